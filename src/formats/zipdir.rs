//! A zip archive's central directory, read and validated by hand: torch.save archives
//! (`torch.save` writes zip64 records for large files, data descriptors, and alignment padding in
//! extra fields) and numpy `.npz` files.
//!
//! Why not the `zip` crate: it refuses some ordinary archives that torch and Python's zipfile
//! read ("Invalid Central Directory header": whether a file opened depended on its name, which
//! shifts every offset). This reader follows APPNOTE.TXT and checks every count, size and offset
//! against the file length before it allocates or slices anything.

use std::collections::HashMap;
use std::io::Read;

use super::Loc;

/// Central directory header size without its variable fields.
const CDH_LEN: usize = 46;
/// Local file header size without its variable fields.
const LFH_LEN: usize = 30;
const EOCD_LEN: usize = 22;
const ZIP64_LOCATOR_LEN: usize = 20;
const ZIP64_EOCD_LEN: usize = 56;
/// The end record's comment is at most 65535 bytes, so the record sits in the last 64 KiB + 22.
const EOCD_SEARCH: usize = EOCD_LEN + 0xFFFF;
/// Deflate cannot expand data by more than about 1032:1; a size claim beyond that is a lie.
const MAX_DEFLATE_RATIO: u64 = 1032;

/// Where an entry's bytes are and how they are stored.
#[derive(Debug, Clone)]
struct ZipEntry {
    name: String,
    /// Offset of the (possibly compressed) data in the archive.
    start: usize,
    /// Stored, not compressed.
    stored: bool,
    /// Uncompressed size.
    size: usize,
    compressed: usize,
}

/// The entries of a zip archive, validated.
pub struct ZipIndex {
    files: Vec<ZipEntry>,
    /// Entry name → index in `files`, built once (an .npz of 100 000 arrays looks each name up
    /// several times).
    by_name: HashMap<String, usize>,
}

fn u16_at(b: &[u8], at: usize) -> Result<u16, String> {
    b.get(at..at + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .ok_or_else(|| "zip record cut short (truncated?)".to_string())
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, String> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or_else(|| "zip record cut short (truncated?)".to_string())
}

fn u64_at(b: &[u8], at: usize) -> Result<u64, String> {
    b.get(at..at + 8)
        .map(|s| u64::from_le_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]]))
        .ok_or_else(|| "zip record cut short (truncated?)".to_string())
}

fn to_usize(x: u64, what: &str) -> Result<usize, String> {
    usize::try_from(x).map_err(|_| format!("{what} {x} does not fit in memory addresses"))
}

/// Where the central directory is: (offset, size, entry count), from the end records.
fn find_directory(b: &[u8]) -> Result<(usize, usize, usize, usize), String> {
    let lowest = b.len().saturating_sub(EOCD_SEARCH);
    let eocd = (lowest..=b.len().saturating_sub(EOCD_LEN))
        .rev()
        .find(|&i| {
            b[i..].starts_with(b"PK\x05\x06")
                && u16_at(b, i + 20).is_ok_and(|c| i + EOCD_LEN + c as usize == b.len())
        })
        .ok_or("no end-of-central-directory record (truncated, or not a zip archive)")?;
    if u16_at(b, eocd + 4)? != 0 || u16_at(b, eocd + 6)? != 0 {
        return Err("a multi-disk (split) zip archive".into());
    }
    let mut count = u64::from(u16_at(b, eocd + 10)?);
    let mut size = u64::from(u32_at(b, eocd + 12)?);
    let mut offset = u64::from(u32_at(b, eocd + 16)?);
    // Where the directory must end: the zip64 records or the end record follow it.
    let mut dir_end = eocd;
    let zip64 = count == 0xFFFF || size == 0xFFFF_FFFF || offset == 0xFFFF_FFFF;
    if let Some(loc) = eocd.checked_sub(ZIP64_LOCATOR_LEN)
        && b[loc..].starts_with(b"PK\x06\x07")
    {
        let rec = to_usize(u64_at(b, loc + 8)?, "zip64 record offset")?;
        if rec.checked_add(ZIP64_EOCD_LEN).is_none_or(|e| e > loc) {
            return Err("the zip64 end record lies outside the archive".into());
        }
        if !b[rec..].starts_with(b"PK\x06\x06") {
            return Err("the zip64 locator points at no zip64 end record".into());
        }
        count = u64_at(b, rec + 32)?;
        size = u64_at(b, rec + 40)?;
        offset = u64_at(b, rec + 48)?;
        dir_end = rec;
    } else if zip64 {
        return Err("the end record says zip64 but there is no zip64 locator".into());
    }
    let (count, size, offset) = (
        to_usize(count, "entry count")?,
        to_usize(size, "directory size")?,
        to_usize(offset, "directory offset")?,
    );
    if offset.checked_add(size).is_none_or(|e| e > dir_end) {
        return Err(format!(
            "the central directory ({size} bytes at {offset}) lies outside the archive (truncated?)"
        ));
    }
    // Every entry takes at least CDH_LEN bytes: a count the directory cannot hold is a lie,
    // refused before anything is allocated for it.
    if count.checked_mul(CDH_LEN).is_none_or(|n| n > size) {
        return Err(format!(
            "the archive claims {count} entries, its directory of {size} bytes holds fewer"
        ));
    }
    Ok((offset, size, count, dir_end))
}

/// Reads the zip64 extended-information field for the values the header marked 0xFFFFFFFF.
fn zip64_extra(
    extra: &[u8],
    size: &mut u64,
    compressed: &mut u64,
    local: &mut u64,
) -> Result<(), String> {
    let mut at = 0;
    while at + 4 <= extra.len() {
        let id = u16_at(extra, at)?;
        let len = u16_at(extra, at + 2)? as usize;
        let body = extra
            .get(at + 4..at + 4 + len)
            .ok_or("an extra field runs past its header")?;
        if id == 0x0001 {
            let mut pos = 0;
            for field in [size, compressed, local] {
                if *field == 0xFFFF_FFFF {
                    *field = u64_at(body, pos).map_err(|_| "zip64 extra field too short")?;
                    pos += 8;
                }
            }
            return Ok(());
        }
        at += 4 + len;
    }
    Ok(())
}

impl ZipIndex {
    pub fn read(b: &[u8]) -> Result<Self, String> {
        let (offset, size, count, _) = find_directory(b)?;
        let dir = &b[offset..offset + size];
        let mut files = Vec::with_capacity(count);
        let mut by_name = HashMap::with_capacity(count);
        let mut at = 0;
        for i in 0..count {
            if !dir.get(at..).is_some_and(|d| d.starts_with(b"PK\x01\x02")) {
                return Err(format!(
                    "central directory entry {i} has no valid signature"
                ));
            }
            let flags = u16_at(dir, at + 8)?;
            let method = u16_at(dir, at + 10)?;
            let mut compressed = u64::from(u32_at(dir, at + 20)?);
            let mut usize_ = u64::from(u32_at(dir, at + 24)?);
            let name_len = u16_at(dir, at + 28)? as usize;
            let extra_len = u16_at(dir, at + 30)? as usize;
            let comment_len = u16_at(dir, at + 32)? as usize;
            let mut local = u64::from(u32_at(dir, at + 42)?);
            let name_at = at + CDH_LEN;
            let next = name_at + name_len + extra_len + comment_len;
            if next > dir.len() {
                return Err(format!(
                    "central directory entry {i} runs past the directory"
                ));
            }
            let name_bytes = &dir[name_at..name_at + name_len];
            let name = String::from_utf8_lossy(name_bytes).into_owned();
            let extra = &dir[name_at + name_len..name_at + name_len + extra_len];
            zip64_extra(extra, &mut usize_, &mut compressed, &mut local)?;
            at = next;

            let what = |msg: &str| format!("archive entry {name}: {msg}");
            if flags & 1 != 0 {
                return Err(what("encrypted"));
            }
            let stored = match method {
                0 => true,
                8 => false,
                m => return Err(what(&format!("compression method {m} is not supported"))),
            };
            if stored && compressed != usize_ {
                return Err(what("stored, yet its two sizes differ"));
            }
            if !stored && usize_ > compressed.saturating_mul(MAX_DEFLATE_RATIO) + 64 {
                return Err(what(&format!(
                    "claims {usize_} bytes from {compressed} compressed, more than deflate can expand"
                )));
            }
            let local = to_usize(local, "local header offset")?;
            if !b.get(local..).is_some_and(|l| l.starts_with(b"PK\x03\x04")) {
                return Err(what("no local header where the directory says"));
            }
            let l_name = u16_at(b, local + 26)? as usize;
            let l_extra = u16_at(b, local + 28)? as usize;
            if b.get(local + LFH_LEN..local + LFH_LEN + l_name) != Some(name_bytes) {
                return Err(what("the local header names a different entry"));
            }
            let start = local + LFH_LEN + l_name + l_extra;
            let compressed = to_usize(compressed, "entry size")?;
            // The data must lie between its local header and the central directory.
            if start.checked_add(compressed).is_none_or(|e| e > offset) {
                return Err(what("data runs past the end of the archive (truncated?)"));
            }
            if by_name.insert(name.clone(), files.len()).is_some() {
                return Err(what("appears twice in the archive"));
            }
            files.push(ZipEntry {
                name,
                start,
                stored,
                size: to_usize(usize_, "entry size")?,
                compressed,
            });
        }
        Ok(ZipIndex { files, by_name })
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.files.iter().map(|f| f.name.as_str())
    }

    fn find(&self, name: &str) -> Result<&ZipEntry, String> {
        self.by_name
            .get(name)
            .map(|&i| &self.files[i])
            .ok_or_else(|| format!("archive entry {name} is missing"))
    }

    /// Uncompressed size of entry `name` (0 if there is none).
    pub fn size(&self, name: &str) -> usize {
        self.find(name).map(|f| f.size).unwrap_or(0)
    }

    /// Where `len` bytes at `skip` into entry `name` are: a range of the file for stored
    /// entries, else a part of a compressed entry.
    pub fn loc(&self, name: &str, skip: usize, len: usize) -> Result<Loc, String> {
        let f = self.find(name)?;
        let end = skip
            .checked_add(len)
            .ok_or_else(|| format!("archive entry {name}: impossible size"))?;
        if end > f.size {
            return Err(format!(
                "archive entry {name} holds {} bytes, {end} needed (truncated?)",
                f.size
            ));
        }
        Ok(if f.stored {
            Loc::Range(f.start + skip, f.start + end)
        } else {
            Loc::Zip {
                entry: name.to_string(),
                skip,
                len,
            }
        })
    }

    /// The whole of entry `name`, if it is at most `cap` bytes.
    pub fn read_all(&self, bytes: &[u8], name: &str, cap: usize) -> Result<Vec<u8>, String> {
        let size = self.size(name);
        if size > cap {
            return Err(format!(
                "archive entry {name} holds {size} bytes, more than the limit of {cap}"
            ));
        }
        self.extract(bytes, name, 0, size)
    }

    /// `len` bytes at `skip` into entry `name`, decompressing if needed.
    pub fn extract(
        &self,
        bytes: &[u8],
        name: &str,
        skip: usize,
        len: usize,
    ) -> Result<Vec<u8>, String> {
        let f = self.find(name)?;
        let end = skip
            .checked_add(len)
            .filter(|&e| e <= f.size)
            .ok_or_else(|| format!("archive entry {name}: read past its end"))?;
        let raw = &bytes[f.start..f.start + f.compressed];
        let mut out = Vec::new();
        out.try_reserve_exact(len)
            .map_err(|_| format!("archive entry {name}: cannot allocate {len} bytes"))?;
        if f.stored {
            out.extend_from_slice(&raw[skip..end]);
            return Ok(out);
        }
        let mut inflate = flate2::read::DeflateDecoder::new(raw);
        std::io::copy(&mut (&mut inflate).take(skip as u64), &mut std::io::sink())
            .map_err(|e| format!("archive entry {name}: bad deflate data ({e})"))?;
        inflate
            .take(len as u64)
            .read_to_end(&mut out)
            .map_err(|e| format!("archive entry {name}: bad deflate data ({e})"))?;
        if out.len() != len {
            return Err(format!(
                "archive entry {name}: inflates to fewer bytes than its header says (truncated?)"
            ));
        }
        Ok(out)
    }
}
