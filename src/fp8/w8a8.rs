//! The W8A8 block-FP8 Linear as vLLM and SGLang serve a block-quantised checkpoint
//! (`Fp8LinearMethod` → `apply_w8a8_block_fp8_linear`; dynamic activation quantisation is the
//! only scheme block checkpoints allow):
//!
//! 1. per token, per group of `block[1]` input channels (the weight's column block; the last
//!    group partial): `s = max(max|x|, 1e-10) / 448` in f32 ([`ActScale::Ue8m0`]: `max(s, 1e-10)`
//!    rounded up to a power of two), `q = e4m3(clamp(x / s, ±448))`, to nearest, ties to even;
//! 2. per output, over the column blocks in order: `acc += dot(q_x, q_w) · s_x · s_w` in f32,
//!    from `acc = 0` — the dot of one block computed exactly and rounded once to f32 (the
//!    engines' tensor-core dot accumulates it in f32; an fp8 product has 8 significant bits and a
//!    block's sum of them fits 53, so exactness costs nothing and fixes the result), then the two
//!    multiplies and the add each rounded to f32 (a GPU compiler may fuse the last two into an
//!    FMA: at most one f32 rounding of the accumulator per block, far below the bf16 output's);
//! 3. the output rounded to bf16.
//!
//! `golden/make_fp8.py` implements the same recipe in torch; tests/model/fp8.rs holds the
//! two to bit equality.

use half::bf16;
use rayon::prelude::*;

use super::format::{E4M3_MAX, round_e4m3};
use super::{ActScale, BlockScales, Fp8Format};

/// The activation-scale floor of vLLM's and SGLang's `per_token_group_quant_fp8`.
const EPS: f32 = 1e-10;

/// A quantised `[rows, cols]` weight as the served GEMM reads it: its e4m3 values (exact) and,
/// for each row, the scales of its column blocks.
#[derive(Debug, Clone)]
pub struct Fp8Weight {
    rows: usize,
    cols: usize,
    /// Columns per block: the activation group size too.
    block_cols: usize,
    values: Vec<f32>,
    /// `rows × ⌈cols / block_cols⌉`.
    row_scales: Vec<f32>,
}

impl Fp8Weight {
    /// The weight stored as `codes` (`[rows, cols]`, row-major) with its `scales`. Only e4m3
    /// weights are served (what vLLM and SGLang run); an error in words otherwise.
    pub fn new(
        format: Fp8Format,
        codes: &[u8],
        rows: usize,
        cols: usize,
        scales: &BlockScales,
    ) -> Result<Self, String> {
        if format != Fp8Format::E4M3 {
            return Err(format!(
                "stored as {}: the served W8A8 arithmetic runs e4m3 weights",
                format.name()
            ));
        }
        if codes.len() != rows * cols {
            return Err(format!(
                "{} codes for a [{rows}, {cols}] weight",
                codes.len()
            ));
        }
        let table = format.table();
        let row_scales = (0..rows).flat_map(|r| scales.row(r).to_vec()).collect();
        Ok(Fp8Weight {
            rows,
            cols,
            block_cols: scales.block()[1],
            values: codes.iter().map(|&c| table[c as usize]).collect(),
            row_scales,
        })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    fn blocks(&self) -> usize {
        self.cols.div_ceil(self.block_cols)
    }

    /// Rows `rows` of this weight, in that order (with their scales): each output of the GEMM
    /// depends on its own row only, so a row-permuted projection (Qwen3-Next's packed
    /// `in_proj_qkvz`) is served exactly as the packed one.
    pub fn select_rows(&self, rows: &[usize]) -> Self {
        let (c, b) = (self.cols, self.blocks());
        Fp8Weight {
            rows: rows.len(),
            cols: c,
            block_cols: self.block_cols,
            values: rows
                .iter()
                .flat_map(|&r| self.values[r * c..(r + 1) * c].iter().copied())
                .collect(),
            row_scales: rows
                .iter()
                .flat_map(|&r| self.row_scales[r * b..(r + 1) * b].iter().copied())
                .collect(),
        }
    }
}

/// One token's activations quantised per group of `group` channels: the e4m3 values and one
/// scale per group.
pub fn quantize_activations(x: &[f32], group: usize, act: ActScale) -> (Vec<f32>, Vec<f32>) {
    let mut q = Vec::with_capacity(x.len());
    let mut scales = Vec::with_capacity(x.len().div_ceil(group));
    for chunk in x.chunks(group) {
        let amax = chunk.iter().fold(0f32, |m, v| m.max(v.abs()));
        let mut s = amax.max(EPS) / E4M3_MAX;
        if act == ActScale::Ue8m0 {
            // vLLM's kernel floors the scale itself at 1e-10 before rounding it up.
            s = power_of_two_at_least(s.max(EPS));
        }
        q.extend(
            chunk
                .iter()
                .map(|&v| round_e4m3((v / s).clamp(-E4M3_MAX, E4M3_MAX))),
        );
        scales.push(s);
    }
    (q, scales)
}

/// The smallest power of two ≥ `s` (a positive normal f32), exactly: `2^⌈log₂ s⌉`.
fn power_of_two_at_least(s: f32) -> f32 {
    let bits = s.to_bits();
    if bits & 0x007F_FFFF == 0 {
        s
    } else {
        f32::from_bits((bits & 0x7F80_0000) + 0x0080_0000)
    }
}

/// `x · wᵀ` for `m` tokens of bf16 activations `x` (`[m, w.cols()]`, as f32: exact), served:
/// `[m, w.rows()]` in bf16.
pub fn matmul(x: &[f32], m: usize, w: &Fp8Weight, act: ActScale) -> Vec<bf16> {
    let (n, k, blocks, bc) = (w.rows, w.cols, w.blocks(), w.block_cols);
    let mut out = vec![bf16::ZERO; m * n];
    out.par_chunks_mut(n.max(1))
        .zip(x.par_chunks(k.max(1)))
        .for_each(|(y, xt)| {
            let (q, sx) = quantize_activations(xt, bc, act);
            for (o, yo) in y.iter_mut().enumerate() {
                let wrow = &w.values[o * k..(o + 1) * k];
                let sw = &w.row_scales[o * blocks..(o + 1) * blocks];
                let mut acc = 0f32;
                for b in 0..blocks {
                    let span = b * bc..((b + 1) * bc).min(k);
                    let dot: f64 = q[span.clone()]
                        .iter()
                        .zip(&wrow[span])
                        .map(|(a, w)| f64::from(a * w))
                        .sum();
                    acc += (dot as f32) * sx[b] * sw[b];
                }
                *yo = bf16::from_f32(acc);
            }
        });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activation_scales_follow_the_engines_recipe() {
        let x = [1.0f32, -3.5, 0.25, 0.0, 0.0, 0.0];
        let (q, s) = quantize_activations(&x, 3, ActScale::Fp32);
        assert_eq!(s[0], 3.5 / 448.0);
        assert_eq!(q[1], -448.0, "the group's max maps to ±448");
        assert_eq!(q[0], round_e4m3(1.0 / (3.5 / 448.0)));
        // An all-zero group takes the 1e-10 floor, not a division by zero.
        assert_eq!(s[1], EPS / 448.0);
        let (_, z8) = quantize_activations(&[0.0; 3], 3, ActScale::Ue8m0);
        assert_eq!(
            z8[0],
            power_of_two_at_least(EPS),
            "UE8M0 floors the scale at 1e-10"
        );
        assert_eq!(&q[3..], &[0.0, 0.0, 0.0]);
        let (_, s8) = quantize_activations(&x, 3, ActScale::Ue8m0);
        assert_eq!(
            s8[0],
            1.0 / 128.0,
            "3.5/448 = 2⁻⁷ exactly stays a power of two"
        );
        let (_, s8) = quantize_activations(&[3.0, 1.0, 0.0], 3, ActScale::Ue8m0);
        assert_eq!(s8[0], 1.0 / 128.0, "3/448 rounds up to 2⁻⁷");
        assert_eq!(power_of_two_at_least(0.75), 1.0);
        assert_eq!(power_of_two_at_least(2f32.powi(-40)), 2f32.powi(-40));
    }

    #[test]
    fn the_gemm_applies_each_blocks_scales_and_rounds_once_to_bf16() -> Result<(), String> {
        // A [2, 5] weight of 1.0 codes, column blocks of 3 (the second partial): scales 2 and 4
        // for row 0, 8 and 16 for row 1.
        let scales = BlockScales::new(&[2, 5], [1, 3], vec![2.0, 4.0, 8.0, 16.0])
            .ok_or("a 2 × 2 grid of scales")?;
        let w = Fp8Weight::new(Fp8Format::E4M3, &[0x38; 10], 2, 5, &scales)?;
        // Each x / s is an e4m3 value (112, 224, 448 and 224, 448), so the sums are those of x
        // up to f32 roundings of s that bf16 does not see: Σ_b s_w · Σ x.
        let x = [1.0f32, 2.0, 4.0, 8.0, 16.0];
        let y = matmul(&x, 1, &w, ActScale::Fp32);
        assert_eq!(y[0].to_f32(), 2.0 * 7.0 + 4.0 * 24.0);
        assert_eq!(y[1].to_f32(), 8.0 * 7.0 + 16.0 * 24.0);
        let swapped = w.select_rows(&[1, 0]);
        let y2 = matmul(&x, 1, &swapped, ActScale::Fp32);
        assert_eq!((y2[0], y2[1]), (y[1], y[0]));
        assert!(Fp8Weight::new(Fp8Format::E5M2, &[0; 10], 2, 5, &scales).is_err());
        Ok(())
    }
}
