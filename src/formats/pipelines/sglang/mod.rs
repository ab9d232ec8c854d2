//! SGLang's own dumps, read one forward pass per sample (the layouts are read from SGLang's
//! code: `python/sglang/srt/debug_utils/dumper.py` and `tensor_dump_forward_hook.py`, the
//! decoder layers of `models/qwen3_5.py` / `qwen3_next.py`; docs/file-formats.md#sglang):
//!
//! - the dumper ([`dumper`]): one torch.save file per tensor, named by its tags
//!   ([`tags`]), holding `{value, meta}` or, in versions before `meta`, the bare tensor
//!   ([`dump_file`]); tensor-parallel copies joined as their meta says ([`tp`]); the layers
//!   rebuilt from the tensors' roles ([`dumper_layers`]);
//! - the tensor dump of `--debug-tensor-dump-output-folder` ([`pass`]): one `Pass{n}.pt` dict
//!   of leaf-module outputs per forward pass;
//! - the hidden states a request returns with `return_hidden_states=True`, its `/generate`
//!   response saved as JSON ([`returned`]; the counts checked by [`returned_counts`]).
//!
//! A layer's output is rebuilt from the `(hidden_states, residual)` pair SGLang's fused
//! add-RMSNorm carries; the sample becomes an in-memory file source ([`assemble`]) under
//! hsdiff's names, read by the comparison as any file.

mod assemble;
mod dump_file;
mod dumper;
mod dumper_layers;
mod dumper_ops;
mod listing;
mod pass;
mod requests;
mod returned;
mod returned_counts;
mod served;
pub mod tags;
mod tp;

use std::path::Path;

use candle_core::DType;

use super::ReadOptions;
use crate::error::{Error, Result};
use crate::formats::FileSource;

pub use tags::{collapse, sample_id};

/// Opens `path` as the forward pass of an SGLang dump it belongs to; None when its name is no
/// SGLang dump file's.
pub fn open(path: &Path, hint: Option<DType>, opts: &ReadOptions) -> Result<Option<FileSource>> {
    let parsed = tags::parse(path);
    let is_pass = parsed.is_none() && tags::parse_pass(path).is_some();
    let is_response = returned::is_response(path);
    if parsed.is_none() && !is_pass && !is_response {
        return Ok(None);
    }
    // An SGLang dump names its layers by module path: ids given for this side would name
    // nothing (ids for both sides are for the other side's pipeline dump).
    if let Some(ids) = &opts.layer_ids
        && ids.from.is_one_side()
    {
        return Err(Error::argument(
            ids.from.option(),
            format!(
                "{} is an SGLang dump, whose layers are named by their module path: the ids would name nothing",
                path.display()
            ),
        ));
    }
    match parsed {
        Some(t) => dumper::open(path, &t, hint, opts).map(Some),
        None if is_pass => pass::open(path, hint, opts).map(Some),
        None => returned::open(path, hint, opts).map(Some),
    }
}
