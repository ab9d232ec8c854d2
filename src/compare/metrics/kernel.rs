//! The per-row sums of [`super::diff_stats`], read straight from the stored values (bf16, f16,
//! f32 or f64 on either side) and widened to f64 inside the loop.
//!
//! Each row is summed in chunks of [`CHUNK`] elements into [`LANES`] independent accumulators
//! per quantity (element `c` of a row goes to lane `c % LANES`), so that LLVM vectorises the
//! loop; the lanes are added in one fixed order at the end of the row. The lane count is a
//! constant, not the machine's vector width, and no operation is fused (Rust never contracts a
//! multiply and an add), so the sums are the same bits on every instruction set: the AVX2
//! variant and the generic one give identical numbers (tested).
//!
//! A chunk is first summed without looking at its values. When its sums of squares come out
//! finite, every element in it was finite (a NaN or ±Inf makes them NaN or +Inf) and the chunk
//! is kept. Otherwise the chunk is summed again element by element, exactly as the statistics
//! define it: non-finite elements counted, located, and left out of the sums. For finite
//! elements both ways perform the same operations in the same order, so a chunk that goes the
//! slow way only because a finite f64 square overflowed gives the same sums.

use half::{bf16, f16};

use super::Location;

/// Independent accumulators per quantity (fixed: the result must not depend on the ISA).
pub const LANES: usize = 8;
/// Elements per finiteness check.
pub const CHUNK: usize = 256;

/// A stored value that widens to f64 exactly.
pub trait Widen: Copy {
    fn widen(self) -> f64;
}

impl Widen for bf16 {
    #[inline(always)]
    fn widen(self) -> f64 {
        // bf16 is the top half of an f32: the shift widens it exactly (and vectorises, where
        // half's conversion also quiets signalling NaNs — a NaN either way).
        f64::from(f32::from_bits(u32::from(self.to_bits()) << 16))
    }
}

impl Widen for f16 {
    #[inline(always)]
    fn widen(self) -> f64 {
        self.to_f64()
    }
}

impl Widen for f32 {
    #[inline(always)]
    fn widen(self) -> f64 {
        f64::from(self)
    }
}

impl Widen for f64 {
    #[inline(always)]
    fn widen(self) -> f64 {
        self
    }
}

/// One token row's values, as stored.
#[derive(Clone, Copy)]
pub enum Row<'a> {
    BF16(&'a [bf16]),
    F16(&'a [f16]),
    F32(&'a [f32]),
    F64(&'a [f64]),
}

/// Non-finite elements seen so far, with the first of each kind (token order).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct NonFinite {
    pub nan_a: usize,
    pub inf_a: usize,
    pub nan_b: usize,
    pub inf_b: usize,
    pub disagree: usize,
    pub disagree_at: Option<Location>,
    pub both: usize,
    pub both_at: Option<Location>,
    /// The first non-finite element of each side (token order), with its value.
    pub first_a: Option<(Location, NonFiniteValue)>,
    pub first_b: Option<(Location, NonFiniteValue)>,
}

/// What a non-finite element holds (an enum, so that two records of one NaN compare equal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonFiniteValue {
    NaN,
    PlusInf,
    MinusInf,
}

impl NonFiniteValue {
    /// `x`'s kind; `x` is not finite.
    fn of(x: f64) -> Self {
        if x.is_nan() {
            NonFiniteValue::NaN
        } else if x > 0.0 {
            NonFiniteValue::PlusInf
        } else {
            NonFiniteValue::MinusInf
        }
    }

    /// `NaN`, `+Inf` or `-Inf`.
    pub fn word(self) -> &'static str {
        match self {
            NonFiniteValue::NaN => "NaN",
            NonFiniteValue::PlusInf => "+Inf",
            NonFiniteValue::MinusInf => "-Inf",
        }
    }
}

/// One row's sums over the element pairs finite on both sides.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct RowSums {
    pub abs: f64,
    pub sq_diff: f64,
    pub sq_a: f64,
    pub sq_b: f64,
    pub dot: f64,
    /// Some element is finite on one side only.
    pub one_sided: bool,
    /// The row's largest |a − b| and its first channel, when it exceeds the `above` asked for.
    pub max: Option<(f64, usize)>,
    /// Per side, the first finite element past each narrow float's range ([`RANGE_LIMITS`]):
    /// its channel and value.
    pub beyond_a: Beyond,
    pub beyond_b: Beyond,
}

/// The largest finite values of the narrow float types a run may compute in, f16 then bf16: a
/// finite value above one in a wider capture is where a run in that type would have overflowed.
pub const RANGE_LIMITS: [f64; 2] = [65504.0, 3.389_531_389_251_535_5e38];

/// The first element past each of [`RANGE_LIMITS`] in a row, if any: (channel, value).
pub type Beyond = [Option<(usize, f64)>; 2];

/// The first finite elements of `x` past each range limit. A row whose finite squares sum to at
/// most the f16 limit squared holds no such element, so only larger rows (or rows with
/// non-finite elements, left out of that sum) are scanned.
fn beyond<A: Widen>(x: &[A], sq: f64, one_sided: bool) -> Beyond {
    let mut out: Beyond = [None, None];
    if sq <= RANGE_LIMITS[0] * RANGE_LIMITS[0] && !one_sided {
        return out;
    }
    for (channel, &v) in x.iter().enumerate() {
        let v = v.widen();
        if !v.is_finite() {
            continue;
        }
        for (slot, limit) in out.iter_mut().zip(RANGE_LIMITS) {
            if slot.is_none() && v.abs() > limit {
                *slot = Some((channel, v));
            }
        }
        if out.iter().all(Option::is_some) {
            break;
        }
    }
    out
}

/// Per-lane running sums.
#[derive(Clone, Copy)]
struct Lanes {
    abs: [f64; LANES],
    sq_diff: [f64; LANES],
    sq_a: [f64; LANES],
    sq_b: [f64; LANES],
    dot: [f64; LANES],
    max: [f64; LANES],
}

impl Lanes {
    const ZERO: Lanes = Lanes {
        abs: [0.0; LANES],
        sq_diff: [0.0; LANES],
        sq_a: [0.0; LANES],
        sq_b: [0.0; LANES],
        dot: [0.0; LANES],
        max: [0.0; LANES],
    };

    /// Adds one finite pair to `lane`.
    #[inline(always)]
    fn add(&mut self, lane: usize, x: f64, y: f64) {
        let diff = x - y;
        let d = diff.abs();
        self.abs[lane] += d;
        self.sq_diff[lane] += diff * diff;
        self.sq_a[lane] += x * x;
        self.sq_b[lane] += y * y;
        self.dot[lane] += x * y;
        self.max[lane] = if d > self.max[lane] {
            d
        } else {
            self.max[lane]
        };
    }

    #[inline(always)]
    fn merge(&mut self, c: &Lanes) {
        for l in 0..LANES {
            self.abs[l] += c.abs[l];
            self.sq_diff[l] += c.sq_diff[l];
            self.sq_a[l] += c.sq_a[l];
            self.sq_b[l] += c.sq_b[l];
            self.dot[l] += c.dot[l];
            self.max[l] = if c.max[l] > self.max[l] {
                c.max[l]
            } else {
                self.max[l]
            };
        }
    }

    /// No element summed into these lanes was NaN or ±Inf (a finite f64 whose square
    /// overflows also reads as non-finite: it then takes the exact path, which sums the same).
    #[inline(always)]
    fn all_finite(&self) -> bool {
        let mut s = 0.0;
        for l in 0..LANES {
            s += self.sq_a[l] + self.sq_b[l];
        }
        s.is_finite()
    }
}

/// The lanes added in one fixed order (pairwise).
#[inline(always)]
fn reduce(v: &[f64; LANES]) -> f64 {
    ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]))
}

/// A chunk summed without a look at its values (`a.len()` a multiple of [`LANES`]).
#[inline(always)]
fn chunk_fast<A: Widen, B: Widen>(a: &[A], b: &[B]) -> Lanes {
    let mut c = Lanes::ZERO;
    for (xa, xb) in a.chunks_exact(LANES).zip(b.chunks_exact(LANES)) {
        for l in 0..LANES {
            c.add(l, xa[l].widen(), xb[l].widen());
        }
    }
    c
}

/// A chunk summed element by element: non-finite pairs counted, located and skipped.
/// `channel0` is the chunk's first channel (a multiple of [`LANES`]).
#[inline(always)]
fn chunk_exact<A: Widen, B: Widen>(
    a: &[A],
    b: &[B],
    token: usize,
    channel0: usize,
    nf: &mut NonFinite,
    one_sided: &mut bool,
) -> Lanes {
    let mut c = Lanes::ZERO;
    for (j, (&xa, &xb)) in a.iter().zip(b).enumerate() {
        let (x, y) = (xa.widen(), xb.widen());
        count(x, &mut nf.nan_a, &mut nf.inf_a);
        count(y, &mut nf.nan_b, &mut nf.inf_b);
        if !(x.is_finite() && y.is_finite()) {
            *one_sided |= x.is_finite() != y.is_finite();
            let here = Location {
                token,
                channel: channel0 + j,
            };
            if !x.is_finite() {
                nf.first_a = nf.first_a.or(Some((here, NonFiniteValue::of(x))));
            }
            if !y.is_finite() {
                nf.first_b = nf.first_b.or(Some((here, NonFiniteValue::of(y))));
            }
            let at = Some(here);
            if same_non_finite(x, y) {
                nf.both += 1;
                nf.both_at = nf.both_at.or(at);
            } else {
                nf.disagree += 1;
                nf.disagree_at = nf.disagree_at.or(at);
            }
            continue;
        }
        c.add(j % LANES, x, y);
    }
    c
}

fn count(x: f64, nan: &mut usize, inf: &mut usize) {
    if x.is_nan() {
        *nan += 1;
    } else if x.is_infinite() {
        *inf += 1;
    }
}

/// Both NaN, or both infinite with the same sign.
fn same_non_finite(x: f64, y: f64) -> bool {
    (x.is_nan() && y.is_nan()) || (x.is_infinite() && x == y)
}

/// The sums of one row pair (same length), the non-finite elements added to `nf`; the row's
/// maximum |a − b| and its first channel when it is larger than `above`.
#[inline(always)]
fn row_body<A: Widen, B: Widen>(
    a: &[A],
    b: &[B],
    token: usize,
    above: f64,
    nf: &mut NonFinite,
) -> RowSums {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut lanes = Lanes::ZERO;
    let mut one_sided = false;
    let whole = n - n % CHUNK;
    for start in (0..whole).step_by(CHUNK) {
        let (ca, cb) = (&a[start..start + CHUNK], &b[start..start + CHUNK]);
        let mut c = chunk_fast(ca, cb);
        if !c.all_finite() {
            c = chunk_exact(ca, cb, token, start, nf, &mut one_sided);
        }
        lanes.merge(&c);
    }
    if whole < n {
        let c = chunk_exact(&a[whole..], &b[whole..], token, whole, nf, &mut one_sided);
        lanes.merge(&c);
    }
    let row_max = lanes
        .max
        .iter()
        .fold(0.0f64, |m, &x| if x > m { x } else { m });
    // Found again only when it is a new overall maximum: the first channel holding it (the
    // statistics' max location is its first occurrence in token order).
    let max = (row_max > above).then(|| {
        let at = a
            .iter()
            .zip(b)
            .position(|(&x, &y)| {
                let (x, y) = (x.widen(), y.widen());
                x.is_finite() && y.is_finite() && (x - y).abs() == row_max
            })
            .unwrap_or(0);
        (row_max, at)
    });
    let (sq_a, sq_b) = (reduce(&lanes.sq_a), reduce(&lanes.sq_b));
    RowSums {
        abs: reduce(&lanes.abs),
        sq_diff: reduce(&lanes.sq_diff),
        sq_a,
        sq_b,
        dot: reduce(&lanes.dot),
        one_sided,
        max,
        beyond_a: beyond(a, sq_a, one_sided),
        beyond_b: beyond(b, sq_b, one_sided),
    }
}

/// Instruction set a row is summed with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx2,
    /// Whatever the crate is compiled for (SSE2 on a default x86-64 build).
    Generic,
}

/// The best this CPU runs, detected once.
pub fn isa() -> Isa {
    static ISA: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
    *ISA.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            return Isa::Avx2;
        }
        Isa::Generic
    })
}

fn row_typed<A: Widen, B: Widen>(
    isa: Isa,
    a: &[A],
    b: &[B],
    token: usize,
    above: f64,
    nf: &mut NonFinite,
) -> RowSums {
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn avx2<A: Widen, B: Widen>(
        a: &[A],
        b: &[B],
        token: usize,
        above: f64,
        nf: &mut NonFinite,
    ) -> RowSums {
        row_body(a, b, token, above, nf)
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa()` returns Avx2 only when the CPU reports AVX2 (tests ask for it only
        // then too).
        Isa::Avx2 => unsafe { avx2(a, b, token, above, nf) },
        _ => row_body(a, b, token, above, nf),
    }
}

/// [`row_typed`] for rows of any stored types, with the given instruction set.
pub fn row_with(isa: Isa, a: Row, b: Row, token: usize, above: f64, nf: &mut NonFinite) -> RowSums {
    macro_rules! on_b {
        ($x:expr) => {
            match b {
                Row::BF16(y) => row_typed(isa, $x, y, token, above, nf),
                Row::F16(y) => row_typed(isa, $x, y, token, above, nf),
                Row::F32(y) => row_typed(isa, $x, y, token, above, nf),
                Row::F64(y) => row_typed(isa, $x, y, token, above, nf),
            }
        };
    }
    match a {
        Row::BF16(x) => on_b!(x),
        Row::F16(x) => on_b!(x),
        Row::F32(x) => on_b!(x),
        Row::F64(x) => on_b!(x),
    }
}

/// The sums of one row pair with this CPU's instruction set (see [`row_with`]).
pub fn row(a: Row, b: Row, token: usize, above: f64, nf: &mut NonFinite) -> RowSums {
    row_with(isa(), a, b, token, above, nf)
}
