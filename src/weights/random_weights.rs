//! `--random-weights SEED`: a checkpoint that exists only as a config.json. Every tensor a real
//! checkpoint of that config would hold is generated, when the forward pass asks for it, from SEED
//! and the tensor's name with the golden weight recipe (docs/golden.md, golden/make.py),
//! rounded to bf16 like a stored checkpoint, and never kept.
//!
//! The generator is counter-based (element `i` of tensor `name` depends only on SEED, `name` and
//! `i`), so any row range of any tensor can be produced on its own, in parallel, and the same
//! SEED always gives the same values whatever order the forward reads them in. The values are
//! drawn from the recipe's distributions, not from torch's generator: a random-weights model is
//! not bit-identical to the golden checkpoints, only alike in names, shapes and statistics.

use std::collections::BTreeMap;

use candle_core::{DType, Device, Tensor};
use half::{bf16, f16};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::weights::checkpoint::{KeyLayout, TensorRequest};
use crate::weights::config::ModelConfig;
pub use crate::weights::tensor_list::{checkpoint_tensors, layout_for};

/// The distribution of one tensor's elements (docs/golden.md, "A weight recipe").
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Recipe {
    /// N(0, variance).
    Normal { variance: f64 },
    /// U(lo, hi).
    Uniform { lo: f64, hi: f64 },
    /// log U(lo, hi) (`A_log`).
    LogUniform { lo: f64, hi: f64 },
}

/// The recipe for a tensor of the text model, by name and shape; `None` when no rule matches.
pub fn recipe_for(name: &str, shape: &[usize], hidden: usize) -> Option<Recipe> {
    let leaf = name.rsplit('.').next().unwrap_or(name);
    let fan_in = |s: &[usize]| s.get(1..).map(|r| r.iter().product::<usize>());
    Some(if name.ends_with("embed_tokens.weight") {
        Recipe::Normal { variance: 1.0 }
    } else if name.ends_with(".mlp.gate.weight") {
        // The MoE router, at gain 2 so that routing is not a near-tie everywhere.
        Recipe::Normal {
            variance: 4.0 / hidden as f64,
        }
    } else if leaf == "A_log" {
        Recipe::LogUniform { lo: 0.05, hi: 2.0 }
    } else if leaf == "dt_bias" {
        Recipe::Uniform { lo: -3.0, hi: 0.5 }
    } else if name.ends_with("conv1d.weight") {
        Recipe::Normal { variance: 0.25 }
    } else if name.ends_with("linear_attn.norm.weight") {
        // The gated RMSNorm multiplies by `w` itself.
        Recipe::Uniform { lo: 0.5, hi: 1.5 }
    } else if name.ends_with("norm.weight") {
        // Zero-centred RMSNorms (input/post-attention/final/q_norm/k_norm) use `1 + w`.
        Recipe::Uniform { lo: -0.5, hi: 0.5 }
    } else if leaf == "weight" && shape.len() == 2 {
        Recipe::Normal {
            variance: 1.0 / fan_in(shape)? as f64,
        }
    } else {
        return None;
    })
}

/// A generated checkpoint: names and shapes of a real one, values from the recipe and SEED.
pub struct RandomWeights {
    seed: u64,
    hidden: usize,
    tensors: BTreeMap<String, Vec<usize>>,
    layout: KeyLayout,
}

impl RandomWeights {
    /// Fails naming the first tensor the recipe has no rule for (e.g. attention biases).
    pub fn new(cfg: &ModelConfig, seed: u64) -> Result<Self> {
        let layout = layout_for(cfg);
        let tensors = checkpoint_tensors(cfg, &layout);
        if let Some((name, _)) = tensors
            .iter()
            .find(|(n, s)| recipe_for(n, s, cfg.hidden_size).is_none())
        {
            return Err(Error::argument(
                "--random-weights",
                format!(
                    "the golden weight recipe has no rule for `{name}` \
                     (docs/golden.md); this config cannot be generated"
                ),
            ));
        }
        Ok(RandomWeights {
            seed,
            hidden: cfg.hidden_size,
            tensors,
            layout,
        })
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn layout(&self) -> &KeyLayout {
        &self.layout
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// Names and shapes, in name order.
    pub fn tensors(&self) -> &BTreeMap<String, Vec<usize>> {
        &self.tensors
    }

    /// `name`, which must have exactly `shape`, generated in `dtype` on `device`.
    pub fn get(&self, want: &TensorRequest) -> Result<Tensor> {
        let (name, shape, dtype, device) = (want.name, want.shape, want.dtype, want.device);
        let stream = self.generator(name, shape)?;
        make_tensor(
            &stream,
            Span::All(shape.iter().product()),
            dtype,
            shape,
            device,
        )
    }

    /// Rows `rows` (indices along the first dimension) of `name`, which must have exactly
    /// `shape`, generated in `dtype` on `device`.
    pub fn get_rows(&self, want: &TensorRequest, rows: &[usize]) -> Result<Tensor> {
        let (name, shape, dtype, device) = (want.name, want.shape, want.dtype, want.device);
        let stream = self.generator(name, shape)?;
        let n_rows = shape.first().copied().unwrap_or(1);
        if let Some(r) = rows.iter().find(|&&r| r >= n_rows) {
            return Err(Error::tensor(
                self.label(),
                name,
                format!("row {r} of {n_rows} requested"),
            ));
        }
        let row_len: usize = shape.iter().skip(1).product();
        let mut out_shape = shape.to_vec();
        if let Some(first) = out_shape.first_mut() {
            *first = rows.len();
        }
        make_tensor(
            &stream,
            Span::Rows(rows, row_len),
            dtype,
            &out_shape,
            device,
        )
    }

    /// Stands in for a file name in messages.
    fn label(&self) -> String {
        format!("<random weights, seed {}>", self.seed)
    }

    fn generator(&self, name: &str, shape: &[usize]) -> Result<Generator> {
        let Some(have) = self.tensors.get(name) else {
            return Err(Error::tensor(
                self.label(),
                name,
                "not a tensor of this config's checkpoint",
            ));
        };
        if have.as_slice() != shape {
            return Err(Error::tensor(
                self.label(),
                name,
                format!("shape {have:?}, expected {shape:?}"),
            ));
        }
        let recipe = recipe_for(name, shape, self.hidden).ok_or_else(|| {
            Error::tensor(
                self.label(),
                name,
                "the golden weight recipe has no rule for it",
            )
        })?;
        Ok(Generator::new(self.seed, name, recipe))
    }
}

/// Which elements of a tensor to generate.
#[derive(Clone, Copy)]
enum Span<'a> {
    /// The first `n` (the whole tensor).
    All(usize),
    /// These rows, each `row_len` elements long.
    Rows(&'a [usize], usize),
}

/// The elements `span` of `stream`'s tensor as a tensor of `shape`, generated straight into `dtype`.
fn make_tensor(
    stream: &Generator,
    span: Span,
    dtype: DType,
    shape: &[usize],
    device: &Device,
) -> Result<Tensor> {
    Ok(match dtype {
        DType::F64 => Tensor::from_vec(stream.values(span, |x| x), shape, device)?,
        DType::F32 => Tensor::from_vec(stream.values(span, |x| x as f32), shape, device)?,
        DType::BF16 => Tensor::from_vec(stream.values(span, bf16::from_f64), shape, device)?,
        DType::F16 => Tensor::from_vec(stream.values(span, f16::from_f64), shape, device)?,
        other => {
            return Err(Error::argument(
                "--random-weights",
                format!("cannot generate weights in {other:?}"),
            ));
        }
    })
}

/// The counter-based generator of one tensor.
struct Generator {
    key: u64,
    recipe: Recipe,
}

const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function (Steele, Lea & Flood 2014).
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// 64 random bits for counter `i` of the stream `key`.
fn bits(key: u64, i: u64) -> u64 {
    mix(key.wrapping_add(i.wrapping_add(1).wrapping_mul(GAMMA)))
}

/// A uniform in (0, 1) from 32 bits (never 0, so its log is finite).
fn unit(b: u32) -> f64 {
    (f64::from(b) + 0.5) / 4_294_967_296.0
}

impl Generator {
    fn new(seed: u64, name: &str, recipe: Recipe) -> Self {
        // FNV-1a of the name, mixed with the seed: one independent stream per tensor.
        let mut h: u64 = 0xCBF2_9CE4_8422_2325;
        for b in name.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3);
        }
        Generator {
            key: mix(h ^ mix(seed)),
            recipe,
        }
    }

    /// Elements `first..first + out.len()` of the tensor (flat, row-major), bf16-rounded, then
    /// converted by `conv`. Normal elements come in Box–Muller pairs: `2j` is the cosine and
    /// `2j + 1` the sine of counter `j`.
    fn fill_into<T>(&self, first: u64, out: &mut [T], conv: &impl Fn(f64) -> T) {
        let round = |x: f64| conv(bf16::from_f64(x).to_f64());
        match self.recipe {
            Recipe::Normal { variance } => {
                let sd = variance.sqrt();
                let mut pair = (u64::MAX, 0.0, 0.0);
                for (k, o) in out.iter_mut().enumerate() {
                    let i = first + k as u64;
                    if pair.0 != i / 2 {
                        let b = bits(self.key, i / 2);
                        let r = (-2.0 * unit((b >> 32) as u32).ln()).sqrt() * sd;
                        let (s, c) = (std::f64::consts::TAU * unit(b as u32)).sin_cos();
                        pair = (i / 2, r * c, r * s);
                    }
                    *o = round(if i.is_multiple_of(2) { pair.1 } else { pair.2 });
                }
            }
            Recipe::Uniform { lo, hi } => {
                for (k, o) in out.iter_mut().enumerate() {
                    let u = unit(bits(self.key, first + k as u64) as u32);
                    *o = round(lo + (hi - lo) * u);
                }
            }
            Recipe::LogUniform { lo, hi } => {
                for (k, o) in out.iter_mut().enumerate() {
                    let u = unit(bits(self.key, first + k as u64) as u32);
                    *o = round((lo + (hi - lo) * u).ln());
                }
            }
        }
    }

    /// The elements `span`, converted by `conv`, generated in parallel.
    fn values<T: Copy + Default + Send>(
        &self,
        span: Span,
        conv: impl Fn(f64) -> T + Sync,
    ) -> Vec<T> {
        const CHUNK: usize = 1 << 16;
        match span {
            Span::All(n) => {
                let mut out = vec![T::default(); n];
                out.par_chunks_mut(CHUNK)
                    .enumerate()
                    .for_each(|(c, chunk)| {
                        self.fill_into((c * CHUNK) as u64, chunk, &conv);
                    });
                out
            }
            Span::Rows(rows, row_len) => {
                let mut out = vec![T::default(); rows.len() * row_len];
                if row_len > 0 {
                    out.par_chunks_mut(row_len)
                        .zip(rows.par_iter())
                        .with_min_len(CHUNK.div_ceil(row_len))
                        .for_each(|(chunk, &r)| {
                            self.fill_into((r * row_len) as u64, chunk, &conv);
                        });
                }
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(v: &[f64]) -> (f64, f64) {
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
        (mean, var)
    }

    #[test]
    fn normal_elements_follow_the_recipe_and_are_bf16_values() {
        let variance = 1.0 / 640.0;
        let g = Generator::new(
            7,
            "model.layers.0.mlp.up_proj.weight",
            Recipe::Normal { variance },
        );
        let n = 200_000;
        let v = g.values(Span::All(n), |x| x);
        assert!(
            v.iter()
                .all(|&x| bf16::from_f64(x).to_f64() == x && x.is_finite())
        );
        let (mean, var) = stats(&v);
        // Sampling error: sd(mean) = sqrt(var / n), sd(var) ≈ var·sqrt(2 / n); 6 sd bounds, plus
        // bf16 rounding (relative 2^-9 per element, mean-zero).
        let sd_mean = (variance / n as f64).sqrt();
        assert!(mean.abs() < 6.0 * sd_mean, "mean {mean}");
        let sd_var = variance * (2.0 / n as f64).sqrt();
        assert!(
            (var - variance).abs() < 6.0 * sd_var + variance * 2f64.powi(-8),
            "var {var}"
        );
    }

    #[test]
    fn uniform_and_log_uniform_stay_in_range() {
        let u = Generator::new(3, "x.dt_bias", Recipe::Uniform { lo: -3.0, hi: 0.5 })
            .values(Span::All(10_000), |x| x);
        assert!(u.iter().all(|&x| (-3.0..=0.5).contains(&x)));
        let (mean, _) = stats(&u);
        assert!((mean - (-1.25)).abs() < 0.05, "mean {mean}");
        let a = Generator::new(3, "x.A_log", Recipe::LogUniform { lo: 0.05, hi: 2.0 })
            .values(Span::All(10_000), |x| x);
        let (lo, hi) = (0.05f64.ln() - 0.01, 2.0f64.ln() + 0.01);
        assert!(a.iter().all(|&x| x > lo && x < hi));
    }

    #[test]
    fn a_row_range_equals_the_same_rows_of_the_whole_tensor() {
        let g = Generator::new(11, "t", Recipe::Normal { variance: 1.0 });
        let whole = g.values(Span::All(7 * 9), |x| x);
        // Odd start: the range begins with the sine half of a Box–Muller pair.
        let part = g.values(Span::Rows(&[3, 4], 9), |x| x);
        assert_eq!(part, whole[27..45]);
    }

    #[test]
    fn streams_differ_by_seed_and_by_name() {
        let r = Recipe::Normal { variance: 1.0 };
        let a = Generator::new(1, "a", r).values(Span::All(64), |x| x);
        assert_ne!(a, Generator::new(2, "a", r).values(Span::All(64), |x| x));
        assert_ne!(a, Generator::new(1, "b", r).values(Span::All(64), |x| x));
        assert_eq!(a, Generator::new(1, "a", r).values(Span::All(64), |x| x));
    }
}
