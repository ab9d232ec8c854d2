//! The sentences the terminal table and markdown both say under the table (logits, routing
//! flips, router agreement, amplification, token ids, environment differences): worded once
//! here, framed by each renderer (a `router layer 3:` prefix on the terminal, a list item in
//! markdown). The logits sentence itself is the headline's (`report::summary`).

use super::cells::sci;
use crate::compare::metrics::logits::LogitStats;
use crate::report::logits_words::logits_sentence;
use crate::report::{EnvDiff, Report, RouterRow, RoutingFlip, TokenIds};

/// The logits line of the renderers: "KL mean 8.9e-4, p99 5.7e-3, max 1.6e-2 (token 138);
/// top-1 agrees at 146 of 155 positions; …; top-5 overlap 95.1%".
pub fn logits_line(l: &LogitStats) -> String {
    format!(
        "KL mean {}, p99 {}, max {} (token {}); {}; top-5 overlap {:.1}%",
        sci(Some(l.kl_mean)),
        sci(Some(l.kl_p99)),
        sci(Some(l.kl_max)),
        l.kl_max_token,
        logits_sentence(l),
        100.0 * l.top5_overlap
    )
}

/// "MoE routing flips against the f64 truth (28 of 30 at near-ties): layer 0 token 41 (B, gap
/// 8.0e-5), …" — None when nothing flipped.
pub fn routing_line(flips: &[RoutingFlip], max_shown: usize) -> Option<String> {
    if flips.is_empty() {
        return None;
    }
    let shown: Vec<String> = flips
        .iter()
        .take(max_shown)
        .map(|f| {
            let tie = if f.near_tie { "" } else { ", NOT a near-tie" };
            format!(
                "layer {} token {} ({}, gap {:.1e}{tie})",
                f.layer,
                f.token,
                f.on.join("+"),
                f.flip_gap
            )
        })
        .collect();
    let more = flips.len().saturating_sub(shown.len());
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    let apart = flips.iter().filter(|f| f.near_tie).count();
    Some(format!(
        "MoE routing flips against the f64 truth ({apart} of {} at near-ties): {}{more}",
        flips.len(),
        shown.join(", ")
    ))
}

/// "top-k sets agree on 98.4% of tokens", then the flipped tokens (at most `max_shown`, see
/// [`flips`]) as `frame` words them; nothing more when no token flipped.
pub fn router_agreement(
    router: &RouterRow,
    max_shown: usize,
    frame: impl Fn(&str) -> String,
) -> String {
    let flipped = flips(router, max_shown);
    let flipped = if flipped.is_empty() {
        flipped
    } else {
        frame(&flipped)
    };
    format!(
        "top-k sets agree on {:.1}% of tokens{flipped}",
        100.0 * router.agree
    )
}

/// "tokens 3 (margin 1.2e-3), 7 (margin 4.0e-2) and 5 more", or "" when nothing flipped.
pub fn flips(router: &RouterRow, max_shown: usize) -> String {
    if router.flipped_tokens.is_empty() {
        return String::new();
    }
    let shown: Vec<String> = router
        .flipped_tokens
        .iter()
        .zip(router.flip_margins.iter().chain(std::iter::repeat(&None)))
        .take(max_shown)
        .map(|(t, m)| match m {
            Some(m) => format!("{t} (margin {m:.1e})"),
            None => t.to_string(),
        })
        .collect();
    let more = router.flipped_tokens.len().saturating_sub(shown.len());
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!("tokens {}{more}", shown.join(", "))
}

/// "grows > 2× per layer for 3 layers from layers.4, layers.9", or `None` when the error
/// nowhere amplifies.
pub fn amplification(r: &Report) -> Option<String> {
    if r.amplification.is_empty() {
        return None;
    }
    let starts: Vec<String> = r
        .amplification
        .iter()
        .map(|l| format!("layers.{l}"))
        .collect();
    Some(format!(
        "grows > 2× per layer for 3 layers from {}",
        starts.join(", ")
    ))
}

/// A line saying which sides carry token ids, unless both do (and they match).
pub fn token_ids_note(r: &Report) -> Option<&'static str> {
    match r.inputs.token_ids {
        TokenIds::Match => None,
        TokenIds::OnlyA => Some("token ids: only A carries them, so the inputs were not checked"),
        TokenIds::OnlyB => Some("token ids: only B carries them, so the inputs were not checked"),
        TokenIds::Unknown => {
            Some("token ids: neither side carries them, so whether the inputs match is unknown")
        }
    }
}

/// Why the environment-differences section is empty.
pub fn env_empty_note(r: &Report) -> &'static str {
    match r.env_recorded() {
        (true, true) => "none (the two fingerprints agree)",
        (false, true) => "A records no environment (no fingerprint in the file)",
        (true, false) => "B records no environment (no fingerprint in the file)",
        (false, false) => "neither side records an environment",
    }
}

/// The environment differences a renderer lists: with `all`, every one; otherwise those that
/// say what ran differently (and can change the numbers), then a line counting the rest.
pub fn env_shown(r: &Report, all: bool) -> (Vec<&EnvDiff>, Option<String>) {
    if all {
        return (r.env_diff.iter().collect(), None);
    }
    let (ran, rest) = r.env_ran_differently();
    if rest.is_empty() {
        return (ran, None);
    }
    let mattering: Vec<&str> = rest
        .iter()
        .filter(|d| d.matters)
        .map(|d| d.key.as_str())
        .collect();
    let which = match mattering.len() {
        0 => "none of them can change the numbers".to_string(),
        n => format!(
            "{n} of them can change the numbers: {}",
            mattering
                .iter()
                .take(4)
                .copied()
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let line = format!(
        "{} more difference(s) ({which}); --env all lists them",
        rest.len()
    );
    (ran, Some(line))
}
