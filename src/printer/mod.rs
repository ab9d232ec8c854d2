//! A finished value → its bytes, in the manner of ripgrep's printer and hyperfine's exporters:
//! one [`Render`] trait (a whole document to its bytes), one [`Format`] the commands take
//! (`--format`), the JSON renderer every document shares ([`Json`]), and the printing of the
//! engine's two documents, the pair report and the dataset report: the terminal table
//! (`table`), markdown (`markdown`), the dataset's text (`dataset`), the SVG and PNG figures
//! (`plot`), and where a report goes (`emit`). A command's own small document (`bench`,
//! `paths`, a check set, `env --json`) is printed beside its command, through this trait, this
//! format and the shared cells (`cells`, `table::grid`). Printers format; what they say comes
//! from the value (`report`), and they compute nothing.

pub mod cells;
pub mod dataset;
pub mod emit;
pub mod json;
pub mod markdown;
pub mod plot;
pub mod sentences;
pub mod table;

use crate::error::Result;

pub use json::Json;

/// A way to write documents of type `D` (terminal table, markdown, JSON, plot): the bytes of a
/// whole document, or the error that kept it from being made.
pub trait Render<D: ?Sized> {
    fn render(&self, doc: &D) -> Result<Vec<u8>>;
}

/// The text formats a document is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    Markdown,
    Json,
}
