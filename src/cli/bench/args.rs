//! The options of `bench core` and `bench forward` (see [`super`]).

use std::path::PathBuf;

use clap::Args;

use crate::backends::BackendKind;
use crate::cli::values::DtypeArg;

/// Options shared by `core` and `forward`.
#[derive(Args, Debug)]
pub struct CommonArgs {
    /// Backends to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "reference,chunked,fused")]
    pub backends: Vec<BackendKind>,

    /// Compute dtypes, comma-separated (f32, bf16, f16, f64).
    #[arg(long, value_delimiter = ',', default_value = "f32,bf16")]
    pub dtypes: Vec<DtypeArg>,

    /// Timed calls per case (the median is reported).
    #[arg(long)]
    pub repeats: Option<usize>,

    /// Untimed calls before the timed ones.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,

    /// Threads for hsdiff (RAYON_NUM_THREADS of each child) and for torch (set_num_threads).
    /// Default: all available cores.
    #[arg(long)]
    pub threads: Option<usize>,

    /// Skip cases: NAME[@QUALIFIER…] where NAME is a backend, `torch` or `torch_recurrent` and
    /// each qualifier a sequence length or a dtype, e.g. `reference@8192`, `torch@bf16`,
    /// `chunked`. Repeatable.
    #[arg(long, value_delimiter = ',')]
    pub skip: Vec<String>,

    /// Also run transformers with this Python (which has torch + transformers and none of fla,
    /// causal-conv1d, kernels).
    #[arg(long, value_name = "PYTHON")]
    pub torch: Option<PathBuf>,

    /// The PyTorch side (default: the bench_torch.py built into this binary).
    #[arg(long, value_name = "FILE")]
    pub torch_script: Option<PathBuf>,

    /// Seed of the random inputs.
    #[arg(long, default_value_t = 20240917)]
    pub seed: u64,

    /// Folder in which the run makes its own folder (hsdiff-bench-PID) for the input and
    /// output files, removed afterwards unless --keep (default: the temp dir).
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,

    /// Keep the input and output files.
    #[arg(long)]
    pub keep: bool,

    /// Print the table as Markdown.
    #[arg(long)]
    pub markdown: bool,

    /// Also write every measurement as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct CoreArgs {
    /// Sequence lengths, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "512,2048,8192")]
    pub lengths: Vec<usize>,

    /// Key heads (Qwen3.5-27B: 16).
    #[arg(long, default_value_t = 16)]
    pub key_heads: usize,

    /// Value heads (Qwen3.5-27B: 48).
    #[arg(long, default_value_t = 48)]
    pub value_heads: usize,

    /// Key and value head dim (Qwen3.5-27B: 128).
    #[arg(long, default_value_t = 128)]
    pub head_dim: usize,

    /// Also time transformers' `torch_recurrent_gated_delta_rule` (slow: one Python step per
    /// token).
    #[arg(long)]
    pub torch_recurrent: bool,

    #[command(flatten)]
    pub common: CommonArgs,
}

#[derive(Args, Debug)]
pub struct ForwardArgs {
    /// Checkpoint folder (config.json + safetensors), e.g. written by
    /// scripts/make_bench_model.py.
    #[arg(long, value_name = "DIR")]
    pub model: PathBuf,

    /// Prompt length in tokens (random token ids).
    #[arg(long, default_value_t = 512)]
    pub seq: usize,

    #[command(flatten)]
    pub common: CommonArgs,
}
