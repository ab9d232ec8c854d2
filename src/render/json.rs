//! `--format json`: a document as pretty JSON and a newline ([`crate::util::json_doc`]), the same way
//! for every document.

use serde::Serialize;

use super::Render;
use crate::error::Result;

/// A document with a JSON form: what it is called in an encoding error.
pub trait JsonDocument: Serialize {
    const WHAT: &'static str;
}

pub struct Json;

impl<D: JsonDocument> Render<D> for Json {
    fn render(&self, doc: &D) -> Result<Vec<u8>> {
        crate::util::json_doc::pretty(doc, D::WHAT)
    }
}
