//! `hsdiff compare A B`: compare two files of captured hidden states — hsdiff dumps, safetensors
//! written by PyTorch, `torch.save` files, numpy arrays — with the same table, verdicts and JSON
//! as a live run, plus the layer alignment and the environment differences. With the model at
//! hand (`--model`, or named by a fingerprint) the f64 truth and each side's floor are computed
//! on the files' token ids by the same run planner as live runs; without one the report is
//! "uncalibrated" and only the depth-scaled band can flag a row.

use std::path::PathBuf;

use candle_core::{DType, Device};
use clap::Args;
use serde_json::Value;

use super::common::{Session, command_line, find_model, parse_layer_list};
use super::diff::{ReportArgs, emit};
use crate::alignment::{self, Alignment};
use crate::capture::names;
use crate::compare::{Kind, RowSpec, TensorSource, plan_rows};
use crate::device::{dtype_label, parse_dtype};
use crate::error::{Error, Result};
use crate::fingerprint::Fingerprint;
use crate::formats::{FileSource, coarseness, naming};
use crate::model::Model;
use crate::planner::{self, SideRun};
use crate::report::{Comparison, Side, TokenIds, build_report};
use crate::run::forward_through;
use crate::verdict::thresholds;

#[derive(Args, Debug, Clone)]
pub struct CompareArgs {
    /// Side A: an hsdiff dump, safetensors, torch.save (.pt/.pth), .npy or .npz file.
    #[arg(value_name = "A")]
    pub a: PathBuf,

    /// Side B.
    #[arg(value_name = "B")]
    pub b: PathBuf,

    /// Compare A's tensor A_NAME with B's tensor B_NAME (names as in the files, or hsdiff's
    /// names); repeatable.
    #[arg(long = "map", value_name = "A_NAME=B_NAME")]
    pub map: Vec<String>,

    /// Compare B's layer i with A's layer i+K (embed counts as layer −1), e.g. when one side
    /// counts the embedding output as a layer.
    #[arg(
        long,
        value_name = "K",
        default_value_t = 0,
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i64).range(-1024..=1024)
    )]
    pub shift: i64,

    /// Checkpoint folder of the model both files were captured from: hsdiff computes the f64
    /// truth and each side's rounding floor on the files' token ids and judges every row
    /// against them. Default: the model a fingerprint names (the built-in model by its weights
    /// digest, or a folder that exists here); without one the report is uncalibrated.
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,

    /// Skip the f64 truth and floor runs even when a model is at hand: verdicts then use the
    /// depth-scaled static band alone.
    #[arg(long)]
    pub no_floor: bool,

    /// Compute dtype of files that record none (f64, f32, bf16, f16): sets the thresholds, and
    /// lets 16-bit integer numpy arrays be read as bf16 bit patterns.
    #[arg(long, value_name = "DTYPE")]
    pub dtype_hint: Option<String>,

    #[command(flatten)]
    pub report: ReportArgs,
}

pub fn run(args: &CompareArgs) -> Result<i32> {
    args.report.check_targets(&[&args.a, &args.b])?;
    let hint = args.dtype_hint.as_deref().map(parse_dtype).transpose()?;
    let mut a = FileSource::open(&args.a, hint)?;
    let mut b = FileSource::open(&args.b, hint)?;
    let (label_a, label_b) = labels(&args.a, &args.b);

    let mut extra_rows = Vec::new();
    for m in &args.map {
        let (x, y) = m
            .split_once('=')
            .ok_or_else(|| Error::Input(format!("--map expects A_NAME=B_NAME, got `{m}`")))?;
        let target = if naming::is_ours(x) {
            x
        } else if naming::is_ours(y) {
            y
        } else {
            extra_rows.push(x.to_string());
            x
        };
        a.rename(x, target)?;
        b.rename(y, target)?;
    }
    for (side, src) in [("A", &a), ("B", &b)] {
        for c in &src.conventions {
            eprintln!("hsdiff: {side} ({}): {c}", src.path().display());
        }
        if src.names().is_empty() {
            return Err(Error::file(
                src.path(),
                format!(
                    "no tensor name recognised (found {}); name them as in docs/file-formats.md or use --map",
                    list(&src.raw_names())
                ),
            ));
        }
    }

    // Token ids first: different inputs make every other number meaningless.
    let (input_ids, token_ids) = match (a.input_ids()?, b.input_ids()?) {
        (Some(x), Some(y)) => {
            if x != y {
                return Err(token_mismatch(&a, &b, &x, &y));
            }
            (x, TokenIds::Match)
        }
        (Some(x), None) => (x, TokenIds::OnlyA),
        (None, Some(y)) => (y, TokenIds::OnlyB),
        (None, None) => (Vec::new(), TokenIds::Unknown),
    };

    let (a_dtype, b_dtype) = (
        a.compute_dtype().unwrap_or(DType::F32),
        b.compute_dtype().unwrap_or(DType::F32),
    );
    let dtype = [a_dtype, b_dtype]
        .into_iter()
        .max_by_key(|d| coarseness(*d))
        .unwrap_or(DType::F32);
    let th = thresholds(dtype);

    let mut notes: Vec<String> = [("A", &a), ("B", &b)]
        .iter()
        .flat_map(|(side, src)| src.conventions.iter().map(move |c| format!("{side}: {c}")))
        .collect();
    let model = if args.no_floor {
        Err("no floor measured (--no-floor)".to_string())
    } else {
        calibration_model(args, &a, &b, &input_ids)?
    };
    let session = match model {
        Ok((model, how)) => {
            eprintln!("hsdiff: calibrating with {how}");
            model.check_tokens(&input_ids)?;
            // A tuple/list is output_hidden_states only if its length fits the model.
            let want = model.config.num_hidden_layers + 1;
            for src in [&a, &b] {
                if let Some(n) = src.sequence_len
                    && n != want
                    && args.map.is_empty()
                {
                    return Err(Error::file(
                        src.path(),
                        format!(
                            "{n} entries were read as output_hidden_states, but this model has {} layers ({want} entries): save the layers by index ({{1: h1, 3: h3}}) or name them with --map",
                            want - 1
                        ),
                    ));
                }
            }
            notes.push(format!("floor and truth measured with {how}"));
            Some(Session {
                model,
                ids: input_ids.clone(),
                prompt_label: None,
                dtype,
                device: Device::Cpu,
            })
        }
        Err(why) => {
            // The headline says so; a stderr line here would precede any later input error.
            notes.push(format!("uncalibrated: {why}"));
            None
        }
    };
    let layers = args
        .report
        .layers
        .as_deref()
        .map(parse_layer_list)
        .transpose()?;
    // With --layers the truth and floor runs stop after the last layer that can be paired (the
    // layers asked for, plus the ±2 of shift detection and any --shift): a deep model's
    // calibration costs only the layers reported.
    let num_layers = session.as_ref().map(|s| s.model.config.num_hidden_layers);
    let last_layer = match (&layers, num_layers) {
        (Some(list), Some(n)) => list
            .iter()
            .max()
            .map(|&l| l + 2 + args.shift.unsigned_abs() as usize)
            .filter(|&l| l + 1 < n),
        _ => None,
    };
    let calibration = match &session {
        Some(session) => {
            let capture_ops = a
                .names()
                .iter()
                .chain(&b.names())
                .any(|n| names::parse_op(n).is_some());
            let plan = planner::plan(
                SideRun {
                    dtype: a_dtype,
                    is_reference_run: false,
                },
                SideRun {
                    dtype: b_dtype,
                    is_reference_run: false,
                },
            );
            Some(planner::execute(plan, &session.device, |backend, d| {
                forward_through(session, backend, d, capture_ops, None, last_layer)
            })?)
        }
        None => None,
    };

    // Bare layer indices: output of layer N, or hidden_states[N]? Decided against the truth,
    // else against the other side when that one is a full capture.
    let truth = calibration.as_ref().and_then(|c| c.truth_run());
    for side in ["A", "B"] {
        let (this, other) = if side == "A" { (&a, &b) } else { (&b, &a) };
        if !this.index_keyed {
            continue;
        }
        let (reference, against): (Option<&dyn TensorSource>, String) = match truth {
            Some(t) => (Some(t), "the f64 truth".to_string()),
            None if !other.index_keyed => (
                Some(other),
                format!("side {}", if side == "A" { "B" } else { "A" }),
            ),
            None => (None, String::new()),
        };
        let reading = match reference {
            Some(r) => alignment::index_reading(this, r)?,
            None => None,
        };
        let note = match &reading {
            Some(r) => format!("{side}: {}", r.describe(&against)),
            None => format!(
                "{side}: index N read as the output of layer N (no evidence either way: pass --shift -1 \
                 if the indices are hidden_states[N])"
            ),
        };
        eprintln!("hsdiff: {note}");
        notes.push(note);
        if reading.is_some_and(|r| r.input) {
            if side == "A" {
                a.shift_layers(-1);
            } else {
                b.shift_layers(-1);
            }
        }
    }

    let detected = alignment::detect(&a, &b, th.ok, args.shift != 0)?;
    let alignment = match (&detected, args.shift) {
        (Some((_, e)), k) if k != 0 => Some(Alignment {
            offset: k,
            applied: true,
            evidence: alignment::evidence_for(e, k),
        }),
        (Some((k, e)), 0) if *k != 0 => Some(Alignment {
            offset: *k,
            applied: false,
            evidence: e.clone(),
        }),
        _ => None,
    };
    // A shift past every layer would pair nothing and read as agreement.
    let b_layers = b
        .names()
        .iter()
        .filter_map(|n| names::parse_layer(n))
        .max()
        .map_or(0, |l| l + 1);
    if args.shift.unsigned_abs() as usize > b_layers {
        return Err(Error::Input(format!(
            "--shift {}: {} holds {b_layers} layers, so no layer would be paired",
            args.shift,
            args.b.display()
        )));
    }
    b.shift_layers(args.shift);

    let b_names = b.names();
    let common: Vec<String> = a
        .names()
        .into_iter()
        .filter(|n| n != names::INPUT_IDS && b_names.contains(n))
        .collect();
    if let Some(layers) = &layers {
        let count = common
            .iter()
            .filter_map(|n| names::parse_layer(n))
            .max()
            .map_or(0, |l| l + 1);
        super::common::check_layer_list(layers, count, "what both files hold")?;
    }
    let layer_types = session
        .as_ref()
        .map(|s| s.model.config.layer_types.as_slice());
    let mut rows = plan_rows(&common, layer_types, layers.as_deref());
    if let Some(last) = last_layer {
        rows.retain(|r| !matches!(r.kind, Kind::FinalNorm | Kind::Logits));
        notes.push(format!(
            "--layers: the truth and floor ran through layer {last} only, so final_norm and \
             logits are not reported"
        ));
    }
    for name in extra_rows {
        if !rows.iter().any(|r| r.name == name) && common.contains(&name) {
            rows.push(RowSpec {
                name,
                kind: Kind::Op,
                layer: None,
            });
        }
    }
    if rows.is_empty() {
        return Err(Error::Compare(format!(
            "{} and {} have no tensor in common (A: {}; B: {}); use --map A_NAME=B_NAME",
            args.a.display(),
            args.b.display(),
            list(&a.names()),
            list(&b_names)
        )));
    }
    for row in &rows {
        let (sa, sb) = (a.shape(&row.name), b.shape(&row.name));
        if sa != sb {
            return Err(Error::Compare(format!(
                "`{}` has shape {:?} in {} (`{}`) but {:?} in {} (`{}`)",
                row.name,
                sa.unwrap_or_default(),
                args.a.display(),
                a.raw_name(&row.name).unwrap_or_default(),
                sb.unwrap_or_default(),
                args.b.display(),
                b.raw_name(&row.name).unwrap_or_default(),
            )));
        }
    }
    let tokens = if input_ids.is_empty() {
        rows.iter()
            .find_map(|r| a.shape(&r.name))
            .and_then(|s| s.get(1).copied())
            .unwrap_or(0)
    } else {
        input_ids.len()
    };

    let comparison = Comparison {
        a: &a,
        b: &b,
        a_side: side(&a, label_a, dtype)?,
        b_side: side(&b, label_b, dtype)?,
        calibration: match (&calibration, &session) {
            (Some(cal), Some(session)) => Some(cal.calibrated(
                &a,
                &b,
                (a_dtype, b_dtype),
                &session.model.source.to_string(),
            )),
            _ => None,
        },
        floor_skipped: args.no_floor,
        rows,
        dtype,
        mode: "files".to_string(),
        input_ids,
        token_ids,
        tokens,
        num_layers: session.as_ref().map(|s| s.model.config.num_hidden_layers),
        command: Some(command_line()),
        alignment,
        notes,
    };
    let report = build_report(&comparison)?;
    emit(&report, &args.report)
}

/// The model that measures the truth and floor: `--model`, else the one a fingerprint names
/// ([`find_model`]). The inner `Err` says why there is none (the report is then uncalibrated).
fn calibration_model(
    args: &CompareArgs,
    a: &FileSource,
    b: &FileSource,
    ids: &[u32],
) -> Result<std::result::Result<(Model, String), String>> {
    if ids.is_empty() {
        return Ok(Err(
            "neither file carries token ids, so the truth cannot be computed".to_string(),
        ));
    }
    if let Some(dir) = &args.model {
        return Ok(Ok((
            Model::load(dir)?,
            format!("--model {}", dir.display()),
        )));
    }
    for src in [a, b] {
        let key = |k: &str| {
            src.fingerprint
                .as_ref()
                .and_then(|f| f.get(k))
                .and_then(Value::as_str)
        };
        if let Some(found) = find_model(key("model"), key("weights_digest"), src.path().parent())? {
            return Ok(Ok(found));
        }
    }
    Ok(Err(
        "no model to measure the floor — pass --model DIR".to_string()
    ))
}

/// Labels for the two sides: file names, or the paths as given when the names are equal.
fn labels(a: &std::path::Path, b: &std::path::Path) -> (String, String) {
    let name = |p: &std::path::Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| p.display().to_string())
    };
    let (x, y) = (name(a), name(b));
    if x == y {
        (a.display().to_string(), b.display().to_string())
    } else {
        (x, y)
    }
}

fn token_mismatch(a: &FileSource, b: &FileSource, x: &[u32], y: &[u32]) -> Error {
    let pos = x
        .iter()
        .zip(y)
        .position(|(p, q)| p != q)
        .unwrap_or(x.len().min(y.len()));
    let at = |v: &[u32]| v.get(pos).map_or("nothing".to_string(), |t| t.to_string());
    Error::Compare(format!(
        "token ids differ: {} ({} tokens) and {} ({} tokens) first differ at position {pos} (A has {}, B has {}); the two captures are of different inputs",
        a.path().display(),
        x.len(),
        b.path().display(),
        y.len(),
        at(x),
        at(y)
    ))
}

/// One side of the report, from the file's fingerprint (if any).
fn side(src: &FileSource, label: String, dtype: DType) -> Result<Side> {
    let fingerprint = match &src.fingerprint {
        None => Fingerprint::default(),
        Some(Value::Object(map)) => {
            let mut map = map.clone();
            for key in ["format", "source"] {
                map.entry(key)
                    .or_insert_with(|| Value::String(String::new()));
            }
            serde_json::from_value(Value::Object(map.clone())).unwrap_or_else(|_| Fingerprint {
                extra: map,
                ..Default::default()
            })
        }
        Some(_) => {
            return Err(Error::file(
                src.path(),
                "the `hsdiff` fingerprint is not a JSON object",
            ));
        }
    };
    let recorded = |k: &str| {
        src.fingerprint
            .as_ref()
            .and_then(|f| f.get(k))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    Ok(Side {
        label,
        backend: recorded("backend"),
        implementation: recorded("implementation"),
        dtype: recorded("dtype")
            .or_else(|| Some(dtype_label(src.compute_dtype().unwrap_or(dtype)).to_string())),
        device: recorded("device"),
        fingerprint,
    })
}

fn list(names: &[String]) -> String {
    let shown: Vec<&str> = names.iter().take(6).map(String::as_str).collect();
    if names.len() > 6 {
        format!("{}, … ({} in all)", shown.join(", "), names.len())
    } else if names.is_empty() {
        "nothing".to_string()
    } else {
        shown.join(", ")
    }
}
