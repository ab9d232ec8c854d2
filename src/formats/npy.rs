//! `.npy` and `.npz` files as entries. The `.npy` header (format versions 1–3): dtype, shape and
//! order, parsed from the bytes ahead of the data, so that the data itself can stay in a memory
//! map; an `.npz` is a zip archive of `.npy` arrays, each header read through the inflater.

use std::path::Path;

use crate::util::mapped::FileMap;
use candle_core::DType;

use super::{Entry, FileFormat, FileSource, Loc, ZipIndex, bad, stem};
use crate::error::{self, Error};

/// What a 16-bit array without a float dtype may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bits16 {
    /// `<u2` / `<i2`: bf16 bit patterns only if the user says so (`--dtype-hint bf16`).
    Integer,
    /// `<V2`: what `ml_dtypes.bfloat16` arrays are saved as.
    Void,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    pub descr: String,
    /// candle dtype of the elements, if candle has one.
    pub dtype: Option<DType>,
    /// Set for 2-byte integer and void arrays (possible bf16 bits).
    pub bits16: Option<Bits16>,
    pub fortran_order: bool,
    pub shape: Vec<usize>,
    /// Bytes from the start of the file to the first data byte.
    pub data_offset: usize,
}

impl Header {
    pub fn elem_size(&self) -> usize {
        match (self.dtype, self.bits16) {
            (Some(d), _) => d.size_in_bytes(),
            (None, Some(_)) => 2,
            _ => 0,
        }
    }

    /// Bytes of data the header declares; None when that overflows.
    pub fn data_len(&self) -> Option<usize> {
        checked_bytes(&self.shape, self.elem_size())
    }
}

const MAGIC: &[u8] = b"\x93NUMPY";

/// `elem × Π shape`, or None on overflow (a malformed header must not panic).
pub fn checked_bytes(shape: &[usize], elem: usize) -> Option<usize> {
    shape.iter().try_fold(elem, |acc, &d| acc.checked_mul(d))
}

/// Bytes of the fixed prelude: magic, version, header length (v1: u16, v2/v3: u32).
pub fn prelude_len(bytes: &[u8]) -> Result<usize, String> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err("not a .npy array (no \\x93NUMPY magic)".into());
    }
    let (len_bytes, header_len) = match bytes[6] {
        1 => (2, u16::from_le_bytes([bytes[8], bytes[9]]) as usize),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err("truncated .npy header".into());
            }
            (
                4,
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            )
        }
        v => return Err(format!("unsupported .npy format version {v}")),
    };
    Ok(8 + len_bytes + header_len)
}

/// Parses the header at the start of `bytes` (which must hold at least [`prelude_len`] bytes).
pub fn parse_header(bytes: &[u8]) -> Result<Header, String> {
    let total = prelude_len(bytes)?;
    let start = if bytes[6] == 1 { 10 } else { 12 };
    let text = bytes
        .get(start..total)
        .ok_or_else(|| "truncated .npy header".to_string())?;
    let text = std::str::from_utf8(text).map_err(|_| "the .npy header is not text".to_string())?;
    let descr = field(text, "descr")
        .and_then(quoted)
        .ok_or_else(|| format!("no dtype in the .npy header `{}`", text.trim()))?;
    let fortran_order = field(text, "fortran_order")
        .map(|v| v.trim_start().starts_with("True"))
        .unwrap_or(false);
    let shape = field(text, "shape")
        .and_then(parse_shape)
        .ok_or_else(|| format!("no shape in the .npy header `{}`", text.trim()))?;
    let (dtype, bits16) = parse_descr(&descr)?;
    Ok(Header {
        descr,
        dtype,
        bits16,
        fortran_order,
        shape,
        data_offset: total,
    })
}

/// The text after `'key':` in a Python dict literal.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let pat_single = format!("'{key}'");
    let pat_double = format!("\"{key}\"");
    let at = text.find(&pat_single).or_else(|| text.find(&pat_double))?;
    let rest = &text[at + key.len() + 2..];
    let rest = rest.trim_start().strip_prefix(':')?;
    Some(rest.trim_start())
}

fn quoted(v: &str) -> Option<String> {
    let q = v.chars().next()?;
    if q != '\'' && q != '"' {
        return None;
    }
    let end = v[1..].find(q)?;
    Some(v[1..1 + end].to_string())
}

fn parse_shape(v: &str) -> Option<Vec<usize>> {
    let inner = v.strip_prefix('(')?;
    let end = inner.find(')')?;
    inner[..end]
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('L').parse().ok())
        .collect()
}

fn parse_descr(descr: &str) -> Result<(Option<DType>, Option<Bits16>), String> {
    let (order, code) = match descr.chars().next() {
        Some(c @ ('<' | '>' | '|' | '=')) => (c, &descr[1..]),
        _ => ('=', descr),
    };
    if order == '>' && !matches!(code, "u1" | "i1" | "b1") {
        return Err(format!("big-endian arrays (`{descr}`) are not supported"));
    }
    Ok(match code {
        "f8" => (Some(DType::F64), None),
        "f4" => (Some(DType::F32), None),
        "f2" => (Some(DType::F16), None),
        "i8" => (Some(DType::I64), None),
        "i4" => (Some(DType::I32), None),
        "u4" => (Some(DType::U32), None),
        "u1" | "b1" => (Some(DType::U8), None),
        "i2" | "u2" => (None, Some(Bits16::Integer)),
        "V2" => (None, Some(Bits16::Void)),
        other => {
            return Err(format!(
                "unsupported numpy dtype `{other}` (expected f8, f4, f2, i8, i4; bf16 as float32 or 16-bit bits, see docs/file-formats.md)"
            ));
        }
    })
}

impl FileSource {
    pub(super) fn npy(path: &Path, map: FileMap) -> error::Result<Self> {
        let h = parse_header(&map).map_err(|e| bad(path, e))?;
        let end = h
            .data_len()
            .and_then(|n| n.checked_add(h.data_offset))
            .ok_or_else(|| bad(path, format!("impossible shape {:?}", h.shape)))?;
        if end > map.len() {
            return Err(bad(
                path,
                format!(
                    "truncated: the array needs {end} bytes, the file has {}",
                    map.len()
                ),
            ));
        }
        let entry = Entry {
            raw: stem(path),
            dtype: h.dtype,
            bits16: h.bits16,
            shape: h.shape.clone(),
            fortran: h.fortran_order && h.shape.len() > 1,
            loc: Loc::Range(h.data_offset, end),
            seq: None,
        };
        let mut src = Self::empty(path, FileFormat::Npy, map);
        src.entries.push(entry);
        Ok(src)
    }

    pub(super) fn npz(path: &Path, map: FileMap, zip: ZipIndex) -> error::Result<Self> {
        let mut entries = Vec::new();
        for name in zip.names() {
            let Some(stem) = name.strip_suffix(".npy") else {
                continue;
            };
            // The header: at most a few KiB at the start of the entry.
            let head_len = zip.size(name).min(64 << 10);
            let head = zip
                .extract(&map, name, 0, head_len)
                .map_err(|e| Error::tensor(path, stem, e))?;
            let h = parse_header(&head).map_err(|e| Error::tensor(path, stem, e))?;
            let len = h.data_len().ok_or_else(|| {
                Error::tensor(path, stem, format!("impossible shape {:?}", h.shape))
            })?;
            let loc = zip
                .loc(name, h.data_offset, len)
                .map_err(|e| Error::tensor(path, stem, e))?;
            entries.push(Entry {
                raw: stem.to_string(),
                dtype: h.dtype,
                bits16: h.bits16,
                shape: h.shape.clone(),
                fortran: h.fortran_order && h.shape.len() > 1,
                loc,
                seq: None,
            });
        }
        if entries.is_empty() {
            return Err(bad(
                path,
                "a zip archive holding neither data.pkl (torch.save) nor .npy arrays (np.savez)",
            ));
        }
        let mut src = Self::empty(path, FileFormat::Npz, map);
        src.entries = entries;
        src.zip = Some(zip);
        Ok(src)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(dict: &str) -> Vec<u8> {
        let mut h = MAGIC.to_vec();
        h.extend([1, 0]);
        let mut text = dict.to_string();
        while !(10 + text.len() + 1).is_multiple_of(64) {
            text.push(' ');
        }
        text.push('\n');
        h.extend((text.len() as u16).to_le_bytes());
        h.extend(text.as_bytes());
        h
    }

    #[test]
    fn parses_v1() {
        let h = header("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3, 4), }");
        let p = parse_header(&h).expect("parses");
        assert_eq!(p.dtype, Some(DType::F32));
        assert_eq!(p.shape, vec![1, 3, 4]);
        assert!(p.data_offset.is_multiple_of(64));
        assert_eq!(p.data_offset, h.len());
        assert!(!p.fortran_order);
    }

    #[test]
    fn scalar_and_bits() {
        let h = header("{'descr': '<u2', 'fortran_order': True, 'shape': (), }");
        let p = parse_header(&h).expect("parses");
        assert_eq!(p.bits16, Some(Bits16::Integer));
        assert!(p.shape.is_empty());
        assert!(p.fortran_order);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_header(b"hello world, not npy").is_err());
        let h = header("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }");
        assert!(parse_header(&h).is_err());
    }
}
