//! `--plot FILE.svg|FILE.png`: the report as a figure.
//!
//! Top panel: relative L2 error of every compared tensor in forward order on a log axis — the
//! A-vs-B line (points coloured by verdict), the measured floor (dashed), each side against the
//! f64 truth when there is one, the static `ok` / `fail` bands of the dtype as horizontal lines,
//! the mismatch line max(ok band, k × floor), and the first divergent tensor marked. Bottom panel:
//! a tensor × token heatmap of the per-token relative error on a log colour scale.
//!
//! The figure needs no system fonts or libraries: text is laid out with DejaVu Sans, embedded in
//! the binary through the `dejavu` crate, and the PNG is the SVG rasterised in memory
//! (`raster.rs`). Like the other renderers, this computes nothing: everything comes from the report.

use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{FontStyle, RGBColor, register_font};

use super::{Render, Report, TensorRow};
use crate::compare::Kind;
use crate::error::{Error, Result};
use crate::verdict::Verdict;

/// The image formats `--plot` writes, chosen by the file extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlotFormat {
    Svg,
    Png,
}

const WIDTH: u32 = 1400;
const TOP_HEIGHT: u32 = 640;
const TITLE_HEIGHT: u32 = 82;
/// Characters per line of the summary under the title.
const SUMMARY_LINE: usize = 165;

const BLUE_A_VS_B: RGBColor = RGBColor(31, 84, 180);
const FLOOR_GREY: RGBColor = RGBColor(60, 60, 60);
const A_TRUTH: RGBColor = RGBColor(230, 140, 20);
const B_TRUTH: RGBColor = RGBColor(140, 70, 170);
pub(super) const OK_GREEN: RGBColor = RGBColor(40, 150, 60);
pub(super) const DRIFT_ORANGE: RGBColor = RGBColor(235, 150, 0);
pub(super) const FAIL_RED: RGBColor = RGBColor(200, 30, 30);
pub(super) const ZERO_GREY: RGBColor = RGBColor(225, 225, 225);
pub(super) const NON_FINITE: RGBColor = RGBColor(255, 0, 200);

/// Checks that `path` names a format `--plot` can write (`.svg` or `.png`, any case) in a
/// folder that exists; called before the model runs so that a typo costs nothing.
pub fn check_path(path: &Path) -> Result<PlotFormat> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let format = match ext.as_deref() {
        Some("svg") => PlotFormat::Svg,
        Some("png") => PlotFormat::Png,
        Some(other) => {
            return Err(Error::file(
                path,
                format!("--plot writes .svg or .png files, not .{other}"),
            ));
        }
        None => {
            return Err(Error::file(
                path,
                "--plot needs a file name ending in .svg or .png",
            ));
        }
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.is_dir()
    {
        return Err(Error::file(
            path,
            format!(
                "cannot write the plot: folder {} does not exist",
                dir.display()
            ),
        ));
    }
    Ok(format)
}

/// The figure in one image format: a renderer like the text ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plot(pub PlotFormat);

impl Render for Plot {
    fn render(&self, report: &Report) -> Result<Vec<u8>> {
        // Labels from files are drawn with control characters as visible escapes (they are not
        // allowed in XML even escaped) and long ones shortened; the SVG writer escapes markup.
        let report = &super::cells::escaped(
            report,
            |s| crate::escape::plain(s, crate::escape::SHORT),
            |s| crate::escape::plain(s, crate::escape::LONG),
        );
        // Drawing and encoding happen in memory: a failure there is a bug, not bad input.
        let drawn = match self.0 {
            PlotFormat::Svg => render_svg(report).map(String::into_bytes),
            PlotFormat::Png => render_png(report),
        };
        drawn.map_err(Error::Internal)
    }
}

/// Draws the report and writes it to `path` (SVG or PNG by extension).
pub fn write_plot(report: &Report, path: &Path) -> Result<()> {
    let bytes = Plot(check_path(path)?).render(report)?;
    crate::output::write_bytes(path, &bytes)
}

/// The figure as an SVG document.
fn render_svg(report: &Report) -> std::result::Result<String, String> {
    register_fonts()?;
    let size = (WIDTH, figure_height(report));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        draw(&root, report).map_err(|e| format!("cannot draw the plot: {e}"))?;
        root.present()
            .map_err(|e| format!("cannot draw the plot: {e}"))?;
    }
    Ok(svg)
}

/// The figure as PNG bytes: the SVG figure rasterised, so both formats show the same thing.
fn render_png(report: &Report) -> std::result::Result<Vec<u8>, String> {
    super::raster::svg_to_png(&render_svg(report)?)
}

/// Registers the embedded font under the family names plotters asks for (once per process).
pub(super) fn register_fonts() -> std::result::Result<(), String> {
    static DONE: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        for family in ["sans-serif", "serif", "monospace"] {
            register_font(family, FontStyle::Normal, dejavu::sans::regular())
                .map_err(|_| "the embedded font is unreadable".to_string())?;
            register_font(family, FontStyle::Bold, dejavu::sans::bold())
                .map_err(|_| "the embedded font is unreadable".to_string())?;
        }
        Ok(())
    })
    .clone()
}

/// Rows of the heatmap: the whole-tensor rows (embed, layers, final norm, logits); the op rows
/// only when there is nothing else.
fn heatmap_rows(report: &Report) -> Vec<&TensorRow> {
    let rows: Vec<&TensorRow> = report
        .tensors
        .iter()
        .filter(|t| t.kind != Kind::Op && !t.per_token_rel.is_empty())
        .collect();
    if rows.is_empty() {
        report
            .tensors
            .iter()
            .filter(|t| !t.per_token_rel.is_empty())
            .collect()
    } else {
        rows
    }
}

fn figure_height(report: &Report) -> u32 {
    let rows = heatmap_rows(report).len() as u32;
    TOP_HEIGHT + (rows * 22 + 130).clamp(260, 900)
}

pub(super) type DrawResult<DB> =
    std::result::Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &Report) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(TOP_HEIGHT);
    let (title, top) = top.split_vertically(TITLE_HEIGHT);
    draw_title(&title, r)?;
    if r.tensors.is_empty() {
        top.draw(&Text::new(
            "nothing was compared",
            (40, 40),
            ("sans-serif", 20),
        ))?;
        return Ok(());
    }
    draw_rel_chart(&top, r)?;
    draw_heatmap(&bottom, r)?;
    Ok(())
}

fn draw_title<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, r: &Report) -> DrawResult<DB> {
    let head = format!(
        "{} vs {}: {}   ({} mode, {}, {} tokens)",
        r.a.label,
        r.b.label,
        r.verdict.as_str(),
        r.mode,
        r.thresholds.dtype,
        r.inputs.tokens
    );
    let color = verdict_color(r.verdict);
    area.draw(&Text::new(
        head,
        (16, 8),
        ("sans-serif", 22)
            .into_font()
            .style(FontStyle::Bold)
            .color(&color),
    ))?;
    for (k, line) in wrap(&r.summary, SUMMARY_LINE, 2).into_iter().enumerate() {
        area.draw(&Text::new(
            line,
            (16, 38 + 20 * k as i32),
            ("sans-serif", 15).into_font().color(&BLACK),
        ))?;
    }
    Ok(())
}

/// Greedy word wrap to `width` characters, at most `max_lines` lines (the last one cut with …).
pub(super) fn wrap(s: &str, width: usize, max_lines: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in s.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    if lines.len() > max_lines {
        lines.truncate(max_lines);
        if let Some(last) = lines.last_mut() {
            let cut: String = last.chars().take(width.saturating_sub(1)).collect();
            *last = format!("{cut}…");
        }
    }
    lines
}

pub(super) fn verdict_color(v: Verdict) -> RGBColor {
    match v {
        Verdict::Ok => OK_GREEN,
        Verdict::Drift => DRIFT_ORANGE,
        Verdict::Mismatch => FAIL_RED,
    }
}

/// A short x-axis label of a whole-tensor row (`layers.12` → `12`).
fn short_label(t: &TensorRow) -> String {
    match t.kind {
        Kind::Embed => "embed".into(),
        Kind::FinalNorm => "norm".into(),
        Kind::Logits => "logits".into(),
        // A layer's final recurrent state.
        Kind::State => t.layer.map_or_else(|| t.name.clone(), |l| format!("s{l}")),
        _ => match t.layer {
            Some(l) if t.kind != Kind::Op => l.to_string(),
            _ => t.name.clone(),
        },
    }
}

/// The decade at or below `x` and at or above `y`.
pub(super) fn decades(lo: f64, hi: f64) -> (f64, f64) {
    let lo = 10f64.powf(lo.log10().floor());
    let mut hi = 10f64.powf(hi.log10().ceil());
    if hi <= lo {
        hi = lo * 10.0;
    }
    (lo, hi)
}

/// The positive finite values of `xs`.
pub(super) fn positives(xs: impl IntoIterator<Item = f64>) -> Vec<f64> {
    xs.into_iter()
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect()
}

fn min_max(xs: &[f64]) -> Option<(f64, f64)> {
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo.is_finite() && hi.is_finite()).then_some((lo, hi))
}

/// Consecutive runs of present values as (x, y) segments, zeros and negatives clamped to
/// `bottom` (a log axis has no 0), non-finite values dropped. A run also ends where
/// `new_line[i]` is set: the recurrent-state rows are their own line, not a continuation of the
/// layer outputs' line.
fn segments(values: &[Option<f64>], new_line: &[bool], bottom: f64) -> Vec<Vec<(i32, f64)>> {
    let mut out: Vec<Vec<(i32, f64)>> = Vec::new();
    let mut current = Vec::new();
    for (i, v) in values.iter().enumerate() {
        if new_line.get(i).copied().unwrap_or(false) && !current.is_empty() {
            out.push(std::mem::take(&mut current));
        }
        match v {
            Some(v) if v.is_finite() => current.push((i as i32, v.max(bottom))),
            _ => {
                if !current.is_empty() {
                    out.push(std::mem::take(&mut current));
                }
            }
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// Where a new line starts: at each change between recurrent-state rows and the other rows.
fn line_starts(tensors: &[TensorRow]) -> Vec<bool> {
    let is_state: Vec<bool> = tensors.iter().map(|t| t.kind == Kind::State).collect();
    (0..tensors.len())
        .map(|i| i > 0 && is_state[i] != is_state[i - 1])
        .collect()
}

fn draw_rel_chart<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, r: &Report) -> DrawResult<DB> {
    let n = r.tensors.len();
    let th = &r.thresholds;
    let mismatch_line: Vec<Option<f64>> = r
        .tensors
        .iter()
        .map(|t| t.floor.map(|f| (th.k_mismatch * f).max(th.bands.ok)))
        .collect();
    let all = positives(
        r.tensors
            .iter()
            .flat_map(|t| [Some(t.rel_l2), t.floor, t.a_vs_truth, t.b_vs_truth])
            .flatten()
            .chain([th.bands.ok, th.bands.fail])
            .chain(mismatch_line.iter().flatten().copied()),
    );
    let (lo, hi) = min_max(&all).unwrap_or((1e-12, 1.0));
    // Whole decades, padded a little so that their labels are drawn.
    let (lo, hi) = decades(lo / 1.5, hi * 1.5);
    let (lo, hi) = (lo / 1.2, hi * 1.2);

    // Label the whole-tensor rows, skipping any label that would overlap the previous one.
    let names: Vec<String> = r.tensors.iter().map(short_label).collect();
    let px_per_slot = (WIDTH as f64 - 140.0) / (n as f64 + 1.0);
    let label_px = |i: usize| names[i].chars().count() as f64 * 7.5;
    let mut key_points: Vec<i32> = Vec::new();
    let mut last: Option<usize> = None;
    for i in (0..n).filter(|&i| r.tensors[i].kind != Kind::Op) {
        let fits = last.is_none_or(|j| {
            (i - j) as f64 * px_per_slot >= (label_px(i) + label_px(j)) / 2.0 + 8.0
        });
        if fits {
            key_points.push(i as i32);
            last = Some(i);
        }
    }
    let has_ops = r.tensors.iter().any(|t| t.kind == Kind::Op);
    let has_states = r.tensors.iter().any(|t| t.kind == Kind::State);
    let x_desc = format!(
        "captured tensor, forward order (decoder layer index{}{})",
        if has_ops {
            "; small points: ops inside linear-attention layers"
        } else {
            ""
        },
        if has_states {
            "; sN: layer N's recurrent state after the last token, a line of its own"
        } else {
            ""
        }
    );
    let new_line = line_starts(&r.tensors);
    // One empty slot either side so that the end points do not sit on the frame.
    let x_range: Range<i32> = -1..n as i32;
    let mut chart = ChartBuilder::on(area)
        .margin_left(14)
        .margin_right(24)
        .margin_top(6)
        .margin_bottom(6)
        .x_label_area_size(52)
        .y_label_area_size(78)
        .build_cartesian_2d(x_range.with_key_points(key_points), (lo..hi).log_scale())?;
    let x_fmt = |x: &i32| {
        usize::try_from(*x)
            .ok()
            .and_then(|i| names.get(i).cloned())
            .unwrap_or_default()
    };
    let y_fmt = |y: &f64| format!("{y:.0e}");
    chart
        .configure_mesh()
        .x_desc(x_desc.as_str())
        .y_desc("rel L2 = ‖a − b‖ / ‖b‖ (log)")
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .x_label_style(("sans-serif", 13))
        .y_label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
        .light_line_style(RGBColor(240, 240, 240))
        .bold_line_style(RGBColor(215, 215, 215))
        .draw()?;

    let (x_start, x_end) = (-1, n as i32);
    // Static bands of the dtype.
    chart
        .draw_series(LineSeries::new(
            [(x_start, th.bands.ok), (x_end, th.bands.ok)],
            OK_GREEN.stroke_width(2),
        ))?
        .label(format!(
            "ok band ({}): rel L2 ≤ {:.0e}",
            th.dtype, th.bands.ok
        ))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], OK_GREEN.stroke_width(2)));
    chart
        .draw_series(LineSeries::new(
            [(x_start, th.bands.fail), (x_end, th.bands.fail)],
            FAIL_RED.stroke_width(2),
        ))?
        .label(format!(
            "fail band ({}): rel L2 > {:.0e}{}",
            th.dtype,
            th.bands.fail,
            if r.tensors.iter().any(|t| t.floor.is_some()) {
                " (decides only without a floor)"
            } else {
                ""
            }
        ))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], FAIL_RED.stroke_width(2)));

    // The floor and the mismatch line it implies.
    let floors: Vec<Option<f64>> = r.tensors.iter().map(|t| t.floor).collect();
    for (j, seg) in segments(&floors, &new_line, lo).into_iter().enumerate() {
        let s = chart.draw_series(DashedLineSeries::new(seg, 8, 5, FLOOR_GREY.stroke_width(2)))?;
        if j == 0 {
            s.label("floor: reference at this dtype vs f64 truth (same input)".to_string())
                .legend(|(x, y)| {
                    EmptyElement::at((x, y))
                        + PathElement::new(vec![(0, 0), (8, 0)], FLOOR_GREY.stroke_width(2))
                        + PathElement::new(vec![(13, 0), (22, 0)], FLOOR_GREY.stroke_width(2))
                });
        }
    }
    let faint_red = FAIL_RED.mix(0.45);
    for (j, seg) in segments(&mismatch_line, &new_line, lo)
        .into_iter()
        .enumerate()
    {
        let s = chart.draw_series(DashedLineSeries::new(seg, 2, 4, faint_red.stroke_width(2)))?;
        if j == 0 {
            s.label(format!(
                "mismatch line: max(ok band, {}× floor)",
                th.k_mismatch
            ))
            .legend(move |(x, y)| {
                EmptyElement::at((x, y))
                    + PathElement::new(vec![(0, 0), (3, 0)], faint_red.stroke_width(2))
                    + PathElement::new(vec![(9, 0), (12, 0)], faint_red.stroke_width(2))
                    + PathElement::new(vec![(18, 0), (21, 0)], faint_red.stroke_width(2))
            });
        }
    }

    // Each side against the truth.
    for (values, color, label) in [
        (
            r.tensors.iter().map(|t| t.a_vs_truth).collect::<Vec<_>>(),
            A_TRUTH,
            format!("A ({}) vs f64 truth", r.a.label),
        ),
        (
            r.tensors.iter().map(|t| t.b_vs_truth).collect::<Vec<_>>(),
            B_TRUTH,
            format!("B ({}) vs f64 truth", r.b.label),
        ),
    ] {
        for (j, seg) in segments(&values, &new_line, lo).into_iter().enumerate() {
            let s = chart.draw_series(LineSeries::new(seg, color.mix(0.85).stroke_width(1)))?;
            if j == 0 {
                s.label(label.clone()).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 22, y)], color.stroke_width(1))
                });
            }
        }
    }

    // A vs B, the primary line, with points coloured by verdict.
    let rel: Vec<Option<f64>> = r.tensors.iter().map(|t| Some(t.rel_l2)).collect();
    for (j, seg) in segments(&rel, &new_line, lo).into_iter().enumerate() {
        let s = chart.draw_series(LineSeries::new(seg, BLUE_A_VS_B.stroke_width(3)))?;
        if j == 0 {
            s.label(format!("A vs B: {} vs {}", r.a.label, r.b.label))
                .legend(|(x, y)| {
                    EmptyElement::at((x, y))
                        + PathElement::new(vec![(0, 0), (22, 0)], BLUE_A_VS_B.stroke_width(3))
                        + Circle::new((11, 0), 4, OK_GREEN.filled())
                });
        }
    }
    chart.draw_series(r.tensors.iter().enumerate().map(|(i, t)| {
        let radius = if t.kind == Kind::Op { 3 } else { 5 };
        let y = if t.rel_l2.is_finite() {
            t.rel_l2.max(lo)
        } else {
            hi
        };
        let color = verdict_color(t.verdict);
        if t.rel_l2 > 0.0 {
            Circle::new((i as i32, y), radius, color.filled())
        } else {
            // Exactly equal: drawn hollow at the bottom of the axis.
            Circle::new((i as i32, y), radius, color.stroke_width(2))
        }
    }))?;

    // NaN/Inf on either side: a marker at the top of each such tensor, the counts at the
    // first (rel L2 and the other metrics cover the finite elements only).
    let non_finite: Vec<usize> = (0..n)
        .filter(|&i| {
            let t = &r.tensors[i];
            t.nan_a + t.inf_a + t.nan_b + t.inf_b > 0
        })
        .collect();
    if let Some(&first) = non_finite.first() {
        chart
            .draw_series(
                non_finite
                    .iter()
                    .map(|&i| TriangleMarker::new((i as i32, hi / 1.3), 7, NON_FINITE.filled())),
            )?
            .label("NaN/Inf on a side (rel L2 then covers the finite elements only)")
            .legend(|(x, y)| TriangleMarker::new((x + 11, y), 6, NON_FINITE.filled()));
        let t = &r.tensors[first];
        let (anchor, dx) = if first > n / 2 {
            (HPos::Right, -10)
        } else {
            (HPos::Left, 10)
        };
        chart.draw_series(std::iter::once(
            EmptyElement::at((first as i32, hi / 1.3))
                + Text::new(
                    format!(
                        "{}: NaN/Inf A {}, B {}",
                        t.name,
                        t.nan_a + t.inf_a,
                        t.nan_b + t.inf_b
                    ),
                    (dx, 10),
                    ("sans-serif", 13)
                        .into_font()
                        .color(&NON_FINITE)
                        .pos(Pos::new(anchor, VPos::Top)),
                ),
        ))?;
    }

    // The first divergent tensor.
    if let Some(first) = &r.first_divergent
        && let Some(i) = r.tensors.iter().position(|t| &t.name == first)
    {
        let x = i as i32;
        chart.draw_series(DashedLineSeries::new(
            [(x, lo), (x, hi)],
            6,
            4,
            FAIL_RED.stroke_width(1),
        ))?;
        let (anchor, dx) = if i > n / 2 {
            (HPos::Right, -6)
        } else {
            (HPos::Left, 6)
        };
        chart.draw_series(std::iter::once(
            EmptyElement::at((x, lo))
                + Text::new(
                    format!("first divergent: {first}"),
                    (dx, -6),
                    ("sans-serif", 14)
                        .into_font()
                        .style(FontStyle::Bold)
                        .color(&FAIL_RED)
                        .pos(Pos::new(anchor, VPos::Bottom)),
                ),
        ))?;
    }

    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 13))
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(180, 180, 180))
        .draw()?;
    Ok(())
}

/// Heatmap cells per row at most (wider inputs are binned).
const MAX_CELLS: usize = 600;

/// The value a bin of tokens is drawn with: non-finite if any is, else the largest.
fn bin_value(values: &[f64]) -> f64 {
    if let Some(bad) = values.iter().find(|v| !v.is_finite()) {
        return *bad;
    }
    values.iter().copied().fold(0.0, f64::max)
}

/// Maps a per-token relative error to a colour of the log scale `[lo, hi]`.
pub(super) fn heat_color(v: f64, lo: f64, hi: f64) -> RGBColor {
    if v.is_nan() || v.is_infinite() {
        NON_FINITE
    } else if v <= 0.0 {
        ZERO_GREY
    } else {
        let (l, h) = (lo.log10(), hi.log10());
        ViridisRGB::get_color_normalized(v.log10().clamp(l, h), l, h)
    }
}

fn draw_heatmap<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, r: &Report) -> DrawResult<DB> {
    let rows = heatmap_rows(r);
    if rows.is_empty() {
        return Ok(());
    }
    let tokens = rows
        .iter()
        .map(|t| t.per_token_rel.len())
        .max()
        .unwrap_or(0);
    let m = rows.len();
    let pos = positives(rows.iter().flat_map(|t| t.per_token_rel.iter().copied()));
    let mut sorted = pos.clone();
    sorted.sort_by(f64::total_cmp);
    // Colour scale from the 1st percentile (one tiny value should not wash out the rest) to the
    // maximum, rounded out to decades.
    let (lo, hi) = match (sorted.get(sorted.len() / 100), sorted.last()) {
        (Some(&lo), Some(&hi)) => decades(lo, hi),
        _ => (1e-3, 1.0),
    };

    // Long inputs: one cell per bin of tokens (the bin's worst value), so that a figure stays a
    // few thousand cells whatever the length.
    let bin = tokens.div_ceil(MAX_CELLS).max(1);
    let caption = if bin > 1 {
        format!(
            "per-token rel error ‖a_t − b_t‖ / ‖b_t‖, max over {bin}-token bins (log colour; grey: identical, magenta: NaN/Inf)"
        )
    } else {
        "per-token rel error ‖a_t − b_t‖ / ‖b_t‖ (log colour; grey: identical, magenta: NaN/Inf)"
            .to_string()
    };
    let (map_area, bar_area) = area.split_horizontally(WIDTH - 130);
    let row_names: Vec<String> = rows.iter().map(|t| t.name.clone()).collect();
    let stride = m.div_ceil(40).max(1);
    // Row i (forward order, top to bottom) spans y in [2(m−1−i), 2(m−1−i) + 2]; its label sits
    // at the odd coordinate in the middle.
    let row_y = |i: usize| 2 * (m - 1 - i) as i32;
    let y_keys: Vec<i32> = (0..m)
        .filter(|i| i % stride == 0)
        .map(|i| row_y(i) + 1)
        .collect();
    let mut chart = ChartBuilder::on(&map_area)
        .margin_left(14)
        .margin_right(8)
        .margin_top(34)
        .margin_bottom(8)
        .x_label_area_size(44)
        .y_label_area_size(100)
        .caption(caption, ("sans-serif", 15))
        .build_cartesian_2d(
            0i32..tokens as i32,
            (0i32..2 * m as i32).with_key_points(y_keys),
        )?;
    let y_fmt = |y: &i32| {
        let from_bottom = usize::try_from((y - 1) / 2).unwrap_or(usize::MAX);
        (m - 1)
            .checked_sub(from_bottom)
            .and_then(|i| row_names.get(i).cloned())
            .unwrap_or_default()
    };
    let x_fmt = |x: &i32| x.to_string();
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc("token position")
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .x_label_style(("sans-serif", 13))
        .y_label_style(("sans-serif", 12))
        .axis_desc_style(("sans-serif", 14))
        .draw()?;
    chart.draw_series(rows.iter().enumerate().flat_map(|(i, t)| {
        let y0 = row_y(i);
        t.per_token_rel
            .chunks(bin)
            .enumerate()
            .map(move |(j, values)| {
                let start = (j * bin) as i32;
                Rectangle::new(
                    [(start, y0), (start + values.len() as i32, y0 + 2)],
                    heat_color(bin_value(values), lo, hi).filled(),
                )
            })
    }))?;
    // Tensors with NaN/Inf: their per-token errors cover the finite elements only, so outline
    // them in magenta.
    for (i, t) in rows.iter().enumerate() {
        if t.nan_a + t.inf_a + t.nan_b + t.inf_b > 0 {
            let y0 = row_y(i);
            chart.draw_series(std::iter::once(Rectangle::new(
                [(0, y0), (tokens as i32, y0 + 2)],
                NON_FINITE.stroke_width(2),
            )))?;
        }
    }

    // Outline the first divergent row.
    if let Some(i) = r
        .first_divergent
        .as_ref()
        .and_then(|f| rows.iter().position(|t| &t.name == f))
    {
        let y0 = row_y(i);
        chart.draw_series(std::iter::once(Rectangle::new(
            [(0, y0), (tokens as i32, y0 + 2)],
            FAIL_RED.stroke_width(2),
        )))?;
    }

    draw_colour_bar(&bar_area, lo, hi)
}

/// The heatmap's colour bar for values `lo..hi`, on an axis of log10 values so that even a
/// one-decade range gets several labels (the report's and the dataset's figures).
pub(super) fn draw_colour_bar<DB: DrawingBackend>(
    bar_area: &DrawingArea<DB, Shift>,
    lo: f64,
    hi: f64,
) -> DrawResult<DB> {
    let (l, h) = (lo.log10(), hi.log10());
    let mut bar = ChartBuilder::on(bar_area)
        .margin_left(4)
        .margin_right(8)
        .margin_top(34)
        .margin_bottom(52)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..1f64, l..h)?;
    let bar_fmt = |y: &f64| format!("{:.1e}", 10f64.powf(*y));
    bar.configure_mesh()
        .disable_mesh()
        .disable_x_axis()
        .y_labels(8)
        .y_label_formatter(&bar_fmt)
        .y_label_style(("sans-serif", 12))
        .draw()?;
    let steps = 96;
    bar.draw_series((0..steps).map(|s| {
        let a = l + (h - l) * s as f64 / steps as f64;
        let b = l + (h - l) * (s + 1) as f64 / steps as f64;
        Rectangle::new(
            [(0.0, a), (1.0, b)],
            heat_color(10f64.powf((a + b) / 2.0), lo, hi).filled(),
        )
    }))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_break_at_gaps_and_at_marked_starts() {
        let values = [Some(1.0), Some(2.0), None, Some(3.0), Some(0.0), Some(5.0)];
        let new_line = [false, false, false, false, false, true];
        let segs = segments(&values, &new_line, 0.5);
        assert_eq!(
            segs,
            vec![
                vec![(0, 1.0), (1, 2.0)],
                vec![(3, 3.0), (4, 0.5)],
                vec![(5, 5.0)]
            ]
        );
    }
}
