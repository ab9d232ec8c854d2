//! `bench gemm`: the linear layers' products alone, at a decoder layer's shapes (default
//! Qwen3.5-27B's, the bench model's), in this process on `RAYON_NUM_THREADS` threads — hsdiff's
//! product on the packed bf16 weight (what a forward pass runs) and candle's matmul on the weight
//! widened to the compute dtype (what runs where hsdiff has no kernel) — as GFLOP/s and as a
//! fraction of the FMA peak [`super::peak`] measures at the same thread count.
//!
//! Each call is timed by wall time and by the process's CPU time (`/proc/self/task/*/schedstat`,
//! good to a scheduler tick: for calls of a second or more). The CPU-time rate (FLOPs over CPU
//! seconds per thread) discounts the time other work on the machine held the cores, though not
//! what that work does to the caches. `--columns` multiplies only the first columns of each
//! weight — the same work per column in calls short enough that, on a loaded machine, the best
//! of many still runs undisturbed.

use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use half::bf16;
use serde::Serialize;

use super::peak::{Peak, Peaks, Precision};
use super::runner::machine_summary;
use crate::backends::cases::SplitMix;
use crate::error::Result;
use crate::model::{Bf16Kernel, Linear, WideKernel};
use crate::printer::Render;
use crate::util::device::dtype_label;
use crate::util::json_doc::JsonDocument;
use crate::util::sysinfo::{load_average, process_cpu_ns};

/// One product: `x [m, k] · wᵀ` with `w [n, k]`, named after the layers that have its shape.
#[derive(Debug, Clone, Serialize)]
pub struct Shape {
    pub name: &'static str,
    pub n: usize,
    pub k: usize,
}

/// A Qwen3.5-27B decoder layer's large product shapes (hidden 5120, intermediate 17408, linear
/// attention 16 key / 48 value heads of 128, full attention 24 query heads (gated: × 2) of 256):
/// what scripts/make_bench_model.py's model multiplies. `out_proj` (linear attention) has the
/// shape of `o_proj` (full attention), `gate_proj` that of `up_proj`.
pub const SHAPES_27B: [Shape; 6] = [
    Shape {
        name: "in_proj_qkv",
        n: 10240,
        k: 5120,
    },
    Shape {
        name: "in_proj_z",
        n: 6144,
        k: 5120,
    },
    Shape {
        name: "out_proj",
        n: 5120,
        k: 6144,
    },
    Shape {
        name: "q_proj",
        n: 12288,
        k: 5120,
    },
    Shape {
        name: "gate_proj",
        n: 17408,
        k: 5120,
    },
    Shape {
        name: "down_proj",
        n: 5120,
        k: 17408,
    },
];

/// What to measure.
#[derive(Debug, Clone)]
pub struct GemmBench {
    /// Rows of `x` (tokens of a prefill).
    pub seq: usize,
    pub shapes: Vec<Shape>,
    /// At most this many output columns (`n`) of each product.
    pub columns: Option<usize>,
    pub dtypes: Vec<DType>,
    pub repeats: usize,
    pub warmup: usize,
    pub seed: u64,
}

/// One measured product.
#[derive(Debug, Clone, Serialize)]
pub struct GemmRow {
    pub shape: String,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub dtype: String,
    pub implementation: String,
    pub times_ms: Vec<f64>,
    pub median_ms: f64,
    /// FLOPs (2·m·n·k) over the median wall time.
    pub gflops: f64,
    /// FLOPs over the best call's wall time.
    pub gflops_best: f64,
    /// FLOPs over the median call's CPU time per thread.
    pub gflops_cpu_time: Option<f64>,
    /// The FMA peak of the dtype at this thread count (bf16: f32's).
    pub peak_gflops: Option<f64>,
}

impl GemmBench {
    /// Measures the peak and every product, printing the header (machine, peak, load) as it
    /// goes; the results are what [`GemmTable`] and [`GemmJson`] render.
    pub fn run_and_report(&self) -> Result<GemmResults> {
        // rayon's pool and candle's matmul both read RAYON_NUM_THREADS.
        let threads = rayon::current_num_threads();
        let load = || load_average().unwrap_or_else(|| "unknown".into());
        let load_before = load();
        eprintln!("hsdiff bench gemm: measuring the FMA peak …");
        let peaks = Peaks::measure(threads);
        let machine = machine_summary();
        println!(
            "hsdiff bench gemm: x [{}, k] · wᵀ, random bf16 weights, {threads} thread(s) \
             (RAYON_NUM_THREADS), median and best of {} call(s) after {} warm-up call(s)",
            self.seq, self.repeats, self.warmup
        );
        println!("machine: {machine}");
        match &peaks {
            Some(p) => println!("{}", p.describe()),
            None => {
                println!("FMA peak: not measured (this CPU has neither AVX2 + FMA nor AVX-512F)")
            }
        }
        println!("load before the run: {load_before}");
        if cfg!(debug_assertions) {
            println!("warning: this hsdiff is a debug build; build with --release to benchmark");
        }
        let rows = self.run(peaks.as_ref(), threads)?;
        Ok(GemmResults {
            kind: "gemm",
            machine,
            threads,
            seq: self.seq,
            fma_peak: peaks.map(|p| p.peaks),
            load_before,
            load_after: load(),
            rows,
        })
    }

    /// Every shape × dtype × implementation; `threads` is the process's thread count.
    pub fn run(&self, peaks: Option<&Peaks>, threads: usize) -> Result<Vec<GemmRow>> {
        let mut rng = SplitMix::new(self.seed);
        let mut rows = Vec::new();
        for shape in &self.shapes {
            let (n, k) = (self.columns.map_or(shape.n, |c| c.min(shape.n)), shape.k);
            let sd = 1.0 / (k as f64).sqrt();
            let w: Vec<bf16> = (0..n * k)
                .map(|_| bf16::from_f64(rng.normal() * sd))
                .collect();
            let w = Tensor::from_vec(w, (n, k), &Device::Cpu)?;
            let x = Tensor::from_vec(rng.normals(self.seq * k, 1.0), (self.seq, k), &Device::Cpu)?;
            let packed = Linear::from_weight(w.clone())?;
            for &dtype in &self.dtypes {
                eprintln!("hsdiff bench gemm: {} {} …", shape.name, dtype_label(dtype));
                let x = x.to_dtype(dtype)?;
                let precision = match dtype {
                    DType::F64 => Precision::F64,
                    _ => Precision::F32,
                };
                let hsdiff = match (dtype, WideKernel::chosen()) {
                    (DType::BF16, _) => {
                        Some(format!("hsdiff bf16 GEMM {}", Bf16Kernel::chosen().name()))
                    }
                    (_, Some(kernel)) => Some(format!("hsdiff {}", kernel.name())),
                    (_, None) => None,
                };
                // candle's matmul on the weight in the compute dtype; not in bf16, where a bf16
                // weight is always packed (and candle's bf16 matmul widens to its f32 one).
                let candle = match dtype {
                    DType::BF16 => None,
                    _ => Some(Linear::from_weight(w.to_dtype(dtype)?)?),
                };
                let mut sides: Vec<(String, &Linear)> = Vec::new();
                sides.extend(hsdiff.map(|name| (name, &packed)));
                sides.extend(
                    candle
                        .as_ref()
                        .map(|c| (format!("candle matmul ({} weight)", dtype_label(dtype)), c)),
                );
                for (implementation, linear) in sides {
                    let (wall, cpu) = self.time(|| linear.forward(&x).map(|_| ()))?;
                    rows.push(row(RowInput {
                        shape,
                        m: self.seq,
                        n,
                        dtype,
                        implementation,
                        wall,
                        cpu,
                        threads,
                        peak: peaks.and_then(|p| p.find(precision, threads)),
                    }));
                }
            }
        }
        Ok(rows)
    }

    /// Wall times (ms) and CPU times (s, when readable) of the timed calls after the warm-up ones.
    fn time(&self, mut call: impl FnMut() -> Result<()>) -> Result<(Vec<f64>, Vec<f64>)> {
        let (mut wall, mut cpu) = (Vec::new(), Vec::new());
        for i in 0..self.warmup + self.repeats {
            let (start, cpu0) = (Instant::now(), process_cpu_ns());
            call()?;
            let ms = start.elapsed().as_secs_f64() * 1e3;
            let cpu_s = match (cpu0, process_cpu_ns()) {
                (Some(a), Some(b)) if b > a => Some((b - a) as f64 * 1e-9),
                _ => None,
            };
            if i >= self.warmup {
                wall.push(ms);
                cpu.extend(cpu_s);
            }
        }
        Ok((wall, cpu))
    }
}

struct RowInput<'a> {
    shape: &'a Shape,
    m: usize,
    n: usize,
    dtype: DType,
    implementation: String,
    wall: Vec<f64>,
    cpu: Vec<f64>,
    threads: usize,
    peak: Option<&'a Peak>,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

fn row(r: RowInput) -> GemmRow {
    let (m, n, k) = (r.m, r.n, r.shape.k);
    let flops = 2.0 * (m * n * k) as f64;
    let median_ms = median(&r.wall);
    let best_ms = r.wall.iter().copied().fold(f64::INFINITY, f64::min);
    // Every timed call's CPU time was read, or none counts.
    let cpu = (r.cpu.len() == r.wall.len()).then(|| median(&r.cpu) / r.threads as f64);
    GemmRow {
        shape: r.shape.name.to_string(),
        m,
        n,
        k,
        dtype: dtype_label(r.dtype).to_string(),
        implementation: r.implementation,
        times_ms: r.wall,
        median_ms,
        gflops: flops / median_ms * 1e-6,
        gflops_best: flops / best_ms * 1e-6,
        gflops_cpu_time: cpu.map(|s| flops / s * 1e-9),
        peak_gflops: r.peak.map(|p| p.gflops),
    }
}

/// What `bench gemm` measured, with the run's settings: the document its table
/// ([`GemmTable`]) and `--json` ([`GemmJson`]) render.
#[derive(Debug, Serialize)]
pub struct GemmResults {
    pub kind: &'static str,
    pub machine: String,
    pub threads: usize,
    pub seq: usize,
    pub fma_peak: Option<Vec<Peak>>,
    pub load_before: String,
    pub load_after: String,
    pub rows: Vec<GemmRow>,
}

/// `--json`'s document: the results with their keys sorted at every level, as `bench gemm`
/// has written them since its first version (through serde_json's sorted map).
pub struct GemmJson<'a>(pub &'a GemmResults);

impl Serialize for GemmJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        serde_json::to_value(self.0)
            .map_err(serde::ser::Error::custom)?
            .serialize(s)
    }
}

impl JsonDocument for GemmJson<'_> {
    const WHAT: &'static str = "the gemm bench results";
}

/// The results table (Unicode or Markdown), then the load after the run.
pub struct GemmTable {
    pub markdown: bool,
}

impl Render<GemmResults> for GemmTable {
    fn render(&self, r: &GemmResults) -> Result<Vec<u8>> {
        Ok(format!(
            "\n{}\nload after the run: {}\n",
            table(&r.rows, self.markdown),
            r.load_after
        )
        .into_bytes())
    }
}

/// The rows as a table (Markdown when asked).
fn table(rows: &[GemmRow], markdown: bool) -> String {
    use comfy_table::presets::{ASCII_MARKDOWN, UTF8_FULL_CONDENSED};
    let mut table = comfy_table::Table::new();
    table.load_preset(if markdown {
        ASCII_MARKDOWN
    } else {
        UTF8_FULL_CONDENSED
    });
    table.set_header(vec![
        "product (m × n × k)",
        "dtype",
        "implementation",
        "ms (median)",
        "GFLOP/s median (of peak)",
        "GFLOP/s best (of peak)",
        "GFLOP/s by CPU time (of peak)",
    ]);
    let of = |g: f64, p: Option<f64>| match p {
        Some(p) => format!("{g:.1} ({:.0} %)", 100.0 * g / p),
        None => format!("{g:.1}"),
    };
    for r in rows {
        table.add_row(vec![
            format!("{} ({} × {} × {})", r.shape, r.m, r.n, r.k),
            r.dtype.clone(),
            r.implementation.clone(),
            format!("{:.1}", r.median_ms),
            of(r.gflops, r.peak_gflops),
            of(r.gflops_best, r.peak_gflops),
            r.gflops_cpu_time
                .map_or_else(|| "—".to_string(), |g| of(g, r.peak_gflops)),
        ]);
    }
    table.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_count_two_m_n_k_flops_per_call() {
        let shape = Shape {
            name: "p",
            n: 64,
            k: 100,
        };
        let peak = Peak {
            dtype: Precision::F32,
            threads: 2,
            isa: "avx2+fma",
            gflops: 10.0,
        };
        let r = row(RowInput {
            shape: &shape,
            m: 8,
            n: 64,
            dtype: DType::F32,
            implementation: "x".into(),
            wall: vec![0.1, 0.4, 0.2],
            cpu: vec![0.0004, 0.0002, 0.0008],
            threads: 2,
            peak: Some(&peak),
        });
        // 2 · 8 · 64 · 100 = 102 400 FLOPs.
        assert!((r.gflops - 102_400.0 / 0.2e-3 * 1e-9).abs() < 1e-9);
        assert!((r.gflops_best - 102_400.0 / 0.1e-3 * 1e-9).abs() < 1e-9);
        let cpu = r.gflops_cpu_time.expect("all read");
        assert!((cpu - 102_400.0 / 0.0002 * 1e-9).abs() < 1e-9, "{cpu}");
        let text = table(&[r], true);
        assert!(text.contains("| p (8 × 64 × 100) "), "{text}");
        assert!(
            text.contains("0.5 (5 %)") && text.contains("1.0 (10 %)"),
            "{text}"
        );
    }
}
