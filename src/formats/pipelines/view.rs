//! A view of a stored tensor: one layer cut out of layers concatenated along the hidden
//! dimension (`[1, T, k·H]` → `[1, T, H]`) or stacked on an axis (`[T, k, H]` → `[T, H]`), one
//! sample of a batch, and the real (unpadded) positions. The view's shape is known when the file
//! is opened; the cut is made when the tensor is read.

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
