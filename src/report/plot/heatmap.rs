//! The figure's bottom panel: a tensor × token heatmap of the per-token relative error on a log
//! colour scale, and the colour bar the dataset's plot draws too.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::RGBColor;

use super::{DrawResult, FAIL_RED, NON_FINITE, WIDTH, ZERO_GREY, decades, positives};
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
pub(in crate::report) fn heat_color(v: f64, lo: f64, hi: f64) -> RGBColor {
    if v.is_nan() || v.is_infinite() {
        NON_FINITE
    } else if v <= 0.0 {
        ZERO_GREY
    } else {
        let (l, h) = (lo.log10(), hi.log10());
        ViridisRGB::get_color_normalized(v.log10().clamp(l, h), l, h)
    }
}

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
    let m = rows.len();
    let pos = positives(
        rows.iter()
            .flat_map(|t| t.stats.per_token_rel.iter().copied()),
    );
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
    // Tensors with NaN/Inf: their per-token errors cover the finite elements only, so outline
    // them in magenta.
    for (i, t) in rows.iter().enumerate() {
        if t.non_finite() != (0, 0) {
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
pub(in crate::report) fn draw_colour_bar<DB: DrawingBackend>(
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
