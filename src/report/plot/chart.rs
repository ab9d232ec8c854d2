//! The figure's top panel: relative L2 error of every compared tensor in forward order on a log
//! axis — the A-vs-B line (points coloured by verdict), the measured floor (dashed), each side
//! against the f64 truth when there is one, the static bands of the dtype, the mismatch line and
//! the first divergent tensor marked.

use std::ops::Range;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::RGBColor;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{DrawResult, FAIL_RED, NON_FINITE, OK_GREEN, WIDTH, decades, positives, verdict_color};
use crate::compare::Kind;
use crate::report::{Report, TensorRow};

const BLUE_A_VS_B: RGBColor = RGBColor(31, 84, 180);
const FLOOR_GREY: RGBColor = RGBColor(60, 60, 60);
const A_TRUTH: RGBColor = RGBColor(230, 140, 20);
const B_TRUTH: RGBColor = RGBColor(140, 70, 170);

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

pub(super) fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    r: &Report,
) -> DrawResult<DB> {
    let n = r.tensors.len();
    let th = &r.thresholds;
    let mismatch_line: Vec<Option<f64>> = r
        .tensors
        .iter()
        .map(|t| {
            t.judgement
                .floor
                .map(|f| (th.k_mismatch * f).max(th.bands.ok))
        })
        .collect();
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
            if r.tensors.iter().any(|t| t.judgement.floor.is_some()) {
                " (decides only without a floor)"
            } else {
                ""
            }
        ))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 22, y)], FAIL_RED.stroke_width(2)));

    // The floor and the mismatch line it implies.
    let floors: Vec<Option<f64>> = r.tensors.iter().map(|t| t.judgement.floor).collect();
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
            r.tensors
                .iter()
                .map(|t| t.judgement.a_vs_truth)
                .collect::<Vec<_>>(),
            A_TRUTH,
            format!("A ({}) vs f64 truth", r.a.label),
        ),
        (
            r.tensors
                .iter()
                .map(|t| t.judgement.b_vs_truth)
                .collect::<Vec<_>>(),
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
    let rel: Vec<Option<f64>> = r.tensors.iter().map(|t| Some(t.stats.rel_l2)).collect();
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

    // NaN/Inf on either side: a marker at the top of each such tensor, the counts at the
    // first (rel L2 and the other metrics cover the finite elements only).
    let non_finite: Vec<usize> = (0..n)
        .filter(|&i| {
            let t = &r.tensors[i];
            t.non_finite() != (0, 0)
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
