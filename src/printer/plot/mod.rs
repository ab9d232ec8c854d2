//! `--plot FILE.svg|FILE.png`: the report as a figure.
//!
//! Top panel: relative L2 error of every compared tensor in forward order on a log axis — the
//! A-vs-B line (points coloured by verdict), the measured floor (dashed), each side against the
//! f64 truth when there is one, the static `ok` / `fail` bands of the dtype as horizontal lines,
//! the mismatch line max(ok band, k × floor), and the first divergent tensor marked. Bottom panel:
//! a tensor × token heatmap of the per-token relative error on a log colour scale.
//!
//! The figure needs no system fonts or libraries: text is laid out with DejaVu Sans, embedded in
//! the binary through the `dejavu` crate, and the PNG is the SVG rasterised in memory
//! (`raster.rs`). Like the other renderers, this computes nothing: everything comes from the report.
//! The top panel is drawn by `chart.rs`, the bottom one by `heatmap.rs`, the dataset report's
//! figure by `dataset/`; this file holds the renderer, the figure's title, fonts and colours, and
//! `axes.rs` what the panels share.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{FontStyle, RGBColor, register_font};

use super::Render;
use crate::compare::verdict::Verdict;
use crate::error::{Error, Result};
use crate::report::Report;

mod axes;
mod chart;
mod dataset;
mod heatmap;
mod raster;

use heatmap::{draw_colour_bar, heat_color};

/// The image formats `--plot` writes, chosen by the file extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlotFormat {
    Svg,
    Png,
}

const WIDTH: u32 = 1400;
const TOP_HEIGHT: u32 = 640;
const TITLE_HEIGHT: u32 = 82;
/// Characters per line of the summary under the title.
const SUMMARY_LINE: usize = 165;

const OK_GREEN: RGBColor = RGBColor(40, 150, 60);
const DRIFT_ORANGE: RGBColor = RGBColor(235, 150, 0);
const FAIL_RED: RGBColor = RGBColor(200, 30, 30);
const ZERO_GREY: RGBColor = RGBColor(225, 225, 225);
const NON_FINITE: RGBColor = RGBColor(255, 0, 200);

/// Checks that `path` names a format `--plot` can write (`.svg` or `.png`, any case) in a
/// folder that exists; called before the model runs so that a typo costs nothing.
pub fn check_path(path: &Path) -> Result<PlotFormat> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let format = match ext.as_deref() {
        Some("svg") => PlotFormat::Svg,
        Some("png") => PlotFormat::Png,
        Some(other) => {
            return Err(Error::output(
                path,
                format!("--plot writes .svg or .png files, not .{other}"),
            ));
        }
        None => {
            return Err(Error::output(
                path,
                "--plot needs a file name ending in .svg or .png",
            ));
        }
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.is_dir()
    {
        return Err(Error::output(
            path,
            format!(
                "cannot write the plot: folder {} does not exist",
                dir.display()
            ),
        ));
    }
    Ok(format)
}

/// The figure in one image format: a renderer like the text ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plot(pub PlotFormat);

impl Render<Report> for Plot {
    fn render(&self, report: &Report) -> Result<Vec<u8>> {
        // Labels from files are drawn with control characters as visible escapes (they are not
        // allowed in XML even escaped) and long ones shortened; the SVG writer escapes markup.
        let report = &super::cells::escaped(
            report,
            |s| crate::util::escape::plain(s, crate::util::escape::SHORT),
            |s| crate::util::escape::plain(s, crate::util::escape::LONG),
        );
        self.figure((WIDTH, figure_height(report)), |root| draw(root, report))
    }
}

/// What drawing on the SVG backend comes to.
type SvgResult = std::result::Result<(), DrawingAreaErrorKind<std::io::Error>>;

impl Plot {
    /// A figure of `size` drawn by `draw`: the SVG document, or that document rasterised so that
    /// both formats show the same thing.
    fn figure(
        self,
        size: (u32, u32),
        draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> SvgResult,
    ) -> Result<Vec<u8>> {
        let svg = svg(size, draw);
        let drawn = match self.0 {
            PlotFormat::Svg => svg.map(String::into_bytes),
            PlotFormat::Png => svg.and_then(|svg| raster::svg_to_png(&svg)),
        };
        // Drawing and encoding happen in memory: a failure there is a bug, not bad input.
        drawn.map_err(Error::Internal)
    }
}

/// Draws a report or a dataset report and writes it to `path` through the output policy (SVG or
/// PNG by extension).
pub fn write_plot<D>(doc: &D, path: &Path) -> Result<()>
where
    Plot: Render<D>,
{
    let bytes = Plot(check_path(path)?).render(doc)?;
    crate::util::output::write_bytes(path, &bytes)
}

/// The SVG document of a figure of `size` drawn by `draw`.
fn svg(
    size: (u32, u32),
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> SvgResult,
) -> std::result::Result<String, String> {
    register_fonts()?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        draw(&root).map_err(|e| format!("cannot draw the plot: {e}"))?;
        root.present()
            .map_err(|e| format!("cannot draw the plot: {e}"))?;
    }
    Ok(svg)
}

/// Registers the embedded font under the family names plotters asks for (once per process).
fn register_fonts() -> std::result::Result<(), String> {
    static DONE: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        for family in ["sans-serif", "serif", "monospace"] {
            register_font(family, FontStyle::Normal, dejavu::sans::regular())
                .map_err(|_| "the embedded font is unreadable".to_string())?;
            register_font(family, FontStyle::Bold, dejavu::sans::bold())
                .map_err(|_| "the embedded font is unreadable".to_string())?;
        }
        Ok(())
    })
    .clone()
}

fn figure_height(report: &Report) -> u32 {
    let rows = heatmap::rows(report).len() as u32;
    TOP_HEIGHT + (rows * 22 + 130).clamp(260, 900)
}

type DrawResult<DB> =
    std::result::Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &Report) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(TOP_HEIGHT);
    let (title, top) = top.split_vertically(TITLE_HEIGHT);
    draw_title(&title, r)?;
    if r.tensors.is_empty() {
        top.draw(&Text::new(
            "nothing was compared",
            (40, 40),
            ("sans-serif", 20),
        ))?;
        return Ok(());
    }
    chart::draw(&top, r)?;
    heatmap::draw(&bottom, r)?;
    Ok(())
}

fn draw_title<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, r: &Report) -> DrawResult<DB> {
    let head = format!(
        "{} vs {}: {}   ({} mode, {}, {} tokens)",
        r.a.label,
        r.b.label,
        r.verdict.as_str(),
        r.mode,
        r.thresholds.dtype,
        r.inputs.tokens
    );
    draw_heading(area, head, &r.summary.to_string(), r.verdict)
}

/// A figure's heading: its first line in the verdict's colour, then the summary wrapped on at
/// most two lines (the pair report's figure and the dataset report's).
fn draw_heading<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    head: String,
    summary: &str,
    verdict: Verdict,
) -> DrawResult<DB> {
    let color = verdict_color(verdict);
    area.draw(&Text::new(
        head,
        (16, 8),
        ("sans-serif", 22)
            .into_font()
            .style(FontStyle::Bold)
            .color(&color),
    ))?;
    for (k, line) in wrap(summary, SUMMARY_LINE, 2).into_iter().enumerate() {
        area.draw(&Text::new(
            line,
            (16, 38 + 20 * k as i32),
            ("sans-serif", 15).into_font().color(&BLACK),
        ))?;
    }
    Ok(())
}

/// Greedy word wrap to `width` characters, at most `max_lines` lines (the last one cut with …).
fn wrap(s: &str, width: usize, max_lines: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in s.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    if lines.len() > max_lines {
        lines.truncate(max_lines);
        if let Some(last) = lines.last_mut() {
            let cut: String = last.chars().take(width.saturating_sub(1)).collect();
            *last = format!("{cut}…");
        }
    }
    lines
}

fn verdict_color(v: Verdict) -> RGBColor {
    match v {
        Verdict::Ok => OK_GREEN,
        Verdict::Drift => DRIFT_ORANGE,
        Verdict::Mismatch => FAIL_RED,
    }
}
