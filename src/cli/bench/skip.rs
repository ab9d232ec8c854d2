//! `--skip NAME[@QUALIFIER…]` of `bench core` and `bench forward`, parsed into the bench's
//! [`SkipList`]: an unknown name or qualifier is an error naming `--skip`, never a spec that
//! silently matches nothing.

use crate::backends::available_backends;
use crate::commands::bench::plan::{SkipList, SkipSpec, TORCH_CASES};
use crate::error::{Error, Result};
use crate::util::device::dtype_named;

/// Parses `NAME[@QUALIFIER…]`, e.g. `reference@8192`, `torch@bf16`, `chunked`.
pub fn skip_spec(spec: &str) -> Result<SkipSpec> {
    let refuse = |msg: String| Error::argument("--skip", format!("`{spec}`: {msg}"));
    let mut parts = spec.split('@');
    let name = parts.next().unwrap_or_default();
    let known = skippable_cases();
    if !known.contains(&name) {
        return Err(refuse(format!(
            "unknown case `{name}` (known: {})",
            known.join(", ")
        )));
    }
    let (mut lengths, mut dtypes) = (Vec::new(), Vec::new());
    for q in parts {
        if let Ok(n) = q.parse::<usize>() {
            if n == 0 {
                return Err(refuse("sequence length 0 names no case".into()));
            }
            lengths.push(n);
        } else if let Some(d) =
            dtype_named(q).filter(|d| crate::fp8::serving::act_scale(*d).is_none())
        {
            dtypes.push(d);
        } else {
            return Err(refuse(format!(
                "qualifier `{q}` is neither a sequence length nor a dtype (f64, f32, bf16, f16)"
            )));
        }
    }
    Ok(SkipSpec {
        name: name.to_string(),
        lengths,
        dtypes,
    })
}

fn skippable_cases() -> Vec<&'static str> {
    let mut names: Vec<&str> = available_backends().iter().map(|b| b.name).collect();
    names.extend(TORCH_CASES);
    names
}

/// The specs of a run; empty ones (a trailing comma) are ignored.
pub fn skip_list(specs: &[String]) -> Result<SkipList> {
    let given: Vec<String> = specs.iter().filter(|s| !s.is_empty()).cloned().collect();
    let parsed = given.iter().map(|s| skip_spec(s)).collect::<Result<_>>()?;
    Ok(SkipList::new(given, parsed))
}

#[cfg(test)]
mod tests {
    use candle_core::DType;

    use super::*;
    use crate::cli::bench::plan::option_of;

    #[test]
    fn skip_specs_parse_names_lengths_and_dtypes() {
        let s = skip_spec("reference@8192").expect("valid");
        assert_eq!(
            (s.name.as_str(), s.lengths.as_slice()),
            ("reference", &[8192][..])
        );
        assert!(s.matches("reference", 8192, DType::F32));
        assert!(s.matches("reference", 8192, DType::BF16));
        assert!(!s.matches("reference", 512, DType::F32));
        assert!(!s.matches("chunked", 8192, DType::F32));

        let s = skip_spec("torch@bf16").expect("valid");
        assert_eq!(s.dtypes, vec![DType::BF16]);
        assert!(s.matches("torch", 1, DType::BF16) && !s.matches("torch", 1, DType::F32));

        let s = skip_spec("fused@512@f16").expect("valid");
        assert!(s.matches("fused", 512, DType::F16));
        assert!(!s.matches("fused", 512, DType::F32) && !s.matches("fused", 513, DType::F16));

        let s = skip_spec("chunked").expect("valid");
        assert!(s.matches("chunked", 7, DType::F64));
        assert!(skip_spec("torch_recurrent@2048").is_ok());
    }

    #[test]
    fn bad_skip_specs_are_errors_naming_the_option() {
        for (spec, words) in [
            ("refrence", "unknown case `refrence`"),
            ("", "unknown case ``"),
            ("@512", "unknown case ``"),
            ("reference@", "qualifier `` is neither"),
            ("reference@fp8", "qualifier `fp8` is neither"),
            ("reference@-3", "qualifier `-3` is neither"),
            ("reference@0", "sequence length 0"),
        ] {
            let e = skip_spec(spec).expect_err(spec);
            let line = e.to_string();
            assert!(line.contains(words), "{spec}: {line}");
            assert!(line.contains(&format!("`{spec}`")), "{spec}: {line}");
            assert_eq!(option_of(e), "--skip", "{spec}");
        }
    }

    #[test]
    fn skip_lists_ignore_empty_specs_and_match_any_spec() {
        let list =
            skip_list(&["reference@512".into(), String::new(), "torch".into()]).expect("valid");
        assert_eq!(list.given(), ["reference@512", "torch"]);
        assert!(list.skips("reference", 512, DType::F32));
        assert!(list.skips("torch", 9, DType::BF16));
        assert!(!list.skips("reference", 2048, DType::F32));
        let e = skip_list(&["chunked".into(), "nope@f32".into()]).expect_err("bad");
        assert_eq!(option_of(e), "--skip");
    }
}
