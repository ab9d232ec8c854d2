//! `hsdiff compare`'s logic: two capture files made comparable — tensor names mapped (`--map`),
//! token ids checked, bare layer indices read, B's layers shifted onto A's, the rows both hold
//! paired with equal shapes, and each side described from its fingerprint. The comparison
//! itself is the engine's (`compare`, `report`); the command (src/cli/compare.rs) only wires its
//! options to these steps.

use std::path::Path;

use candle_core::DType;
use serde_json::Value;

use crate::capture::fingerprint::Fingerprint;
use crate::capture::{Captures, Key};
use crate::commands::compare::layer_id_slip;
use crate::commands::compare::pair::TensorMap;
use crate::compare::alignment::{self, Alignment};
use crate::compare::{PlannedRow, TensorSource, token_shift};
use crate::error::{Error, Result};
use crate::formats::{FileSource, naming};
use crate::job::session::{check_layer_list, find_model};
use crate::job::{RowMode, RowsFrom, plan_rows};
use crate::model::{Model, ModelFolder};
use crate::report::{Side, TokenIds};
use crate::util::device::dtype_label;

/// Applies the maps: both tensors take hsdiff's name when either side's name is one, else A's
/// name. Returns the keys of the names that are none of hsdiff's (compared as extra rows).
pub fn apply_maps(a: &mut FileSource, b: &mut FileSource, maps: &[TensorMap]) -> Result<Vec<Key>> {
    let mut extra_rows = Vec::new();
    for m in maps {
        let (x, y) = (m.a.as_str(), m.b.as_str());
        let target = if naming::is_ours(x) {
            x
        } else if naming::is_ours(y) {
            y
        } else {
            extra_rows.push(Key::mapped(x));
            x
        };
        a.rename(x, target)?;
        b.rename(y, target)?;
    }
    Ok(extra_rows)
}

/// Refuses a file in which no tensor name was recognised.
pub fn require_names(src: &FileSource) -> Result<()> {
    if src.names().is_empty() {
        return Err(Error::file(
            src.path(),
            format!(
                "no tensor name recognised (found {}); name them as in docs/file-formats.md or use --map",
                list(&src.raw_names())
            ),
        ));
    }
    Ok(())
}

/// The token ids the two files carry, refused when both carry ids and they differ: different
/// inputs make every other number meaningless.
pub fn token_ids(a: &FileSource, b: &FileSource) -> Result<(Vec<u32>, TokenIds)> {
    Ok(match (a.input_ids()?, b.input_ids()?) {
        (Some(x), Some(y)) => {
            if x != y {
                if let Some(e) = super::engine_tokens::known_failure(a, b, &x, &y) {
                    return Err(e);
                }
                return Err(token_mismatch(a, b, &x, &y));
            }
            (x, TokenIds::Match)
        }
        (Some(x), None) => (x, TokenIds::OnlyA),
        (None, Some(y)) => (y, TokenIds::OnlyB),
        (None, None) => (Vec::new(), TokenIds::Unknown),
    })
}

fn token_mismatch(a: &FileSource, b: &FileSource, x: &[u32], y: &[u32]) -> Error {
    let how = crate::commands::compare::token_difference::token_difference(x, y)
        .map_or_else(|| "equal".to_string(), |d| d.describe());
    Error::Compare(format!(
        "token ids differ: {} and {}: {how}; the two captures are of different inputs",
        a.path().display(),
        b.path().display(),
    ))
}

/// The model that measures the truth and floor: `folder` (`--model`), else the one a
/// fingerprint names ([`find_model`]). The inner `Err` says why there is none (the report is
/// then uncalibrated).
pub fn calibration_model(
    folder: Option<ModelFolder>,
    a: &FileSource,
    b: &FileSource,
    ids: &[u32],
) -> Result<std::result::Result<(Model, String), String>> {
    if ids.is_empty() {
        let and_model = if folder.is_none() {
            " and pass --model DIR"
        } else {
            ""
        };
        return Ok(Err(format!(
            "neither file carries token ids (`input_ids`), so the truth and the floor cannot be \
             computed — give the ids with --tokens IDS|@FILE or --prompt TEXT|@FILE|NAME{and_model}"
        )));
    }
    if let Some(folder) = folder {
        let how = format!("--model {}", folder.dir.display());
        return Ok(Ok((Model::from_folder(folder)?, how)));
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

/// Refuses a tuple/list read as output_hidden_states whose length does not fit `model` (unless
/// `--map` names the tensors).
pub fn check_sequence_len(model: &Model, sources: [&FileSource; 2], mapped: bool) -> Result<()> {
    let want = model.config.num_hidden_layers + 1;
    for src in sources {
        if let Some(n) = src.sequence_len
            && n != want
            && !mapped
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
    Ok(())
}

/// Each side's decoder layers exist in the model (`num_layers` of them): a state named past the
/// last layer (`--layer-ids 99` on an 8-layer model, a deeper model's file) has no truth to be
/// judged against, so it would drop out of every row and leave a verdict made without it.
pub fn check_layers_exist(sources: [&FileSource; 2], num_layers: usize) -> Result<()> {
    for src in sources {
        let beyond = src
            .keys()
            .into_iter()
            .filter_map(Key::layer_output)
            .find(|&l| l >= num_layers);
        if let Some(l) = beyond {
            return Err(Error::file(
                src.path(),
                format!(
                    "holds {}, but this model has {num_layers} decoder layers (0–{}): the file's \
                     layer ids or indices name layers the model lacks (check --layer-ids, the \
                     draft config, or --model)",
                    Key::Layer(l),
                    num_layers - 1
                ),
            ));
        }
    }
    Ok(())
}

/// Bare layer indices: output of layer N, or hidden_states[N]? Decided against the truth, else
/// against the other side when that one is a full capture; a side read as hidden_states[N] is
/// shifted by one. A pipeline's ids are measured against the truth instead
/// ([`layer_id_slip`]): ids that the truth shows to be off are a finding, the side read as its
/// states are. `truth` comes with the model's layer count. Returns one note per index-keyed side
/// saying how it was read, and the findings.
pub fn read_layer_indices(
    a: &mut FileSource,
    b: &mut FileSource,
    truth: Option<(&Captures, usize)>,
) -> Result<(Vec<String>, Vec<String>)> {
    let (truth, num_layers) = (truth.map(|(t, _)| t), truth.map_or(0, |(_, n)| n));
    let mut notes = Vec::new();
    let mut slips = Vec::new();
    for side in ["A", "B"] {
        let (this, other) = if side == "A" { (&*a, &*b) } else { (&*b, &*a) };
        if !this.index_keyed {
            continue;
        }
        if let Some(t) = truth
            && let Some(ids) = layer_id_slip::check(side, this, t, num_layers)?
        {
            notes.push(ids.note());
            slips.extend(ids.finding());
            let this = if side == "A" { &mut *a } else { &mut *b };
            this.shift_layers(ids.slip().unwrap_or(0));
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
        // Both readings far from the truth: the indices are no evidence of either (files of
        // another model, or a bug before the first layer), so neither is chosen.
        let reading = match reading {
            Some(r)
                if truth.is_some()
                    && r.output_median.min(r.input_median)
                        > crate::commands::compare::plausibility::IMPLAUSIBLE_REL =>
            {
                notes.push(format!(
                    "{side}: neither reading of index N fits the f64 truth (median rel L2 as the \
                     output of layer N {:.2}, as hidden_states[N] {:.2}; {} indices): kept as the \
                     output of layer N, no shift",
                    r.output_median, r.input_median, r.pairs
                ));
                continue;
            }
            other => other,
        };
        notes.push(match &reading {
            Some(r) => format!("{side}: {}", r.describe(&against)),
            None => format!(
                "{side}: index N read as the output of layer N (no evidence either way: pass --shift -1 \
                 if the indices are hidden_states[N])"
            ),
        });
        if reading.is_some_and(|r| r.input) {
            let this = if side == "A" { &mut *a } else { &mut *b };
            notes.extend(read_as_hidden_states(side, this, truth)?);
        }
    }
    Ok((notes, slips))
}

/// A side whose indices are `hidden_states[N]`, shifted by one; its last index read as
/// `final_norm` when the truth shows it is after the final norm, with the note that says so.
fn read_as_hidden_states(
    side: &str,
    this: &mut FileSource,
    truth: Option<&Captures>,
) -> Result<Option<String>> {
    this.shift_layers(-1);
    // Index L of an `output_hidden_states` saved by index is after the final norm.
    let Some(t) = truth.filter(|_| !this.has(&Key::FinalNorm.to_string())) else {
        return Ok(None);
    };
    let Some((true, as_norm, as_raw)) = alignment::last_entry_reading(this, t)? else {
        return Ok(None);
    };
    let Some(last) = t.keys().filter_map(Key::layer_output).max() else {
        return Ok(None);
    };
    this.rename(&Key::Layer(last).to_string(), &Key::FinalNorm.to_string())?;
    Ok(Some(format!(
        "{side}: the last index ({}) read as final_norm, after the final norm as transformers' \
         output_hidden_states has it (rel L2 {as_norm:.1e} against the truth's final_norm; as \
         the output of layer {last}: {as_raw:.1e})",
        last + 1
    )))
}

/// Detects a layer offset between the files (within `ok`, the dtype's ok band) and applies
/// `shift` (`--shift K`) to B: the alignment the report shows, if any.
pub fn align(a: &FileSource, b: &mut FileSource, ok: f64, shift: i64) -> Result<Option<Alignment>> {
    let detected = alignment::detect(a, b, ok, shift != 0)?;
    let alignment = match (&detected, shift) {
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
        .keys()
        .into_iter()
        .filter_map(Key::layer_output)
        .max()
        .map_or(0, |l| l + 1);
    if shift.unsigned_abs() as usize > b_layers {
        return Err(Error::argument(
            format!("--shift {shift}"),
            format!(
                "{} holds {b_layers} layers, so no layer would be paired",
                b.path().display()
            ),
        ));
    }
    b.shift_layers(shift);
    Ok(alignment)
}

/// The rows both files hold, in forward order (only `layers` when given; `extra` rows named by
/// `--map` after them; `final_norm` and logits left out with `without_final`), refused when
/// there is none or when a pair's shapes differ.
pub fn paired_rows(
    a: &FileSource,
    b: &FileSource,
    layers: Option<&[usize]>,
    layer_types: Option<&[crate::weights::config::LayerType]>,
    extra: Vec<Key>,
    without_final: bool,
) -> Result<Vec<PlannedRow>> {
    let b_keys: std::collections::HashSet<Key> = b.keys().into_iter().collect();
    let common: Vec<Key> = a
        .keys()
        .into_iter()
        .filter(|k| *k != Key::InputIds && b_keys.contains(k))
        .collect();
    if let Some(layers) = layers {
        let count = common
            .iter()
            .filter_map(|k| k.layer_output())
            .max()
            .map_or(0, |l| l + 1);
        check_layer_list(layers, count, "what both files hold")?;
    }
    let from = RowsFrom {
        held: &common,
        layer_types,
        layers,
    };
    let mode = RowMode::Files {
        without_final,
        mapped: extra,
    };
    let rows = plan_rows(from, mode);
    if rows.is_empty() {
        return Err(nothing_in_common(a, b));
    }
    for row in &rows {
        let name = row.key.to_string();
        let (sa, sb) = (a.shape(&name), b.shape(&name));
        if sa != sb {
            // Lengths one apart: the states may show the one-token shift that explains them.
            let shift = token_shift::detect(a, b, 0.0)?
                .map(|s| format!(": {} ({})", s.finding(), s.evidence()))
                .unwrap_or_default();
            return Err(Error::Compare(format!(
                "`{name}` has shape {:?} in {} (`{}`) but {:?} in {} (`{}`){shift}",
                sa.unwrap_or_default(),
                a.path().display(),
                a.raw_name(&name).unwrap_or_default(),
                sb.unwrap_or_default(),
                b.path().display(),
                b.raw_name(&name).unwrap_or_default(),
            )));
        }
    }
    Ok(rows)
}

/// Why two files share no row: a side that holds no hidden state at all (hooks on modules the
/// forward never ran), else the names each side holds.
fn nothing_in_common(a: &FileSource, b: &FileSource) -> Error {
    for (side, src) in [("A", a), ("B", b)] {
        let states = src.names();
        if states.iter().all(|n| Key::of(n) == Some(Key::InputIds)) {
            return Error::file(
                src.path(),
                format!(
                    "side {side} holds no hidden state ({}): were its hooks ever called? \
                     (hooks on modules the forward does not run — a VL model's vision blocks \
                     on a text prompt — write nothing)",
                    if states.is_empty() {
                        "no tensor".to_string()
                    } else {
                        format!("only {}", list(&states))
                    }
                ),
            );
        }
    }
    Error::Compare(format!(
        "{} and {} have no tensor in common (A: {}; B: {}); use --map A_NAME=B_NAME",
        a.path().display(),
        b.path().display(),
        list(&a.names()),
        list(&b.names())
    ))
}

/// Labels for the two sides: file names, or the paths as given when the names are equal.
pub fn labels(a: &Path, b: &Path) -> (String, String) {
    let name = |p: &Path| {
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

/// One side of the report, from the file's fingerprint (if any).
pub fn side(src: &FileSource, label: String, dtype: DType) -> Result<Side> {
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
