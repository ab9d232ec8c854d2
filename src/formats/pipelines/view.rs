//! A view of a stored tensor: one layer cut out of layers concatenated along the hidden
//! dimension (`[1, T, k·H]` → `[1, T, H]`) or stacked on an axis (`[T, k, H]` → `[T, H]`), one
//! sample of a batch, and the real (unpadded) positions. The view's shape is known when the file
//! is opened; the cut is made when the tensor is read.

use std::mem::MaybeUninit;

use candle_core::{Device, Tensor};

use crate::error::Result;

/// One step of a view, applied in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `len` entries of `axis` from `start`.
    Narrow {
        axis: usize,
        start: usize,
        len: usize,
    },
    /// Drops `axis` (of size 1).
    Squeeze(usize),
    /// The entries of `axis` at these indices (the real positions).
    Select { axis: usize, index: Vec<u32> },
}

/// A view as a box of its stored tensor: (start, length) per stored axis, and the stored axis
/// of each of the view's axes.
pub type BoxCut = (Vec<(usize, usize)>, Vec<usize>);

/// What a view does to a stored tensor, and the shape that comes out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub ops: Vec<Op>,
    pub shape: Vec<usize>,
}

impl View {
    /// The view of `ops` on a tensor stored with `stored` shape, or why the ops do not fit it.
    pub fn new(stored: &[usize], ops: Vec<Op>) -> std::result::Result<View, String> {
        let mut shape = stored.to_vec();
        for op in &ops {
            match op {
                Op::Narrow { axis, start, len } => {
                    let n = *shape.get(*axis).ok_or("axis out of range")?;
                    if start.checked_add(*len).is_none_or(|end| end > n) {
                        return Err(format!(
                            "entries {start}..{} of axis {axis} of {stored:?}",
                            start + len
                        ));
                    }
                    shape[*axis] = *len;
                }
                Op::Squeeze(axis) => {
                    if shape.get(*axis) != Some(&1) {
                        return Err(format!("axis {axis} of {shape:?} is not of size 1"));
                    }
                    shape.remove(*axis);
                }
                Op::Select { axis, index } => {
                    let n = *shape.get(*axis).ok_or("axis out of range")?;
                    if index.iter().any(|&i| i as usize >= n) {
                        return Err(format!("a position past {n} on axis {axis}"));
                    }
                    shape[*axis] = index.len();
                }
            }
        }
        Ok(View { ops, shape })
    }

    /// The view as a box of the stored tensor — (start, length) per stored axis — and which
    /// stored axis each of the view's axes is, when its ops only narrow and squeeze (a layer
    /// cut from a concatenation, a batch row); None when it selects positions.
    pub fn as_box(&self, stored: &[usize]) -> Option<BoxCut> {
        let mut bx: Vec<(usize, usize)> = stored.iter().map(|&n| (0, n)).collect();
        let mut axes: Vec<usize> = (0..stored.len()).collect();
        for op in &self.ops {
            match op {
                Op::Narrow { axis, start, len } => {
                    let s = *axes.get(*axis)?;
                    bx[s] = (bx[s].0 + start, *len);
                }
                Op::Squeeze(axis) => {
                    if *axis >= axes.len() {
                        return None;
                    }
                    axes.remove(*axis);
                }
                Op::Select { .. } => return None,
            }
        }
        Some((bx, axes))
    }

    /// The view as its ops up to the first selection of positions (a box, such as a batch row)
    /// and the ops from there on, which apply to what the first part cuts.
    pub fn split_at_select(&self, stored: &[usize]) -> Option<(View, View)> {
        let at = self
            .ops
            .iter()
            .position(|op| matches!(op, Op::Select { .. }))
            .unwrap_or(self.ops.len());
        let boxed = View::new(stored, self.ops[..at].to_vec()).ok()?;
        let rest = View {
            ops: self.ops[at..].to_vec(),
            shape: self.shape.clone(),
        };
        Some((boxed, rest))
    }

    /// The view's first `n` token rows (all of them when it has fewer): the token axis is 0
    /// of a `[T, H]` view, 1 of a `[1, T, …]` one. Only those rows are copied.
    pub fn apply_head(&self, t: Tensor, n: usize) -> Result<Tensor> {
        let t = self.cut(t)?;
        let axis = usize::from(t.rank() >= 3);
        let rows = t.dim(axis)?;
        Ok(t.narrow(axis, 0, rows.min(n))?.contiguous()?)
    }

    /// Applies the view to the stored tensor.
    pub fn apply(&self, t: Tensor) -> Result<Tensor> {
        Ok(self.cut(t)?.contiguous()?)
    }

    /// The view's ops on `t`, without making the result contiguous.
    fn cut(&self, mut t: Tensor) -> Result<Tensor> {
        for op in &self.ops {
            t = match op {
                Op::Narrow { axis, start, len } => t.narrow(*axis, *start, *len)?,
                Op::Squeeze(axis) => t.squeeze(*axis)?,
                Op::Select { axis, index } => {
                    let idx = Tensor::from_vec(index.clone(), index.len(), &Device::Cpu)?;
                    // index_select wants one buffer; a narrowed view is not.
                    t.contiguous()?.index_select(&idx, *axis)?
                }
            };
        }
        Ok(t)
    }
}

/// Copies the box `bx` ((start, length) per axis, inside `shape`) of a C-order array of
/// `elem`-byte elements held in `src` (exactly `shape`'s bytes) into `out` (exactly the box's
/// bytes, which need not be initialised): contiguous runs one after the other, so each byte of
/// the box is read once and written once. Returns the bytes written: all of `out`.
pub fn copy_box(
    src: &[u8],
    shape: &[usize],
    bx: &[(usize, usize)],
    elem: usize,
    out: &mut [MaybeUninit<u8>],
) -> usize {
    if out.is_empty() || shape.is_empty() {
        return 0;
    }
    let rank = shape.len();
    let mut stride = vec![elem; rank];
    for i in (0..rank - 1).rev() {
        stride[i] = stride[i + 1] * shape[i + 1];
    }
    // The innermost axis the box does not cover whole: a run is its length times its stride.
    let k = (0..rank)
        .rev()
        .find(|&i| bx[i] != (0, shape[i]))
        .unwrap_or(0);
    let run = bx[k].1 * stride[k];
    let mut idx = vec![0usize; k];
    let mut written = 0;
    for chunk in out.chunks_exact_mut(run) {
        let off = bx[k].0 * stride[k]
            + (0..k)
                .map(|i| (bx[i].0 + idx[i]) * stride[i])
                .sum::<usize>();
        let from = &src[off..off + run];
        // SAFETY: `chunk` holds exactly `run` bytes, `from` too (a checked slice), and the
        // two cannot overlap (`out` is a unique borrow).
        unsafe {
            std::ptr::copy_nonoverlapping(from.as_ptr(), chunk.as_mut_ptr().cast::<u8>(), run);
        }
        written += run;
        // The next run: the outer index counts up like an odometer.
        for i in (0..k).rev() {
            idx[i] += 1;
            if idx[i] < bx[i].1 {
                break;
            }
            idx[i] = 0;
        }
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_out_of_concatenation() -> Result<()> {
        // [1, T=3, 2·H] with H = 2: layer 1 is columns 2..4.
        let t = Tensor::arange(0f32, 12f32, &Device::Cpu)?.reshape((1, 3, 4))?;
        let v = View::new(
            &[1, 3, 4],
            vec![Op::Narrow {
                axis: 2,
                start: 2,
                len: 2,
            }],
        )
        .map_err(crate::error::Error::Internal)?;
        assert_eq!(v.shape, [1, 3, 2]);
        let got: Vec<f32> = v.apply(t)?.flatten_all()?.to_vec1()?;
        assert_eq!(got, [2., 3., 6., 7., 10., 11.]);
        Ok(())
    }

    #[test]
    fn stacked_layer_and_positions() -> Result<()> {
        // [T=3, k=2, H=2]: entry 1 of axis 1, positions 0 and 2.
        let t = Tensor::arange(0f32, 12f32, &Device::Cpu)?.reshape((3, 2, 2))?;
        let ops = vec![
            Op::Narrow {
                axis: 1,
                start: 1,
                len: 1,
            },
            Op::Squeeze(1),
            Op::Select {
                axis: 0,
                index: vec![0, 2],
            },
        ];
        let v = View::new(&[3, 2, 2], ops).map_err(crate::error::Error::Internal)?;
        assert_eq!(v.shape, [2, 2]);
        let got: Vec<f32> = v.apply(t)?.flatten_all()?.to_vec1()?;
        assert_eq!(got, [2., 3., 10., 11.]);
        Ok(())
    }

    /// Boxes: layers of a concatenation, a stacked layer squeezed, a batch row.
    fn box_cases() -> Vec<Vec<Op>> {
        let narrow = |axis, start, len| Op::Narrow { axis, start, len };
        vec![
            vec![narrow(2, 4, 3)],
            vec![narrow(1, 2, 1), Op::Squeeze(1)],
            vec![narrow(0, 1, 1), narrow(2, 0, 10)],
            vec![narrow(0, 2, 1), Op::Squeeze(0), narrow(1, 8, 2)],
        ]
    }

    /// The tensor `v` sees in `bytes` (f32s of shape `[3, 4, 10]`), copied as a box.
    fn copied_box(bytes: &[u8], v: &View) -> Result<Tensor> {
        let (bx, _) = v
            .as_box(&[3, 4, 10])
            .ok_or_else(|| crate::error::Error::Internal(format!("{:?} is a box", v.ops)))?;
        let n = bx.iter().map(|b| b.1).product::<usize>() * 4;
        let mut got: Vec<u8> = Vec::with_capacity(n);
        assert_eq!(
            copy_box(
                bytes,
                &[3, 4, 10],
                &bx,
                4,
                &mut got.spare_capacity_mut()[..n]
            ),
            n
        );
        // SAFETY: copy_box wrote all n bytes (checked above).
        unsafe { got.set_len(n) };
        Ok(Tensor::from_raw_buffer(
            &got,
            candle_core::DType::F32,
            &v.shape,
            &Device::Cpu,
        )?)
    }

    /// A box copied from the bytes is the view candle cuts; a selection is no box.
    #[test]
    fn box_copy_is_the_view() -> Result<()> {
        let t = Tensor::randn(0f32, 1.0, (3, 4, 10), &Device::Cpu)?;
        let bytes: Vec<u8> = t
            .flatten_all()?
            .to_vec1::<f32>()?
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        for ops in box_cases() {
            let v = View::new(&[3, 4, 10], ops.clone()).map_err(crate::error::Error::Internal)?;
            let got = copied_box(&bytes, &v)?;
            let want = v.apply(t.clone())?;
            assert_eq!(
                got.flatten_all()?.to_vec1::<f32>()?,
                want.flatten_all()?.to_vec1::<f32>()?,
                "{ops:?}"
            );
        }
        let select = View::new(
            &[3, 4, 10],
            vec![Op::Select {
                axis: 1,
                index: vec![0, 2],
            }],
        )
        .map_err(crate::error::Error::Internal)?;
        assert!(select.as_box(&[3, 4, 10]).is_none());
        Ok(())
    }

    #[test]
    fn refuses_what_does_not_fit() {
        let narrow = |start, len| Op::Narrow {
            axis: 2,
            start,
            len,
        };
        assert!(View::new(&[1, 3, 4], vec![narrow(3, 2)]).is_err());
        assert!(View::new(&[1, 3, 4], vec![Op::Squeeze(1)]).is_err());
        assert!(
            View::new(
                &[1, 3, 4],
                vec![Op::Select {
                    axis: 1,
                    index: vec![3]
                }]
            )
            .is_err()
        );
    }
}
