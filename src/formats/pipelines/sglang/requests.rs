//! A forward pass of several requests: SGLang batches concurrent prompts into one pass, their
//! tokens concatenated (`seq_lens` gives each request's length). Each request is a sample of
//! its own — the positions of one request cut out of every tensor — as a batched file's rows
//! are. By `seq_lens` alone only prefill passes of whole prompts can be cut: a decode pass (one
//! token per request) or a prefix-cached extend holds fewer tokens than `seq_lens` counts, and
//! is refused here; a dumper folder carrying `positions` is read per request ([`super::served`]).

use candle_core::{DType, Tensor};

use super::assemble::Sample;
use crate::util::limits;

/// Each request's token count, from the pass's `seq_lens` (None: one request, all tokens),
/// checked against the `tokens` the pass holds.
pub fn lengths(
    seq_lens: Option<(&str, &Tensor)>,
    tokens: usize,
) -> std::result::Result<Vec<usize>, String> {
    let Some((name, t)) = seq_lens else {
        return Ok(vec![tokens]);
    };
    if t.elem_count() > limits::get().tokens {
        return Err(limits::exceeded(
            &format!("`{name}`"),
            t.elem_count(),
            "tokens",
            limits::get().tokens,
        ));
    }
    let lens: Vec<i64> = t
        .flatten_all()
        .and_then(|t| t.to_dtype(DType::I64))
        .and_then(|t| t.to_vec1())
        .map_err(|e| format!("`{name}`: {e}"))?;
    if let Some(bad) = lens.iter().find(|&&l| l < 1) {
        return Err(format!(
            "`{name}` {lens:?} holds the length {bad}: a request has at least one token"
        ));
    }
    let sum = lens
        .iter()
        .try_fold(0usize, |s, &l| s.checked_add(l as usize));
    if sum != Some(tokens) {
        return Err(format!(
            "`{name}` {lens:?} counts {} tokens, the pass holds {tokens}: a decode pass or a \
             prefix-cached extend, whose requests cannot be told apart without each token's \
             request slot (the tensor dump records positions but no `req_pool_indices`; the \
             dumper's core fields carry both, and a folder of them is read one request per \
             sample)",
            sum.map_or("more than usize".to_string(), |s| s.to_string())
        ));
    }
    Ok(lens.into_iter().map(|l| l as usize).collect())
}

/// Each request's token ids (`input_ids` cut as [`cut`] cuts it) when the pass holds several
/// requests and carries token ids; empty otherwise. Small next to the pass: kept by the source of
/// any one request, they spare reading the pass again for the others' ids.
pub fn each_requests_ids(sample: &Sample) -> candle_core::Result<Vec<Tensor>> {
    let ids = sample
        .tensors
        .iter()
        .find(|(name, _)| crate::capture::Key::of(name) == Some(crate::capture::Key::InputIds));
    let Some((_, ids)) = ids.filter(|_| sample.requests.len() > 1) else {
        return Ok(Vec::new());
    };
    let mut start = 0;
    let mut each = Vec::with_capacity(sample.requests.len());
    for &len in &sample.requests {
        each.push(ids.narrow(0, start, len)?.to_dtype(DType::I64)?);
        start += len;
    }
    Ok(each)
}

/// Request `r` of a pass of requests `lens` long: its positions cut out of every tensor (all
/// `[tokens, …]`), the description saying which request it is. The pass itself when it holds
/// one request.
pub fn cut(sample: Sample, r: usize) -> std::result::Result<Sample, String> {
    let lens = sample.requests.clone();
    if r >= lens.len() {
        return Err(format!(
            "the forward pass holds {} request(s), not request {r}",
            lens.len()
        ));
    }
    if lens.len() == 1 {
        return Ok(sample);
    }
    let start: usize = lens[..r].iter().sum();
    let tensors = sample
        .tensors
        .into_iter()
        .map(|(name, t)| {
            let cut = t
                .narrow(0, start, lens[r])
                .map_err(|e| format!("`{name}`: {e}"))?;
            Ok((name, cut))
        })
        .collect::<std::result::Result<Vec<_>, String>>()?;
    Ok(Sample {
        tensors,
        description: format!(
            "{}; request {r} of the pass's {} (seq_lens {lens:?}: positions {start}..{})",
            sample.description,
            lens.len(),
            start + lens[r]
        ),
        requests: vec![lens[r]],
        absent_prefix: sample.absent_prefix,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn lens_of(v: &[i64]) -> Tensor {
        Tensor::new(v, &Device::Cpu).expect("tensor")
    }

    #[test]
    fn lengths_checked_against_the_tokens() {
        let t = lens_of(&[10, 13]);
        assert_eq!(lengths(Some(("seq_lens", &t)), 23), Ok(vec![10, 13]));
        assert_eq!(lengths(None, 7), Ok(vec![7]));
        // One request is checked as several are: [0] and a length past the pass's tokens (a
        // decode pass or a prefix-cached extend, with no positions) are refused.
        assert_eq!(lengths(Some(("seq_lens", &lens_of(&[7]))), 7), Ok(vec![7]));
        let one = lengths(Some(("seq_lens", &lens_of(&[999]))), 10).unwrap_err();
        assert!(
            one.contains("counts 999 tokens, the pass holds 10"),
            "{one}"
        );
        let none = lengths(Some(("seq_lens", &lens_of(&[0]))), 10).unwrap_err();
        assert!(none.contains("holds the length 0"), "{none}");
        let decode = lengths(Some(("seq_lens", &lens_of(&[11, 14]))), 2).unwrap_err();
        assert!(
            decode.contains("counts 25 tokens, the pass holds 2: a decode pass"),
            "{decode}"
        );
        // Refused for want of request slots, which a served dumper folder carries.
        assert!(decode.contains("no `req_pool_indices`"), "{decode}");
        let zero = lengths(Some(("seq_lens", &lens_of(&[3, 0]))), 3).unwrap_err();
        assert!(zero.contains("holds the length 0"), "{zero}");
    }

    #[test]
    fn a_request_cut_from_every_tensor() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        let hidden = Tensor::randn(0f32, 1.0, (5, 3), &dev)?;
        let ids = Tensor::new(&[7i64, 8, 9, 10, 11], &dev)?;
        let sample = || Sample {
            tensors: vec![
                ("layers.0".to_string(), hidden.clone()),
                ("input_ids".to_string(), ids.clone()),
            ],
            description: "pass".to_string(),
            requests: vec![2, 3],
            absent_prefix: 0,
        };
        let second = cut(sample(), 1).expect("cut");
        assert_eq!(
            second.tensors[0].1.to_vec2::<f32>()?,
            hidden.narrow(0, 2, 3)?.to_vec2::<f32>()?
        );
        assert_eq!(second.tensors[1].1.to_vec1::<i64>()?, [9, 10, 11]);
        assert!(
            second
                .description
                .ends_with("request 1 of the pass's 2 (seq_lens [2, 3]: positions 2..5)")
        );
        assert!(cut(sample(), 2).is_err());
        // Each request's ids, as cut.
        let each: Vec<Vec<i64>> = each_requests_ids(&sample())?
            .iter()
            .map(|t| t.to_vec1::<i64>())
            .collect::<candle_core::Result<_>>()?;
        assert_eq!(each, [vec![7, 8], vec![9, 10, 11]]);
        let whole = Sample {
            requests: vec![5],
            ..sample()
        };
        assert!(each_requests_ids(&whole)?.is_empty());
        assert_eq!(cut(whole, 0).expect("whole").description, "pass");
        Ok(())
    }
}
