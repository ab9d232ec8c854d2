//! The recurrent state of one Gated DeltaNet layer between calls — what a serving engine keeps
//! in its cache — and the shared bookkeeping of the conv window.

use candle_core::Tensor;

use crate::error::{Error, Result};

/// State of one linear-attention layer after some prefix of a sequence.
#[derive(Debug, Clone)]
pub struct GdnState {
    /// `[B, conv_dim, K]`: the last K conv inputs (`mixed_qkv`, compute dtype), oldest first,
    /// zero where the sequence was shorter — transformers' `conv_states` layout.
    pub conv: Tensor,
    /// `[B, Hv, dk, dv]` at the accumulation dtype.
    pub recurrent: Tensor,
}

/// The conv window after `x` `[B, T, C]` follows `prev` (`[B, C, K]`, or nothing: zeros).
pub fn next_conv_state(prev: Option<&Tensor>, x: &Tensor, kernel: usize) -> Result<Tensor> {
    let (b, t, c) = x.dims3()?;
    let x = x.transpose(1, 2)?; // [B, C, T]
    let prev = match prev {
        Some(p) => p.to_dtype(x.dtype())?,
        None => Tensor::zeros((b, c, kernel), x.dtype(), x.device())?,
    };
    let full = Tensor::cat(&[&prev, &x], 2)?;
    Ok(full
        .narrow(2, t + prev.dim(2)? - kernel, kernel)?
        .contiguous()?)
}

/// Checks a conv state against the conv input it continues.
pub fn check_conv_state(backend: &str, x: &Tensor, kernel: usize, state: &Tensor) -> Result<()> {
    let (b, _, c) = x.dims3()?;
    if state.dims() != [b, c, kernel] {
        return Err(Error::backend(
            backend,
            format!(
                "conv state must be [{b}, {c}, {kernel}], got {:?}",
                state.dims()
            ),
        ));
    }
    Ok(())
}
