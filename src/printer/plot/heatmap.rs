//! The figure's bottom panel: a tensor × token heatmap of the per-token relative error on a log
//! colour scale, and the colour bar the dataset's plot draws too.

use plotters::coord::Shift;
use plotters::coord::combinators::WithKeyPoints;
use plotters::coord::types::RangedCoordi32;
use plotters::prelude::*;
use plotters::style::RGBColor;

use super::axes::{MapRows, colour_range, map_panel, positives};
use super::{DrawResult, FAIL_RED, NON_FINITE, WIDTH, ZERO_GREY};
use crate::compare::Kind;
use crate::report::{Report, TensorRow};

/// Rows of the heatmap: the whole-tensor rows (embed, layers, final norm, logits); the op rows
/// only when there is nothing else.
pub(super) fn rows(report: &Report) -> Vec<&TensorRow> {
    let rows: Vec<&TensorRow> = report
        .tensors
        .iter()
        .filter(|t| t.kind != Kind::Op && !t.stats.per_token_rel.is_empty())
        .collect();
    if rows.is_empty() {
        report
            .tensors
            .iter()
            .filter(|t| !t.stats.per_token_rel.is_empty())
            .collect()
    } else {
        rows
    }
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

/// The heatmap: tensors (forward order, top to bottom) × tokens.
type Map<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordi32, WithKeyPoints<RangedCoordi32>>>;

pub(super) fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    r: &Report,
) -> DrawResult<DB> {
    let rows = rows(r);
    if rows.is_empty() {
        return Ok(());
    }
    let tokens = rows
        .iter()
        .map(|t| t.stats.per_token_rel.len())
        .max()
        .unwrap_or(0);
    let (lo, hi) = colour_range(positives(
        rows.iter()
            .flat_map(|t| t.stats.per_token_rel.iter().copied()),
    ));
    // Long inputs: one cell per bin of tokens (the bin's worst value), so that a figure stays a
    // few thousand cells whatever the length.
    let bin = tokens.div_ceil(MAX_CELLS).max(1);
    let (map_area, bar_area) = area.split_horizontally(WIDTH - 130);
    let map_rows = MapRows(rows.len());
    let mut chart = map_panel(&map_area, 100, caption(bin)).build_cartesian_2d(
        0i32..tokens as i32,
        map_rows.span().with_key_points(map_rows.keys()),
    )?;
    let y_fmt = |y: &i32| {
        map_rows
            .at(*y)
            .and_then(|i| rows.get(i))
            .map(|t| t.name.clone())
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
    draw_cells(&mut chart, &rows, bin, (lo, hi))?;
    draw_outlines(&mut chart, r, &rows, tokens)?;
    draw_colour_bar(&bar_area, lo, hi)
}

/// One cell per bin of `bin` tokens of each row, coloured on the log scale `lo..hi`.
fn draw_cells<DB: DrawingBackend>(
    chart: &mut Map<'_, DB>,
    rows: &[&TensorRow],
    bin: usize,
    (lo, hi): (f64, f64),
) -> DrawResult<DB> {
    let map_rows = MapRows(rows.len());
    chart.draw_series(rows.iter().enumerate().flat_map(|(i, t)| {
        let y0 = map_rows.y(i);
        t.stats
            .per_token_rel
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
    Ok(())
}

/// The heatmap's caption, saying how wide a bin of tokens is when there are bins.
fn caption(bin: usize) -> String {
    if bin > 1 {
        format!(
            "per-token rel error ‖a_t − b_t‖ / ‖b_t‖, max over {bin}-token bins (log colour; grey: identical, magenta: NaN/Inf)"
        )
    } else {
        "per-token rel error ‖a_t − b_t‖ / ‖b_t‖ (log colour; grey: identical, magenta: NaN/Inf)"
            .to_string()
    }
}

/// Tensors with NaN/Inf outlined in magenta (their per-token errors cover the finite elements
/// only), then the first divergent one in red.
fn draw_outlines<DB: DrawingBackend>(
    chart: &mut Map<'_, DB>,
    r: &Report,
    rows: &[&TensorRow],
    tokens: usize,
) -> DrawResult<DB> {
    let map_rows = MapRows(rows.len());
    let outline = |i: usize| [(0, map_rows.y(i)), (tokens as i32, map_rows.y(i) + 2)];
    for (i, t) in rows.iter().enumerate() {
        if t.non_finite() != (0, 0) {
            chart.draw_series(std::iter::once(Rectangle::new(
                outline(i),
                NON_FINITE.stroke_width(2),
            )))?;
        }
    }
    if let Some(i) = r
        .first_divergent
        .as_ref()
        .and_then(|f| rows.iter().position(|t| &t.name == f))
    {
        chart.draw_series(std::iter::once(Rectangle::new(
            outline(i),
            FAIL_RED.stroke_width(2),
        )))?;
    }
    Ok(())
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
