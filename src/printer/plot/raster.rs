//! PNG figures, rasterised from the SVG figure by resvg.
//!
//! One drawing path serves both formats, so a PNG shows exactly what the SVG shows. Text is
//! shaped by resvg with DejaVu Sans, embedded in the binary (no system fonts are read):
//! plotters' own bitmap text sets each glyph by its bounding box rather than on the baseline and
//! drops its side bearings, which raised periods ("9·46e-2") and broke letter spacing.

use std::sync::{Arc, OnceLock};

use resvg::{tiny_skia, usvg};

/// The family every generic family name (`sans-serif`, `serif`, `monospace`) resolves to.
const FAMILY: &str = "DejaVu Sans";

/// The embedded fonts, loaded once per process.
fn fonts() -> Arc<usvg::fontdb::Database> {
    static FONTS: OnceLock<Arc<usvg::fontdb::Database>> = OnceLock::new();
    FONTS
        .get_or_init(|| {
            let mut db = usvg::fontdb::Database::new();
            db.load_font_data(dejavu::sans::regular().to_vec());
            db.load_font_data(dejavu::sans::bold().to_vec());
            db.set_sans_serif_family(FAMILY);
            db.set_serif_family(FAMILY);
            db.set_monospace_family(FAMILY);
            Arc::new(db)
        })
        .clone()
}

/// Renders an SVG document (as written by the plot renderers) to PNG bytes at its own size.
pub fn svg_to_png(svg: &str) -> Result<Vec<u8>, String> {
    let options = usvg::Options {
        fontdb: fonts(),
        font_family: FAMILY.to_string(),
        ..usvg::Options::default()
    };
    let tree = usvg::Tree::from_str(svg, &options)
        .map_err(|e| format!("cannot read the drawn SVG: {e}"))?;
    let size = tree.size().to_int_size();
    let mut pixmap = tiny_skia::Pixmap::new(size.width(), size.height()).ok_or_else(|| {
        format!(
            "cannot rasterise a {}×{} figure",
            size.width(),
            size.height()
        )
    })?;
    pixmap.fill(tiny_skia::Color::WHITE);
    resvg::render(
        &tree,
        tiny_skia::Transform::identity(),
        &mut pixmap.as_mut(),
    );
    pixmap
        .encode_png()
        .map_err(|e| format!("cannot encode the PNG: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PNG decoded to (width, rows of "is ink").
    fn ink(png_bytes: &[u8]) -> Result<(usize, Vec<Vec<bool>>), String> {
        let pixmap = tiny_skia::Pixmap::decode_png(png_bytes).map_err(|e| e.to_string())?;
        let width = pixmap.width() as usize;
        let rows = pixmap
            .pixels()
            .chunks(width)
            .map(|row| row.iter().map(|px| px.red() < 128).collect())
            .collect();
        Ok((width, rows))
    }

    fn page(text: &str) -> String {
        format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="160" height="60"><text x="10" y="40" font-family="sans-serif" font-size="32">{text}</text></svg>"#
        )
    }

    /// Glyphs sit on the baseline: in "1.5" the period's lowest ink row is the digits' lowest
    /// row (plotters' bitmap text drew it half an em higher), and the three glyphs are three
    /// separate runs of ink columns, in order, not overlapping.
    #[test]
    fn glyphs_sit_on_the_baseline() -> Result<(), String> {
        let (width, rows) = ink(&svg_to_png(&page("1.5"))?)?;
        let inked = |x: usize| rows.iter().any(|r| r[x]);
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for x in 0..width {
            match runs.last_mut() {
                Some((_, end)) if inked(x) && *end + 1 == x => *end = x,
                _ if inked(x) => runs.push((x, x)),
                _ => {}
            }
        }
        assert_eq!(runs.len(), 3, "ink column runs: {runs:?}");
        let bottom = |(a, b): (usize, usize)| {
            rows.iter()
                .rposition(|r| r[a..=b].iter().any(|&i| i))
                .unwrap_or(0)
        };
        let (one, dot, five) = (bottom(runs[0]), bottom(runs[1]), bottom(runs[2]));
        assert!(
            one.abs_diff(dot) <= 1 && five.abs_diff(dot) <= 2,
            "bottoms {one} {dot} {five}"
        );
        Ok(())
    }

    #[test]
    fn an_empty_figure_has_no_ink() -> Result<(), String> {
        let (_, rows) = ink(&svg_to_png(&page(""))?)?;
        assert!(rows.iter().flatten().all(|&i| !i));
        Ok(())
    }
}
