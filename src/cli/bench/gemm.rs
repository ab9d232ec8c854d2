//! `bench gemm`'s options checked into the [`GemmBench`] it measures: the shapes named, positive
//! sizes and calls, the dtypes it has products for.

use candle_core::DType;

use super::case::GemmArgs;
use crate::commands::bench::gemm::{GemmBench, SHAPES_27B, Shape};
use crate::error::{Error, Result};
use crate::util::device::dtype_label;

/// The bench `args` ask for, or the first error among their values.
pub fn checked_gemm(args: &GemmArgs) -> Result<GemmBench> {
    let gemm = GemmBench {
        seq: args.seq,
        shapes: shapes_named(&args.shapes)?,
        columns: args.columns,
        dtypes: args.dtypes.iter().map(|d| d.0).collect(),
        repeats: args.repeats,
        warmup: 1,
        seed: 20240917,
    };
    check(&gemm)?;
    Ok(gemm)
}

/// The shapes of [`SHAPES_27B`] named in `names` (all of them when empty).
fn shapes_named(names: &[String]) -> Result<Vec<Shape>> {
    if names.is_empty() {
        return Ok(SHAPES_27B.to_vec());
    }
    names
        .iter()
        .map(|name| {
            SHAPES_27B
                .iter()
                .find(|s| s.name == name)
                .cloned()
                .ok_or_else(|| {
                    let known: Vec<&str> = SHAPES_27B.iter().map(|s| s.name).collect();
                    Error::argument(
                        "--shapes",
                        format!("unknown shape `{name}` (known: {})", known.join(", ")),
                    )
                })
        })
        .collect()
}

fn check(g: &GemmBench) -> Result<()> {
    if g.seq == 0 {
        return Err(Error::argument("--seq", "must be positive"));
    }
    if g.columns == Some(0) {
        return Err(Error::argument("--columns", "must be positive"));
    }
    if g.repeats == 0 {
        return Err(Error::argument("--repeats", "must be positive"));
    }
    if let Some(d) = g
        .dtypes
        .iter()
        .find(|d| !matches!(d, DType::F32 | DType::F64 | DType::BF16))
    {
        return Err(Error::argument(
            "--dtypes",
            format!(
                "bench gemm measures f32, f64 and bf16, not {}",
                dtype_label(*d)
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked() {
        let ok = GemmBench {
            seq: 4,
            shapes: vec![],
            columns: None,
            dtypes: vec![DType::F32, DType::BF16],
            repeats: 1,
            warmup: 0,
            seed: 1,
        };
        assert!(check(&ok).is_ok());
        let f16 = GemmBench {
            dtypes: vec![DType::F16],
            ..ok.clone()
        };
        assert!(check(&f16).is_err());
        let zero_seq = GemmBench {
            seq: 0,
            ..ok.clone()
        };
        assert!(check(&zero_seq).is_err());
        let zero_columns = GemmBench {
            columns: Some(0),
            ..ok.clone()
        };
        assert!(check(&zero_columns).is_err());
        assert!(check(&GemmBench { repeats: 0, ..ok }).is_err());
        assert_eq!(shapes_named(&[]).expect("all").len(), SHAPES_27B.len());
        let down = shapes_named(&["down_proj".into()]).expect("known");
        assert_eq!((down[0].n, down[0].k), (5120, 17408));
        assert!(shapes_named(&["up".into()]).is_err());
    }
}
