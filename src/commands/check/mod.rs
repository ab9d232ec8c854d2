//! `hsdiff check`: recompute what a golden dump describes and compare. This module holds what
//! does not depend on the command line: each check as a job (the golden file against a live
//! run of a backend on its ids and dtype, [`check_golden`]), the built-in golden set, which of a
//! golden file's states are compared, the golden side of the report, the notes on a model that
//! differs from the one the file was made from, and the rendering of a set of checks (`set.rs`,
//! schema `hsdiff.check/v1`). The golden files themselves are read by [`Dump`].

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};

use crate::backends::BackendKind;
use crate::capture::Key;
use crate::capture::dump::Dump;
use crate::capture::fingerprint::Fingerprint;
use crate::compare::{PlannedRow, TensorSource};
use crate::error::{Error, Result};
use crate::job::session::{ModelInput, check_layer_list, find_model};
use crate::job::{
    Calibration, Given, Job, Live, Parts, Role, RowMode, RowsFrom, SideSpec, Spec, plan_rows,
};
use crate::model::Model;
use crate::model::builtin;
use crate::report::{Report, Side};
use crate::util::escape::{one_line, path_text};

mod set;

pub use set::{line, worst, write_set};

/// Schema of the JSON of a set of checks (docs/report-schema.md).
pub const SET_SCHEMA: &str = "hsdiff.check/v1";

/// The built-in golden set: transformers 5.24's states of the built-in model on `fizzbuzz`
/// (golden/make.py; docs/golden.md), as (name, file bytes).
pub const BUILTIN_SET: &[(&str, &[u8])] = &[
    (
        "fizzbuzz.f64",
        include_bytes!("../../../golden/states/qwen3_5_tiny/fizzbuzz.f64.safetensors"),
    ),
    (
        "fizzbuzz.f32",
        include_bytes!("../../../golden/states/qwen3_5_tiny/fizzbuzz.f32.safetensors"),
    ),
    (
        "fizzbuzz.bf16",
        include_bytes!("../../../golden/states/qwen3_5_tiny/fizzbuzz.bf16.safetensors"),
    ),
];

/// One built-in golden file, opened from the binary.
pub fn builtin_golden(name: &str, bytes: &'static [u8]) -> Result<Dump> {
    Dump::from_static(&format!("<built-in golden {name}>"), bytes)
}

/// What every check of a command runs with.
pub struct CheckRun {
    /// Recompute with each of these, in turn.
    pub backends: Vec<BackendKind>,
    /// The compute dtype (None: each golden file's).
    pub dtype: Option<DType>,
    pub device: Device,
    /// `--model DIR` (None: the model the file names; the built-in model for the built-in set).
    pub model: Option<PathBuf>,
    pub no_floor: bool,
    pub layers: Option<Vec<usize>>,
    pub command: Option<String>,
}

/// `check --golden FILE`: the file against each backend, one line per check on stderr.
pub fn check_file(path: &Path, run: &CheckRun) -> Result<Vec<CheckOutcome>> {
    let golden = Dump::open(path)?;
    let model = match &run.model {
        Some(dir) => Model::load(dir)?,
        None => named_model(&golden)?,
    };
    let name = path.display().to_string();
    let mut outcomes = Vec::new();
    check_golden(&golden, &model, run, |report| {
        eprintln!("{}", one_line(&line(&name, &report)));
        outcomes.push(CheckOutcome {
            name: name.clone(),
            report,
        });
    })?;
    Ok(outcomes)
}

/// `check` without a file: the built-in golden set against each backend.
pub fn check_builtin_set(run: &CheckRun) -> Result<Vec<CheckOutcome>> {
    let mut outcomes = Vec::new();
    for (name, bytes) in BUILTIN_SET {
        let golden = builtin_golden(name, bytes)?;
        let model = match &run.model {
            Some(dir) => Model::load(dir)?,
            None => builtin::model()?,
        };
        check_golden(&golden, &model, run, |report| {
            outcomes.push(CheckOutcome {
                name: (*name).to_string(),
                report,
            });
        })?;
    }
    Ok(outcomes)
}

/// The model a golden file's fingerprint names ([`find_model`]), looked for beside the file too.
fn named_model(golden: &Dump) -> Result<Model> {
    let fp = golden.fingerprint.as_ref();
    let name = fp.and_then(|f| f.model.as_deref());
    match find_model(
        name,
        fp.and_then(|f| f.weights_digest.as_deref()),
        golden.path().parent(),
    )? {
        Some((model, _)) => Ok(model),
        None => Err(Error::file(
            golden.path(),
            match name {
                Some(name) => {
                    format!("the model it names, `{name}`, is not a folder here; pass --model DIR")
                }
                None => "the fingerprint names no model; pass --model DIR".to_string(),
            },
        )),
    }
}

/// One report per backend, each handed to `each` as it is made: the run `golden` describes —
/// its ids, its dtype (unless `run` sets one), on `model` — as side B of a job whose side A is
/// the golden file.
pub fn check_golden(
    golden: &Dump,
    model: &Model,
    run: &CheckRun,
    mut each: impl FnMut(Report),
) -> Result<()> {
    let ids = golden.required_input_ids()?;
    model.check_tokens(&ids)?;
    let dtype = match run.dtype {
        Some(d) => d,
        None => golden.states_dtype()?,
    };
    if let Some(fp) = &golden.fingerprint {
        note_model_differences(golden.path(), fp, model);
    }
    let prompt_label = golden.fingerprint.as_ref().and_then(|f| f.prompt.clone());
    let input = ModelInput {
        model,
        ids: &ids,
        prompt_label: prompt_label.as_deref(),
        device: &run.device,
        routes: crate::job::session::SideRoutes::default(),
    };
    if let Some(layers) = &run.layers {
        check_layer_list(layers, model.config.num_hidden_layers, "the model")?;
    }
    let golden_dtype = golden.states_dtype()?;
    let capture_ops = TensorSource::keys(golden)
        .iter()
        .any(|k| matches!(k, Key::Op(..)));
    for &backend in &run.backends {
        let b = Live {
            backend,
            dtype,
            fed: false,
        };
        let spec = check_spec(run, golden_dtype, b, capture_ops);
        let done = Job::plan(spec).execute(Some(input))?;
        let ours = done
            .side(Role::B)
            .ok_or_else(|| Error::Internal("check: side B is not a run".to_string()))?;
        let rows = golden_rows(golden, &TensorSource::keys(ours), model, run)?;
        each(done.report(Parts {
            given: Given::A(golden),
            a_side: golden_side(golden),
            b_side: done.live_side(Role::B, " (here)")?,
            rows,
            input: input.compared_input(),
            command: run.command.clone(),
        })?);
    }
    Ok(())
}

/// The job of one check: the golden file (its states in `golden_dtype`) as side A, the live run
/// `b` as side B.
fn check_spec(run: &CheckRun, golden_dtype: DType, b: Live, ops: bool) -> Spec {
    Spec {
        a: SideSpec::Golden {
            dtype: golden_dtype,
        },
        b: SideSpec::Live(b),
        calibration: if run.no_floor {
            Calibration::NoFloor
        } else {
            Calibration::Measure
        },
        ops,
        through: None,
        routing: crate::job::Routing::Own,
    }
}

/// The rows of a check: the golden states the run also produced (`ours`), within `run.layers`;
/// none is an error naming the golden file.
fn golden_rows(
    golden: &Dump,
    ours: &[Key],
    model: &Model,
    run: &CheckRun,
) -> Result<Vec<PlannedRow>> {
    let common = shared_states(golden, ours)?;
    let from = RowsFrom {
        held: &common,
        layer_types: Some(&model.config.layer_types),
        layers: run.layers.as_deref(),
    };
    let rows = plan_rows(from, RowMode::Every);
    if rows.is_empty() {
        return Err(Error::file(
            golden.path(),
            "holds no hidden states hsdiff captures (embed, layers.N, final_norm, logits)",
        ));
    }
    Ok(rows)
}

/// One check's outcome: what was checked, and its report.
pub struct CheckOutcome {
    pub name: String,
    pub report: Report,
}

/// The golden states the recomputed run also captured (`ours`), in the golden file's order.
/// A hidden state (embed, layers.N, final_norm, logits) that the run does not produce means
/// another model: an error rather than a shorter table.
pub fn shared_states(golden: &Dump, ours: &[Key]) -> Result<Vec<Key>> {
    let golden_keys = TensorSource::keys(golden);
    let missing: Vec<&Key> = golden_keys
        .iter()
        .filter(|k| {
            !ours.contains(k)
                && matches!(k, Key::Embed | Key::FinalNorm | Key::Logits | Key::Layer(_))
        })
        .collect();
    if let Some(first) = missing.first() {
        return Err(Error::Compare(format!(
            "{}: holds {} hidden state(s) this model does not produce (first: `{first}`); is it \
             the same model?",
            golden.path().display(),
            missing.len(),
        )));
    }
    Ok(golden_keys
        .into_iter()
        .filter(|k| ours.contains(k))
        .collect())
}

/// Side A of a check's report: the golden file, as its fingerprint describes it.
pub fn golden_side(golden: &Dump) -> Side {
    let fp = golden.fingerprint.clone().unwrap_or_default();
    Side {
        label: "golden".to_string(),
        backend: fp.backend.clone().or_else(|| Some(fp.source.clone())),
        implementation: fp.implementation.clone(),
        dtype: fp.dtype.clone(),
        device: fp.device.clone(),
        fingerprint: fp,
    }
}

/// Says on stderr when the golden file was made from other config or weights than the model
/// about to run; the numbers will then disagree, and this says why.
pub fn note_model_differences(path: &Path, fp: &Fingerprint, model: &Model) {
    if let Some(want) = &fp.config_sha256
        && want != &model.config.sha256
    {
        let note = format!(
            "hsdiff: note: {} was made from a config.json with sha256 {}, this model's is {}",
            path_text(path),
            short(want),
            short(&model.config.sha256)
        );
        eprintln!("{}", one_line(&note));
    }
    if let Some(want) = &fp.weights_digest
        && let Ok(here) = model.weights.digest()
        && want != &here
    {
        let note = format!(
            "hsdiff: note: {} was made from other weights (digest {}, this model's {})",
            path_text(path),
            short(want),
            short(&here)
        );
        eprintln!("{}", one_line(&note));
    }
}

/// The first 12 hex digits of a digest (`sha256:` prefix dropped).
fn short(s: &str) -> String {
    let hex = s.rsplit(':').next().unwrap_or(s);
    hex.chars().take(12).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_shortened_to_twelve_hex_digits() {
        assert_eq!(short("sha256:0123456789abcdef"), "0123456789ab");
        assert_eq!(short("abc"), "abc");
    }

    #[test]
    fn the_builtin_set_opens_with_ids_and_its_dtypes() -> Result<()> {
        let want = [
            candle_core::DType::F64,
            candle_core::DType::F32,
            candle_core::DType::BF16,
        ];
        for ((name, bytes), dtype) in BUILTIN_SET.iter().zip(want) {
            let golden = builtin_golden(name, bytes)?;
            assert!(!golden.required_input_ids()?.is_empty());
            assert_eq!(golden.states_dtype()?, dtype, "{name}");
            assert!(shared_states(&golden, &TensorSource::keys(&golden))?.len() > 2);
            assert!(shared_states(&golden, &[]).is_err());
        }
        Ok(())
    }
}
