//! This machine's FMA peak, measured: what `bench` divides a product's GFLOP/s by.
//!
//! A register-resident microbenchmark per float type and thread count: each thread runs `CHAINS`
//! independent chains of vector FMAs (`acc = acc · m + c`, values near 1, never denormal) on the
//! widest FMA instructions the CPU has — AVX-512F (24 chains of 512 bits), else AVX2 + FMA (12
//! chains of 256 bits) — with no memory traffic. `CHAINS` covers an FMA's latency (4 cycles on
//! recent x86 cores) times two FMA ports, so the loop issues an FMA every port-cycle: its rate is
//! the arithmetic peak. Each repetition is short (≈ 2 ms, so that on a loaded machine some of them
//! still run undisturbed) and the best of them by wall time is the peak. (Not by CPU time: the
//! kernel's per-thread run time, `schedstat`, is only brought up to date at scheduler ticks, too
//! coarse for a 2 ms run — and a register-resident loop's rate while it has the core is the
//! best wall-time rate anyway.)

use std::sync::Barrier;
use std::time::Instant;

use serde::Serialize;

/// A float type of the products.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    F32,
    F64,
}

impl Precision {
    pub fn label(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F64 => "f64",
        }
    }
}

/// The FMA instructions the microbenchmark runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Isa {
    Avx512,
    Avx2,
}

impl Isa {
    fn detect() -> Option<Isa> {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx512f") {
                return Some(Isa::Avx512);
            }
            if has!("avx2") && has!("fma") {
                return Some(Isa::Avx2);
            }
        }
        None
    }

    fn name(self) -> &'static str {
        match self {
            Isa::Avx512 => "avx512f",
            Isa::Avx2 => "avx2+fma",
        }
    }

    /// Lanes of one vector.
    fn lanes(self, p: Precision) -> usize {
        let bits = match self {
            Isa::Avx512 => 512,
            Isa::Avx2 => 256,
        };
        bits / match p {
            Precision::F32 => 32,
            Precision::F64 => 64,
        }
    }

    /// Independent accumulator chains per thread.
    fn chains(self) -> usize {
        match self {
            Isa::Avx512 => 24,
            Isa::Avx2 => 12,
        }
    }
}

/// Loop iterations per repetition per thread: 12–24 FMAs each, a few ms at 3 GHz.
const ITERATIONS: u64 = 500_000;
/// Repetitions; the best one counts.
const REPETITIONS: usize = 25;

/// One measured peak.
#[derive(Debug, Clone, Serialize)]
pub struct Peak {
    pub dtype: Precision,
    pub threads: usize,
    /// The instructions it ran on, e.g. `avx2+fma`.
    pub isa: &'static str,
    /// Best repetition by wall time.
    pub gflops: f64,
}

/// The peaks of one run: f32 and f64 on one thread and on `threads`.
#[derive(Debug, Clone, Serialize)]
pub struct Peaks {
    pub peaks: Vec<Peak>,
}

impl Peaks {
    /// Measures f32 and f64 on 1 and `threads` threads (≈ 0.5 s); `None` on a CPU without
    /// AVX2 + FMA or AVX-512F.
    pub fn measure(threads: usize) -> Option<Peaks> {
        let isa = Isa::detect()?;
        let mut counts = vec![1, threads.max(1)];
        counts.dedup();
        let peaks = [Precision::F32, Precision::F64]
            .into_iter()
            .flat_map(|p| counts.iter().map(move |&t| measure(isa, p, t)))
            .collect();
        Some(Peaks { peaks })
    }

    /// The peak of `dtype` on `threads` threads, if measured.
    pub fn find(&self, dtype: Precision, threads: usize) -> Option<&Peak> {
        self.peaks
            .iter()
            .find(|p| p.dtype == dtype && p.threads == threads)
    }

    /// The wall-time peak of `dtype` on `threads` threads, if measured.
    pub fn gflops(&self, dtype: Precision, threads: usize) -> Option<f64> {
        self.find(dtype, threads).map(|p| p.gflops)
    }

    /// One line for the bench header.
    pub fn describe(&self) -> String {
        let isa = self.peaks.first().map_or("", |p| p.isa);
        let each: Vec<String> = self
            .peaks
            .iter()
            .map(|p| {
                format!(
                    "{} {} thread(s) {:.1}",
                    p.dtype.label(),
                    p.threads,
                    p.gflops
                )
            })
            .collect();
        format!(
            "FMA peak (measured: register-resident {isa} FMA chains, best of {REPETITIONS}), \
             GFLOP/s: {}",
            each.join(", ")
        )
    }
}

/// The peak of `p` on `threads` threads running `isa`'s FMA chains at once: the best repetition's
/// FLOPs over its slowest thread's time.
fn measure(isa: Isa, p: Precision, threads: usize) -> Peak {
    let flops_per_thread = (ITERATIONS * (isa.chains() * isa.lanes(p) * 2) as u64) as f64;
    let mut best = 0.0f64;
    for _ in 0..REPETITIONS {
        let barrier = Barrier::new(threads);
        let times: Vec<f64> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        let start = Instant::now();
                        std::hint::black_box(run_chains(isa, p, ITERATIONS));
                        start.elapsed().as_secs_f64()
                    })
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().ok()).collect()
        });
        let slowest = times.iter().copied().fold(0.0, f64::max);
        if times.len() == threads && slowest > 0.0 {
            best = best.max(flops_per_thread * threads as f64 / slowest * 1e-9);
        }
    }
    Peak {
        dtype: p,
        threads,
        isa: isa.name(),
        gflops: best,
    }
}

/// `iterations` rounds of the chains; returns a value of theirs so that the work is not removed.
fn run_chains(isa: Isa, p: Precision, iterations: u64) -> f64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `Isa::detect` found the features of the kernel that runs.
    unsafe {
        match (isa, p) {
            (Isa::Avx512, Precision::F32) => x86::avx512_f32(iterations),
            (Isa::Avx512, Precision::F64) => x86::avx512_f64(iterations),
            (Isa::Avx2, Precision::F32) => x86::avx2_f32(iterations),
            (Isa::Avx2, Precision::F64) => x86::avx2_f64(iterations),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("no FMA microbenchmark here: {isa:?} {p:?} {iterations}")
}

/// Each chain's step is `acc · M + C`, from `START`: the accumulator falls towards the fixed
/// point 1 and stays in [1, 2] (never denormal, never infinite).
const M: f64 = 1.0 - 1.0 / 1024.0;
const C: f64 = 1.0 / 1024.0;
const START: f64 = 2.0;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{C, M, START};

    /// Defines one microbenchmark: `$chains` accumulators of `$vec`, each iteration one FMA on
    /// every one of them.
    macro_rules! chains {
        ($name:ident, $feature:literal, $chains:literal, $vec:ty, $set1:ident, $fma:ident,
         $elem:ty, $lanes:literal) => {
            #[target_feature(enable = $feature)]
            pub unsafe fn $name(iterations: u64) -> f64 {
                let (m, c) = ($set1(M as $elem), $set1(C as $elem));
                let mut acc: [$vec; $chains] = [$set1(START as $elem); $chains];
                for _ in 0..iterations {
                    for a in acc.iter_mut() {
                        *a = $fma(*a, m, c);
                    }
                }
                // SAFETY: a vector is `$lanes` plain floats.
                let lanes: [[$elem; $lanes]; $chains] = unsafe { std::mem::transmute(acc) };
                lanes.iter().flatten().map(|&v| f64::from(v)).sum()
            }
        };
    }

    chains!(
        avx2_f32,
        "avx2,fma",
        12,
        __m256,
        _mm256_set1_ps,
        _mm256_fmadd_ps,
        f32,
        8
    );
    chains!(
        avx2_f64,
        "avx2,fma",
        12,
        __m256d,
        _mm256_set1_pd,
        _mm256_fmadd_pd,
        f64,
        4
    );
    chains!(
        avx512_f32,
        "avx512f",
        24,
        __m512,
        _mm512_set1_ps,
        _mm512_fmadd_ps,
        f32,
        16
    );
    chains!(
        avx512_f64,
        "avx512f",
        24,
        __m512d,
        _mm512_set1_pd,
        _mm512_fmadd_pd,
        f64,
        8
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chains_compute_what_they_claim_and_stay_normal() {
        let Some(isa) = Isa::detect() else {
            return;
        };
        // Every lane of every chain runs the scalar recurrence: the f64 chains exactly (the same
        // FMA; the sum of the lanes adds its own roundings), the f32 ones to f32 rounding per step.
        let steps = 1000;
        let mut x = START;
        for _ in 0..steps {
            x = x.mul_add(M, C);
        }
        assert!(x > 1.3 && x < 1.4, "{x}: the chains moved");
        for p in [Precision::F32, Precision::F64] {
            let got = run_chains(isa, p, steps);
            let n = (isa.chains() * isa.lanes(p)) as f64;
            let per_lane = match p {
                Precision::F32 => steps as f64 * f64::from(f32::EPSILON),
                Precision::F64 => n * f64::EPSILON,
            };
            assert!(
                (got - n * x).abs() <= n * per_lane * 2.0,
                "{p:?}: {got} vs {}",
                n * x
            );
        }
    }

    #[test]
    fn peaks_cover_both_types_and_thread_counts() {
        let Some(peaks) = Peaks::measure(2) else {
            return;
        };
        for p in [Precision::F32, Precision::F64] {
            for t in [1, 2] {
                let g = peaks.gflops(p, t).expect("measured");
                assert!(g.is_finite() && g > 0.0, "{p:?} {t}: {g}");
            }
        }
        assert!(peaks.gflops(Precision::F32, 3).is_none());
        assert!(peaks.describe().contains("f64 2 thread(s)"));
    }
}
