//! `--plot FILE.svg|FILE.png` for a dataset report: each layer's distribution across samples
//! (`distribution.rs`) and a sample × layer map (`map.rs`).
//!
//! Top panel: per layer (forward order), every sample's figure — ×floor when the report is
//! calibrated, rel L2 otherwise (the report's `metric`) — on a log axis, coloured by the
//! sample's verdict at that layer, with the layer's median, p95 and max marked; NaN/Inf at the
//! top in magenta; the floor (1×) as a dashed line when calibrated. Bottom panel: samples
//! (pairing order, top to bottom) × layers, coloured by the same figure on a log scale; flagged
//! cells outlined in red. Large datasets are drawn in bins of consecutive samples (a bin shows
//! its worst sample) and at most [`distribution::MAX_POINTS`] points per layer (flagged samples
//! always), said in the captions.
//!
//! Fonts, colours and the PNG encoder are the pair plot's ([`super`]); labels from files
//! (sample ids, layer names, the headline) are drawn through [`crate::util::escape::plain`]. Like
//! the other renderers, this computes nothing the report does not hold.

mod distribution;
mod map;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{DrawResult, Plot, TITLE_HEIGHT, WIDTH, draw_heading};
use crate::compare::verdict::Verdict;
use crate::error::Result;
use crate::printer::Render;
use crate::report::dataset::{DatasetReport, RowFigures};
use crate::util::escape::{LONG, SHORT, plain};

const DIST_HEIGHT: u32 = 560;
/// Rows of the sample × layer map at most (more samples: bins of consecutive samples).
const MAX_ROWS: usize = 300;

/// A sample's figure and verdict at a layer, if it has the row.
type Cell = Option<(f64, Verdict)>;

/// The report's labels made safe to draw, and its figures per sample and layer.
struct Figure {
    verdict: Verdict,
    title: String,
    summary: String,
    metric: String,
    layers: Vec<String>,
    samples: Vec<String>,
    /// `cells[s][l]`: sample s's figure and verdict at layer l, if it has the row.
    cells: Vec<Vec<Cell>>,
    /// Per layer: median, p95, max (the report's).
    marks: Vec<(f64, f64, f64)>,
}

impl Figure {
    fn of(r: &DatasetReport) -> Self {
        let value = |f: &RowFigures| {
            if r.metric == "x_floor" {
                f.x_floor.unwrap_or(f64::NAN)
            } else {
                f.rel_l2
            }
        };
        Figure {
            verdict: r.verdict,
            title: plain(
                &format!("{} vs {}: {}", r.a, r.b, r.verdict.as_str()),
                SHORT,
            ),
            summary: plain(&r.summary, LONG),
            metric: r.metric.clone(),
            layers: r.layers.iter().map(|l| plain(&l.name, SHORT)).collect(),
            samples: r.samples.iter().map(|s| plain(&s.id, SHORT)).collect(),
            cells: r
                .samples
                .iter()
                .map(|s| {
                    r.layers
                        .iter()
                        .map(|l| s.rows.get(&l.name).map(|f| (value(f), f.verdict)))
                        .collect()
                })
                .collect(),
            marks: r.layers.iter().map(|l| (l.median, l.p95, l.max)).collect(),
        }
    }

    fn calibrated(&self) -> bool {
        self.metric == "x_floor"
    }

    fn metric_label(&self) -> &'static str {
        if self.calibrated() {
            "× the rounding floor (log)"
        } else {
            "rel L2 = ‖a − b‖ / ‖b‖, uncalibrated (log)"
        }
    }

    /// Samples per row of the map.
    fn bin(&self) -> usize {
        self.samples.len().div_ceil(MAX_ROWS).max(1)
    }

    fn height(&self) -> u32 {
        let rows = self.samples.len().div_ceil(self.bin()) as u32;
        TITLE_HEIGHT + DIST_HEIGHT + (rows * 16 + 140).clamp(260, 900)
    }
}

/// The dataset's figure as SVG or PNG bytes (the pair report's [`Plot`] renderer).
impl Render<DatasetReport> for Plot {
    fn render(&self, report: &DatasetReport) -> Result<Vec<u8>> {
        let fig = Figure::of(report);
        self.figure((WIDTH, fig.height()), |root| draw(root, &fig))
    }
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, fig: &Figure) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let (title, rest) = root.split_vertically(TITLE_HEIGHT);
    let (dist, map) = rest.split_vertically(DIST_HEIGHT);
    draw_heading(&title, fig.title.clone(), &fig.summary, fig.verdict)?;
    if fig.layers.is_empty() || fig.samples.is_empty() {
        dist.draw(&Text::new(
            "nothing was compared",
            (40, 40),
            ("sans-serif", 20),
        ))?;
        return Ok(());
    }
    distribution::draw(&dist, fig)?;
    map::draw(&map, fig)?;
    Ok(())
}

/// A short axis label of a row name (`layers.12` → `12`, `final_norm` → `norm`).
fn short(name: &str) -> String {
    match name.strip_prefix("layers.") {
        Some(i) if i.chars().all(|c| c.is_ascii_digit()) => i.to_string(),
        _ if name == "final_norm" => "norm".to_string(),
        _ => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::distribution::{MAX_POINTS, drawn_samples};
    use super::map::bin_cell;
    use super::*;
    use crate::error::Error;
    use crate::printer::plot::PlotFormat;
    use crate::report::dataset::{DATASET_SCHEMA, LayerRow, SampleRow};

    fn sample(pair: usize, id: &str, figures: &[(&str, f64, Verdict)]) -> SampleRow {
        let rows: BTreeMap<String, RowFigures> = figures
            .iter()
            .map(|&(n, x, verdict)| {
                (
                    n.to_string(),
                    RowFigures {
                        rel_l2: x * 1e-3,
                        x_floor: Some(x),
                        verdict,
                    },
                )
            })
            .collect();
        SampleRow {
            pair,
            id: id.to_string(),
            id_b: None,
            paired_by: "id".into(),
            verdict: figures.iter().map(|f| f.2).max().unwrap_or(Verdict::Ok),
            first_divergent: None,
            worst_x_floor: None,
            worst_tensor: None,
            worst_rel_l2: 0.0,
            positions: 4,
            trained: None,
            untrained: false,
            file_a: String::new(),
            file_b: String::new(),
            order: figures.iter().map(|f| f.0.to_string()).collect(),
            rows,
            zero_padding: None,
            only_a: Vec::new(),
            only_b: Vec::new(),
            unnamed_a: Vec::new(),
            unnamed_b: Vec::new(),
            layer_id_slips: Vec::new(),
        }
    }

    fn report(samples: Vec<SampleRow>) -> DatasetReport {
        let layer = |name: &str| LayerRow {
            name: name.into(),
            samples: samples.len(),
            median: 0.5,
            p95: 0.9,
            max: 12.0,
            worst_sample: "s".into(),
            flagged: 1,
        };
        DatasetReport {
            schema: DATASET_SCHEMA.into(),
            verdict: Verdict::Mismatch,
            summary: "mismatch: 1 of 2 <b>flagged</b>\u{1b}[31m".into(),
            a: "dump/".into(),
            b: "eval/".into(),
            formats_a: vec![],
            formats_b: vec![],
            metric: "x_floor".into(),
            calibration: String::new(),
            layers: vec![layer("layers.1"), layer("layers.4")],
            samples,
            token_mismatches: vec![],
            token_mismatches_allowed: false,
            unpaired_a: vec![],
            unpaired_b: vec![],
            failed: vec![],
            shard: None,
            pairs_total: 2,
            notes: vec![],
            sample_notes: vec![],
            command: None,
            part: None,
        }
    }

    /// Labels from files are drawn escaped: markup by the SVG writer, control characters as
    /// visible escapes; both panels are drawn, and a PNG is a PNG.
    #[test]
    fn labels_escaped_and_both_panels_drawn() -> Result<()> {
        let r = report(vec![
            sample(
                0,
                "<script>\u{202e}x",
                &[
                    ("layers.1", 0.4, Verdict::Ok),
                    ("layers.4", 0.6, Verdict::Ok),
                ],
            ),
            sample(
                1,
                "b",
                &[
                    ("layers.1", 0.5, Verdict::Ok),
                    ("layers.4", 12.0, Verdict::Mismatch),
                ],
            ),
        ]);
        let svg = String::from_utf8(Plot(PlotFormat::Svg).render(&r)?)
            .map_err(|e| Error::Internal(e.to_string()))?;
        assert!(!svg.contains("<script>"), "markup from a sample id");
        assert!(svg.contains("&lt;script&gt;\\u{202e}x"), "the id, escaped");
        assert!(!svg.contains('\u{1b}') && !svg.contains('\u{202e}'));
        assert!(svg.contains("each layer across samples"));
        assert!(svg.contains("samples × layers"));
        let png = Plot(PlotFormat::Png).render(&r)?;
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
        Ok(())
    }

    /// Many samples: bins of consecutive samples in the map, a bounded number of points per
    /// layer, and every flagged sample among them.
    #[test]
    fn large_datasets_binned_and_thinned() {
        let samples: Vec<SampleRow> = (0..1000)
            .map(|i| {
                let bad = i == 777;
                sample(
                    i,
                    &i.to_string(),
                    &[(
                        "layers.1",
                        if bad {
                            20.0
                        } else {
                            0.3 + (i % 7) as f64 * 0.1
                        },
                        if bad { Verdict::Mismatch } else { Verdict::Ok },
                    )],
                )
            })
            .collect();
        let r = report(samples);
        let fig = Figure::of(&r);
        assert_eq!(fig.bin(), 4);
        let drawn = drawn_samples(&fig, 0);
        assert!(drawn.len() <= MAX_POINTS, "{}", drawn.len());
        assert!(drawn.contains(&777));
        assert!(drawn_samples(&fig, 1).is_empty(), "layers.4 held by none");
        let cell = bin_cell(&fig.cells[776..780], 0);
        assert_eq!(cell, Some((20.0, true)));
    }
}
