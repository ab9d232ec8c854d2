//! Safetensors files as entries: hsdiff dumps (a fingerprint under the `hsdiff` metadata key) and
//! those PyTorch's `save_file` writes. The header is read by the one safetensors layer
//! ([`crate::weights::safetensors_file`]), which also maps the dtypes.

use std::path::Path;

use crate::util::mapped::FileMap;
use serde_json::Value;

use super::{Entry, FileFormat, FileSource, Loc, bad};
use crate::capture::dump::METADATA_KEY;
use crate::error::Result;
use crate::weights::safetensors_file::SafetensorsHeader;

impl FileSource {
    pub(super) fn safetensors(path: &Path, map: FileMap) -> Result<Self> {
        let header = SafetensorsHeader::parse(path, &map)?;
        let fingerprint = match header.user_metadata().and_then(|m| m.get(METADATA_KEY)) {
            Some(json) => Some(serde_json::from_str::<Value>(json).map_err(|e| {
                bad(
                    path,
                    format!("metadata `{METADATA_KEY}` is not valid JSON: {e}"),
                )
            })?),
            None => None,
        };
        let entries = header
            .tensors(path, map.len())?
            .into_iter()
            .map(|t| Entry {
                raw: t.name,
                dtype: Some(t.dtype),
                bits16: None,
                shape: t.shape,
                fortran: false,
                loc: Loc::Range(t.range.start, t.range.end),
                seq: None,
            })
            .collect();
        let format = if fingerprint.is_some() {
            FileFormat::HsdiffDump
        } else {
            FileFormat::Safetensors
        };
        // Other writers record the run's dtype under these keys (`torch_dtype`: transformers'
        // config name); an unreadable value records nothing.
        let metadata_dtype = header.user_metadata().and_then(|m| {
            ["dtype", "torch_dtype"]
                .iter()
                .find_map(|k| m.get(*k).and_then(|v| super::parse_dtype_label(v)))
        });
        let mut src = Self::empty(path, format, map);
        src.entries = entries;
        src.fingerprint = fingerprint;
        src.metadata_dtype = metadata_dtype;
        Ok(src)
    }
}
