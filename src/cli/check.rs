//! `hsdiff check [--golden FILE]`: recompute what a golden dump describes — its model, its token
//! ids, its dtype — with a backend of this build on this machine, and compare (same report,
//! verdicts and exit codes as the live run: 0 ok, 1 divergence, 2 trouble). With no file it checks
//! the built-in golden set: transformers' states of the built-in model at f64 (strict), f32 and
//! bf16, compiled into the binary.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};
use clap::Args;

use super::common::command_line;
use super::report_args::ReportArgs;
use crate::backends::{LinearAttentionBackend, backend_by_name};
use crate::builtin;
use crate::capture::{dump::METADATA_KEY, names};
use crate::compare::{TensorSource, plan_rows};
use crate::device::{parse_device, parse_dtype};
use crate::error::{Error, Result};
use crate::fingerprint::Fingerprint;
use crate::model::Model;
use crate::planner::{self, SideRun};
use crate::report::emit::{Format, emit};
use crate::report::json::Json;
use crate::report::{Comparison, Render, Report, Side, TokenIds, build_report};
use crate::run::{fingerprint_for, forward};
use crate::safetensors_file::SafetensorsFile;
use crate::session::{Session, check_layer_list, find_model};
use crate::verdict::Verdict;

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// A dump to recompute and compare against (hsdiff dump, scripts/capture_hf.py output or a
    /// golden file). Default: the built-in golden set.
    #[arg(long, value_name = "FILE")]
    pub golden: Option<PathBuf>,

    /// Backend(s) to recompute with, comma-separated (see `hsdiff backends`).
    #[arg(long, default_value = "reference", value_name = "LIST")]
    pub backend: String,

    /// Checkpoint folder. Default: the model the dump's fingerprint names (a folder, or the
    /// built-in model).
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,

    /// Compute dtype. Default: the dump's (fingerprint `dtype`, else its tensors' dtype).
    #[arg(long, value_name = "DTYPE")]
    pub dtype: Option<String>,

    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu", value_name = "DEVICE")]
    pub device: String,

    /// Skip the f64 truth and floor runs: verdicts then use the depth-scaled static band alone.
    #[arg(long)]
    pub no_floor: bool,

    #[command(flatten)]
    pub report: ReportArgs,
}

/// The built-in golden set: transformers 5.24's states of the built-in model on `fizzbuzz`
/// (scripts/make_golden.py; docs/golden.md).
const BUILTIN_SET: &[(&str, &[u8])] = &[
    (
        "fizzbuzz.f64",
        include_bytes!("../../golden/states/qwen3_5_tiny/fizzbuzz.f64.safetensors"),
    ),
    (
        "fizzbuzz.f32",
        include_bytes!("../../golden/states/qwen3_5_tiny/fizzbuzz.f32.safetensors"),
    ),
    (
        "fizzbuzz.bf16",
        include_bytes!("../../golden/states/qwen3_5_tiny/fizzbuzz.bf16.safetensors"),
    ),
];

/// A golden file: its tensors, read one by one, and its fingerprint.
struct Golden {
    file: SafetensorsFile,
    fingerprint: Option<Fingerprint>,
    /// Folder of the file, for finding the model it names (none for built-in files).
    dir: Option<PathBuf>,
}

impl Golden {
    fn new(file: SafetensorsFile, dir: Option<PathBuf>) -> Result<Self> {
        let fingerprint = match file.user_metadata().and_then(|m| m.get(METADATA_KEY)) {
            Some(json) => Some(serde_json::from_str(json).map_err(|e| {
                Error::file(
                    file.path(),
                    format!("metadata `{METADATA_KEY}` is not valid: {e}"),
                )
            })?),
            None => None,
        };
        Ok(Golden {
            file,
            fingerprint,
            dir,
        })
    }

    fn open(path: &Path) -> Result<Self> {
        let file = SafetensorsFile::open(path)?;
        Self::new(file, path.parent().map(Path::to_path_buf))
    }

    fn path(&self) -> &Path {
        self.file.path()
    }

    fn input_ids(&self) -> Result<Vec<u32>> {
        let bad = |msg: &str| Error::tensor(self.path(), names::INPUT_IDS, msg.to_string());
        if !self.file.contains(names::INPUT_IDS) {
            return Err(bad(
                "missing: a golden file must carry the token ids it was computed from",
            ));
        }
        let t = self.file.load(names::INPUT_IDS)?;
        if !matches!(t.dtype(), DType::I64 | DType::U32 | DType::U8) {
            return Err(bad("must be integer token ids, [1, T] or [T]"));
        }
        let t = match t.rank() {
            1 => t,
            2 if t.dim(0)? == 1 => t.squeeze(0)?,
            _ => return Err(bad("must be integer token ids, [1, T] or [T]")),
        };
        let ids: Vec<i64> = t.to_dtype(DType::I64)?.to_vec1()?;
        if ids.is_empty() {
            return Err(bad("holds no token ids"));
        }
        ids.into_iter()
            .map(|x| u32::try_from(x).map_err(|_| bad(&format!("token id {x} out of range"))))
            .collect()
    }

    /// The dtype the golden states were computed in.
    fn dtype(&self) -> Result<DType> {
        if let Some(d) = self.fingerprint.as_ref().and_then(|f| f.dtype.as_deref()) {
            return parse_dtype(d).map_err(|_| {
                Error::file(
                    self.path(),
                    format!("fingerprint dtype `{d}` is not one hsdiff computes in"),
                )
            });
        }
        let name = self
            .file
            .names()
            .into_iter()
            .find(|n| n == names::EMBED || names::parse_layer(n).is_some())
            .ok_or_else(|| {
                Error::file(
                    self.path(),
                    "no `embed` or `layers.N` tensor: not a dump of hidden states",
                )
            })?;
        let info = self
            .file
            .info(&name)
            .ok_or_else(|| Error::tensor(self.path(), &name, "not in this file"))?;
        crate::safetensors_file::candle_dtype(info.dtype)
            .filter(|d| d.is_float())
            .ok_or_else(|| {
                Error::tensor(
                    self.path(),
                    &name,
                    format!("dtype {:?} is not a float type", info.dtype),
                )
            })
    }

    /// The model the fingerprint names ([`find_model`]).
    fn model(&self) -> Result<Model> {
        let fp = self.fingerprint.as_ref();
        let name = fp.and_then(|f| f.model.as_deref());
        match find_model(
            name,
            fp.and_then(|f| f.weights_digest.as_deref()),
            self.dir.as_deref(),
        )? {
            Some((model, _)) => Ok(model),
            None => Err(Error::file(
                self.path(),
                match name {
                    Some(name) => format!(
                        "the model it names, `{name}`, is not a folder here; pass --model DIR"
                    ),
                    None => "the fingerprint names no model; pass --model DIR".to_string(),
                },
            )),
        }
    }
}

impl TensorSource for Golden {
    fn tensor(&self, name: &str) -> Result<Option<candle_core::Tensor>> {
        if self.file.contains(name) {
            self.file.load(name).map(Some)
        } else {
            Ok(None)
        }
    }
    fn names(&self) -> Vec<String> {
        self.file.names()
    }
}

/// One check's outcome.
struct Outcome {
    name: String,
    report: Report,
}

pub fn run(args: &CheckArgs) -> Result<i32> {
    let inputs: Vec<&std::path::Path> = [args.golden.as_deref(), args.model.as_deref()]
        .into_iter()
        .flatten()
        .collect();
    args.report.options().check_targets(&inputs)?;
    let device = parse_device(&args.device)?;
    let backends: Vec<Box<dyn LinearAttentionBackend>> = args
        .backend
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|b| backend_by_name(b, &device))
        .collect::<Result<_>>()?;
    if backends.is_empty() {
        return Err(Error::argument("--backend", "names no backend"));
    }
    let dtype_override = args.dtype.as_deref().map(parse_dtype).transpose()?;

    match &args.golden {
        Some(path) => {
            let golden = Golden::open(path)?;
            let model = match &args.model {
                Some(dir) => Model::load(dir)?,
                None => golden.model()?,
            };
            let session = session_for(&golden, model, dtype_override, &device)?;
            let mut outcomes = Vec::new();
            for backend in &backends {
                let report = check_one(&golden, &session, backend.as_ref(), args)?;
                let name = path.display().to_string();
                eprintln!("{}", line(&name, &report));
                outcomes.push(Outcome { name, report });
            }
            if let [only] = outcomes.as_slice() {
                return emit(&only.report, &args.report.options());
            }
            render_set(&outcomes, &args.report)
        }
        None => {
            if args.report.plot.is_some() {
                return Err(Error::argument(
                    "--plot",
                    "draws one report: use it with --golden FILE",
                ));
            }
            let mut outcomes = Vec::new();
            for (name, bytes) in BUILTIN_SET {
                let label = format!("<built-in golden {name}>");
                let golden = Golden::new(SafetensorsFile::from_static(&label, bytes)?, None)?;
                let model = match &args.model {
                    Some(dir) => Model::load(dir)?,
                    None => builtin::model()?,
                };
                let session = session_for(&golden, model, dtype_override, &device)?;
                for backend in &backends {
                    let report = check_one(&golden, &session, backend.as_ref(), args)?;
                    outcomes.push(Outcome {
                        name: (*name).to_string(),
                        report,
                    });
                }
            }
            render_set(&outcomes, &args.report)
        }
    }
}

/// The run a golden file describes: its ids, its dtype (unless overridden), this model.
fn session_for(
    golden: &Golden,
    model: Model,
    dtype_override: Option<DType>,
    device: &Device,
) -> Result<Session> {
    let ids = golden.input_ids()?;
    model.check_tokens(&ids)?;
    let dtype = match dtype_override {
        Some(d) => d,
        None => golden.dtype()?,
    };
    if let Some(fp) = &golden.fingerprint {
        note_model_differences(golden.path(), fp, &model);
    }
    Ok(Session {
        model,
        ids,
        prompt_label: golden.fingerprint.as_ref().and_then(|f| f.prompt.clone()),
        dtype,
        device: device.clone(),
    })
}

fn check_one(
    golden: &Golden,
    session: &Session,
    backend: &dyn LinearAttentionBackend,
    args: &CheckArgs,
) -> Result<Report> {
    let (dtype, device) = (session.dtype, &session.device);
    let golden_names = golden.names();
    let capture_ops = golden_names.iter().any(|n| names::parse_op(n).is_some());
    let ours = forward(session, backend, dtype, capture_ops, None)?;
    let golden_dtype = golden.dtype()?;
    let calibration = if args.no_floor {
        None
    } else {
        let plan = planner::plan(
            SideRun {
                dtype: golden_dtype,
                is_reference_run: false,
            },
            SideRun {
                dtype,
                is_reference_run: backend.name() == "reference",
            },
        );
        Some(planner::execute(plan, device, |backend, d| {
            forward(session, backend, d, capture_ops, None)
        })?)
    };

    let ours_names = TensorSource::names(&ours);
    let common: Vec<String> = golden_names
        .iter()
        .filter(|n| ours_names.contains(n))
        .cloned()
        .collect();
    let missing: Vec<&String> = golden_names
        .iter()
        .filter(|n| {
            !ours_names.contains(n)
                && (n.as_str() == names::EMBED
                    || n.as_str() == names::FINAL_NORM
                    || n.as_str() == names::LOGITS
                    || names::parse_layer(n).is_some())
        })
        .collect();
    if !missing.is_empty() {
        return Err(Error::Compare(format!(
            "{}: holds {} hidden state(s) this model does not produce (first: `{}`); is it the \
             same model?",
            golden.path().display(),
            missing.len(),
            missing[0]
        )));
    }
    let layers = args.report.layers()?;
    if let Some(layers) = &layers {
        check_layer_list(layers, session.model.config.num_hidden_layers, "the model")?;
    }
    let rows = plan_rows(
        &common,
        Some(&session.model.config.layer_types),
        layers.as_deref(),
    );
    if rows.is_empty() {
        return Err(Error::file(
            golden.path(),
            "holds no hidden states hsdiff captures (embed, layers.N, final_norm, logits)",
        ));
    }
    let a_fp = golden.fingerprint.clone().unwrap_or_default();
    let a_side = Side {
        label: "golden".to_string(),
        backend: a_fp.backend.clone().or_else(|| Some(a_fp.source.clone())),
        implementation: a_fp.implementation.clone(),
        dtype: a_fp.dtype.clone(),
        device: a_fp.device.clone(),
        fingerprint: a_fp,
    };
    let b_fp = fingerprint_for(session, backend);
    let b_side = Side {
        label: format!("{} (here)", backend.name()),
        backend: b_fp.backend.clone(),
        implementation: b_fp.implementation.clone(),
        dtype: b_fp.dtype.clone(),
        device: b_fp.device.clone(),
        fingerprint: b_fp,
    };
    let comparison = Comparison {
        a: golden,
        b: &ours,
        a_side,
        b_side,
        calibration: calibration.as_ref().map(|cal| {
            cal.calibrated(
                golden,
                &ours,
                (golden_dtype, dtype),
                &session.model.source.to_string(),
            )
        }),
        floor_skipped: args.no_floor,
        rows,
        dtype: [golden_dtype, dtype]
            .into_iter()
            .max_by_key(|d| crate::formats::coarseness(*d))
            .unwrap_or(dtype),
        mode: "check".to_string(),
        input_ids: session.ids.clone(),
        token_ids: TokenIds::Match,
        tokens: session.ids.len(),
        num_layers: Some(session.model.config.num_hidden_layers),
        command: Some(command_line()),
        alignment: None,
        notes: Vec::new(),
    };
    build_report(&comparison)
}

/// Says on stderr when the golden file was made from other config or weights than the model
/// about to run; the numbers will then disagree, and this says why.
fn note_model_differences(path: &Path, fp: &Fingerprint, model: &Model) {
    if let Some(want) = &fp.config_sha256
        && want != &model.config.sha256
    {
        eprintln!(
            "hsdiff: note: {} was made from a config.json with sha256 {}, this model's is {}",
            path.display(),
            short(want),
            short(&model.config.sha256)
        );
    }
    if let Some(want) = &fp.weights_digest
        && let Ok(here) = model.weights.digest()
        && want != &here
    {
        eprintln!(
            "hsdiff: note: {} was made from other weights (digest {}, this model's {})",
            path.display(),
            short(want),
            short(&here)
        );
    }
}

fn short(s: &str) -> String {
    let hex = s.rsplit(':').next().unwrap_or(s);
    hex.chars().take(12).collect()
}

/// `check fizzbuzz.f64  reference/cpu-candle  f64: ok — <summary>`
fn line(name: &str, r: &Report) -> String {
    format!(
        "check {name}  {}  {}: {} — {}",
        r.b.implementation.as_deref().unwrap_or("?"),
        r.thresholds.dtype,
        r.verdict.as_str(),
        r.summary
    )
}

/// Several checks: each report rendered in turn (JSON: one object with every report), one line
/// per check at the end, and the exit code of the worst.
fn render_set(outcomes: &[Outcome], args: &ReportArgs) -> Result<i32> {
    let options = args.options();
    let worst = outcomes
        .iter()
        .map(|o| o.report.verdict)
        .max()
        .unwrap_or(Verdict::Ok);
    let lines: Vec<String> = outcomes.iter().map(|o| line(&o.name, &o.report)).collect();
    let text = match args.format {
        Format::Json => {
            let checks: Vec<serde_json::Value> = outcomes
                .iter()
                .map(|o| {
                    let report = Json.render(&o.report)?;
                    Ok(serde_json::json!({
                        "name": o.name,
                        "backend": o.report.b.backend,
                        "implementation": o.report.b.implementation,
                        "dtype": o.report.thresholds.dtype,
                        "verdict": o.report.verdict,
                        "report": serde_json::from_slice::<serde_json::Value>(&report)
                            .unwrap_or(serde_json::Value::Null),
                    }))
                })
                .collect::<Result<_>>()?;
            let doc = serde_json::json!({
                "schema": "hsdiff.check/v1",
                "verdict": worst,
                "checks": checks,
            });
            let mut s = serde_json::to_string_pretty(&doc)
                .map_err(|e| Error::Internal(format!("cannot encode the report: {e}")))?;
            s.push('\n');
            s
        }
        Format::Table | Format::Markdown => {
            let mut s = String::new();
            for o in outcomes {
                let body = options.renderer().render(&o.report)?;
                let body = String::from_utf8_lossy(&body);
                s.push_str(&format!("== check {} ==\n{body}\n", o.name));
            }
            for l in &lines {
                s.push_str(l);
                s.push('\n');
            }
            s
        }
    };
    match &args.out {
        Some(path) => {
            crate::output::write_bytes(path, text.as_bytes())?;
            for l in &lines {
                eprintln!("{l}");
            }
        }
        None => print!("{text}"),
    }
    Ok(i32::from(args.fail_on.flags(worst)))
}
