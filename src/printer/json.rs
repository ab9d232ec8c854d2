//! `--format json`: a document as pretty JSON and a newline ([`crate::util::json_doc`]), the same way
//! for every document.

use super::Render;
use crate::error::Result;
use crate::util::json_doc::JsonDocument;

pub struct Json;

impl<D: JsonDocument> Render<D> for Json {
    fn render(&self, doc: &D) -> Result<Vec<u8>> {
        crate::util::json_doc::pretty(doc, D::WHAT)
    }
}
