//! How the text renderers write a value, and the cells of the tensor table: the terminal table
//! and markdown show the same 11 columns, written the same way, so both take them from here (as
//! does `hsdiff paths` where it shows the same kinds of values).

use crate::report::{Report, TensorRow};

/// The tensor table's columns, in order; the last is the verdict, which each renderer styles
/// itself (colour on a terminal, bold in markdown).
pub const TENSOR_COLUMNS: [&str; 11] = [
    "tensor",
    "mean |Δ|",
    "max |Δ| (tok, ch)",
    "rel L2",
    "cosine",
    "min cos (tok)",
    "floor",
    "×floor",
    "A vs f64",
    "B vs f64",
    "verdict",
];

/// The cells of one tensor row, every column but the verdict. A row with NaN/Inf elements
/// shows their counts instead of statistics: those cover the finite elements only, and over
/// an all-NaN side they would read as agreement (rel L2 0, cosine 1).
pub fn tensor_cells(t: &TensorRow) -> [String; 10] {
    let (bad_a, bad_b) = t.non_finite();
    if bad_a + bad_b > 0 {
        let dash = || "—".to_string();
        let vs = |x: Option<f64>, bad: usize| {
            if bad > 0 {
                "NaN/Inf".to_string()
            } else {
                sci(x)
            }
        };
        return [
            t.name.clone(),
            dash(),
            dash(),
            format!("NaN/Inf: A {bad_a}, B {bad_b}"),
            dash(),
            dash(),
            sci(t.judgement.floor),
            dash(),
            vs(t.judgement.a_vs_truth, bad_a),
            vs(t.judgement.b_vs_truth, bad_b),
        ];
    }
    [
        t.name.clone(),
        sci(Some(t.stats.mean_abs)),
        format!(
            "{} ({}, {})",
            sci(Some(t.stats.max_abs)),
            t.stats.max_abs_at.token,
            t.stats.max_abs_at.channel
        ),
        sci(Some(t.stats.rel_l2)),
        cosine(t.stats.cosine),
        format!(
            "{} ({})",
            cosine(t.stats.cosine_min),
            t.stats.cosine_min_token
        ),
        sci(t.judgement.floor),
        ratio(t.judgement.ratio_to_floor),
        sci(t.judgement.a_vs_truth),
        sci(t.judgement.b_vs_truth),
    ]
}

/// Scientific notation with 2 decimals, `—` for missing values.
pub fn sci(x: Option<f64>) -> String {
    match x {
        Some(v) if v.is_nan() => "NaN".to_string(),
        Some(0.0) => "0".to_string(),
        Some(v) => format!("{v:.2e}"),
        None => "—".to_string(),
    }
}

/// A multiple of the floor (`×floor`) with one decimal, `—` when there is no floor.
pub fn ratio(x: Option<f64>) -> String {
    x.map_or_else(|| "—".to_string(), |x| format!("{x:.1}"))
}

/// A cosine printed so that its distance from 1 is readable.
pub fn cosine(c: f64) -> String {
    if (0.999_999_5..1.0).contains(&c) {
        format!("1−{:.1e}", 1.0 - c)
    } else {
        format!("{c:.6}")
    }
}

/// A fingerprint value for a table cell: `—` when absent, long values cut to 48 characters.
pub fn clip(s: Option<&str>) -> String {
    match s {
        None => "—".to_string(),
        Some(s) if s.chars().count() > 48 => format!("{}…", s.chars().take(47).collect::<String>()),
        Some(s) => s.to_string(),
    }
}

/// A copy of `r` whose text from files — labels, sides, tensor names, fingerprint values, the
/// summary and notes that quote them — went through `short` (names and values) or `long`
/// (sentences): how each text renderer escapes for its sink ([`crate::util::escape`]).
pub fn escaped(
    r: &Report,
    short: impl Fn(&str) -> String,
    long: impl Fn(&str) -> String,
) -> Report {
    let mut r = r.clone();
    let opt = |v: &mut Option<String>| {
        if let Some(s) = v.as_mut() {
            *s = short(s);
        }
    };
    for clause in &mut r.summary.clauses {
        *clause = long(clause);
    }
    for n in &mut r.notes {
        *n = long(n);
    }
    for side in [&mut r.a, &mut r.b] {
        side.label = short(&side.label);
        for v in [
            &mut side.backend,
            &mut side.implementation,
            &mut side.dtype,
            &mut side.device,
            &mut side.fingerprint.model,
            &mut side.fingerprint.config_sha256,
            &mut side.fingerprint.tool_version,
        ] {
            opt(v);
        }
    }
    for t in &mut r.tensors {
        t.name = short(&t.name);
    }
    opt(&mut r.first_divergent);
    for d in &mut r.env_diff {
        d.key = short(&d.key);
        opt(&mut d.a);
        opt(&mut d.b);
    }
    r
}
