//! What the headline says about MoE routing: the clause on how routing was handled, and a flip
//! rounding cannot explain as a finding.

use super::RouterRow;
use super::routing::Routing;

/// How MoE routing was handled, for the headline: the sides that record no router choice
/// (flips cannot be separated, unless their routing was `recovered` from their states), or,
/// where the sides routed apart (`each_side`), how many tokens route differently on A and B;
/// None when there is nothing to say.
pub fn routing_clause(
    routing: &Routing,
    each_side: bool,
    routers: &[RouterRow],
    recovered: &[String],
) -> Option<String> {
    let silent = routing.silent_sides();
    if !silent.is_empty() && silent.iter().all(|s| recovered.contains(s)) {
        let (who, verb) = match silent.len() {
            1 => (silent.join(""), "records"),
            _ => (silent.join(" and "), "record"),
        };
        return Some(format!(
            "{who} {verb} no router ids: the routing was recovered from the states, so each side \
             is judged against the f64 truth under its own routing"
        ));
    }
    if !silent.is_empty() {
        let who = silent.join(" and ");
        let verb = if silent.len() == 1 {
            "records"
        } else {
            "record"
        };
        return Some(format!(
            "MoE routing flips could not be separated: {who} {verb} no router ids, so every token is judged"
        ));
    }
    if !each_side {
        return None;
    }
    let apart: usize = routers.iter().map(|r| r.flipped_tokens.len()).sum();
    let layers = routers
        .iter()
        .filter(|r| !r.flipped_tokens.is_empty())
        .count();
    let ties = routing.flips.iter().filter(|f| f.near_tie).count();
    Some(format!(
        "A and B route {apart} token(s) apart in {layers} MoE layer(s), so each is judged against \
         the f64 truth under its own routing; {ties} of {} flip(s) against the exact router are \
         rounding-level near-ties",
        routing.flips.len()
    ))
}

/// The first routing flip rounding cannot explain, as a finding; None when every flip is a
/// near-tie.
pub fn routing_finding(routing: &Routing) -> Option<String> {
    let n = routing.beyond_ties().count();
    let f = routing.beyond_ties().next()?;
    let (who, verb) = match f.on.len() {
        1 => (f.on.join(""), "routes"),
        _ => (f.on.join(" and "), "route"),
    };
    Some(format!(
        "{who} {verb} token {} at layer {} to experts the exact router would not choose there \
         (gap {:.1e} of the logits' RMS, beyond the {:.1e} its rounding can explain; {n} such \
         flip(s))",
        f.token, f.layer, f.flip_gap, f.near_tie_bound
    ))
}
