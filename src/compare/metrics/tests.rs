//! [`diff_stats`] against a straightforward f64 reference (one sequential sum per quantity, the
//! definition of every field), on fresh random data with planted non-finite values, and the
//! kernel's AVX2 variant against its generic one.

use candle_core::{DType, Device, Tensor};

use super::kernel::{self, CHUNK, Isa, NonFinite, Row};
use super::*;
use crate::backends::cases::SplitMix;

/// Unit roundoff of f64.
const U: f64 = f64::EPSILON / 2.0;

/// γ_n = n·u / (1 − n·u): the bound on the relative error of a sum of n non-negative terms in
/// any order (Higham, Accuracy and Stability of Numerical Algorithms, §4.2).
fn gamma(n: usize) -> f64 {
    let nu = n as f64 * U;
    nu / (1.0 - nu)
}

/// The definition, summed element by element in token order.
fn reference(a: &Tensor, b: &Tensor) -> DiffStats {
    let rows = |t: &Tensor| -> Vec<Vec<f64>> {
        t.squeeze(0)
            .and_then(|t| t.to_dtype(DType::F64))
            .and_then(|t| t.to_vec2())
            .expect("rows")
    };
    let (ra, rb) = (rows(a), rows(b));
    let (tokens, cols) = (ra.len(), ra[0].len());
    let mut s = DiffStats::before_any_row(tokens, cols);
    let (mut abs, mut sq_diff, mut sq_a, mut sq_b, mut dot) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for token in 0..tokens {
        let (mut r_sq_diff, mut r_sq_a, mut r_sq_b, mut r_dot) = (0.0, 0.0, 0.0, 0.0);
        let mut one_sided = false;
        for channel in 0..cols {
            let (x, y) = (ra[token][channel], rb[token][channel]);
            s.nan_a += usize::from(x.is_nan());
            s.inf_a += usize::from(x.is_infinite());
            s.nan_b += usize::from(y.is_nan());
            s.inf_b += usize::from(y.is_infinite());
            let at = Some(Location { token, channel });
            if !(x.is_finite() && y.is_finite()) {
                one_sided |= x.is_finite() != y.is_finite();
                if (x.is_nan() && y.is_nan()) || (x.is_infinite() && x == y) {
                    s.non_finite_both += 1;
                    s.non_finite_both_at = s.non_finite_both_at.or(at);
                } else {
                    s.non_finite_disagree += 1;
                    s.non_finite_disagree_at = s.non_finite_disagree_at.or(at);
                }
                continue;
            }
            let d = (x - y).abs();
            abs += d;
            r_sq_diff += d * d;
            r_sq_a += x * x;
            r_sq_b += y * y;
            r_dot += x * y;
            if d > s.max_abs {
                s.max_abs = d;
                s.max_abs_at = Location { token, channel };
            }
        }
        s.per_token_rel.push(if one_sided {
            f64::NAN
        } else {
            ratio(r_sq_diff.sqrt(), r_sq_b.sqrt())
        });
        let cos = if r_sq_diff == 0.0 {
            1.0
        } else {
            cosine(r_dot, r_sq_a, r_sq_b)
        };
        if cos < s.cosine_min || token == 0 {
            s.cosine_min = cos;
            s.cosine_min_token = token;
        }
        s.token_sq_diff.push(r_sq_diff);
        s.token_sq_b.push(r_sq_b);
        sq_diff += r_sq_diff;
        sq_a += r_sq_a;
        sq_b += r_sq_b;
        dot += r_dot;
    }
    let finite = s.elements - (s.nan_a + s.inf_a).max(s.nan_b + s.inf_b);
    s.mean_abs = if finite > 0 { abs / finite as f64 } else { 0.0 };
    s.norm_b = sq_b.sqrt();
    s.rel_l2 = ratio(sq_diff.sqrt(), s.norm_b);
    s.cosine = if sq_diff == 0.0 {
        1.0
    } else {
        cosine(dot, sq_a, sq_b)
    };
    s
}

/// `got` within `rel` of `want` (relative), NaN only against NaN.
fn close(what: &str, got: f64, want: f64, rel: f64) {
    if want.is_nan() {
        assert!(got.is_nan(), "{what}: {got} where the reference has NaN");
        return;
    }
    assert!(
        (got - want).abs() <= rel * want.abs(),
        "{what}: {got:e} vs reference {want:e} (rel {:e} > bound {rel:e})",
        (got - want).abs() / want.abs()
    );
}

/// Every field of `got` against the reference, to bounds from f64 summation error: a sum of n
/// non-negative terms is within γ_n of the exact one in either order, so two orders differ by at
/// most 2γ_n; a square root halves a relative error, a division or square root adds u each.
fn check(got: &DiffStats, want: &DiffStats, cols: usize, ctx: &str) {
    assert_eq!(got.elements, want.elements, "{ctx}");
    // Counts, locations and the maximum involve no rounding: exact.
    assert_eq!(
        (got.nan_a, got.inf_a, got.nan_b, got.inf_b),
        (want.nan_a, want.inf_a, want.nan_b, want.inf_b),
        "{ctx}"
    );
    assert_eq!(
        (got.non_finite_disagree, got.non_finite_disagree_at),
        (want.non_finite_disagree, want.non_finite_disagree_at),
        "{ctx}"
    );
    assert_eq!(
        (got.non_finite_both, got.non_finite_both_at),
        (want.non_finite_both, want.non_finite_both_at),
        "{ctx}"
    );
    assert_eq!(got.max_abs.to_bits(), want.max_abs.to_bits(), "{ctx}");
    assert_eq!(got.max_abs_at, want.max_abs_at, "{ctx}");
    let n = want.elements;
    let (row_sum, all_sum) = (2.0 * gamma(cols), 2.0 * gamma(n));
    for t in 0..want.token_sq_b.len() {
        close(
            &format!("{ctx} Σ(a−b)² token {t}"),
            got.token_sq_diff[t],
            want.token_sq_diff[t],
            row_sum,
        );
        close(
            &format!("{ctx} Σb² token {t}"),
            got.token_sq_b[t],
            want.token_sq_b[t],
            row_sum,
        );
        close(
            &format!("{ctx} rel token {t}"),
            got.per_token_rel[t],
            want.per_token_rel[t],
            row_sum + 3.0 * U,
        );
    }
    close(
        &format!("{ctx} mean_abs"),
        got.mean_abs,
        want.mean_abs,
        all_sum + U,
    );
    close(
        &format!("{ctx} norm_b"),
        got.norm_b,
        want.norm_b,
        all_sum / 2.0 + U,
    );
    close(
        &format!("{ctx} rel_l2"),
        got.rel_l2,
        want.rel_l2,
        all_sum + 3.0 * U,
    );
    // cos = dot / (‖a‖‖b‖): the dot's error is bounded by 2γ_n Σ|xy| ≤ 2γ_n ‖a‖‖b‖ (Cauchy–
    // Schwarz), so in absolute terms 2γ_n, plus |cos| times the norms' and the division's.
    let cos_abs = |cols: usize| 2.0 * gamma(cols) + 2.0 * gamma(cols) + 3.0 * U;
    assert!(
        (got.cosine - want.cosine).abs() <= cos_abs(n),
        "{ctx} cosine {} vs {}",
        got.cosine,
        want.cosine
    );
    assert!(
        (got.cosine_min - want.cosine_min).abs() <= cos_abs(cols),
        "{ctx} cosine_min {} vs {}",
        got.cosine_min,
        want.cosine_min
    );
    assert_eq!(got.cosine_min_token, want.cosine_min_token, "{ctx}");
}

/// `[1, tokens, cols]` of N(0, 1) in f32, and a B that is A plus small noise (the usual
/// comparison) or independent (large differences, cosines near 0).
fn pair(rng: &mut SplitMix, tokens: usize, cols: usize, close_pair: bool) -> (Vec<f32>, Vec<f32>) {
    let a: Vec<f32> = (0..tokens * cols).map(|_| rng.normal() as f32).collect();
    let b = a
        .iter()
        .map(|&x| {
            if close_pair {
                x + (1e-3 * rng.normal()) as f32
            } else {
                rng.normal() as f32
            }
        })
        .collect();
    (a, b)
}

/// Plants NaN, ±Inf on one side or both (the same or different) at random places.
fn plant(rng: &mut SplitMix, a: &mut [f32], b: &mut [f32], count: usize) {
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY];
    for _ in 0..count {
        let i = (rng.next_u64() % a.len() as u64) as usize;
        let pick = |rng: &mut SplitMix| specials[(rng.next_u64() % 3) as usize];
        match rng.next_u64() % 4 {
            0 => a[i] = pick(rng),
            1 => b[i] = pick(rng),
            2 => {
                let v = pick(rng);
                (a[i], b[i]) = (v, v);
            }
            _ => (a[i], b[i]) = (pick(rng), pick(rng)),
        }
    }
}

fn tensor(v: &[f32], tokens: usize, cols: usize, dtype: DType) -> Tensor {
    Tensor::from_slice(v, (1, tokens, cols), &Device::Cpu)
        .and_then(|t| t.to_dtype(dtype))
        .expect("tensor")
}

#[test]
fn diff_stats_matches_the_reference_on_random_data_with_non_finite_values() {
    let mut rng = SplitMix::new(0x5eed_2005);
    // Whole chunks, a chunk and a tail, a row shorter than the lanes, odd lengths.
    let shapes = [
        (6, 4 * CHUNK),
        (5, 3 * CHUNK + 5),
        (7, 7),
        (3, 1001),
        (4, CHUNK - 1),
    ];
    let dtypes = [
        (DType::BF16, DType::BF16),
        (DType::F32, DType::F32),
        (DType::BF16, DType::F32),
        (DType::F16, DType::F64),
    ];
    for (tokens, cols) in shapes {
        for (da, db) in dtypes {
            for close_pair in [true, false] {
                for planted in [0, 1, 12] {
                    let (mut a, mut b) = pair(&mut rng, tokens, cols, close_pair);
                    plant(&mut rng, &mut a, &mut b, planted);
                    let (ta, tb) = (tensor(&a, tokens, cols, da), tensor(&b, tokens, cols, db));
                    let ctx = format!(
                        "[{tokens}, {cols}] {da:?}/{db:?} close {close_pair} planted {planted}"
                    );
                    let got = diff_stats("x", &ta, &tb).expect("stats");
                    check(&got, &reference(&ta, &tb), cols, &ctx);
                }
            }
        }
    }
}

/// The largest difference (exactly 64 at three places) is named where it first occurs in token
/// order: in an earlier chunk than a second one of the same row, and not replaced by a later
/// row's equal one.
#[test]
fn max_location_is_the_first_occurrence() {
    let mut rng = SplitMix::new(0x5eed_2006);
    let (tokens, cols) = (3, 2 * CHUNK + 3);
    let (mut a, mut b) = pair(&mut rng, tokens, cols, true);
    for &(t, c) in &[(1, CHUNK + 9), (1, 17), (2, 4)] {
        (a[t * cols + c], b[t * cols + c]) = (0.5, 64.5);
    }
    let (ta, tb) = (
        tensor(&a, tokens, cols, DType::F32),
        tensor(&b, tokens, cols, DType::F32),
    );
    let got = diff_stats("x", &ta, &tb).expect("stats");
    assert_eq!(got.max_abs, 64.0);
    assert_eq!(
        got.max_abs_at,
        Location {
            token: 1,
            channel: 17
        }
    );
    assert_eq!(got.max_abs_at, reference(&ta, &tb).max_abs_at);
}

#[test]
fn identical_tensors_are_exactly_identical() {
    let mut rng = SplitMix::new(0x5eed_2007);
    let (a, _) = pair(&mut rng, 4, 3 * CHUNK + 1, true);
    let t = tensor(&a, 4, 3 * CHUNK + 1, DType::BF16);
    let s = diff_stats("x", &t, &t).expect("stats");
    assert_eq!((s.rel_l2, s.max_abs, s.mean_abs), (0.0, 0.0, 0.0));
    assert_eq!((s.cosine, s.cosine_min), (1.0, 1.0));
}

/// The AVX2 variant and the generic one give the same bits, non-finite elements included.
#[test]
fn every_instruction_set_gives_the_same_bits() {
    if kernel::isa() != Isa::Avx2 {
        eprintln!("no AVX2 here: only the generic variant exists");
        return;
    }
    let mut rng = SplitMix::new(0x5eed_2008);
    for (cols, planted) in [(4 * CHUNK, 0), (3 * CHUNK + 7, 0), (4 * CHUNK + 3, 9)] {
        let (mut a, mut b) = pair(&mut rng, 1, cols, true);
        plant(&mut rng, &mut a, &mut b, planted);
        let ab: Vec<half::bf16> = a.iter().map(|&x| half::bf16::from_f32(x)).collect();
        let rows = [(Row::F32(&a), Row::F32(&b)), (Row::BF16(&ab), Row::F32(&b))];
        for (ra, rb) in rows {
            let run = |isa| {
                let mut nf = NonFinite::default();
                let r = kernel::row_with(isa, ra, rb, 0, 0.0, &mut nf);
                (r, nf)
            };
            let ((x, nx), (y, ny)) = (run(Isa::Avx2), run(Isa::Generic));
            let bits =
                |r: &kernel::RowSums| [r.abs, r.sq_diff, r.sq_a, r.sq_b, r.dot].map(f64::to_bits);
            assert_eq!(bits(&x), bits(&y), "cols {cols}");
            assert_eq!(
                (x.one_sided, x.max.map(|m| (m.0.to_bits(), m.1))),
                (y.one_sided, y.max.map(|m| (m.0.to_bits(), m.1)))
            );
            assert_eq!(nx, ny);
        }
    }
}

/// The stored bytes of `t` (`[1, T, C]`, any float dtype) laid out as a concatenation of `k`
/// layers along the channels (the SpecForge layout `[1, T, k·C]`), `t` being layer `layer`;
/// the other layers hold fresh random values. `pad` bytes come first (to misalign on purpose).
fn concatenated(
    rng: &mut SplitMix,
    t: &Tensor,
    k: usize,
    layer: usize,
    pad: usize,
) -> (Vec<u8>, usize, usize) {
    let (_, tokens, cols) = t.dims3().expect("[1, T, C]");
    let elem = t.dtype().size_in_bytes();
    let mut parts = Vec::with_capacity(k);
    for l in 0..k {
        parts.push(if l == layer {
            t.clone()
        } else {
            let noise: Vec<f32> = (0..tokens * cols).map(|_| rng.normal() as f32).collect();
            tensor(&noise, tokens, cols, t.dtype())
        });
    }
    let whole = Tensor::cat(&parts, 2).expect("cat");
    let mut bytes = vec![0u8; pad];
    macro_rules! put {
        ($ty:ty) => {
            for v in whole
                .flatten_all()
                .and_then(|x| x.to_vec1::<$ty>())
                .expect("values")
            {
                bytes.extend_from_slice(&v.to_le_bytes());
            }
        };
    }
    match t.dtype() {
        DType::BF16 => put!(half::bf16),
        DType::F16 => put!(half::f16),
        DType::F32 => put!(f32),
        _ => put!(f64),
    }
    (bytes, pad + layer * cols * elem, k * cols * elem)
}

/// Bytes in an 8-aligned buffer, as a file's map is page-aligned.
struct Aligned {
    words: Vec<u64>,
    len: usize,
}

impl Aligned {
    fn of(bytes: &[u8]) -> Self {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        for (w, c) in words.iter_mut().zip(bytes.chunks(8)) {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            *w = u64::from_ne_bytes(b);
        }
        Aligned {
            words,
            len: bytes.len(),
        }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the first `len` bytes of the words' buffer, read as bytes.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }
}

fn stored(
    bytes: &[u8],
    dtype: DType,
    rows: usize,
    cols: usize,
    first: usize,
    stride: usize,
) -> StoredRows<'_> {
    StoredRows {
        bytes,
        dtype,
        rows,
        first,
        stride,
        row_bytes: cols * dtype.size_in_bytes(),
    }
}

/// Statistics summed from the stored bytes of a layer cut from a concatenation are the tensor
/// path's, bit for bit, field for field — NaN/±Inf planted, mixed dtypes, odd widths; a row not
/// aligned for its type is no view (None), never misread.
#[test]
fn stored_rows_give_the_tensor_paths_bits() {
    let mut rng = SplitMix::new(0x5eed_0701);
    let dtypes = [
        (DType::BF16, DType::BF16),
        (DType::F32, DType::BF16),
        (DType::F16, DType::F64),
    ];
    for (tokens, cols) in [(5, 2 * CHUNK + 3), (3, 7), (9, CHUNK)] {
        for (da, db) in dtypes {
            for planted in [0, 9] {
                let (mut a, mut b) = pair(&mut rng, tokens, cols, true);
                plant(&mut rng, &mut a, &mut b, planted);
                let (ta, tb) = (tensor(&a, tokens, cols, da), tensor(&b, tokens, cols, db));
                let ctx = format!("[{tokens}, {cols}] {da:?}/{db:?} planted {planted}");
                let (bytes_a, first_a, stride_a) = concatenated(&mut rng, &ta, 5, 2, 0);
                let (bytes_b, first_b, stride_b) = concatenated(&mut rng, &tb, 3, 0, 8);
                let (buf_a, buf_b) = (Aligned::of(&bytes_a), Aligned::of(&bytes_b));
                let sa = stored(buf_a.bytes(), da, tokens, cols, first_a, stride_a);
                let sb = stored(buf_b.bytes(), db, tokens, cols, first_b, stride_b);
                let got = diff_stats_stored(&sa, &sb).expect(&ctx);
                let want = diff_stats("x", &ta, &tb).expect("stats");
                assert_eq!(format!("{got:?}"), format!("{want:?}"), "{ctx}");
                // One byte off: no view of a 2-, 4- or 8-byte type.
                let shifted = stored(buf_b.bytes(), db, tokens, cols, first_b + 1, stride_b);
                assert!(
                    diff_stats_stored(&sa, &shifted).is_none(),
                    "{ctx}: misaligned"
                );
            }
        }
    }
    // Different shapes are no pair: the tensor path names the difference.
    let t = tensor(&[1.0; 12], 3, 4, DType::F32);
    let (bytes, first, stride) = concatenated(&mut rng, &t, 1, 0, 0);
    let buf = Aligned::of(&bytes);
    let rows = |rows, cols| stored(buf.bytes(), DType::F32, rows, cols, first, stride);
    assert!(diff_stats_stored(&rows(3, 4), &rows(3, 4)).is_some());
    assert!(diff_stats_stored(&rows(3, 4), &rows(2, 4)).is_none());
    assert!(diff_stats_stored(&rows(3, 4), &rows(3, 2)).is_none());
}
