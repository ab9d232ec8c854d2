//! `hsdiff compare A B`: compare two files of captured hidden states — hsdiff dumps, safetensors
//! written by PyTorch, `torch.save` files, numpy arrays — with the same table, verdicts and JSON
//! as a live run, plus the layer alignment and the environment differences. With the model at
//! hand (`--model`, or named by a fingerprint) the f64 truth and each side's floor are computed
//! on the files' token ids by the same job plan as live runs; without one the report is
//! "uncalibrated" and only the depth-scaled band can flag a row.

mod args;
mod given;

pub use args::CompareArgs;

use super::common::command_line;
use crate::commands::compare::dataset;
use crate::commands::compare::pair::PairOptions;
use crate::commands::compare::{CompareRequest, Compared, compare};
use crate::error::Result;
use crate::printer::dataset::emit as emit_dataset;
use crate::printer::emit::emit;

pub fn run(args: &CompareArgs) -> Result<i32> {
    let shard = super::shard::resolve(args.shard.as_deref())?;
    let layer_ids = given::layer_ids(args)?;
    let given_ids = given::token_ids(args.tokens.as_deref(), args.prompt.as_deref())?;
    let options = args.report.options();
    let req = CompareRequest {
        a: args.a.clone(),
        b: args.b.clone(),
        pair: PairOptions {
            maps: given::maps(&args.map)?,
            shift: args.shift,
            layers: args.report.layers.clone(),
            command: Some(command_line()),
            no_floor: args.no_floor,
            verbose: true,
            ..PairOptions::default()
        },
        model: args.model.clone(),
        dtype_hint: args.dtype_hint.map(|d| d.0),
        layer_ids: layer_ids.both,
        layer_ids_a: layer_ids.a,
        layer_ids_b: layer_ids.b,
        draft_config: args.draft_config.clone(),
        calibrate: args.calibrate,
        shard,
        part: super::shard::part(shard, &options),
        given_ids,
        allow_token_mismatch: args.allow_token_mismatch,
    };
    options.check_targets(&req.inputs())?;
    match compare(&req)? {
        Compared::Pair(report) => emit(&report, &options),
        Compared::Dataset(report) => {
            emit_dataset(&report, &options)?;
            Ok(dataset::exit_code(&report, options.fail_on))
        }
        Compared::Resumed(report) => Ok(dataset::exit_code(&report, options.fail_on)),
    }
}
