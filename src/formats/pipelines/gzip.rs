//! `.ckpt.gz` (SpecForge `--compress`): a gzip stream around a torch.save archive, inflated into
//! anonymous memory so the rest of the reader sees a memory map as for any file. The inflated
//! size is capped: no more than deflate's maximal expansion of the compressed bytes, and no
//! more than half the machine's memory.

use std::io::Read;
use std::path::Path;

use memmap2::{Mmap, MmapMut};

use crate::error::{Error, Result};

/// Deflate cannot expand data by more than about 1032:1.
const MAX_EXPANSION: usize = 1032;

pub fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0x1f, 0x8b])
}

/// The inflated bytes of the gzip file `path` (already mapped as `map`), as a read-only map.
pub fn inflate(path: &Path, map: &[u8]) -> Result<Mmap> {
    let memory = crate::util::sysinfo::mem_total_kib()
        .and_then(|k| usize::try_from(k.saturating_mul(512)).ok())
        .unwrap_or(usize::MAX);
    let cap = map.len().saturating_mul(MAX_EXPANSION).min(memory);
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(map)
        .take(cap as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| Error::file(path, format!("not a readable gzip file: {e}")))?;
    if out.len() > cap {
        return Err(Error::file(
            path,
            format!(
                "inflates past {cap} bytes (the cap for a {}-byte gzip file)",
                map.len()
            ),
        ));
    }
    if out.is_empty() {
        return Err(Error::file(path, "an empty gzip stream"));
    }
    let mut anon = MmapMut::map_anon(out.len()).map_err(|e| Error::io(path, e))?;
    anon.copy_from_slice(&out);
    anon.make_read_only().map_err(|e| Error::io(path, e))
}
