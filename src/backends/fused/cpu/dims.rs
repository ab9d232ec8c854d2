//! Shape descriptors and their validation.

use crate::backends::fused::cpu::error::{KernelError, prod};

/// Geometry of one Gated DeltaNet layer call: the kernels' and the backends' (re-exported as
/// `backends::GdnDims`) one shape type.
///
/// `v_heads = r · k_heads`; value head `h` reads key/query head `h / r` (repeat_interleave).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GdnDims {
    /// Batch size B (may be 0: nothing to do).
    pub batch: usize,
    /// Sequence length T (may be 0: the final state is the initial state).
    pub seq: usize,
    /// Query/key heads Hk.
    pub k_heads: usize,
    /// Value heads Hv, a multiple of `k_heads`.
    pub v_heads: usize,
    /// Query/key head dimension dk.
    pub k_dim: usize,
    /// Value head dimension dv.
    pub v_dim: usize,
    /// Depthwise conv kernel size K (only used by the fused kernel; 0 where a call has no conv).
    pub conv_kernel: usize,
}

impl GdnDims {
    /// The dims of B sequences of T tokens, Hk key heads and Hv value heads of dk and dv
    /// dimensions, after a conv of `conv_kernel` taps (0: a call without the conv).
    pub fn new(
        batch: usize,
        seq: usize,
        (k_heads, v_heads): (usize, usize),
        (k_dim, v_dim): (usize, usize),
        conv_kernel: usize,
    ) -> GdnDims {
        GdnDims {
            batch,
            seq,
            k_heads,
            v_heads,
            k_dim,
            v_dim,
            conv_kernel,
        }
    }

    /// Channels of the conv input/output: 2·Hk·dk + Hv·dv. For dims that [`validate`] accepted
    /// or that describe tensors which exist; [`checked_conv_dim`] for any other.
    ///
    /// [`validate`]: Self::validate
    /// [`checked_conv_dim`]: Self::checked_conv_dim
    pub fn conv_dim(&self) -> usize {
        2 * self.k_heads * self.k_dim + self.v_heads * self.v_dim
    }

    /// [`conv_dim`](Self::conv_dim), or [`KernelError::Overflow`] where it does not fit a usize.
    pub fn checked_conv_dim(&self) -> Result<usize, KernelError> {
        let qk = prod(&[2, self.k_heads, self.k_dim])?;
        let v = prod(&[self.v_heads, self.v_dim])?;
        qk.checked_add(v).ok_or(KernelError::Overflow)
    }

    /// Value heads per key head, r.
    pub fn heads_per_key_head(&self) -> usize {
        self.v_heads / self.k_heads.max(1)
    }

    /// Checks the dimensions that do not depend on a particular kernel.
    pub(crate) fn validate(&self, needs_conv: bool) -> Result<(), KernelError> {
        let bad = |m: &str| Err(KernelError::InvalidDims(m.to_string()));
        if self.k_heads == 0 || self.v_heads == 0 {
            return bad("k_heads and v_heads must be > 0");
        }
        if !self.v_heads.is_multiple_of(self.k_heads) {
            return bad("v_heads must be a multiple of k_heads");
        }
        if self.k_dim == 0 || self.v_dim == 0 {
            return bad("k_dim and v_dim must be > 0");
        }
        if needs_conv && self.conv_kernel == 0 {
            return bad("conv_kernel must be > 0");
        }
        // Make sure every buffer size is representable.
        prod(&[self.batch, self.seq, self.checked_conv_dim()?])?;
        prod(&[self.batch, self.v_heads, self.k_dim, self.v_dim])?;
        Ok(())
    }
}

/// Geometry of a standalone depthwise causal conv: x [B, T, C], w [C, K].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvDims {
    /// Batch size B.
    pub batch: usize,
    /// Sequence length T.
    pub seq: usize,
    /// Channels C.
    pub channels: usize,
    /// Kernel size K.
    pub kernel: usize,
}

/// Geometry of the gated RMS norm: `x`, `z`: [rows, dim]; `w`: `[dim]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NormDims {
    /// Number of independent rows N (e.g. B·T·Hv).
    pub rows: usize,
    /// Normalised dimension (dv).
    pub dim: usize,
}
