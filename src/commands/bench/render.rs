//! The results of `bench core` / `bench forward` as one document ([`BenchResults`]), rendered
//! through the one [`Render`] family: a table (Unicode or Markdown) with the lines below it, or
//! the JSON document of `--json`.

use comfy_table::presets::{ASCII_MARKDOWN, UTF8_FULL_CONDENSED};
use comfy_table::{CellAlignment, Table};
use serde::{Serialize, Serializer};

use super::peak::Peaks;
use super::plan::Plan;
use super::results::{BenchRow, CaseOutcome, TORCH_REFERENCES, skipped_count};
use crate::error::Result;
use crate::printer::{Format, Json, Render};
use crate::util::json_doc::JsonDocument;

/// Every measurement of a run with the run's settings.
pub struct BenchResults<'a> {
    pub rows: &'a [BenchRow],
    /// `core` or `forward`.
    pub kind: &'a str,
    pub plan: &'a Plan,
    pub machine: String,
    pub peaks: Option<&'a Peaks>,
    /// The load average when the run ended.
    pub load_after: String,
}

/// The results table, then the load after the run and how many cases `--skip` left out.
pub struct BenchTable {
    /// Markdown's table (`--markdown`) rather than the terminal's.
    pub markdown: bool,
}

impl Render<BenchResults<'_>> for BenchTable {
    fn render(&self, r: &BenchResults) -> Result<Vec<u8>> {
        let mut out = table(r.rows, self.markdown) + "\n";
        out += &format!("load after the run: {}\n", r.load_after);
        let skipped = skipped_count(r.rows);
        if skipped > 0 {
            out += &format!("{skipped} case(s) skipped by --skip (shown as `skipped`).\n");
        }
        Ok(out.into_bytes())
    }
}

/// The renderer of `format`.
pub fn renderer(format: Format) -> Box<dyn for<'a> Render<BenchResults<'a>>> {
    match format {
        Format::Table => Box::new(BenchTable { markdown: false }),
        Format::Markdown => Box::new(BenchTable { markdown: true }),
        Format::Json => Box::new(Json),
    }
}

const HEADER: [&str; 11] = [
    "T",
    "dtype",
    "implementation",
    "ms/call (median)",
    "min–max ms",
    "tokens/s",
    "× transformers",
    "GFLOP/s (of peak)",
    "peak RSS MiB",
    "Δ RSS MiB",
    "rel L2 vs transformers",
];

/// Columns holding numbers, aligned right.
const NUMERIC_COLUMNS: [usize; 9] = [0, 3, 4, 5, 6, 7, 8, 9, 10];

/// The results table.
pub fn table(rows: &[BenchRow], markdown: bool) -> String {
    let mut table = Table::new();
    table.load_preset(if markdown {
        ASCII_MARKDOWN
    } else {
        UTF8_FULL_CONDENSED
    });
    table.set_header(HEADER.to_vec());
    for r in rows {
        table.add_row(cells(r));
    }
    for i in NUMERIC_COLUMNS {
        if let Some(col) = table.column_mut(i) {
            col.set_cell_alignment(CellAlignment::Right);
        }
    }
    table.to_string()
}

fn cells(r: &BenchRow) -> Vec<String> {
    let mut cells = vec![r.seq.to_string(), r.dtype.clone()];
    let dash = || "—".to_string();
    let mib = |kib: u64| format!("{:.0}", kib as f64 / 1024.0);
    match &r.outcome {
        CaseOutcome::Measured {
            m,
            median_ms,
            min_ms,
            max_ms,
            tokens_per_s,
            speedup_vs_torch,
            rel_l2_vs_torch,
            gflops,
            peak_gflops,
        } => {
            cells.push(m.implementation.clone());
            cells.push(fmt_ms(*median_ms));
            cells.push(format!("{}–{}", fmt_ms(*min_ms), fmt_ms(*max_ms)));
            cells.push(format!("{tokens_per_s:.0}"));
            cells.push(speedup_vs_torch.map_or_else(dash, |s| format!("{s:.2}×")));
            cells.push(match (gflops, peak_gflops) {
                (Some(g), Some(p)) => format!("{g:.1} ({:.0} %)", 100.0 * g / p),
                (Some(g), None) => format!("{g:.1}"),
                _ => dash(),
            });
            cells.push(m.peak_rss_kib.map_or_else(dash, mib));
            cells.push(match (m.peak_rss_kib, m.rss_before_kib) {
                (Some(p), Some(b)) => mib(p.saturating_sub(b)),
                _ => dash(),
            });
            cells.push(if TORCH_REFERENCES.contains(&m.name.as_str()) {
                "(reference)".to_string()
            } else {
                rel_l2_vs_torch.map_or_else(dash, |x| format!("{x:.2e}"))
            });
        }
        CaseOutcome::Skipped { why } => {
            cells.push(format!("{}: skipped ({why})", r.name));
            cells.extend(std::iter::repeat_n(String::new(), HEADER.len() - 3));
        }
        CaseOutcome::Failed { why } => {
            cells.push(format!("{}: FAILED: {why}", r.name));
            cells.extend(std::iter::repeat_n(String::new(), HEADER.len() - 3));
        }
    }
    cells
}

/// Milliseconds with about three significant digits.
fn fmt_ms(ms: f64) -> String {
    if ms < 1.0 {
        format!("{ms:.3}")
    } else if ms < 10.0 {
        format!("{ms:.2}")
    } else {
        format!("{ms:.1}")
    }
}

/// `--json`: `{fma_peak, kind, load_after, machine, repeats, rows, seed, threads, warmup}`.
impl Serialize for BenchResults<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        serde_json::json!({
            "kind": self.kind,
            "machine": self.machine,
            "fma_peak": self.peaks.map(|p| &p.peaks),
            "threads": self.plan.threads,
            "repeats": self.plan.repeats,
            "warmup": self.plan.warmup,
            "seed": self.plan.seed,
            "load_after": self.load_after,
            "rows": self.rows,
        })
        .serialize(s)
    }
}

impl JsonDocument for BenchResults<'_> {
    const WHAT: &'static str = "the results";
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::bench::protocol::Measurement;

    #[test]
    fn milliseconds_keep_about_three_digits() {
        assert_eq!(fmt_ms(0.05822), "0.058");
        assert_eq!(fmt_ms(8.5513), "8.55");
        assert_eq!(fmt_ms(16.663), "16.7");
    }

    #[test]
    fn rows_fill_every_column() {
        let m = Measurement {
            name: "chunked".into(),
            implementation: "chunked/cpu-candle".into(),
            times_ms: vec![16.663, 0.4396],
            rss_before_kib: Some(7384),
            peak_rss_kib: Some(9444),
            output: "out".into(),
            threads: Some(2),
            product_flops: Some(2.0e9),
        };
        let mut rows = [
            BenchRow {
                seq: 8,
                dtype: "f32".into(),
                name: "chunked".into(),
                outcome: CaseOutcome::measured(m, 8, Some(17.102), Some(3.1e-7)),
            },
            BenchRow {
                seq: 8,
                dtype: "f32".into(),
                name: "fused".into(),
                outcome: CaseOutcome::skipped_by_option(),
            },
        ];
        let peaks = Peaks {
            peaks: vec![crate::commands::bench::peak::Peak {
                dtype: crate::commands::bench::peak::Precision::F32,
                threads: 2,
                isa: "avx2+fma",
                gflops: 312.5,
            }],
        };
        crate::commands::bench::results::add_rates(&mut rows, Some(&peaks), 2);
        assert_eq!(
            cells(&rows[0]),
            [
                "8",
                "f32",
                "chunked/cpu-candle",
                "8.55",
                "0.440–16.7",
                "936",
                "2.00×",
                "233.9 (75 %)",
                "9",
                "2",
                "3.10e-7"
            ]
        );
        assert_eq!(cells(&rows[1])[2], "fused: skipped (--skip)");
        let text = table(&rows, true);
        assert_eq!(text.lines().count(), 4, "{text}");
        assert!(text.starts_with("| T | dtype | implementation"), "{text}");
    }
}
