//! How the text renderers write a value, and the cells of the tensor table: the terminal table
//! and markdown show the same 11 columns, written the same way, so both take them from here (as
//! does `hsdiff paths` where it shows the same kinds of values).

use super::TensorRow;

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

/// The cells of one tensor row, every column but the verdict.
pub fn tensor_cells(t: &TensorRow) -> [String; 10] {
    [
        t.name.clone(),
        sci(Some(t.mean_abs)),
        format!(
            "{} ({}, {})",
            sci(Some(t.max_abs)),
            t.max_abs_at.token,
            t.max_abs_at.channel
        ),
        sci(Some(t.rel_l2)),
        cosine(t.cosine),
        format!("{} ({})", cosine(t.cosine_min), t.cosine_min_token),
        sci(t.floor),
        ratio(t.ratio_to_floor),
        sci(t.a_vs_truth),
        sci(t.b_vs_truth),
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
