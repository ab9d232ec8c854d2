//! The figure's top panel: relative L2 error of every compared tensor in forward order on a log
//! axis — the A-vs-B line (points coloured by verdict), the measured floor (dashed), each side
//! against the f64 truth when there is one, the static bands of the dtype, the mismatch line and
//! the first divergent tensor marked.

use plotters::coord::Shift;
use plotters::coord::combinators::WithKeyPoints;
use plotters::coord::types::RangedCoordi32;
use plotters::element::{Drawable, PointCollection};
use plotters::prelude::*;
use plotters::style::RGBColor;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axes::{chart_panel, draw_chart_mesh, min_max, padded_decades, positives};
use super::{DrawResult, FAIL_RED, NON_FINITE, OK_GREEN, WIDTH, verdict_color};
use crate::compare::Kind;
use crate::report::{Report, TensorRow};

const BLUE_A_VS_B: RGBColor = RGBColor(31, 84, 180);
const FLOOR_GREY: RGBColor = RGBColor(60, 60, 60);
const A_TRUTH: RGBColor = RGBColor(230, 140, 20);
const B_TRUTH: RGBColor = RGBColor(140, 70, 170);

/// The panel: tensors in forward order (one empty slot either side) against a log rel L2 axis.
type Chart<'a, DB> =
    ChartContext<'a, DB, Cartesian2d<WithKeyPoints<RangedCoordi32>, LogCoord<f64>>>;

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

/// Each row's mismatch line (the report's rule, [`crate::report::ThresholdInfo::mismatch_line`]),
/// where it has a floor.
fn mismatch_lines(r: &Report) -> Vec<Option<f64>> {
    r.tensors
        .iter()
        .map(|t| t.judgement.floor.map(|f| r.thresholds.mismatch_line(f)))
        .collect()
}

/// The y axis: every positive figure the panel draws, in whole decades, padded.
fn y_range(r: &Report) -> (f64, f64) {
    let th = &r.thresholds;
    let all = positives(
        r.tensors
            .iter()
            .flat_map(|t| {
                [
                    Some(t.stats.rel_l2),
                    t.judgement.floor,
                    t.judgement.a_vs_truth,
                    t.judgement.b_vs_truth,
                ]
            })
            .flatten()
            .chain([th.bands.ok, th.bands.fail])
            .chain(mismatch_lines(r).into_iter().flatten()),
    );
    let (lo, hi) = min_max(&all).unwrap_or((1e-12, 1.0));
    padded_decades(lo, hi)
}

/// The x positions labelled: whole-tensor rows, skipping any label that would overlap the
/// previous one.
fn key_points(r: &Report, names: &[String]) -> Vec<i32> {
    let px_per_slot = (WIDTH as f64 - 140.0) / (r.tensors.len() as f64 + 1.0);
    let label_px = |i: usize| names[i].chars().count() as f64 * 7.5;
    let mut key_points: Vec<i32> = Vec::new();
    let mut last: Option<usize> = None;
    for i in (0..r.tensors.len()).filter(|&i| r.tensors[i].kind != Kind::Op) {
        let fits = last.is_none_or(|j| {
            (i - j) as f64 * px_per_slot >= (label_px(i) + label_px(j)) / 2.0 + 8.0
        });
        if fits {
            key_points.push(i as i32);
            last = Some(i);
        }
    }
    key_points
}

/// The x axis' description, saying what the small points and the `sN` labels are when drawn.
fn x_desc(r: &Report) -> String {
    let has_ops = r.tensors.iter().any(|t| t.kind == Kind::Op);
    let has_states = r.tensors.iter().any(|t| t.kind == Kind::State);
    format!(
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
    )
}

pub(super) fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    r: &Report,
) -> DrawResult<DB> {
    let n = r.tensors.len();
    let (lo, hi) = y_range(r);
    let names: Vec<String> = r.tensors.iter().map(short_label).collect();
    let mut chart = chart_panel(area, 6).build_cartesian_2d(
        (-1..n as i32).with_key_points(key_points(r, &names)),
        (lo..hi).log_scale(),
    )?;
    let x_fmt = |x: &i32| {
        usize::try_from(*x)
            .ok()
            .and_then(|i| names.get(i).cloned())
            .unwrap_or_default()
    };
    let y_fmt = |y: &f64| format!("{y:.0e}");
    draw_chart_mesh(
        &mut chart,
        &x_desc(r),
        "rel L2 = ‖a − b‖ / ‖b‖ (log)",
        &x_fmt,
        &y_fmt,
    )?;
    let new_line = line_starts(&r.tensors);
    let runs = |values: &[Option<f64>]| segments(values, &new_line, lo);
    draw_bands(&mut chart, r)?;
    draw_floor_lines(&mut chart, r, runs)?;
    draw_truth_lines(&mut chart, r, runs)?;
    draw_a_vs_b(&mut chart, r, runs, lo, hi)?;
    draw_non_finite(&mut chart, r, hi)?;
    draw_first_divergent(&mut chart, r, lo, hi)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 13))
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(180, 180, 180))
        .draw()?;
    Ok(())
}

/// Where a label beside point `i` of `n` goes: to its left in the right half of the panel,
/// `gap` pixels away.
fn side_anchor(i: usize, n: usize, gap: i32) -> (HPos, i32) {
    if i > n / 2 {
        (HPos::Right, -gap)
    } else {
        (HPos::Left, gap)
    }
}

/// Draws each run as a series of its own, the first carrying the legend entry.
fn draw_runs<'a, DB, S, E, L, T>(
    chart: &mut Chart<'a, DB>,
    runs: Vec<Vec<(i32, f64)>>,
    series: impl Fn(Vec<(i32, f64)>) -> S,
    label: String,
    legend: L,
) -> DrawResult<DB>
where
    DB: DrawingBackend,
    S: IntoIterator<Item = E>,
    E: Drawable<DB>,
    for<'b> &'b E: PointCollection<'b, (i32, f64)>,
    L: Fn((i32, i32)) -> T + 'a,
    T: IntoDynElement<'a, DB, (i32, i32)>,
{
    let mut legend = Some(legend);
    for run in runs {
        let s = chart.draw_series(series(run))?;
        if let Some(legend) = legend.take() {
            s.label(label.clone()).legend(legend);
        }
    }
    Ok(())
}

/// The dtype's static ok and fail bands, as horizontal lines.
fn draw_bands<DB: DrawingBackend>(chart: &mut Chart<'_, DB>, r: &Report) -> DrawResult<DB> {
    let th = &r.thresholds;
    let decides = if r.tensors.iter().any(|t| t.judgement.floor.is_some()) {
        " (decides only without a floor)"
    } else {
        ""
    };
    let (x_start, x_end) = (-1, r.tensors.len() as i32);
    for (y, color, label) in [
        (
            th.bands.ok,
            OK_GREEN,
            format!("ok band ({}): rel L2 ≤ {:.0e}", th.dtype, th.bands.ok),
        ),
        (
            th.bands.fail,
            FAIL_RED,
            format!(
                "fail band ({}): rel L2 > {:.0e}{decides}",
                th.dtype, th.bands.fail
            ),
        ),
    ] {
        chart
            .draw_series(LineSeries::new(
                [(x_start, y), (x_end, y)],
                color.stroke_width(2),
            ))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 22, y)], color.stroke_width(2))
            });
    }
    Ok(())
}

/// The floor (dashed) and the mismatch line it implies (dotted, faint red).
fn draw_floor_lines<'a, DB: DrawingBackend + 'a>(
    chart: &mut Chart<'a, DB>,
    r: &Report,
    runs: impl Fn(&[Option<f64>]) -> Vec<Vec<(i32, f64)>>,
) -> DrawResult<DB> {
    let floors: Vec<Option<f64>> = r.tensors.iter().map(|t| t.judgement.floor).collect();
    draw_runs(
        chart,
        runs(&floors),
        |run| DashedLineSeries::new(run, 8, 5, FLOOR_GREY.stroke_width(2)),
        "floor: reference at this dtype vs f64 truth (same input)".to_string(),
        |(x, y)| {
            EmptyElement::at((x, y))
                + PathElement::new(vec![(0, 0), (8, 0)], FLOOR_GREY.stroke_width(2))
                + PathElement::new(vec![(13, 0), (22, 0)], FLOOR_GREY.stroke_width(2))
        },
    )?;
    let faint_red = FAIL_RED.mix(0.45);
    draw_runs(
        chart,
        runs(&mismatch_lines(r)),
        |run| DashedLineSeries::new(run, 2, 4, faint_red.stroke_width(2)),
        format!(
            "mismatch line: max(ok band, {}× floor)",
            r.thresholds.k_mismatch
        ),
        move |(x, y)| {
            EmptyElement::at((x, y))
                + PathElement::new(vec![(0, 0), (3, 0)], faint_red.stroke_width(2))
                + PathElement::new(vec![(9, 0), (12, 0)], faint_red.stroke_width(2))
                + PathElement::new(vec![(18, 0), (21, 0)], faint_red.stroke_width(2))
        },
    )
}

/// Each side against the f64 truth.
fn draw_truth_lines<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    r: &Report,
    runs: impl Fn(&[Option<f64>]) -> Vec<Vec<(i32, f64)>>,
) -> DrawResult<DB> {
    let a: Vec<Option<f64>> = r.tensors.iter().map(|t| t.judgement.a_vs_truth).collect();
    let b: Vec<Option<f64>> = r.tensors.iter().map(|t| t.judgement.b_vs_truth).collect();
    for (values, color, label) in [
        (a, A_TRUTH, format!("A ({}) vs f64 truth", r.a.label)),
        (b, B_TRUTH, format!("B ({}) vs f64 truth", r.b.label)),
    ] {
        draw_runs(
            chart,
            runs(&values),
            |run| LineSeries::new(run, color.mix(0.85).stroke_width(1)),
            label,
            move |(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], color.stroke_width(1)),
        )?;
    }
    Ok(())
}

/// A vs B, the primary line, with points coloured by verdict (hollow where exactly equal).
fn draw_a_vs_b<'a, DB: DrawingBackend + 'a>(
    chart: &mut Chart<'a, DB>,
    r: &Report,
    runs: impl Fn(&[Option<f64>]) -> Vec<Vec<(i32, f64)>>,
    lo: f64,
    hi: f64,
) -> DrawResult<DB> {
    let rel: Vec<Option<f64>> = r.tensors.iter().map(|t| Some(t.stats.rel_l2)).collect();
    draw_runs(
        chart,
        runs(&rel),
        |run| LineSeries::new(run, BLUE_A_VS_B.stroke_width(3)),
        format!("A vs B: {} vs {}", r.a.label, r.b.label),
        |(x, y)| {
            EmptyElement::at((x, y))
                + PathElement::new(vec![(0, 0), (22, 0)], BLUE_A_VS_B.stroke_width(3))
                + Circle::new((11, 0), 4, OK_GREEN.filled())
        },
    )?;
    chart.draw_series(r.tensors.iter().enumerate().map(|(i, t)| {
        let radius = if t.kind == Kind::Op { 3 } else { 5 };
        let y = if t.stats.rel_l2.is_finite() {
            t.stats.rel_l2.max(lo)
        } else {
            hi
        };
        let color = verdict_color(t.judgement.verdict);
        if t.stats.rel_l2 > 0.0 {
            Circle::new((i as i32, y), radius, color.filled())
        } else {
            // Exactly equal: drawn hollow at the bottom of the axis.
            Circle::new((i as i32, y), radius, color.stroke_width(2))
        }
    }))?;
    Ok(())
}

/// NaN/Inf on either side: a marker at the top of each such tensor, the counts at the first
/// (rel L2 and the other metrics cover the finite elements only).
fn draw_non_finite<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    r: &Report,
    hi: f64,
) -> DrawResult<DB> {
    let non_finite: Vec<usize> = (0..r.tensors.len())
        .filter(|&i| r.tensors[i].non_finite() != (0, 0))
        .collect();
    let Some(&first) = non_finite.first() else {
        return Ok(());
    };
    chart
        .draw_series(
            non_finite
                .iter()
                .map(|&i| TriangleMarker::new((i as i32, hi / 1.3), 7, NON_FINITE.filled())),
        )?
        .label("NaN/Inf on a side (rel L2 then covers the finite elements only)")
        .legend(|(x, y)| TriangleMarker::new((x + 11, y), 6, NON_FINITE.filled()));
    let t = &r.tensors[first];
    let (anchor, dx) = side_anchor(first, r.tensors.len(), 10);
    chart.draw_series(std::iter::once(
        EmptyElement::at((first as i32, hi / 1.3))
            + Text::new(
                format!(
                    "{}: NaN/Inf A {}, B {}",
                    t.name,
                    t.stats.nan_a + t.stats.inf_a,
                    t.stats.nan_b + t.stats.inf_b
                ),
                (dx, 10),
                ("sans-serif", 13)
                    .into_font()
                    .color(&NON_FINITE)
                    .pos(Pos::new(anchor, VPos::Top)),
            ),
    ))?;
    Ok(())
}

/// The first divergent tensor: a dashed vertical line and its name.
fn draw_first_divergent<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    r: &Report,
    lo: f64,
    hi: f64,
) -> DrawResult<DB> {
    let Some((i, first)) = r.first_divergent.as_ref().and_then(|first| {
        let i = r.tensors.iter().position(|t| &t.name == first)?;
        Some((i, first))
    }) else {
        return Ok(());
    };
    let x = i as i32;
    chart.draw_series(DashedLineSeries::new(
        [(x, lo), (x, hi)],
        6,
        4,
        FAIL_RED.stroke_width(1),
    ))?;
    let (anchor, dx) = side_anchor(i, r.tensors.len(), 6);
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
