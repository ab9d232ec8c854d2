//! The dataset report rendered: a terminal table, markdown or JSON (`hsdiff.dataset/v1`).
//! Formatting only; every figure is the report's.

use comfy_table::Cell;

use super::emit::ReportOptions;
use super::table::grid;
use super::{Format, Json, Render};
use crate::error::Result;
use crate::report::dataset::{DatasetReport, LayerRow, SampleRow, Unpaired};
use crate::util::escape::{LONG, SHORT, markdown_code, markdown_text, plain};

/// The report with every string from outside (file and folder names, sample ids, tensor names,
/// formats, sentences that quote them) made safe for one sink: `short` for names, `long` for
/// sentences.
fn escaped(
    r: &DatasetReport,
    short: impl Fn(&str) -> String,
    long: impl Fn(&str) -> String,
) -> DatasetReport {
    let mut r = r.clone();
    let opt = |v: &mut Option<String>| {
        if let Some(s) = v.as_mut() {
            *s = short(s);
        }
    };
    for s in [&mut r.summary, &mut r.a, &mut r.b, &mut r.calibration] {
        *s = long(s);
    }
    for s in r.notes.iter_mut().chain(&mut r.sample_notes) {
        *s = long(s);
    }
    for s in r.formats_a.iter_mut().chain(&mut r.formats_b) {
        *s = long(s);
    }
    for row in &mut r.samples {
        row.id = short(&row.id);
        opt(&mut row.id_b);
        opt(&mut row.first_divergent);
        opt(&mut row.worst_tensor);
    }
    for l in &mut r.layers {
        l.name = short(&l.name);
        l.worst_sample = short(&l.worst_sample);
    }
    for u in r
        .token_mismatches
        .iter_mut()
        .chain(&mut r.unpaired_a)
        .chain(&mut r.unpaired_b)
    {
        u.id = short(&u.id);
        u.file = short(&u.file);
        opt(&mut u.other);
        if let Some(w) = u.why.as_mut() {
            *w = long(w);
        }
    }
    for f in &mut r.failed {
        f.id = short(&f.id);
        f.file_a = short(&f.file_a);
        f.file_b = short(&f.file_b);
        f.error = long(&f.error);
    }
    r
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

fn sample_cells(s: &SampleRow) -> Vec<String> {
    let partner = match &s.id_b {
        Some(b) => format!("{b} (by {})", s.paired_by),
        None => format!("same id ({})", s.paired_by),
    };
    let worst = match (&s.worst_x_floor, &s.worst_tensor) {
        (Some(x), Some(t)) => format!("{} ({t})", x_floor(Some(*x))),
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
        s.id.clone(),
        partner,
        s.positions.to_string(),
        s.first_divergent.clone().unwrap_or_else(|| "—".to_string()),
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
fn layer_cells(metric: &str, l: &LayerRow, name: String) -> [String; 7] {
    [
        name,
        l.samples.to_string(),
        metric_value(metric, l.median),
        metric_value(metric, l.p95),
        metric_value(metric, l.max),
        l.worst_sample.clone(),
        l.flagged.to_string(),
    ]
}

fn lists(r: &DatasetReport) -> Vec<String> {
    let mut out = Vec::new();
    let line = |u: &Unpaired| match (&u.other, &u.why) {
        (Some(o), Some(w)) => format!("{} ({} vs {o}: {w})", u.id, u.file),
        _ => format!("{} ({})", u.id, u.file),
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
    for f in &r.failed {
        out.push(format!(
            "could not be compared: {} ({} vs {}): {}",
            f.id, f.file_a, f.file_b, f.error
        ));
    }
    out
}

fn header(r: &DatasetReport) -> String {
    let mut out = format!("{}\n\n", r.summary);
    for note in r.notes.iter().chain(&r.sample_notes) {
        out.push_str(&format!("note: {note}\n"));
    }
    for (side, spec, formats) in [("A", &r.a, &r.formats_a), ("B", &r.b, &r.formats_b)] {
        out.push_str(&format!("{side}: {spec}\n"));
        for f in formats {
            out.push_str(&format!("   {f}\n"));
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
        r.calibration
    ));
    out
}

fn table(raw: &DatasetReport) -> String {
    let r = &escaped(raw, |s| plain(s, SHORT), |s| plain(s, LONG));
    let mut out = header(r);
    let mut g = grid(SAMPLE_COLUMNS.to_vec());
    for s in &r.samples {
        g.add_row(sample_cells(s).into_iter().map(Cell::new));
    }
    out.push_str(&format!("{g}\n"));
    let cols = layer_columns(&r.metric);
    let mut g = grid(cols.iter().map(String::as_str).collect());
    for l in &r.layers {
        g.add_row(layer_cells(&r.metric, l, l.name.clone()).map(Cell::new));
    }
    out.push_str(&format!("{g}\n"));
    for l in lists(r) {
        out.push_str(&format!("{l}\n"));
    }
    out
}

/// A table row of cells already escaped for markdown (no `|` left unescaped).
fn md_row(cells: &[String]) -> String {
    format!("| {} |\n", cells.join(" | "))
}

fn markdown(raw: &DatasetReport) -> String {
    // Text from files is escaped once here: nothing in it can open a tag or leave a table cell.
    let r = &escaped(raw, |s| markdown_text(s, SHORT), |s| markdown_text(s, LONG));
    let mut out = format!("**{}**\n\n", r.summary);
    let head = header(r);
    let body: Vec<&str> = head.lines().skip(2).collect();
    for line in body {
        out.push_str(&format!("{}  \n", line.trim_start()));
    }
    out.push('\n');
    let cols: Vec<String> = SAMPLE_COLUMNS.iter().map(|s| s.to_string()).collect();
    out.push_str(&md_row(&cols));
    out.push_str(&md_row(&vec!["---".to_string(); cols.len()]));
    for s in &r.samples {
        out.push_str(&md_row(&sample_cells(s)));
    }
    out.push('\n');
    let cols = layer_columns(&r.metric);
    out.push_str(&md_row(&cols));
    out.push_str(&md_row(&vec!["---".to_string(); cols.len()]));
    for (l, name) in r.layers.iter().zip(&raw.layers) {
        let name = markdown_code(&name.name, SHORT, true);
        out.push_str(&md_row(&layer_cells(&r.metric, l, name)));
    }
    let rest = lists(r);
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
