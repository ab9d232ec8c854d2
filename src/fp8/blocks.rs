//! Block scales and exact dequantisation. A quantised tensor `[.., rows, cols]` carries one scale
//! per `block[0] × block[1]` block of each matrix, `[.., ⌈rows/block[0]⌉, ⌈cols/block[1]⌉]`,
//! edge blocks partial. Despite the checkpoints' name for them (`weight_scale_inv`) they are
//! multipliers: `W[i, j] = value(code[i, j]) · scale[i / block[0], j / block[1]]`.
//!
//! The product of an fp8 value (at most 4 significant bits) and a bf16 / f16 scale (8 / 11) is
//! exact in f32 and of any scale (f32: 24) in f64, so the f64 truth of an FP8 checkpoint is the
//! truth of its dequantised weights.

use super::Fp8Format;

/// The scales of one quantised tensor, as f32 (exact for bf16 / f16 / f32 stored scales).
pub struct BlockScales {
    block: [usize; 2],
    /// `[.., rows, cols]` of the tensor the scales belong to.
    rows: usize,
    cols: usize,
    /// Scale blocks along rows and columns of one matrix.
    grid: [usize; 2],
    values: Vec<f32>,
}

impl BlockScales {
    /// The shape the scales of a tensor of `shape` must have; `None` when `shape` is not at least
    /// a matrix or a block side is zero.
    pub fn expected_shape(shape: &[usize], block: [usize; 2]) -> Option<Vec<usize>> {
        let [.., rows, cols] = *shape else {
            return None;
        };
        if block.contains(&0) {
            return None;
        }
        let mut out = shape[..shape.len() - 2].to_vec();
        out.extend([rows.div_ceil(block[0]), cols.div_ceil(block[1])]);
        Some(out)
    }

    /// Scales `values` (in the order of [`BlockScales::expected_shape`]) of a tensor of `shape`;
    /// `None` when their number does not match.
    pub fn new(shape: &[usize], block: [usize; 2], values: Vec<f32>) -> Option<Self> {
        let want = Self::expected_shape(shape, block)?;
        if want.iter().product::<usize>() != values.len() {
            return None;
        }
        let [.., rows, cols] = *shape else {
            return None;
        };
        Some(BlockScales {
            block,
            rows,
            cols,
            grid: [rows.div_ceil(block[0]), cols.div_ceil(block[1])],
            values,
        })
    }

    pub fn block(&self) -> [usize; 2] {
        self.block
    }

    /// The scale of the element at row-major index `flat` of the tensor.
    pub fn scale_at(&self, flat: usize) -> f32 {
        let per_matrix = self.rows * self.cols;
        let (matrix, at) = (flat / per_matrix, flat % per_matrix);
        let (i, j) = (at / self.cols, at % self.cols);
        let s = matrix * self.grid[0] * self.grid[1]
            + (i / self.block[0]) * self.grid[1]
            + j / self.block[1];
        self.values[s]
    }

    /// The scales of matrix row `row` (of the first matrix: a 2-D weight), one per column block.
    pub fn row(&self, row: usize) -> &[f32] {
        let start = (row / self.block[0]) * self.grid[1];
        &self.values[start..start + self.grid[1]]
    }

    /// The elements stored as `codes`, which start at row-major index `first` of the tensor,
    /// dequantised in f64: exact.
    pub fn dequantize_f64(&self, format: Fp8Format, codes: &[u8], first: usize) -> Vec<f64> {
        let table = format.table();
        codes
            .iter()
            .enumerate()
            .map(|(n, &c)| f64::from(table[c as usize]) * f64::from(self.scale_at(first + n)))
            .collect()
    }

    /// Checks the weights stored as `codes` (from row-major index `first`): every code a finite
    /// value of `format`, and every product with its block's scale within `±limit` (the range of
    /// the dtype the weights are used in). A quantiser never writes a NaN code, so one means the
    /// bytes are not `format`'s (e4m3 codes labelled e5m2 hit e5m2's NaN codes at ±448); a product
    /// past the range means corrupt scales, which would turn every activation they touch into
    /// Inf or NaN.
    pub fn check_weights(
        &self,
        format: Fp8Format,
        codes: &[u8],
        first: usize,
        limit: f64,
    ) -> Result<(), String> {
        let table = format.table();
        for (n, &c) in codes.iter().enumerate() {
            let value = table[c as usize];
            let at = first + n;
            let (row, col) = ((at / self.cols) % self.rows, at % self.cols);
            if !value.is_finite() {
                return Err(format!(
                    "element {at} (row {row}, column {col}) is code 0x{c:02x}, {value} in {}: \
                     quantised weights are finite, so the bytes are not {} codes",
                    format.name(),
                    format.name()
                ));
            }
            let scale = self.scale_at(at);
            let weight = f64::from(value) * f64::from(scale);
            if weight.abs() > limit {
                return Err(format!(
                    "element {at} (row {row}, column {col}) is {value} × its block scale \
                     {scale:e} = {weight:e}, past ±{limit:e}: the block scales are corrupt"
                ));
            }
        }
        Ok(())
    }

    /// [`BlockScales::dequantize_f64`] in f32: exact for bf16 / f16 scales (12 / 15 significant
    /// bits) unless a product falls below f32's normal range, correctly rounded otherwise.
    pub fn dequantize_f32(&self, format: Fp8Format, codes: &[u8], first: usize) -> Vec<f32> {
        let table = format.table();
        codes
            .iter()
            .enumerate()
            .map(|(n, &c)| table[c as usize] * self.scale_at(first + n))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_shapes_round_partial_blocks_up() {
        assert_eq!(
            BlockScales::expected_shape(&[300, 200], [128, 128]),
            Some(vec![3, 2])
        );
        assert_eq!(
            BlockScales::expected_shape(&[4, 160, 64], [48, 40]),
            Some(vec![4, 4, 2])
        );
        assert_eq!(BlockScales::expected_shape(&[7], [128, 128]), None);
        assert_eq!(BlockScales::expected_shape(&[7, 7], [0, 128]), None);
        assert!(BlockScales::new(&[300, 200], [128, 128], vec![1.0; 5]).is_none());
    }

    #[test]
    fn every_element_gets_its_own_blocks_scale_edge_blocks_included() -> Result<(), String> {
        // 5 × 7 with 2 × 3 blocks: a 3 × 3 grid, the last block row and column partial.
        let scales: Vec<f32> = (0..9).map(|s| 2f32.powi(s)).collect();
        let b = BlockScales::new(&[5, 7], [2, 3], scales).ok_or("a 3 × 3 grid of scales")?;
        let code_one = 0x38; // e4m3 1.0
        let codes = vec![code_one; 35];
        let w = b.dequantize_f64(Fp8Format::E4M3, &codes, 0);
        for i in 0..5 {
            for j in 0..7 {
                let want = 2f64.powi((3 * (i / 2) + j / 3) as i32);
                assert_eq!(w[i * 7 + j], want, "({i}, {j})");
            }
        }
        assert_eq!(b.row(4), &[64.0, 128.0, 256.0]);
        // A range starting mid-tensor (row 3) uses the same scales.
        let tail = b.dequantize_f32(Fp8Format::E4M3, &codes[21..], 21);
        assert_eq!(tail[0], 8.0);
        assert_eq!(tail[13], 256.0);
        Ok(())
    }

    #[test]
    fn nan_codes_and_scales_that_overflow_the_weights_are_named() -> Result<(), String> {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(0xf8_5c);
        let (rows, cols) = (6, 10);
        let scales: Vec<f32> = (0..9)
            .map(|_| (rng.random::<f64>() * 0.02 + 1e-4) as f32)
            .collect();
        let b = BlockScales::new(&[rows, cols], [2, 4], scales).ok_or("a 3 × 3 grid")?;
        // Random finite e4m3 codes (0x7f / 0xff are e4m3's NaNs), with ±448 in every block as
        // a quantiser writes it (each block's largest magnitude maps to the format's maximum).
        let mut codes: Vec<u8> = (0..rows * cols)
            .map(|_| {
                loop {
                    let c: u8 = rng.random();
                    if c & 0x7f != 0x7f {
                        break c;
                    }
                }
            })
            .collect();
        codes[7] = 0x7e;
        b.check_weights(Fp8Format::E4M3, &codes, 0, f64::from(f32::MAX))?;

        // The same bytes labelled e5m2: 0x7e is a NaN there.
        let err = b
            .check_weights(Fp8Format::E5M2, &codes, 0, f64::from(f32::MAX))
            .expect_err("e4m3 codes read as e5m2");
        assert!(err.contains("not F8_E5M2 codes"), "{err}");
        // A NaN code, reported with its row and column (from a range starting at row 3).
        codes[34] = 0xff;
        let err = b
            .check_weights(Fp8Format::E4M3, &codes[30..], 30, f64::from(f32::MAX))
            .expect_err("NaN code");
        assert!(
            err.starts_with("element 34 (row 3, column 4) is code 0xff, NaN"),
            "{err}"
        );

        // One block's scale of 3e38 takes 448 past f32's range.
        codes[34] = 0x38;
        let mut big = b.values.clone();
        big[1] = 3e38;
        let b = BlockScales::new(&[rows, cols], [2, 4], big).ok_or("grid")?;
        let err = b
            .check_weights(Fp8Format::E4M3, &codes, 0, f64::from(f32::MAX))
            .expect_err("scale past the range");
        // Block 1 is rows 0–1, columns 4–7: element 4 (or the first of its block past ±1.13).
        assert!(
            err.contains("its block scale 3e38") && err.contains("scales are corrupt"),
            "{err}"
        );
        Ok(())
    }
}
