//! Where a model's weights come from: a safetensors checkpoint, or generated from a seed
//! (`--random-weights`). The forward pass asks both the same way, tensor by tensor.

use candle_core::Tensor;

use crate::capture::fingerprint::weights_digest;
use crate::error::Result;
use crate::fp8::Fp8Weight;
use crate::weights::checkpoint::{Checkpoint, KeyLayout, TensorRequest};
use crate::weights::random_weights::RandomWeights;

pub enum WeightSource {
    Checkpoint(Checkpoint),
    Random(RandomWeights),
}

impl WeightSource {
    pub fn layout(&self) -> &KeyLayout {
        match self {
            WeightSource::Checkpoint(c) => c.layout(),
            WeightSource::Random(r) => r.layout(),
        }
    }

    /// What the weights are, for fingerprints: the sampled digest of a checkpoint, or the
    /// generator and seed of random weights (`random-weights-v1:seed=7`).
    pub fn digest(&self) -> Result<String> {
        match self {
            WeightSource::Checkpoint(c) => weights_digest(c),
            WeightSource::Random(r) => Ok(format!("random-weights-v1:seed={}", r.seed())),
        }
    }

    /// Elements of every tensor (of a checkpoint: every tensor in its files, vision tower
    /// included), for memory estimates.
    pub fn element_count(&self) -> u64 {
        let count = |shape: &[usize]| shape.iter().product::<usize>() as u64;
        match self {
            WeightSource::Checkpoint(c) => c
                .raw_tensors()
                .filter_map(|(_, raw)| raw.ok())
                .map(|(info, _)| count(&info.shape))
                .sum(),
            WeightSource::Random(r) => r.tensors().values().map(|s| count(s)).sum(),
        }
    }

    /// The stored weights holding NaN or ±Inf (generated weights are finite by construction).
    pub fn non_finite(&self) -> &[crate::weights::non_finite::NonFiniteTensor] {
        match self {
            WeightSource::Checkpoint(c) => c.non_finite(),
            WeightSource::Random(_) => &[],
        }
    }

    /// Whether any weight is stored in an FP8 format (generated weights are bf16).
    pub fn holds_fp8(&self) -> bool {
        match self {
            WeightSource::Checkpoint(c) => c
                .raw_tensors()
                .filter_map(|(_, raw)| raw.ok())
                .any(|(info, _)| crate::fp8::Fp8Format::of(info.dtype).is_some()),
            WeightSource::Random(_) => false,
        }
    }

    pub fn contains(&self, name: &str) -> bool {
        match self {
            WeightSource::Checkpoint(c) => c.contains(name),
            WeightSource::Random(r) => r.contains(name),
        }
    }

    /// The tensor `want` names, with exactly its shape, in its dtype on its device.
    pub fn get(&self, want: &TensorRequest) -> Result<Tensor> {
        match self {
            WeightSource::Checkpoint(c) => c.get(want),
            WeightSource::Random(r) => r.get(want),
        }
    }

    /// Whether the weights are generated (`--random-weights`): bf16 values, like a checkpoint's.
    pub fn is_generated(&self) -> bool {
        matches!(self, WeightSource::Random(_))
    }

    /// The stored little-endian bytes of `name` (exactly `shape`) when it is stored in bf16 in a
    /// checkpoint; `None` for another stored dtype and for generated weights.
    pub fn stored_bf16(&self, name: &str, shape: &[usize]) -> Result<Option<&[u8]>> {
        match self {
            WeightSource::Checkpoint(c) => c.stored_bf16(name, shape),
            WeightSource::Random(_) => Ok(None),
        }
    }

    /// Whether `name` is stored in FP8 (generated weights never are).
    pub fn stored_fp8(&self, name: &str) -> bool {
        match self {
            WeightSource::Checkpoint(c) => c.stored_fp8(name).is_some(),
            WeightSource::Random(_) => false,
        }
    }

    /// The quantised `[rows, cols]` weight `name` as the served W8A8 GEMM reads it; `None` when
    /// it is not stored in FP8.
    pub fn fp8_weight(&self, name: &str, rows: usize, cols: usize) -> Result<Option<Fp8Weight>> {
        match self {
            WeightSource::Checkpoint(c) => c.fp8_weight(name, rows, cols),
            WeightSource::Random(_) => Ok(None),
        }
    }

    /// Rows `rows` (along the first dimension) of the tensor `want` names.
    pub fn get_rows(&self, want: &TensorRequest, rows: &[usize]) -> Result<Tensor> {
        match self {
            WeightSource::Checkpoint(c) => c.get_rows(want, rows),
            WeightSource::Random(r) => r.get_rows(want, rows),
        }
    }
}
