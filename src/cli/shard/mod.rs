//! `--shard I/N` and `--shard auto/N` read into a [`Shard`] once, here: the library takes the
//! typed value. `auto` takes the index from the scheduler that started the process
//! ([`scheduler`]), and stderr says from which variable.

use crate::commands::compare::dataset::PartOptions;
use crate::error::{Error, Result};
use crate::printer::Format;
use crate::printer::emit::ReportOptions;
use crate::report::dataset::{MAX_SHARDS, Shard};

mod scheduler;

const FLAG: &str = "--shard";

/// The shard `--shard ARG` names (`None` without the flag).
pub fn resolve(arg: Option<&str>) -> Result<Option<Shard>> {
    let Some(arg) = arg else {
        return Ok(None);
    };
    let bad = || {
        Error::argument(
            FLAG,
            format!("expects I/N or auto/N with 0 ≤ I < N, got `{arg}`"),
        )
    };
    let (i, n) = arg.split_once('/').ok_or_else(bad)?;
    let count: u64 = n.trim().parse().map_err(|_| bad())?;
    if count == 0 || count > MAX_SHARDS as u64 {
        return Err(Error::argument(
            FLAG,
            format!("`{arg}`: N must be 1 to {MAX_SHARDS} (2^24), got {count}"),
        ));
    }
    let index = if i.trim() == "auto" {
        let env = |name: &str| std::env::var_os(name).map(|v| v.to_string_lossy().into_owned());
        let (index, said) = scheduler::shard_index(count as usize, &env)?;
        eprintln!("hsdiff: {FLAG} {arg}: index {index} from {said}");
        index
    } else {
        i.trim().parse::<u64>().map_err(|_| bad())?
    };
    if index >= count {
        return Err(Error::argument(
            FLAG,
            format!("`{arg}`: index {index} is not below N = {count}"),
        ));
    }
    Ok(Some(Shard {
        index: index as usize,
        count: count as usize,
    }))
}

/// A shard's part: its exit code's `--fail-on`, and — written as JSON to `--out` — the file to
/// resume from.
pub fn part(shard: Option<Shard>, options: &ReportOptions) -> Option<PartOptions> {
    shard.map(|_| PartOptions {
        fail_on: options.fail_on,
        resume_from: options
            .out
            .clone()
            .filter(|_| options.format == Format::Json),
    })
}
