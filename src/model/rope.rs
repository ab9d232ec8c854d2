//! Partial rotary position embedding: only the first `rotary_dim` dims of each head rotate,
//! with rotate_half pairing (i, i + rotary_dim/2). For text-only input Qwen3.5's interleaved
//! M-RoPE has three equal position rows and reduces exactly to this.
//!
//! transformers builds `inv_freq` and the angles in float32 and rounds cos/sin to the compute
//! dtype; in f64 mode everything here is float64.

use candle_core::{DType, Device, Tensor};

use crate::error::Result;

pub struct Rope {
    /// `[T, rotary_dim]` in the compute dtype.
    cos: Tensor,
    sin: Tensor,
    rotary_dim: usize,
}

impl Rope {
    pub fn new(
        theta: f64,
        rotary_dim: usize,
        seq: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let half = rotary_dim / 2;
        let (cos, sin) = if dtype == DType::F64 {
            let inv: Vec<f64> = (0..half)
                .map(|i| 1.0 / theta.powf((2 * i) as f64 / rotary_dim as f64))
                .collect();
            angles(seq, &inv, |a| a.cos(), |a| a.sin())
        } else {
            let inv: Vec<f32> = (0..half)
                .map(|i| 1.0 / (theta as f32).powf((2 * i) as f32 / rotary_dim as f32))
                .collect();
            let (c, s) = angles(seq, &inv, |a| a.cos(), |a| a.sin());
            (
                c.into_iter().map(f64::from).collect(),
                s.into_iter().map(f64::from).collect(),
            )
        };
        // f32 values are exactly representable in f64, so going through f64 adds no rounding.
        let to_tensor = |v: Vec<f64>| -> Result<Tensor> {
            Ok(Tensor::from_vec(v, (seq, rotary_dim), device)?.to_dtype(dtype)?)
        };
        Ok(Rope {
            cos: to_tensor(cos)?,
            sin: to_tensor(sin)?,
            rotary_dim,
        })
    }

    /// The rotation at arbitrary positions (a cached continuation, packed documents that
    /// restart at 0): rows of this table, which must cover every position.
    pub fn at_positions(&self, positions: &[u32]) -> Result<Rope> {
        let idx = Tensor::from_vec(positions.to_vec(), positions.len(), self.cos.device())?;
        Ok(Rope {
            cos: self.cos.index_select(&idx, 0)?,
            sin: self.sin.index_select(&idx, 0)?,
            rotary_dim: self.rotary_dim,
        })
    }

    /// Rotates `x` `[B, H, T, d]` (compute dtype): `x_rot·cos + rotate_half(x_rot)·sin`.
    pub fn apply(&self, x: &Tensor) -> Result<Tensor> {
        let d = x.dim(3)?;
        let rot = x.narrow(3, 0, self.rotary_dim)?;
        let half = self.rotary_dim / 2;
        let rotated_half = Tensor::cat(
            &[&rot.narrow(3, half, half)?.neg()?, &rot.narrow(3, 0, half)?],
            3,
        )?;
        let rot = (rot.broadcast_mul(&self.cos)? + rotated_half.broadcast_mul(&self.sin)?)?;
        if self.rotary_dim == d {
            return Ok(rot);
        }
        let pass = x.narrow(3, self.rotary_dim, d - self.rotary_dim)?;
        Ok(Tensor::cat(&[&rot, &pass], 3)?)
    }
}

/// cos and sin of `[f, f]` per position, in the float type of `inv`.
fn angles<F: Copy + FromPosition + std::ops::Mul<Output = F>>(
    seq: usize,
    inv: &[F],
    cos: impl Fn(F) -> F,
    sin: impl Fn(F) -> F,
) -> (Vec<F>, Vec<F>) {
    let mut c = Vec::with_capacity(seq * inv.len() * 2);
    let mut s = Vec::with_capacity(seq * inv.len() * 2);
    for t in 0..seq {
        let pos = F::from_position(t);
        for _ in 0..2 {
            for &f in inv {
                let a = pos * f;
                c.push(cos(a));
                s.push(sin(a));
            }
        }
    }
    (c, s)
}

/// Position index as the float type the angles are computed in.
trait FromPosition {
    fn from_position(t: usize) -> Self;
}
impl FromPosition for f32 {
    fn from_position(t: usize) -> Self {
        t as f32
    }
}
impl FromPosition for f64 {
    fn from_position(t: usize) -> Self {
        t as f64
    }
}
