//! The shard index a scheduler gives the process it starts: a Slurm job array's task
//! (`SLURM_ARRAY_TASK_ID` offset by `SLURM_ARRAY_TASK_MIN`, divided by `SLURM_ARRAY_TASK_STEP`),
//! a Kubernetes Indexed Job's `JOB_COMPLETION_INDEX`, or `HSDIFF_SHARD_INDEX` — for
//! `--shard auto/N`. Every variable that is set must agree, and a Slurm array must have N tasks.

use crate::error::{Error, Result};

const FLAG: &str = "--shard";

/// The index the schedulers' variables give (each one set), checked for agreement; the text
/// says which variables gave it.
pub fn shard_index(count: usize, env: &dyn Fn(&str) -> Option<String>) -> Result<(u64, String)> {
    let mut found: Vec<(u64, String)> = Vec::new();
    if let Some(slurm) = slurm(count, env)? {
        found.push(slurm);
    }
    for name in ["JOB_COMPLETION_INDEX", "HSDIFF_SHARD_INDEX"] {
        if let Some(v) = env(name) {
            found.push((number(name, &v)?, format!("{name}={v}")));
        }
    }
    let Some((index, first)) = found.first().cloned() else {
        return Err(Error::argument(
            FLAG,
            format!(
                "auto/{count}: no shard index in the environment (SLURM_ARRAY_TASK_ID of a Slurm \
                 job array, JOB_COMPLETION_INDEX of a Kubernetes Indexed Job, or \
                 HSDIFF_SHARD_INDEX): give I/{count} or set one"
            ),
        ));
    };
    if let Some((other, said)) = found.iter().find(|(i, _)| *i != index) {
        return Err(Error::argument(
            FLAG,
            format!(
                "auto/{count}: the environment gives two shard indices: {index} from {first}, \
                 {other} from {said}"
            ),
        ));
    }
    let also: Vec<&str> = found[1..].iter().map(|(_, s)| s.as_str()).collect();
    Ok(match also.is_empty() {
        true => (index, first),
        false => (index, format!("{first} (agrees: {})", also.join(", "))),
    })
}

/// A Slurm array task's place in its array: (ID − MIN) / STEP, with the array's size checked
/// against N.
fn slurm(count: usize, env: &dyn Fn(&str) -> Option<String>) -> Result<Option<(u64, String)>> {
    let Some(id_text) = env("SLURM_ARRAY_TASK_ID") else {
        return Ok(None);
    };
    let id = number("SLURM_ARRAY_TASK_ID", &id_text)?;
    let min_text = env("SLURM_ARRAY_TASK_MIN").ok_or_else(|| {
        Error::argument(
            FLAG,
            "auto: SLURM_ARRAY_TASK_ID is set without SLURM_ARRAY_TASK_MIN (Slurm sets both for \
             a job array): set it, or give I/N",
        )
    })?;
    let min = number("SLURM_ARRAY_TASK_MIN", &min_text)?;
    let offset = id.checked_sub(min).ok_or_else(|| {
        Error::argument(
            FLAG,
            format!("auto: SLURM_ARRAY_TASK_ID={id} is below SLURM_ARRAY_TASK_MIN={min}"),
        )
    })?;
    let mut said = format!("SLURM_ARRAY_TASK_ID={id} − SLURM_ARRAY_TASK_MIN={min}");
    let mut index = offset;
    if let Some(step_text) = env("SLURM_ARRAY_TASK_STEP") {
        let step = number("SLURM_ARRAY_TASK_STEP", &step_text)?;
        if step > 1 {
            if offset % step != 0 {
                return Err(Error::argument(
                    FLAG,
                    format!(
                        "auto: SLURM_ARRAY_TASK_ID={id} is not on the array's steps \
                         (SLURM_ARRAY_TASK_MIN={min}, SLURM_ARRAY_TASK_STEP={step})"
                    ),
                ));
            }
            index = offset / step;
            said = format!("({said}) / SLURM_ARRAY_TASK_STEP={step}");
        }
    }
    if let Some(n_text) = env("SLURM_ARRAY_TASK_COUNT") {
        let n = number("SLURM_ARRAY_TASK_COUNT", &n_text)?;
        if n != count as u64 {
            return Err(Error::argument(
                FLAG,
                format!(
                    "auto/{count}: the Slurm array has SLURM_ARRAY_TASK_COUNT={n} tasks, not \
                     {count}: give auto/{n} or resize the array"
                ),
            ));
        }
    }
    Ok(Some((index, said)))
}

fn number(name: &str, value: &str) -> Result<u64> {
    value.trim().parse().map_err(|_| {
        Error::argument(
            FLAG,
            format!(
                "auto: {name}={:?} is not a whole number ≥ 0",
                crate::util::escape::one_line(value)
            ),
        )
    })
}

#[cfg(test)]
mod tests;
