//! The rows of a bench run: one per case, measured, skipped or failed, as the table and the JSON
//! file show them.

use serde::Serialize;

use super::peak::{Peaks, Precision};
use super::protocol::Measurement;
use super::stats::Timings;

/// The PyTorch results everything else is compared with: transformers' chunked rule (core) and
/// transformers' forward (forward).
pub const TORCH_REFERENCES: &[&str] = &["torch_chunk", "torch"];

#[derive(Serialize, Debug)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum CaseOutcome {
    Measured {
        // Boxed: a measurement is most of the row, the other outcomes are one string.
        #[serde(flatten)]
        m: Box<Measurement>,
        median_ms: f64,
        #[serde(skip)]
        min_ms: f64,
        #[serde(skip)]
        max_ms: f64,
        tokens_per_s: f64,
        /// transformers' median time / this one (> 1: faster than transformers).
        speedup_vs_torch: Option<f64>,
        rel_l2_vs_torch: Option<f64>,
        /// The linear layers' products per call (the same on every side of a group: hsdiff's
        /// count) over the median time, in GFLOP/s.
        gflops: Option<f64>,
        /// This machine's measured FMA peak for the dtype (bf16: f32's, the arithmetic its FMA
        /// kernels run) at the run's thread count.
        peak_gflops: Option<f64>,
    },
    Skipped {
        why: String,
    },
    Failed {
        why: String,
    },
}

impl CaseOutcome {
    /// A measurement at `seq` tokens per call; `torch_ms` is transformers' median, `rel` the
    /// relative L2 of the output against transformers'. Timings that cannot be summarised make
    /// the case failed.
    pub fn measured(m: Measurement, seq: usize, torch_ms: Option<f64>, rel: Option<f64>) -> Self {
        match Timings::of(&m.times_ms) {
            Ok(t) => CaseOutcome::Measured {
                median_ms: t.median_ms,
                min_ms: t.min_ms,
                max_ms: t.max_ms,
                tokens_per_s: t.tokens_per_s(seq),
                speedup_vs_torch: torch_ms.map(|r| t.speedup_over(r)),
                rel_l2_vs_torch: rel,
                gflops: None,
                peak_gflops: None,
                m: Box::new(m),
            },
            Err(why) => CaseOutcome::Failed { why },
        }
    }

    pub fn skipped_by_option() -> Self {
        CaseOutcome::Skipped {
            why: "--skip".to_string(),
        }
    }
}

/// Fills in the GFLOP/s and the peak of every measured row of one group (one sequence length and
/// dtype): the products' FLOPs per call come from the first hsdiff case that counted them.
pub fn add_rates(rows: &mut [BenchRow], peaks: Option<&Peaks>, threads: usize) {
    let flops = rows.iter().find_map(|r| match &r.outcome {
        CaseOutcome::Measured { m, .. } => m.product_flops,
        _ => None,
    });
    for r in rows.iter_mut() {
        let precision = match r.dtype.as_str() {
            "f32" | "bf16" => Some(Precision::F32),
            "f64" => Some(Precision::F64),
            _ => None,
        };
        if let CaseOutcome::Measured {
            median_ms,
            gflops,
            peak_gflops,
            ..
        } = &mut r.outcome
        {
            *gflops = flops
                .filter(|_| *median_ms > 0.0)
                .map(|f| f / *median_ms * 1e-6);
            *peak_gflops = precision.and_then(|p| peaks?.gflops(p, threads));
        }
    }
}

/// One case of the table: sequence length, dtype, name and what came of it.
#[derive(Serialize, Debug)]
pub struct BenchRow {
    pub seq: usize,
    pub dtype: String,
    pub name: String,
    #[serde(flatten)]
    pub outcome: CaseOutcome,
}

/// Cases skipped by `--skip`.
pub fn skipped_count(rows: &[BenchRow]) -> usize {
    rows.iter()
        .filter(|r| matches!(r.outcome, CaseOutcome::Skipped { .. }))
        .count()
}

/// 2 when a case failed (trouble), else 0: a benchmark flags no divergence.
pub fn exit_code(rows: &[BenchRow]) -> i32 {
    let failed = rows
        .iter()
        .any(|r| matches!(r.outcome, CaseOutcome::Failed { .. }));
    if failed { 2 } else { 0 }
}
