//! How every command's document is written, in the manner of hyperfine's exporters: one
//! [`Render`] trait (a whole document to its bytes), one [`Format`] the commands take (`--format`),
//! and the JSON renderer every document shares ([`json::Json`]). The terminal table and markdown
//! of each document live beside it (`report::table`, `report::markdown`, `report::dataset_render`,
//! `check::set`, `exec_paths::render`, `bench::render`); they format and compute nothing.

pub mod json;

use crate::error::Result;

pub use json::{Json, JsonDocument};

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
