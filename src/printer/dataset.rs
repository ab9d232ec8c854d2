//! The dataset report rendered: a terminal table, markdown or JSON (`hsdiff.dataset/v1`).
//! Formatting only; every figure is the report's.

use comfy_table::Cell;

use super::emit::ReportOptions;
use super::table::grid;
use super::{Format, Json, Render};
use crate::error::Result;
use crate::report::dataset::{DatasetReport, LayerRow, SampleRow, Unpaired};
use crate::util::escape::{LONG, SHORT, markdown_code, markdown_text, plain};

/// How a sink writes the strings from outside (file and folder names, sample ids, tensor
/// names, sentences that quote them): `short` for names, `long` for sentences, `format` for a
/// side's format line. Applied where each string is written, on the report as it is.
struct Escape {
    short: fn(&str) -> String,
    long: fn(&str) -> String,
    format: fn(&str) -> String,
}

const TABLE: Escape = Escape {
    short: |s| plain(s, SHORT),
    long: |s| plain(s, LONG),
    format: |s| plain(s, LONG),
};

const MARKDOWN: Escape = Escape {
    short: |s| markdown_text(s, SHORT),
    long: |s| markdown_text(s, LONG),
    format: markdown_format,
};

impl Escape {
    fn short_or(&self, v: &Option<String>, none: &str) -> String {
        v.as_deref().map_or(none.to_string(), self.short)
    }
}

/// A side's format line in markdown, from its parts: the names hsdiff quotes in backticks
/// (`` `hidden_states` [1, T, 640] ``) as code spans holding the file's text verbatim, the rest
/// as escaped text. A line whose backticks do not pair (a name holding one) is escaped whole.
fn markdown_format(s: &str) -> String {
    let parts: Vec<&str> = s.split('`').collect();
    if parts.len().is_multiple_of(2) {
        return markdown_text(s, LONG);
    }
    parts
        .iter()
        .enumerate()
        .map(|(k, part)| match k % 2 {
            1 => markdown_code(part, SHORT, false),
            _ => markdown_text(part, LONG),
        })
        .collect()
}

fn x_floor(x: Option<f64>) -> String {
    match x {
        Some(v) if v.is_nan() => "NaN".to_string(),
        Some(v) if v.is_infinite() => "∞".to_string(),
        Some(v) => format!("{v:.1}"),
        None => "—".to_string(),
    }
}

fn rel(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.2e}")
    } else if v.is_nan() {
        "NaN".to_string()
    } else {
        "∞".to_string()
    }
}

/// The figure `metric` names, as the layer table shows it.
fn metric_value(metric: &str, v: f64) -> String {
    if metric == "x_floor" {
        x_floor(Some(v))
    } else {
        rel(v)
    }
}

const SAMPLE_COLUMNS: [&str; 8] = [
    "sample",
    "paired with",
    "positions",
    "first divergent",
    "worst ×floor (tensor)",
    "max rel L2",
    "trained positions (loss_mask)",
    "verdict",
];

fn sample_cells(s: &SampleRow, e: &Escape) -> Vec<String> {
    let partner = match &s.id_b {
        Some(b) => format!("{} (by {})", (e.short)(b), s.paired_by),
        None => format!("same id ({})", s.paired_by),
    };
    let worst = match (&s.worst_x_floor, &s.worst_tensor) {
        (Some(x), Some(t)) => format!("{} ({})", x_floor(Some(*x)), (e.short)(t)),
        _ => "—".to_string(),
    };
    let untrained = || {
        if s.untrained {
            format!("none of {}: loss_mask all 0", s.positions)
        } else {
            "—".to_string()
        }
    };
    let trained = s.trained.as_ref().map_or_else(untrained, |t| {
        let size = match t.worst_x_floor {
            Some(x) => format!("{}×", x_floor(Some(x))),
            None => rel(t.worst_rel_l2),
        };
        format!("{}/{}: {} {size}", t.positions, t.of, t.verdict.as_str())
    });
    vec![
        (e.short)(&s.id),
        partner,
        s.positions.to_string(),
        e.short_or(&s.first_divergent, "—"),
        worst,
        rel(s.worst_rel_l2),
        trained,
        s.verdict.as_str().to_string(),
    ]
}

fn layer_columns(metric: &str) -> Vec<String> {
    let m = if metric == "x_floor" {
        "×floor"
    } else {
        "rel L2"
    };
    vec![
        "tensor".to_string(),
        "samples".to_string(),
        format!("median {m}"),
        format!("p95 {m}"),
        format!("max {m}"),
        "worst sample".to_string(),
        "flagged".to_string(),
    ]
}

/// A row of the layer table, its name written as `name`.
fn layer_cells(metric: &str, l: &LayerRow, name: String, e: &Escape) -> [String; 7] {
    [
        name,
        l.samples.to_string(),
        metric_value(metric, l.median),
        metric_value(metric, l.p95),
        metric_value(metric, l.max),
        (e.short)(&l.worst_sample),
        l.flagged.to_string(),
    ]
}

fn lists(r: &DatasetReport, e: &Escape) -> Vec<String> {
    let mut out = Vec::new();
    let line = |u: &Unpaired| {
        let (id, file) = ((e.short)(&u.id), (e.short)(&u.file));
        match (&u.other, &u.why) {
            (Some(o), Some(w)) => format!("{id} ({file} vs {}: {})", (e.short)(o), (e.long)(w)),
            _ => format!("{id} ({file})"),
        }
    };
    for (what, v) in [
        ("left out, token ids differ", &r.token_mismatches),
        ("unpaired in A", &r.unpaired_a),
        ("unpaired in B", &r.unpaired_b),
    ] {
        if !v.is_empty() {
            out.push(format!(
                "{what}: {}",
                v.iter().map(line).collect::<Vec<_>>().join("; ")
            ));
        }
    }
    // A sample one side could not read may have no sample of its id on the other side.
    let file = |name: &str, side: &str| match name {
        "" => format!("none in {side}"),
        name => (e.short)(name),
    };
    for f in &r.failed {
        out.push(format!(
            "could not be compared: {} ({} vs {}): {}",
            (e.short)(&f.id),
            file(&f.file_a, "A"),
            file(&f.file_b, "B"),
            (e.long)(&f.error)
        ));
    }
    out
}

fn header(r: &DatasetReport, e: &Escape) -> String {
    let mut out = format!("{}\n\n", (e.long)(&r.summary));
    for note in r.notes.iter().chain(&r.sample_notes) {
        out.push_str(&format!("note: {}\n", (e.long)(note)));
    }
    for (side, spec, formats) in [("A", &r.a, &r.formats_a), ("B", &r.b, &r.formats_b)] {
        out.push_str(&format!("{side}: {}\n", (e.long)(spec)));
        for f in formats {
            out.push_str(&format!("   {}\n", (e.format)(f)));
        }
    }
    let shard = match r.shard {
        Some(s) => format!(" (shard {}/{}: every {}th pair)", s.index, s.count, s.count),
        None => String::new(),
    };
    out.push_str(&format!(
        "{} of {} pairs compared{shard}; {}\n",
        r.samples.len(),
        r.pairs_total,
        (e.long)(&r.calibration)
    ));
    out
}

fn table(r: &DatasetReport) -> String {
    let e = &TABLE;
    let mut out = header(r, e);
    let mut g = grid(SAMPLE_COLUMNS.to_vec());
    for s in &r.samples {
        g.add_row(sample_cells(s, e).into_iter().map(Cell::new));
    }
    out.push_str(&format!("{g}\n"));
    let cols = layer_columns(&r.metric);
    let mut g = grid(cols.iter().map(String::as_str).collect());
    for l in &r.layers {
        g.add_row(layer_cells(&r.metric, l, (e.short)(&l.name), e).map(Cell::new));
    }
    out.push_str(&format!("{g}\n"));
    for l in lists(r, e) {
        out.push_str(&format!("{l}\n"));
    }
    out
}

/// A table row of cells already escaped for markdown (no `|` left unescaped).
fn md_row(cells: &[String]) -> String {
    format!("| {} |\n", cells.join(" | "))
}

fn markdown(r: &DatasetReport) -> String {
    // Text from files is escaped where it is written: nothing in it can open a tag or leave a
    // table cell.
    let e = &MARKDOWN;
    let mut out = format!("**{}**\n\n", (e.long)(&r.summary));
    let head = header(r, e);
    let body: Vec<&str> = head.lines().skip(2).collect();
    for line in body {
        out.push_str(&format!("{}  \n", line.trim_start()));
    }
    out.push('\n');
    let cols: Vec<String> = SAMPLE_COLUMNS.iter().map(|s| s.to_string()).collect();
    out.push_str(&md_row(&cols));
    out.push_str(&md_row(&vec!["---".to_string(); cols.len()]));
    for s in &r.samples {
        out.push_str(&md_row(&sample_cells(s, e)));
    }
    out.push('\n');
    let cols = layer_columns(&r.metric);
    out.push_str(&md_row(&cols));
    out.push_str(&md_row(&vec!["---".to_string(); cols.len()]));
    for l in &r.layers {
        let name = markdown_code(&l.name, SHORT, true);
        out.push_str(&md_row(&layer_cells(&r.metric, l, name, e)));
    }
    let rest = lists(r, e);
    if !rest.is_empty() {
        out.push('\n');
        for l in rest {
            out.push_str(&format!("- {l}\n"));
        }
    }
    out
}

/// The dataset report as a terminal table: headline, samples, layers, then what was left out.
pub struct DatasetTable;

impl Render<DatasetReport> for DatasetTable {
    fn render(&self, r: &DatasetReport) -> Result<Vec<u8>> {
        Ok(table(r).into_bytes())
    }
}

/// The dataset report as markdown: the same tables, paste-ready.
pub struct DatasetMarkdown;

impl Render<DatasetReport> for DatasetMarkdown {
    fn render(&self, r: &DatasetReport) -> Result<Vec<u8>> {
        Ok(markdown(r).into_bytes())
    }
}

/// The renderer of `format`.
pub fn renderer(format: Format) -> Box<dyn Render<DatasetReport>> {
    match format {
        Format::Table => Box::new(DatasetTable),
        Format::Markdown => Box::new(DatasetMarkdown),
        Format::Json => Box::new(Json),
    }
}

/// Writes the report as `options` ask, and draws `--plot` (`plot::dataset`).
pub fn emit(r: &DatasetReport, options: &ReportOptions) -> Result<()> {
    let mut bytes = renderer(options.format).render(r)?;
    if options.format == Format::Json && r.part.is_some() {
        // A shard's part carries the digest of its own bytes (`dataset_part`).
        bytes = crate::report::dataset_part::stamp(bytes).ok_or_else(|| {
            crate::error::Error::Internal("a part's JSON has no digest to stamp".into())
        })?;
    }
    options.write(&bytes, &[&r.summary])?;
    if let Some(path) = &options.plot {
        super::plot::write_plot(r, path)?;
        eprintln!(
            "hsdiff: plot written to {}",
            crate::util::escape::one_line(&path.display().to_string())
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_format_lines_names_are_code_spans_and_its_text_escaped() {
        assert_eq!(
            markdown_format("torch.save (`a*b<c>` read as layer indices (1, 3); x*y)"),
            "torch.save (`a*b<c>` read as layer indices (1, 3); x\\*y)"
        );
        // A name holding a backtick: the spans do not pair, the line is escaped whole.
        assert_eq!(
            markdown_format("torch.save (`a`b` read as layer indices (1))"),
            "torch.save (\\`a\\`b\\` read as layer indices (1))"
        );
    }
}
