//! The dtype a file's values were computed in, read from the values themselves. A bf16 run
//! saved for numpy (`h.float()`) or widened to f64 is stored as f32 / f64, but every value is
//! still a bf16 number: rounding to bf16 and back leaves it unchanged. Judged as f32 such a file
//! is a "mismatch at 10⁴× the f32 floor"; judged as what it is, it is an honest bf16 run. An
//! f32 computation produces bf16-exact values only by accident (one value in 65 536 has its low
//! 16 mantissa bits zero), so a whole tensor of them is evidence.
//!
//! Only the hidden states decide: `input_ids` and router ids are integers, and `embed` is the
//! embedding rows — bf16 weights, exact in any run's dtype.

use candle_core::{DType, Tensor};

use super::FileSource;
use crate::capture::Key;
use crate::error::Result;

/// Token rows read first: a tensor whose head is not exact is not, and is not read further.
const HEAD_TOKENS: usize = 16;

/// The narrowest dtype among bf16 and f16 that holds every value of `t` exactly; None when
/// neither does (or `t` is already 16-bit, empty, or holds no finite value). Non-finite values
/// are left out.
pub fn exact_in(t: &Tensor) -> Result<Option<DType>> {
    if !matches!(t.dtype(), DType::F32 | DType::F64) || t.elem_count() == 0 {
        return Ok(None);
    }
    let values: Vec<f64> = t.flatten_all()?.to_dtype(DType::F64)?.to_vec1()?;
    Ok(exact_16bit(&values))
}

/// The narrowest dtype among bf16 and f16 that holds every finite value of `values` exactly;
/// None when neither does or no value is finite (an all-NaN layer says nothing).
pub fn exact_16bit(values: &[f64]) -> Option<DType> {
    let finite = || values.iter().copied().filter(|v| v.is_finite());
    finite().next()?;
    let as_f32 = |v: f64| {
        let x = v as f32;
        (f64::from(x) == v).then_some(x)
    };
    let bf16 = finite().all(|v| as_f32(v).is_some_and(|x| x.to_bits() & 0xFFFF == 0));
    if bf16 {
        return Some(DType::BF16);
    }
    let f16 = finite().all(|v| as_f32(v).is_some_and(|x| half::f16::from_f32(x).to_f32() == x));
    f16.then_some(DType::F16)
}

/// Whether `name` is a hidden state whose values say how it was computed.
fn decides(name: &str) -> bool {
    !matches!(
        Key::of(name),
        Some(Key::InputIds | Key::Embed | Key::Router(..))
    )
}

impl FileSource {
    /// Reads the hidden states' values and records the dtype they were computed in when every
    /// one of them is bf16-exact (or f16-exact) although stored wider; consulted by
    /// [`FileSource::compute_dtype`] after a recorded dtype and `--dtype-hint`. Returns what
    /// was found, for the report: "every value is bf16-exact: read as a bf16 run stored as f32",
    /// or, for a file where only some tensors are, which.
    pub fn infer_dtype_from_values(&mut self) -> Result<Option<String>> {
        let recorded = self
            .fingerprint
            .as_ref()
            .and_then(|f| f.get("dtype"))
            .and_then(serde_json::Value::as_str)
            .and_then(super::parse_dtype_label);
        if recorded.is_some() || self.dtype_hint.is_some() || self.metadata_dtype.is_some() {
            return Ok(None);
        }
        let mut exact: Vec<(String, Option<DType>)> = Vec::new();
        let mut stored = None;
        for name in self.names().into_iter().filter(|n| decides(n)) {
            let Some(i) = self.names.get(&name).copied() else {
                continue;
            };
            let Some(d) = self.entries[i]
                .dtype
                .filter(|d| matches!(d, DType::F32 | DType::F64))
            else {
                continue;
            };
            stored = Some(d);
            let head = match self.get_head(&name, HEAD_TOKENS)? {
                Some(h) => exact_in(&h)?,
                None => None,
            };
            let found = match head {
                Some(_) => match self.get(&name)? {
                    Some(t) => exact_in(&t)?,
                    None => None,
                },
                None => None,
            };
            exact.push((name, found));
        }
        let Some(stored) = stored else {
            return Ok(None);
        };
        let stored = crate::util::device::dtype_label(stored);
        let all = exact.first().and_then(|(_, d)| *d).filter(|d| {
            exact.iter().all(|(_, e)| {
                // f16-exact tensors in a bf16-exact file (small values) still read as bf16 only
                // when every one is bf16-exact; a file exact in f16 needs every tensor f16-exact.
                *e == Some(*d) || (*d == DType::F16 && *e == Some(DType::BF16))
            })
        });
        if let Some(d) = all {
            self.value_dtype = Some(d);
            let label = crate::util::device::dtype_label(d);
            return Ok(Some(format!(
                "every value is {label}-exact: read as a {label} run stored as {stored} \
                 (--dtype-hint overrides)"
            )));
        }
        let some: Vec<String> = exact
            .iter()
            .filter_map(|(n, d)| {
                d.map(|d| format!("{n} ({}-exact)", crate::util::device::dtype_label(d)))
            })
            .collect();
        if some.is_empty() {
            return Ok(None);
        }
        // Per tensor, so that a file mixing runs shows which is which (an embedding output
        // saved by layer index is bf16-exact in any run: bf16 weights).
        Ok(Some(format!(
            "{} of {} tensors hold only 16-bit-exact values: {}; the other {} do not, so the file \
             is read as {stored}, as stored (an embedding output is exact in any run; \
             --dtype-hint sets the dtype)",
            some.len(),
            exact.len(),
            some.join(", "),
            exact.len() - some.len()
        )))
    }
}

/// [`FileSource::infer_dtype_from_values`] on each (label, file), its findings as notes
/// ("B: every value is bf16-exact: …").
pub fn value_dtype_notes(sides: [(&str, &mut FileSource); 2]) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    for (side, src) in sides {
        if let Some(note) = src.infer_dtype_from_values()? {
            notes.push(format!("{side}: {note}"));
        }
    }
    Ok(notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn values_rounded_to_bf16_are_bf16_exact_and_f32_values_are_not() -> Result<()> {
        let dev = Device::Cpu;
        let x = Tensor::randn(0f32, 1.0, (3, 64), &dev)?;
        assert_eq!(exact_in(&x)?, None);
        let bf = x.to_dtype(DType::BF16)?.to_dtype(DType::F32)?;
        assert_eq!(exact_in(&bf)?, Some(DType::BF16));
        assert_eq!(exact_in(&bf.to_dtype(DType::F64)?)?, Some(DType::BF16));
        let h = x.to_dtype(DType::F16)?.to_dtype(DType::F32)?;
        assert_eq!(exact_in(&h)?, Some(DType::F16));
        // A NaN does not make an f32 tensor look bf16, nor spoil a bf16 one.
        let v: Vec<f32> = bf.flatten_all()?.to_vec1()?;
        let mut with_nan = v.clone();
        with_nan[5] = f32::NAN;
        assert_eq!(exact_in(&Tensor::new(with_nan, &dev)?)?, Some(DType::BF16));
        let all_nan = vec![f32::NAN; 8];
        assert_eq!(exact_in(&Tensor::new(all_nan, &dev)?)?, None);
        assert_eq!(exact_in(&bf.to_dtype(DType::BF16)?)?, None);
        Ok(())
    }
}
