//! The logits line of a report: where top-1 agrees, and whether its flips are near-ties.

use crate::compare::metrics::logits::LogitStats;

/// "top-1 agrees at 147 of 155 positions; the 8 flips are all near-ties (margin < 1.2e-1)".
pub fn logits_sentence(l: &LogitStats) -> String {
    let agree = l.tokens - l.top1_flips;
    if l.top1_flips == 0 {
        return format!("top-1 agrees at all {} positions", l.tokens);
    }
    let ties = l.top1_flips - l.top1_flips_decided;
    let margin = format!("top-2 margin < {:.1e}", l.tie_margin);
    let flips = match (ties, l.top1_flips_decided) {
        (_, 0) if l.top1_flips == 1 => format!("the flip is a near-tie ({margin})"),
        (_, 0) => format!("the {} flips are all near-ties ({margin})", l.top1_flips),
        (0, n) => format!("{n} flip(s), none of them a near-tie ({margin})"),
        (t, n) => format!(
            "{t} of the {} flips are near-ties ({margin}), {n} {} not",
            l.top1_flips,
            if n == 1 { "is" } else { "are" }
        ),
    };
    format!("top-1 agrees at {agree} of {} positions; {flips}", l.tokens)
}
