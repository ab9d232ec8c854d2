//! The one-line summary that leads a report, whose first word is always the report's verdict
//! word: `benign`/`uncalibrated` for ok, `drift`, `mismatch` (which side is closer to the truth:
//! `closer_to_truth`; the logits line: `logits_words`). Shared by every renderer.

use super::TensorRow;
use super::closer_to_truth::{neither_near_truth, who_is_right};
use super::logits_words::logits_sentence;
use crate::compare::Kind;
use crate::compare::metrics::Location;
use crate::compare::metrics::logits::LogitStats;
use crate::compare::verdict::Verdict;

/// What the summary is about.
pub struct Subject<'a> {
    pub a: &'a str,
    pub b: &'a str,
    /// The dtype whose bands and floor judge the rows.
    pub dtype: &'a str,
    pub overall: Verdict,
    /// Whether a floor was measured (a model was at hand).
    pub calibrated: bool,
    /// Not calibrated because `--no-floor` asked so.
    pub floor_skipped: bool,
    /// Why not calibrated otherwise (what is missing, how to supply it).
    pub uncalibrated_why: Option<&'a str>,
    /// How MoE routing was handled ([`routing_clause`]), when there is something to say.
    pub routing: Option<&'a str>,
    /// A routing flip rounding cannot explain ([`routing_finding`]): the report is flagged.
    pub routing_finding: Option<&'a str>,
    /// How the sides' router data differ (`router_data::router_difference`), when they do:
    /// equal rows are then not "identical".
    pub router_difference: Option<&'a str>,
    /// The layers of each side, when the two hold none in common and each row was judged
    /// against the truth ("1, 3, 5", "0, 2, 4").
    pub one_sided: Option<(&'a str, &'a str)>,
}

/// The word a report's headline leads with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lead {
    /// Ok, against a measured floor (or bit for bit equal).
    Benign,
    /// Ok, with no floor to judge by.
    Uncalibrated,
    /// The report's drift or mismatch.
    Flagged(Verdict),
}

impl Lead {
    pub fn word(self) -> &'static str {
        match self {
            Lead::Benign => "benign",
            Lead::Uncalibrated => "uncalibrated",
            Lead::Flagged(v) => v.as_str(),
        }
    }
}

/// The one sentence that leads every report, in parts: the lead word, then what was found and
/// each clause after it. Written `lead: clause; clause; …` (JSON's `summary` is that string);
/// a renderer that shows the verdict its own way takes the clauses alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// None when nothing was compared.
    pub lead: Option<Lead>,
    pub clauses: Vec<String>,
}

impl Summary {
    fn new(lead: Option<Lead>, first: String) -> Summary {
        Summary {
            lead,
            clauses: vec![first],
        }
    }

    /// The clauses without the lead word: `clause; clause; …`.
    pub fn rest(&self) -> String {
        self.clauses.join("; ")
    }

    /// Starts the sentence, right after the lead word, with `clause`.
    pub fn lead_with(&mut self, clause: String) {
        self.clauses.insert(0, clause);
    }

    /// Leads with `findings`, in order: findings of how the files were read (a drafter's
    /// declared layer ids the truth shows to be off) that make `verdict` at least a mismatch
    /// whatever the rows say. Returns the verdict.
    pub fn lead_with_findings(&mut self, verdict: Verdict, findings: &[String]) -> Verdict {
        if findings.is_empty() {
            return verdict;
        }
        let verdict = verdict.max(Verdict::Mismatch);
        self.lead = Some(Lead::Flagged(verdict));
        for finding in findings.iter().rev() {
            self.lead_with(finding.clone());
        }
        verdict
    }

    /// Adds `words` to the end of the last clause.
    pub fn end_with(&mut self, words: &str) {
        match self.clauses.last_mut() {
            Some(last) => last.push_str(words),
            None => self.clauses.push(words.to_string()),
        }
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(lead) = self.lead {
            write!(f, "{}: ", lead.word())?;
        }
        f.write_str(&self.rest())
    }
}

impl serde::Serialize for Summary {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The one sentence that leads every report.
pub fn summary(s: &Subject, rows: &[TensorRow], logits: Option<&LogitStats>) -> Summary {
    let Some(worst) = rows.iter().max_by(|x, y| {
        x.judgement
            .verdict
            .cmp(&y.judgement.verdict)
            .then(x.stats.rel_l2.total_cmp(&y.stats.rel_l2))
    }) else {
        return Summary::new(
            None,
            format!("nothing to compare between {} and {}", s.a, s.b),
        );
    };
    let flips = logits.filter(|l| l.top1_flips > 0).map(logits_sentence);
    if let Some(layers) = s.one_sided {
        return one_sided(s, layers, rows);
    }
    let first_flagged = rows.iter().find(|r| r.judgement.verdict != Verdict::Ok);
    if let (None, Some(finding)) = (first_flagged, s.routing_finding) {
        let mut out = Summary::new(Some(Lead::Flagged(s.overall)), finding.to_string());
        out.clauses.extend(s.routing.map(str::to_string));
        return out;
    }
    match first_flagged {
        None => within_rounding(s, rows, worst, flips),
        Some(first) => parted(s, rows, first, flips),
    }
}

/// The headline when no row is flagged: identical, uncalibrated, or within the floor (`worst`
/// the row of the largest rel L2).
fn within_rounding(
    s: &Subject,
    rows: &[TensorRow],
    worst: &TensorRow,
    flips: Option<String>,
) -> Summary {
    let (a, b, dtype) = (s.a, s.b, s.dtype);
    // Equal everywhere is the strongest answer there is, whatever the floor.
    if rows
        .iter()
        .all(|r| r.stats.max_abs == 0.0 && r.non_finite() == (0, 0))
    {
        let n = rows.len();
        let tensors = if n == 1 { "tensor" } else { "tensors" };
        let words = match s.router_difference {
            None => format!(
                "{a} and {b} are identical (bit for bit): every element of the {n} compared \
                 {tensors} is equal"
            ),
            Some(why) => format!(
                "every element of the {n} compared {tensors} of {a} and {b} is equal (bit for \
                 bit), but not their router data: {why}"
            ),
        };
        let mut out = Summary::new(Some(Lead::Benign), words);
        out.clauses.extend(neither_near_truth(rows));
        return out;
    }
    if !s.calibrated {
        let mut out = Summary::new(Some(Lead::Uncalibrated), uncalibrated(s));
        out.clauses.push(format!(
            "nothing exceeds what {dtype} rounding can produce at its depth (max rel L2 \
             {:.2e} at {})",
            worst.stats.rel_l2, worst.name
        ));
        out.clauses.extend(flips);
        return out;
    }
    let routing_words = s.routing.map(|w| format!(" ({w})")).unwrap_or_default();
    let max_ratio = rows
        .iter()
        .filter_map(|r| r.judgement.ratio_to_floor)
        .fold(0.0_f64, f64::max);
    let last = rows
        .iter()
        .rev()
        .find(|r| r.kind != Kind::Logits && r.kind != Kind::Op);
    let mut out = Summary::new(
        Some(Lead::Benign),
        format!(
            "{a} and {b} differ by at most {max_ratio:.1}× the {dtype} rounding \
             floor{routing_words} (max rel L2 {:.2e} at {})",
            worst.stats.rel_l2, worst.name
        ),
    );
    out.clauses
        .extend(last.and_then(|r| who_is_right(a, b, r, rows)));
    out.clauses.extend(neither_near_truth(rows));
    out.clauses.extend(flips);
    out
}

/// The headline when a row is flagged: where the sides part (`first`, the first flagged row),
/// from where it gets worse, and who is right.
fn parted(s: &Subject, rows: &[TensorRow], first: &TensorRow, flips: Option<String>) -> Summary {
    let (a, b, dtype) = (s.a, s.b, s.dtype);
    let routing = s.routing.map(|w| format!(" ({w})")).unwrap_or_default();
    let mut out = Summary::new(
        Some(Lead::Flagged(s.overall)),
        format!(
            "{a} and {b} part at {}{}, {}{routing}",
            first.name,
            op_path(first),
            how(first, dtype)
        ),
    );
    if first.judgement.verdict != s.overall
        && let Some(worse) = rows.iter().find(|r| r.judgement.verdict == s.overall)
    {
        out.clauses.push(format!(
            "{} from {}, {}",
            s.overall.as_str(),
            worse.name,
            how(worse, dtype)
        ));
    }
    out.clauses.extend(s.routing_finding.map(str::to_string));
    if s.calibrated {
        out.clauses.extend(who_is_right(a, b, first, rows));
    } else {
        out.clauses
            .push(format!("uncalibrated: {}", uncalibrated(s)));
    }
    out.clauses.extend(flips);
    out
}

/// The headline of two files that hold different layers, each row judged against the truth.
fn one_sided(s: &Subject, (la, lb): (&str, &str), rows: &[TensorRow]) -> Summary {
    let (a, b, dtype) = (s.a, s.b, s.dtype);
    let what = format!(
        "{a} and {b} hold different layers ({a}: {la}; {b}: {lb}), so each was judged against the \
         f64 truth"
    );
    match rows.iter().find(|r| r.judgement.verdict != Verdict::Ok) {
        None => {
            let max_ratio = rows
                .iter()
                .filter_map(|r| r.judgement.ratio_to_floor)
                .fold(0.0_f64, f64::max);
            Summary::new(
                Some(Lead::Benign),
                format!(
                    "{what}: every row within {max_ratio:.1}× the {dtype} rounding floor of it"
                ),
            )
        }
        Some(first) => {
            // The side with a distance of its own at that row is the one measured there.
            let side = if first.judgement.a_vs_truth.is_some() {
                a
            } else {
                b
            };
            Summary::new(
                Some(Lead::Flagged(s.overall)),
                format!(
                    "{what}: {side} parts from the truth at {}, {}",
                    first.name,
                    how(first, dtype)
                ),
            )
        }
    }
}

/// Why there is no floor: "no model to measure the bf16 floor — pass --model DIR" (after the
/// word `uncalibrated`).
fn uncalibrated(s: &Subject) -> String {
    if s.floor_skipped {
        "no floor measured (--no-floor)".to_string()
    } else if let Some(why) = s.uncalibrated_why {
        why.to_string()
    } else {
        format!(
            "no model to measure the {} floor — pass --model DIR",
            s.dtype
        )
    }
}

/// How far one flagged row is off: its non-finite elements, or its rel L2 against the floor or
/// the band.
fn how(r: &TensorRow, dtype: &str) -> String {
    let at = |l: &Option<Location>| {
        l.map(|l| format!("token {}, channel {}", l.token, l.channel))
            .unwrap_or_default()
    };
    if r.stats.non_finite_disagree > 0 {
        return format!(
            "{} element(s) finite on one side only or of different sign (first at {}; NaN/Inf: \
             {} on A, {} on B)",
            r.stats.non_finite_disagree,
            at(&r.stats.non_finite_disagree_at),
            r.stats.nan_a + r.stats.inf_a,
            r.stats.nan_b + r.stats.inf_b
        );
    }
    if r.stats.non_finite_both > 0 {
        let what = if r.stats.nan_a > 0 { "NaN" } else { "Inf" };
        return format!(
            "both {what} at {} element(s) (first at {})",
            r.stats.non_finite_both,
            at(&r.stats.non_finite_both_at)
        );
    }
    match (r.judgement.ratio_to_floor, r.judgement.floor) {
        (Some(ratio), Some(_)) => format!(
            "rel L2 {:.2e} = {ratio:.1}× the {dtype} floor",
            r.judgement.rel_l2_judged.unwrap_or(r.stats.rel_l2)
        ),
        // A floor no multiple of which is a bound: said as what it is, never as "(NaN)".
        (None, Some(0.0)) => format!(
            "rel L2 {:.2e} where the {dtype} floor is 0 (the reference run meets the f64 truth \
             exactly here)",
            r.judgement.rel_l2_judged.unwrap_or(r.stats.rel_l2)
        ),
        (None, Some(floor)) => format!(
            "rel L2 {:.2e}, and the {dtype} floor is {floor:.2e}: the floor run is not finite, so \
             nothing bounds the difference",
            r.judgement.rel_l2_judged.unwrap_or(r.stats.rel_l2)
        ),
        _ => match r.judgement.expected_floor.filter(|e| *e > 0.0) {
            Some(e) => format!(
                "rel L2 {:.2e} = {:.0}× the {dtype} floor expected at depth {} without a model \
                 ({e:.1e}, from hsdiff's measurements)",
                r.stats.rel_l2,
                r.stats.rel_l2 / e,
                r.judgement.depth
            ),
            None => format!(
                "rel L2 {:.2e}, beyond what {dtype} rounding can produce at depth {} ({:.2e})",
                r.stats.rel_l2,
                r.judgement.depth,
                r.judgement.band.unwrap_or(f64::NAN)
            ),
        },
    }
}

/// "(in the gated norm of layer 3)" for an op row.
fn op_path(r: &TensorRow) -> String {
    if r.kind != Kind::Op {
        return String::new();
    }
    use crate::capture::{Key, Op};
    let what = match Key::of(&r.name) {
        Some(Key::Op(_, Op::ConvOut | Op::Q | Op::K | Op::V)) => "conv path",
        Some(Key::Op(_, Op::Beta | Op::G)) => "gates",
        Some(Key::Op(_, Op::CoreOut)) => "gated delta rule",
        Some(Key::Op(_, Op::GatedNormOut)) => "gated norm",
        Some(Key::Op(_, Op::OutProj)) => "output projection",
        _ => "layer",
    };
    format!(" (in the {what} of layer {})", r.layer.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flagged() -> Summary {
        Summary::new(
            Some(Lead::Flagged(Verdict::Drift)),
            "a and b part at layers.3, rel L2 2.00e-2 = 3.1× the bf16 floor".to_string(),
        )
    }

    /// The sentence is the lead word, then the clauses joined by "; "; JSON writes that string.
    #[test]
    fn a_summary_is_written_as_one_sentence_led_by_its_word() {
        let mut s = flagged();
        s.clauses
            .push("b is 2.0× closer to the f64 truth than a at layers.3".into());
        let sentence = "drift: a and b part at layers.3, rel L2 2.00e-2 = 3.1× the bf16 floor; \
                        b is 2.0× closer to the f64 truth than a at layers.3";
        assert_eq!(s.to_string(), sentence);
        assert_eq!(
            s.rest(),
            sentence.strip_prefix("drift: ").expect("the word")
        );
        assert_eq!(
            serde_json::to_value(&s).expect("JSON"),
            serde_json::Value::String(sentence.into())
        );
        let none = Summary::new(None, "nothing to compare between a: x and b".into());
        assert_eq!(none.to_string(), "nothing to compare between a: x and b");
    }

    /// A detected shift comes right after the lead word; an applied one ends the sentence.
    #[test]
    fn a_shift_leads_the_clauses_or_ends_the_last() {
        let mut s = flagged();
        s.lead_with("B's layer i matches A's layer i + 1".into());
        assert!(
            s.to_string()
                .starts_with("drift: B's layer i matches A's layer i + 1; a and b part at"),
            "{s}"
        );
        let mut s = flagged();
        s.end_with(" (compared with --shift 1)");
        assert!(
            s.to_string().ends_with("floor (compared with --shift 1)"),
            "{s}"
        );
        assert_eq!(Lead::Benign.word(), "benign");
        assert_eq!(Lead::Uncalibrated.word(), "uncalibrated");
        assert_eq!(Lead::Flagged(Verdict::Mismatch).word(), "mismatch");
    }
}
