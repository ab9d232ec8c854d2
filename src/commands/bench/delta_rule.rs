//! `bench core`: the gated delta rule (q/k L2 norm + scale inside) through
//! [`LinearAttentionBackend::gated_delta_rule`](crate::backends::LinearAttentionBackend::gated_delta_rule)
//! at a linear layer's geometry (default Qwen3.5-27B's), on identical fresh random inputs, and
//! transformers' `torch_chunk_gated_delta_rule` on the very same inputs when asked.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};

use super::case::CaseKind;
use super::results::BenchRow;
use super::runner::{Bench, CaseGroup, save_inputs};
use crate::backends::accumulation_dtype;
use crate::backends::cases::SplitMix;
use crate::error::Result;
use crate::util::device::dtype_label;

/// The shapes `bench core` runs at.
#[derive(Debug, Clone)]
pub struct CoreGeometry {
    pub lengths: Vec<usize>,
    pub key_heads: usize,
    pub value_heads: usize,
    /// Key and value head dim.
    pub head_dim: usize,
    /// Also time transformers' token-by-token rule.
    pub torch_recurrent: bool,
}

impl CoreGeometry {
    /// What is measured, for the header.
    pub fn describe(&self) -> String {
        format!(
            "GDN core (gated delta rule, q/k L2 norm inside): B 1, Hk {}, Hv {}, dk = dv = {}, \
             g = -exp(A_log)·softplus(a + dt_bias) with A_log ~ log U(0.05, 2), dt_bias ~ U(-3, 0.5), \
             a ~ N(0, 1); beta = sigmoid(N(0, 1)); q, k, v = SiLU(N(0, 1))",
            self.key_heads, self.value_heads, self.head_dim
        )
    }

    /// Every dtype × length group: inputs written once, then transformers and each backend.
    pub fn run(&self, bench: &Bench) -> Result<Vec<BenchRow>> {
        let plan = bench.plan();
        let mut rows = Vec::new();
        for &dtype in &plan.dtypes {
            for &t in &self.lengths {
                let tag = format!("core-t{t}-{}", dtype_label(dtype));
                let inputs = bench.work_file(&format!("{tag}.inputs.safetensors"));
                self.write_inputs(&inputs, t, dtype, plan.seed)?;
                let group = CaseGroup {
                    seq: t,
                    dtype,
                    tag: &tag,
                    inputs: &inputs,
                };
                let recurrent =
                    self.torch_recurrent && !plan.skips.skips("torch_recurrent", t, dtype);
                rows.extend(bench.run_group(
                    &group,
                    |name| bench.case_command(CaseKind::Core, name),
                    || {
                        let mut cmd = bench.torch_command("core")?;
                        if recurrent {
                            cmd.arg("--recurrent");
                        }
                        Some(cmd)
                    },
                ));
                bench.discard_inputs(&inputs);
            }
        }
        Ok(rows)
    }

    /// q, k, v, g, beta at length `t`, drawn as [`Self::describe`] says.
    fn write_inputs(&self, path: &Path, t: usize, dtype: DType, seed: u64) -> Result<()> {
        let (hk, hv, d) = (self.key_heads, self.value_heads, self.head_dim);
        // One stream per tensor, keyed by what it is, so that T and dtype do not shift the others.
        let silu = |x: f64| x / (1.0 + (-x).exp());
        let mut rng = SplitMix::new(seed ^ (t as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut normal_silu =
            |n: usize| -> Vec<f32> { (0..n).map(|_| silu(rng.normal()) as f32).collect() };
        let q = normal_silu(t * hk * d);
        let k = normal_silu(t * hk * d);
        let v = normal_silu(t * hv * d);
        let mut rng = SplitMix::new(seed.wrapping_add(1));
        let a_log: Vec<f64> = (0..hv)
            .map(|_| (0.05 + 1.95 * rng.uniform()).ln())
            .collect();
        let dt_bias: Vec<f64> = (0..hv).map(|_| -3.0 + 3.5 * rng.uniform()).collect();
        let mut rng = SplitMix::new(seed.wrapping_add(2) ^ (t as u64).rotate_left(17));
        let softplus = |x: f64| if x > 20.0 { x } else { x.exp().ln_1p() };
        let mut g = Vec::with_capacity(t * hv);
        let mut beta = Vec::with_capacity(t * hv);
        for _ in 0..t {
            for h in 0..hv {
                let a = rng.normal();
                g.push((-a_log[h].exp() * softplus(a + dt_bias[h])) as f32);
                beta.push((1.0 / (1.0 + (-rng.normal()).exp())) as f32);
            }
        }
        let cpu = Device::Cpu;
        let map = HashMap::from([
            (
                "q",
                Tensor::from_vec(q, (1, t, hk, d), &cpu)?.to_dtype(dtype)?,
            ),
            (
                "k",
                Tensor::from_vec(k, (1, t, hk, d), &cpu)?.to_dtype(dtype)?,
            ),
            (
                "v",
                Tensor::from_vec(v, (1, t, hv, d), &cpu)?.to_dtype(dtype)?,
            ),
            // g stays at the accumulation precision, as the model hands it to the backends.
            (
                "g",
                Tensor::from_vec(g, (1, t, hv), &cpu)?.to_dtype(accumulation_dtype(dtype))?,
            ),
            (
                "beta",
                Tensor::from_vec(beta, (1, t, hv), &cpu)?.to_dtype(dtype)?,
            ),
        ]);
        save_inputs(&map, path)
    }
}
