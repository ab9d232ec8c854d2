//! `--plot FILE.svg|FILE.png` for a dataset report: each layer's distribution across samples
//! and a sample × layer map.
//!
//! Top panel: per layer (forward order), every sample's figure — ×floor when the report is
//! calibrated, rel L2 otherwise (the report's `metric`) — on a log axis, coloured by the
//! sample's verdict at that layer, with the layer's median, p95 and max marked; NaN/Inf at the
//! top in magenta; the floor (1×) as a dashed line when calibrated. Bottom panel: samples
//! (pairing order, top to bottom) × layers, coloured by the same figure on a log scale; flagged
//! cells outlined in red. Large datasets are drawn in bins of consecutive samples (a bin shows
//! its worst sample) and at most [`MAX_POINTS`] points per layer (flagged samples always),
//! said in the captions.
//!
//! Fonts, colours and the PNG encoder are the pair plot's ([`super::plot`]); labels from files
//! (sample ids, layer names, the headline) are drawn through [`crate::util::escape::plain`]. Like the
//! other renderers, this computes nothing the report does not hold.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::RGBColor;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::dataset::{DatasetReport, RowFigures};
use super::plot::{
    DrawResult, FAIL_RED, NON_FINITE, Plot, PlotFormat, ZERO_GREY, check_path, decades,
    draw_colour_bar, draw_heading, heat_color, positives, register_fonts, verdict_color,
};
use crate::compare::verdict::Verdict;
use crate::error::{Error, Result};
use crate::render::Render;
use crate::util::escape::{LONG, SHORT, plain};

const WIDTH: u32 = 1400;
const TITLE_HEIGHT: u32 = 82;
const DIST_HEIGHT: u32 = 560;
/// Points drawn per layer at most (flagged samples first, then an even spread of the rest).
pub const MAX_POINTS: usize = 400;
/// Rows of the sample × layer map at most (more samples: bins of consecutive samples).
pub const MAX_ROWS: usize = 300;
const MISSING: RGBColor = RGBColor(250, 250, 250);

/// A sample's figure and verdict at a layer, if it has the row.
type Cell = Option<(f64, Verdict)>;
/// A bin of samples at a layer: its worst figure and whether any is flagged.
type Binned = Option<(f64, bool)>;

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

/// Draws `report` as `path`'s extension says and writes it through the output policy.
pub fn write_plot(report: &DatasetReport, path: &Path) -> Result<()> {
    let bytes = Plot(check_path(path)?).render(report)?;
    crate::util::output::write_bytes(path, &bytes)
}

/// The dataset's figure as SVG or PNG bytes (the pair report's [`Plot`] renderer).
impl Render<DatasetReport> for Plot {
    fn render(&self, report: &DatasetReport) -> Result<Vec<u8>> {
        let fig = Figure::of(report);
        // Drawing and encoding happen in memory: a failure there is a bug, not bad input.
        let drawn = match self.0 {
            PlotFormat::Svg => svg(&fig).map(String::into_bytes),
            PlotFormat::Png => png(&fig),
        };
        drawn.map_err(Error::Internal)
    }
}

fn svg(fig: &Figure) -> std::result::Result<String, String> {
    register_fonts()?;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, fig.height())).into_drawing_area();
        draw(&root, fig).map_err(|e| format!("cannot draw the plot: {e}"))?;
        root.present()
            .map_err(|e| format!("cannot draw the plot: {e}"))?;
    }
    Ok(out)
}

/// The SVG figure rasterised (`raster.rs`), so both formats show the same figure.
fn png(fig: &Figure) -> std::result::Result<Vec<u8>, String> {
    super::raster::svg_to_png(&svg(fig)?)
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
    draw_distribution(&dist, fig)?;
    draw_map(&map, fig)?;
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

/// Which samples' points a layer draws: every one up to [`MAX_POINTS`], else the flagged
/// ones and an even spread of the others.
fn drawn_samples(fig: &Figure, layer: usize) -> Vec<usize> {
    let present: Vec<usize> = (0..fig.samples.len())
        .filter(|&s| fig.cells[s][layer].is_some())
        .collect();
    if present.len() <= MAX_POINTS {
        return present;
    }
    let flagged = |s: &usize| fig.cells[*s][layer].is_some_and(|(_, v)| v != Verdict::Ok);
    let mut keep: Vec<usize> = present.iter().copied().filter(flagged).collect();
    let others: Vec<usize> = present.iter().copied().filter(|s| !flagged(s)).collect();
    let room = MAX_POINTS.saturating_sub(keep.len());
    if room > 0 {
        let step = others.len().div_ceil(room).max(1);
        keep.extend(others.iter().step_by(step));
    }
    keep.sort_unstable();
    keep
}

fn draw_distribution<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    fig: &Figure,
) -> DrawResult<DB> {
    let n = fig.layers.len();
    let values = positives(
        fig.cells
            .iter()
            .flat_map(|row| row.iter().flatten().map(|(v, _)| *v))
            .chain(if fig.calibrated() { Some(1.0) } else { None }),
    );
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = if lo.is_finite() && hi.is_finite() {
        decades(lo / 1.5, hi * 1.5)
    } else {
        (1e-6, 1.0)
    };
    let (lo, hi) = (lo / 1.2, hi * 1.2);
    let stride = n.div_ceil(60).max(1);
    // x: SLOT units per layer (integer coordinates, so that points can spread within a slot).
    let keys: Vec<i32> = (0..n).step_by(stride).map(slot).collect();
    let thinned = (0..n).any(|l| drawn_samples(fig, l).len() < count_present(fig, l));
    let caption = format!(
        "each layer across samples: one point per sample (coloured by its verdict at that layer), \
         bars at the median (black), p95 (grey), max (red){}",
        if thinned {
            format!("; at most {MAX_POINTS} points per layer, flagged samples always drawn")
        } else {
            String::new()
        }
    );
    let mut chart = ChartBuilder::on(area)
        .margin_left(14)
        .margin_right(24)
        .margin_top(30)
        .margin_bottom(6)
        .caption(caption, ("sans-serif", 15))
        .x_label_area_size(52)
        .y_label_area_size(78)
        .build_cartesian_2d((-SLOT..slot(n)).with_key_points(keys), (lo..hi).log_scale())?;
    let x_fmt = |x: &i32| match usize::try_from(*x) {
        Ok(x) if x % SLOT as usize == 0 => fig
            .layers
            .get(x / SLOT as usize)
            .map(|s| short(s))
            .unwrap_or_default(),
        _ => String::new(),
    };
    let y_fmt = |y: &f64| format!("{y:.0e}");
    chart
        .configure_mesh()
        .x_desc("compared row, forward order (decoder layer index)")
        .y_desc(fig.metric_label())
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .x_label_style(("sans-serif", 13))
        .y_label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
        .light_line_style(RGBColor(240, 240, 240))
        .bold_line_style(RGBColor(215, 215, 215))
        .draw()?;
    if fig.calibrated() {
        chart.draw_series(DashedLineSeries::new(
            [(-SLOT, 1.0), (slot(n), 1.0)],
            8,
            5,
            RGBColor(60, 60, 60).stroke_width(2),
        ))?;
    }
    for l in 0..n {
        let (median, p95, max) = fig.marks[l];
        // The bars under the points, the max last (thin) so that it shows over an equal p95.
        for (v, color, width) in [
            (p95, RGBColor(150, 150, 150), 3),
            (median, BLACK, 3),
            (max, FAIL_RED, 1),
        ] {
            if v.is_finite() && v > 0.0 {
                let y = v.clamp(lo, hi);
                chart.draw_series(LineSeries::new(
                    [
                        (slot(l) - SLOT * 35 / 100, y),
                        (slot(l) + SLOT * 35 / 100, y),
                    ],
                    color.stroke_width(width),
                ))?;
            }
        }
        let samples = drawn_samples(fig, l);
        chart.draw_series(samples.iter().map(|&s| {
            let (v, verdict) = fig.cells[s][l].unwrap_or((f64::NAN, Verdict::Ok));
            // A fixed spread within the slot (golden-ratio steps), the same in every run.
            let x = slot(l) + (((s as f64 * 0.618_034).fract() - 0.5) * 0.5 * SLOT as f64) as i32;
            if !v.is_finite() {
                return TriangleMarker::new((x, hi / 1.3), 5, NON_FINITE.filled()).into_dyn();
            }
            let color = verdict_color(verdict);
            if v > 0.0 {
                Circle::new((x, v.max(lo)), 3, color.mix(0.7).filled()).into_dyn()
            } else {
                Circle::new((x, lo), 3, color.stroke_width(1)).into_dyn()
            }
        }))?;
    }
    if fig.calibrated() {
        chart.draw_series(std::iter::once(
            EmptyElement::at((-SLOT, 1.0))
                + Text::new(
                    "1× floor",
                    (4, -4),
                    ("sans-serif", 12)
                        .into_font()
                        .color(&RGBColor(60, 60, 60))
                        .pos(Pos::new(HPos::Left, VPos::Bottom)),
                ),
        ))?;
    }
    Ok(())
}

/// Width of a layer's slot in the distribution panel's x coordinates.
const SLOT: i32 = 100;

fn slot(layer: usize) -> i32 {
    layer as i32 * SLOT
}

fn count_present(fig: &Figure, layer: usize) -> usize {
    fig.cells.iter().filter(|row| row[layer].is_some()).count()
}

/// A bin of samples at one layer: the worst (non-finite first) of those present, and whether
/// any is flagged.
fn bin_cell(cells: &[Vec<Cell>], layer: usize) -> Binned {
    let present: Vec<(f64, Verdict)> = cells.iter().filter_map(|row| row[layer]).collect();
    if present.is_empty() {
        return None;
    }
    let flagged = present.iter().any(|(_, v)| *v != Verdict::Ok);
    let worst = present
        .iter()
        .map(|(v, _)| *v)
        .find(|v| !v.is_finite())
        .unwrap_or_else(|| present.iter().map(|(v, _)| *v).fold(0.0, f64::max));
    Some((worst, flagged))
}

fn draw_map<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, fig: &Figure) -> DrawResult<DB> {
    let n = fig.layers.len();
    let bin = fig.bin();
    let rows: Vec<&[Vec<Cell>]> = fig.cells.chunks(bin).collect();
    let m = rows.len();
    let mut sorted = positives(
        fig.cells
            .iter()
            .flat_map(|row| row.iter().flatten().map(|(v, _)| *v)),
    );
    sorted.sort_by(f64::total_cmp);
    // From the 1st percentile (one tiny value should not wash out the rest) to the maximum.
    let (lo, hi) = match (sorted.get(sorted.len() / 100), sorted.last()) {
        (Some(&lo), Some(&hi)) => decades(lo, hi),
        _ => (1e-3, 1.0),
    };
    let what = if fig.calibrated() {
        "×floor"
    } else {
        "rel L2"
    };
    let caption = if bin > 1 {
        format!(
            "samples × layers: {what}, worst of each {bin} consecutive samples (log colour; grey: \
             identical, magenta: NaN/Inf, blank: row not held; red outline: flagged)"
        )
    } else {
        format!(
            "samples × layers: {what} (log colour; grey: identical, magenta: NaN/Inf, blank: row \
             not held; red outline: flagged)"
        )
    };
    let (map_area, bar_area) = area.split_horizontally(WIDTH - 130);
    let label = |i: usize| {
        let first = &fig.samples[i * bin];
        if bin > 1 {
            let last = &fig.samples[((i + 1) * bin).min(fig.samples.len()) - 1];
            format!("{first} … {last}")
        } else {
            first.clone()
        }
    };
    let y_stride = m.div_ceil(40).max(1);
    // Row i (pairing order, top to bottom) spans y in [m−1−i, m−i).
    // Row i spans y in [2(m−1−i), 2(m−i)) and layer l x in [2l, 2l + 2): labels sit at the odd
    // coordinate in the middle.
    let y_keys: Vec<i32> = (0..m)
        .step_by(y_stride)
        .map(|i| 2 * (m - 1 - i) as i32 + 1)
        .collect();
    let x_stride = n.div_ceil(60).max(1);
    let x_keys: Vec<i32> = (0..n).step_by(x_stride).map(|l| 2 * l as i32 + 1).collect();
    let mut chart = ChartBuilder::on(&map_area)
        .margin_left(14)
        .margin_right(8)
        .margin_top(34)
        .margin_bottom(8)
        .x_label_area_size(44)
        .y_label_area_size(150)
        .caption(caption, ("sans-serif", 15))
        .build_cartesian_2d(
            (0i32..2 * n as i32).with_key_points(x_keys),
            (0i32..2 * m as i32).with_key_points(y_keys),
        )?;
    let y_fmt = |y: &i32| {
        let Ok(from_bottom) = usize::try_from(y / 2) else {
            return String::new();
        };
        (m - 1)
            .checked_sub(from_bottom)
            .map(|i| plain(&label(i), 40))
            .unwrap_or_default()
    };
    let x_fmt = |x: &i32| {
        usize::try_from(x / 2)
            .ok()
            .and_then(|l| fig.layers.get(l))
            .map(|s| short(s))
            .unwrap_or_default()
    };
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc("compared row (decoder layer index)")
        .y_desc(if bin > 1 { "samples (bins)" } else { "sample" })
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .x_label_style(("sans-serif", 12))
        .y_label_style(("sans-serif", 11))
        .axis_desc_style(("sans-serif", 14))
        .draw()?;
    let cells: Vec<(usize, usize, Binned)> = rows
        .iter()
        .enumerate()
        .flat_map(|(i, chunk)| (0..n).map(move |l| (i, l, bin_cell(chunk, l))))
        .collect();
    chart.draw_series(cells.iter().map(|&(i, l, cell)| {
        let (x0, y0) = (2 * l as i32, 2 * (m - 1 - i) as i32);
        let color = match cell {
            None => MISSING,
            Some((0.0, _)) => ZERO_GREY,
            Some((v, _)) => heat_color(v, lo, hi),
        };
        Rectangle::new([(x0, y0), (x0 + 2, y0 + 2)], color.filled())
    }))?;
    chart.draw_series(
        cells
            .iter()
            .filter(|(_, _, c)| c.is_some_and(|(_, flagged)| flagged))
            .map(|&(i, l, _)| {
                let (x0, y0) = (2 * l as i32, 2 * (m - 1 - i) as i32);
                Rectangle::new([(x0, y0), (x0 + 2, y0 + 2)], FAIL_RED.stroke_width(2))
            }),
    )?;

    draw_colour_bar(&bar_area, lo, hi)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
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
            file_a: String::new(),
            file_b: String::new(),
            order: figures.iter().map(|f| f.0.to_string()).collect(),
            rows,
            zero_padding: None,
            only_a: Vec::new(),
            only_b: Vec::new(),
            unnamed_a: Vec::new(),
            unnamed_b: Vec::new(),
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
