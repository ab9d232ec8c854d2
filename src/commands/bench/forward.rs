//! `bench forward`: the whole prefill forward pass of a checkpoint, per backend and dtype, and
//! transformers' forward of the same checkpoint when asked (scripts/make_bench_model.py writes
//! one).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use candle_core::{Device, Tensor};

use super::case::CaseKind;
use super::results::BenchRow;
use super::runner::{Bench, CaseGroup, save_inputs};
use crate::backends::cases::SplitMix;
use crate::capture::Key;
use crate::error::Result;
use crate::model::Model;
use crate::util::device::dtype_label;
use crate::weights::config::LayerType;

/// A checkpoint and prompt length to run the forward pass at.
#[derive(Debug, Clone)]
pub struct ForwardBench {
    model: PathBuf,
    seq: usize,
    vocab: usize,
    description: String,
}

impl ForwardBench {
    /// Reads the checkpoint's config (the weights are read by each case); `seq` is positive and
    /// within the limits (the command line checks it).
    pub fn new(model: &Path, seq: usize) -> Result<Self> {
        let loaded = Model::load(model)?;
        let cfg = &loaded.config;
        let layers = cfg
            .layer_types
            .iter()
            .map(|t| match t {
                LayerType::LinearAttention => "linear",
                LayerType::FullAttention => "full",
            })
            .collect::<Vec<_>>()
            .join(", ");
        let description = format!(
            "whole prefill forward: {} ({} layers: {layers}; hidden {}, vocab {}), B 1, T {seq} \
             random token ids; hsdiff reads each layer's weights from the checkpoint (bf16 on \
             disk → compute dtype) inside the forward pass, transformers holds them in memory",
            model.display(),
            cfg.num_hidden_layers,
            cfg.hidden_size,
            cfg.vocab_size,
        );
        Ok(ForwardBench {
            model: model.to_path_buf(),
            seq,
            vocab: cfg.vocab_size,
            description,
        })
    }

    /// What is measured, for the header.
    pub fn describe(&self) -> &str {
        &self.description
    }

    /// One group per dtype on one file of random token ids.
    pub fn run(&self, bench: &Bench) -> Result<Vec<BenchRow>> {
        let plan = bench.plan();
        let ids_path = bench.work_file("forward.ids.safetensors");
        let mut rng = SplitMix::new(plan.seed);
        let ids: Vec<i64> = (0..self.seq)
            .map(|_| (rng.next_u64() % self.vocab as u64) as i64)
            .collect();
        let ids = Tensor::from_vec(ids, (1, self.seq), &Device::Cpu)?;
        let name = Key::InputIds.to_string();
        save_inputs(&HashMap::from([(name.as_str(), ids)]), &ids_path)?;
        let mut rows = Vec::new();
        for &dtype in &plan.dtypes {
            let tag = format!("forward-t{}-{}", self.seq, dtype_label(dtype));
            let group = CaseGroup {
                seq: self.seq,
                dtype,
                tag: &tag,
                inputs: &ids_path,
            };
            // Both sides read the same checkpoint at the same compute dtype.
            let with_model = |mut cmd: Command| {
                cmd.arg("--model").arg(&self.model);
                cmd.args(["--dtype", dtype_label(dtype)]);
                cmd
            };
            rows.extend(bench.run_group(
                &group,
                |name| with_model(bench.case_command(CaseKind::Forward, name)),
                || bench.torch_command("forward").map(with_model),
            ));
        }
        bench.discard_inputs(&ids_path);
        Ok(rows)
    }
}
