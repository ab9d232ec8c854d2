//! The dataset figure's bottom panel: samples (pairing order, top to bottom, in bins of
//! consecutive samples when there are many) × layers, coloured by the figure on a log scale,
//! flagged cells outlined in red.

use plotters::coord::Shift;
use plotters::coord::combinators::WithKeyPoints;
use plotters::coord::types::RangedCoordi32;
use plotters::prelude::*;
use plotters::style::RGBColor;

use super::super::axes::{MapRows, colour_range, map_panel, positives};
use super::super::{DrawResult, FAIL_RED, WIDTH, ZERO_GREY, draw_colour_bar, heat_color};
use super::{Cell, Figure, short};
use crate::compare::verdict::Verdict;
use crate::util::escape::plain;

const MISSING: RGBColor = RGBColor(250, 250, 250);

/// A bin of samples at a layer: its worst figure and whether any is flagged.
type Binned = Option<(f64, bool)>;

/// The panel: layers (x) × bins of samples (y), two coordinates per cell so that labels sit in
/// the middle.
type Map<'a, DB> =
    ChartContext<'a, DB, Cartesian2d<WithKeyPoints<RangedCoordi32>, WithKeyPoints<RangedCoordi32>>>;

/// A bin of samples at one layer: the worst (non-finite first) of those present, and whether
/// any is flagged.
pub(super) fn bin_cell(cells: &[Vec<Cell>], layer: usize) -> Binned {
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

/// The caption: the figure shown, how many samples a bin holds, and the colours' meaning.
fn caption(fig: &Figure, bin: usize) -> String {
    let what = if fig.calibrated() {
        "×floor"
    } else {
        "rel L2"
    };
    if bin > 1 {
        format!(
            "samples × layers: {what}, worst of each {bin} consecutive samples (log colour; grey: \
             identical, magenta: NaN/Inf, blank: row not held; red outline: flagged)"
        )
    } else {
        format!(
            "samples × layers: {what} (log colour; grey: identical, magenta: NaN/Inf, blank: row \
             not held; red outline: flagged)"
        )
    }
}

/// Row `i`'s label: its sample's id, or the first and last of its bin.
fn row_label(fig: &Figure, bin: usize, i: usize) -> String {
    let first = &fig.samples[i * bin];
    if bin > 1 {
        let last = &fig.samples[((i + 1) * bin).min(fig.samples.len()) - 1];
        format!("{first} … {last}")
    } else {
        first.clone()
    }
}

pub(super) fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    fig: &Figure,
) -> DrawResult<DB> {
    let n = fig.layers.len();
    let bin = fig.bin();
    let (lo, hi) = colour_range(positives(
        fig.cells
            .iter()
            .flat_map(|row| row.iter().flatten().map(|(v, _)| *v)),
    ));
    let (map_area, bar_area) = area.split_horizontally(WIDTH - 130);
    let rows = MapRows(fig.cells.chunks(bin).count());
    // Layer l spans x in [2l, 2l + 2), its label at the odd coordinate in the middle.
    let x_stride = n.div_ceil(60).max(1);
    let x_keys: Vec<i32> = (0..n).step_by(x_stride).map(|l| 2 * l as i32 + 1).collect();
    let mut chart = map_panel(&map_area, 150, caption(fig, bin)).build_cartesian_2d(
        (0i32..2 * n as i32).with_key_points(x_keys),
        rows.span().with_key_points(rows.keys()),
    )?;
    let y_fmt = |y: &i32| {
        rows.at(*y)
            .map(|i| plain(&row_label(fig, bin, i), 40))
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
    draw_cells(&mut chart, fig, &rows, lo, hi)?;
    draw_colour_bar(&bar_area, lo, hi)
}

/// Every bin × layer cell in its colour, then red outlines round the flagged ones.
fn draw_cells<DB: DrawingBackend>(
    chart: &mut Map<'_, DB>,
    fig: &Figure,
    rows: &MapRows,
    lo: f64,
    hi: f64,
) -> DrawResult<DB> {
    let n = fig.layers.len();
    let cells: Vec<(usize, usize, Binned)> = fig
        .cells
        .chunks(fig.bin())
        .enumerate()
        .flat_map(|(i, chunk)| (0..n).map(move |l| (i, l, bin_cell(chunk, l))))
        .collect();
    let square = |i: usize, l: usize| {
        let (x0, y0) = (2 * l as i32, rows.y(i));
        [(x0, y0), (x0 + 2, y0 + 2)]
    };
    chart.draw_series(cells.iter().map(|&(i, l, cell)| {
        let color = match cell {
            None => MISSING,
            Some((0.0, _)) => ZERO_GREY,
            Some((v, _)) => heat_color(v, lo, hi),
        };
        Rectangle::new(square(i, l), color.filled())
    }))?;
    chart.draw_series(
        cells
            .iter()
            .filter(|(_, _, c)| c.is_some_and(|(_, flagged)| flagged))
            .map(|&(i, l, _)| Rectangle::new(square(i, l), FAIL_RED.stroke_width(2))),
    )?;
    Ok(())
}
