//! The dataset figure's top panel: per layer, every sample's figure on a log axis, coloured by
//! its verdict there, over bars at the layer's median, p95 and max.

use plotters::coord::Shift;
use plotters::coord::combinators::WithKeyPoints;
use plotters::coord::types::RangedCoordi32;
use plotters::prelude::*;
use plotters::style::RGBColor;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::super::axes::{chart_panel, draw_chart_mesh, min_max, padded_decades, positives};
use super::super::{DrawResult, FAIL_RED, NON_FINITE, verdict_color};
use super::{Figure, short};
use crate::compare::verdict::Verdict;

/// Points drawn per layer at most (flagged samples first, then an even spread of the rest).
pub(super) const MAX_POINTS: usize = 400;
/// Width of a layer's slot in the panel's x coordinates (integers, so that points can spread
/// within a slot).
const SLOT: i32 = 100;
const FLOOR_GREY: RGBColor = RGBColor(60, 60, 60);

/// The panel: layer slots in forward order (one empty slot before the first) against a log axis.
type Chart<'a, DB> =
    ChartContext<'a, DB, Cartesian2d<WithKeyPoints<RangedCoordi32>, LogCoord<f64>>>;

fn slot(layer: usize) -> i32 {
    layer as i32 * SLOT
}

/// Which samples' points a layer draws: every one up to [`MAX_POINTS`], else the flagged
/// ones and an even spread of the others.
pub(super) fn drawn_samples(fig: &Figure, layer: usize) -> Vec<usize> {
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

fn count_present(fig: &Figure, layer: usize) -> usize {
    fig.cells.iter().filter(|row| row[layer].is_some()).count()
}

/// The y axis: every positive figure (and the floor, 1×, when calibrated) in whole decades,
/// padded.
fn y_range(fig: &Figure) -> (f64, f64) {
    let values = positives(
        fig.cells
            .iter()
            .flat_map(|row| row.iter().flatten().map(|(v, _)| *v))
            .chain(if fig.calibrated() { Some(1.0) } else { None }),
    );
    min_max(&values).map_or((1e-6 / 1.2, 1.0 * 1.2), |(lo, hi)| padded_decades(lo, hi))
}

/// The caption, saying when points were thinned.
fn caption(fig: &Figure) -> String {
    let n = fig.layers.len();
    let thinned = (0..n).any(|l| drawn_samples(fig, l).len() < count_present(fig, l));
    format!(
        "each layer across samples: one point per sample (coloured by its verdict at that layer), \
         bars at the median (black), p95 (grey), max (red){}",
        if thinned {
            format!("; at most {MAX_POINTS} points per layer, flagged samples always drawn")
        } else {
            String::new()
        }
    )
}

pub(super) fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    fig: &Figure,
) -> DrawResult<DB> {
    let n = fig.layers.len();
    let (lo, hi) = y_range(fig);
    let stride = n.div_ceil(60).max(1);
    let keys: Vec<i32> = (0..n).step_by(stride).map(slot).collect();
    let mut chart = chart_panel(area, 30)
        .caption(caption(fig), ("sans-serif", 15))
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
    draw_chart_mesh(
        &mut chart,
        "compared row, forward order (decoder layer index)",
        fig.metric_label(),
        &x_fmt,
        &y_fmt,
    )?;
    if fig.calibrated() {
        chart.draw_series(DashedLineSeries::new(
            [(-SLOT, 1.0), (slot(n), 1.0)],
            8,
            5,
            FLOOR_GREY.stroke_width(2),
        ))?;
    }
    for l in 0..n {
        draw_layer(&mut chart, fig, l, lo, hi)?;
    }
    if fig.calibrated() {
        chart.draw_series(std::iter::once(
            EmptyElement::at((-SLOT, 1.0))
                + Text::new(
                    "1× floor",
                    (4, -4),
                    ("sans-serif", 12)
                        .into_font()
                        .color(&FLOOR_GREY)
                        .pos(Pos::new(HPos::Left, VPos::Bottom)),
                ),
        ))?;
    }
    Ok(())
}

/// One layer's slot: the bars under the points, the max last (thin) so that it shows over an
/// equal p95; then its samples' points.
fn draw_layer<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    fig: &Figure,
    l: usize,
    lo: f64,
    hi: f64,
) -> DrawResult<DB> {
    let (median, p95, max) = fig.marks[l];
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
    Ok(())
}
