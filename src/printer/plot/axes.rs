//! What the figures' panels share: their log ranges in whole decades, the frames of the two kinds
//! of panel (a log-axis chart: the pair report's errors, the dataset's distributions; a map with
//! a colour bar: the pair report's heatmap, the dataset's sample × layer map), and the chart
//! panels' mesh.

use std::ops::Range;

use plotters::coord::Shift;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::prelude::*;
use plotters::style::RGBColor;

use super::DrawResult;

/// The decade at or below `lo` and at or above `hi`.
pub(super) fn decades(lo: f64, hi: f64) -> (f64, f64) {
    let lo = 10f64.powf(lo.log10().floor());
    let mut hi = 10f64.powf(hi.log10().ceil());
    if hi <= lo {
        hi = lo * 10.0;
    }
    (lo, hi)
}

/// A chart's axis over `lo..hi`: whole decades, padded a little so that their labels are drawn.
pub(super) fn padded_decades(lo: f64, hi: f64) -> (f64, f64) {
    let (lo, hi) = decades(lo / 1.5, hi * 1.5);
    (lo / 1.2, hi * 1.2)
}

/// A map's colour scale over `values` (positive, finite): from the 1st percentile (one tiny value
/// should not wash out the rest) to the maximum, rounded out to decades.
pub(super) fn colour_range(mut values: Vec<f64>) -> (f64, f64) {
    values.sort_by(f64::total_cmp);
    match (values.get(values.len() / 100), values.last()) {
        (Some(&lo), Some(&hi)) => decades(lo, hi),
        _ => (1e-3, 1.0),
    }
}

/// The positive finite values of `xs`.
pub(super) fn positives(xs: impl IntoIterator<Item = f64>) -> Vec<f64> {
    xs.into_iter()
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect()
}

/// The smallest and largest of `xs`, when both are finite.
pub(super) fn min_max(xs: &[f64]) -> Option<(f64, f64)> {
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo.is_finite() && hi.is_finite()).then_some((lo, hi))
}

/// The frame of a log-axis chart panel, `margin_top` pixels under the panel's top.
pub(super) fn chart_panel<'a, 'b, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    margin_top: u32,
) -> ChartBuilder<'a, 'b, DB> {
    let mut builder = ChartBuilder::on(area);
    builder
        .margin_left(14)
        .margin_right(24)
        .margin_top(margin_top)
        .margin_bottom(6)
        .x_label_area_size(52)
        .y_label_area_size(78);
    builder
}

/// The frame of a map panel under its caption, `y_labels` pixels kept for the row names.
pub(super) fn map_panel<'a, 'b, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    y_labels: u32,
    caption: String,
) -> ChartBuilder<'a, 'b, DB> {
    let mut builder = ChartBuilder::on(area);
    builder
        .margin_left(14)
        .margin_right(8)
        .margin_top(34)
        .margin_bottom(8)
        .x_label_area_size(44)
        .y_label_area_size(y_labels)
        .caption(caption, ("sans-serif", 15));
    builder
}

/// A chart panel's mesh: light grid lines, both axes described and labelled by `x_fmt` and
/// `y_fmt`.
pub(super) fn draw_chart_mesh<'a, 'b, X, Y, DB>(
    chart: &'b mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    x_desc: &str,
    y_desc: &str,
    x_fmt: &'b dyn Fn(&X::ValueType) -> String,
    y_fmt: &'b dyn Fn(&Y::ValueType) -> String,
) -> DrawResult<DB>
where
    X: Ranged + ValueFormatter<X::ValueType>,
    Y: Ranged + ValueFormatter<Y::ValueType>,
    DB: DrawingBackend,
{
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(x_fmt)
        .y_label_formatter(y_fmt)
        .x_label_style(("sans-serif", 13))
        .y_label_style(("sans-serif", 13))
        .axis_desc_style(("sans-serif", 14))
        .light_line_style(RGBColor(240, 240, 240))
        .bold_line_style(RGBColor(215, 215, 215))
        .draw()
}

/// The rows of a map panel, the first at the top: row i spans y in [2(m−1−i), 2(m−1−i) + 2] and
/// its label sits at the odd coordinate in the middle; at most 40 rows are labelled.
pub(super) struct MapRows(pub usize);

impl MapRows {
    /// The y range of all rows.
    pub fn span(&self) -> Range<i32> {
        0..2 * self.0 as i32
    }

    /// The bottom of row `i`.
    pub fn y(&self, i: usize) -> i32 {
        2 * (self.0 - 1 - i) as i32
    }

    /// The labelled y coordinates.
    pub fn keys(&self) -> Vec<i32> {
        let stride = self.0.div_ceil(40).max(1);
        (0..self.0).step_by(stride).map(|i| self.y(i) + 1).collect()
    }

    /// The row a label coordinate `y` is of.
    pub fn at(&self, y: i32) -> Option<usize> {
        let from_bottom = usize::try_from(y / 2).ok()?;
        (self.0 - 1).checked_sub(from_bottom)
    }
}
