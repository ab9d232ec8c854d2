//! `.ckpt.gz` (SpecForge `--compress`): a gzip stream around a torch.save archive, inflated into
//! anonymous memory so the rest of the reader sees a memory map as for any file. The inflated
//! size is capped: no more than deflate's maximal expansion of the compressed bytes, and no
//! more than the `inflated-bytes` limit (`--limit inflated-bytes=N`).
//!
//! A batched file's rows are samples of their own, each opened on its own: the files inflated
//! last are kept (by device, inode, length and modification time), so every row of a batch
//! shares one inflation instead of inflating the file again per row.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use memmap2::{Mmap, MmapMut};

use crate::error::{Error, Result};
use crate::util::limits;

/// Deflate cannot expand data by more than about 1032:1.
const MAX_EXPANSION: usize = 1032;

/// Inflated files kept beyond the sources reading them: one per side of a pair.
const KEPT: usize = 2;

/// Which file was inflated: a file rewritten in place (new length or time) is inflated again.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
}

/// The files inflated last, the newest first.
static RECENT: Mutex<Vec<(Identity, Arc<Mmap>)>> = Mutex::new(Vec::new());

pub fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0x1f, 0x8b])
}

/// The inflated bytes of the gzip file `path` (opened as `file`, mapped as `map`), as a
/// read-only map: the one inflated before when the same file was opened last.
pub fn inflate(path: &Path, file: &File, map: &[u8]) -> Result<Arc<Mmap>> {
    let identity = file.metadata().ok().map(|m| Identity {
        dev: m.dev(),
        ino: m.ino(),
        len: m.len(),
        mtime: (m.mtime(), m.mtime_nsec()),
    });
    let mut recent = RECENT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(id) = &identity
        && let Some(at) = recent.iter().position(|(known, _)| known == id)
    {
        let hit = recent.remove(at);
        let bytes = hit.1.clone();
        recent.insert(0, hit);
        return Ok(bytes);
    }
    drop(recent);
    let bytes = Arc::new(inflate_bounded(path, map)?);
    if let Some(id) = identity {
        let mut recent = RECENT.lock().unwrap_or_else(|e| e.into_inner());
        recent.insert(0, (id, bytes.clone()));
        recent.truncate(KEPT);
    }
    Ok(bytes)
}

/// Inflates `map`, refused past the smaller of deflate's expansion and the limit.
fn inflate_bounded(path: &Path, map: &[u8]) -> Result<Mmap> {
    let limit = limits::get().inflated_bytes;
    let expansion = map.len().saturating_mul(MAX_EXPANSION);
    let cap = expansion.min(limit);
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(map)
        .take(cap as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| Error::file(path, format!("not a readable gzip file: {e}")))?;
    if out.len() > cap {
        let why = if cap == limit {
            format!(
                "the inflated gzip stream runs past {limit} bytes, over the limit \
                 (raise it with --limit inflated-bytes=N)"
            )
        } else {
            format!(
                "the inflated gzip stream runs past {cap} bytes, more than deflate's \
                 {MAX_EXPANSION}:1 expansion of its {} bytes",
                map.len()
            )
        };
        return Err(Error::file(path, why));
    }
    if out.is_empty() {
        return Err(Error::file(path, "an empty gzip stream"));
    }
    let mut anon = MmapMut::map_anon(out.len()).map_err(|e| Error::io(path, e))?;
    anon.copy_from_slice(&out);
    anon.make_read_only().map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_file_opened_again_is_not_inflated_again() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::io(Path::new("tempdir"), e))?;
        let path = dir.path().join("data_0.ckpt.gz");
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let bytes: Vec<u8> = (0..50_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
            .collect();
        enc.write_all(&bytes).map_err(|e| Error::io(&path, e))?;
        std::fs::write(&path, enc.finish().map_err(|e| Error::io(&path, e))?)
            .map_err(|e| Error::io(&path, e))?;
        let open = || -> Result<Arc<Mmap>> {
            let file = File::open(&path).map_err(|e| Error::io(&path, e))?;
            let map = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
            inflate(&path, &file, &map)
        };
        let (first, again) = (open()?, open()?);
        assert!(Arc::ptr_eq(&first, &again), "inflated twice");
        assert_eq!(&first[..], &bytes[..]);
        Ok(())
    }
}
