//! A capture's token rows as the file stores them — little-endian bytes in a file's map — read
//! by the statistics without a copy into a tensor. The bytes are viewed as their values in
//! place; a row that is not aligned for its type (safetensors data need not be) is no view, and
//! the caller reads the tensor as usual.

use candle_core::DType;
use half::{bf16, f16};

use super::kernel::Row;

/// Token rows of one `[tokens, channels]` capture: row `t` is `row_bytes` bytes at
/// `first + t · stride` of `bytes`, holding `dtype` values.
pub struct StoredRows<'a> {
    pub bytes: &'a [u8],
    pub dtype: DType,
    pub rows: usize,
    pub first: usize,
    pub stride: usize,
    pub row_bytes: usize,
}

impl<'a> StoredRows<'a> {
    /// Channels per row.
    pub fn cols(&self) -> usize {
        self.row_bytes / self.dtype.size_in_bytes()
    }

    /// Row `t` as its values; None when its bytes are not aligned for them (or on a big-endian
    /// machine, where the stored bytes are not the values).
    pub(super) fn row(&self, t: usize) -> Option<Row<'a>> {
        let at = self.first + t * self.stride;
        let bytes = self.bytes.get(at..at + self.row_bytes)?;
        if cfg!(target_endian = "big") {
            return None;
        }
        Some(match self.dtype {
            DType::BF16 => Row::BF16(values::<bf16>(bytes)?),
            DType::F16 => Row::F16(values::<f16>(bytes)?),
            DType::F32 => Row::F32(values::<f32>(bytes)?),
            DType::F64 => Row::F64(values::<f64>(bytes)?),
            _ => return None,
        })
    }

    /// Whether every row can be viewed in place.
    pub(super) fn viewable(&self) -> bool {
        (0..self.rows).all(|t| self.row(t).is_some())
    }
}

/// Plain number types: every byte pattern is one of their values.
trait Plain: Copy {}
impl Plain for bf16 {}
impl Plain for f16 {}
impl Plain for f32 {}
impl Plain for f64 {}

/// `bytes` as `T` values, when aligned for `T` and a whole number of them.
fn values<T: Plain>(bytes: &[u8]) -> Option<&[T]> {
    // SAFETY: T is a plain number type (any bytes are a value of it); `align_to` puts in `mid`
    // only what is aligned for T, and the view is used only when nothing is left over.
    let (head, mid, tail) = unsafe { bytes.align_to::<T>() };
    (head.is_empty() && tail.is_empty()).then_some(mid)
}
