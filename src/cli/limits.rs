//! The process-wide settings outside any one command: `--limit NAME=VALUE` into the input
//! [`Limits`], and a `RAYON_NUM_THREADS` this process can start.

use crate::error::{Error, Result};
use crate::util::limits::{Limits, NAMES, PICKLE_DEPTH_MAX, THREADS_MAX};

/// The defaults with the `--limit NAME=VALUE` settings `args` applied.
pub fn limits_from_args(args: &[String]) -> Result<Limits> {
    let mut l = Limits::default();
    for arg in args {
        let (name, value) = arg
            .split_once('=')
            .ok_or_else(|| Error::argument("--limit", format!("`{arg}`: expected NAME=VALUE")))?;
        let value: usize = value
            .trim()
            .parse()
            .ok()
            .filter(|&v| v > 0)
            .ok_or_else(|| {
                Error::argument(
                    format!("--limit {name}"),
                    format!("`{value}` is not a positive integer"),
                )
            })?;
        let slot = match name.trim() {
            "tokens" => &mut l.tokens,
            "prompt-bytes" => &mut l.prompt_bytes,
            "layers" => &mut l.layers,
            "dim" => &mut l.dim,
            "json-bytes" => &mut l.json_bytes,
            "pickle-bytes" => &mut l.pickle_bytes,
            "pickle-depth" => &mut l.pickle_depth,
            "pickle-objects" => &mut l.pickle_objects,
            "inflated-bytes" => &mut l.inflated_bytes,
            other => {
                let known: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
                return Err(Error::argument(
                    "--limit",
                    format!("unknown limit `{other}` (known: {})", known.join(", ")),
                ));
            }
        };
        *slot = value;
    }
    if l.pickle_depth > PICKLE_DEPTH_MAX {
        return Err(Error::argument(
            "--limit pickle-depth",
            format!(
                "{} is deeper than hsdiff reads: at most {PICKLE_DEPTH_MAX} (its readers recurse, and the stack holds no more)",
                l.pickle_depth
            ),
        ));
    }
    Ok(l)
}

/// `RAYON_NUM_THREADS`, when set, is a thread count this process can start (rayon would panic
/// on a count it cannot spawn).
pub fn check_threads_env() -> Result<()> {
    let Some(value) = std::env::var_os("RAYON_NUM_THREADS") else {
        return Ok(());
    };
    let text = value.to_string_lossy();
    match text.trim().parse::<usize>() {
        Ok(n) if n <= THREADS_MAX => Ok(()),
        _ => Err(Error::argument(
            "RAYON_NUM_THREADS",
            format!(
                "`{}` is not a thread count from 0 (all cores) to {THREADS_MAX}",
                crate::util::escape::plain(&text, crate::util::escape::SHORT)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        let l = limits_from_args(&["tokens=5".into(), "pickle-depth=9".into()]).expect("parses");
        assert_eq!((l.tokens, l.pickle_depth), (5, 9));
        assert_eq!(l.layers, Limits::default().layers);
        for bad in [
            "tokens",
            "tokens=0",
            "tokens=-1",
            "nope=3",
            "pickle-depth=1000000",
        ] {
            assert!(limits_from_args(&[bad.to_string()]).is_err(), "{bad}");
        }
    }
}
