//! `hsdiff compare`'s options, as clap reads them.

use std::path::PathBuf;

use clap::Args;

use crate::cli::report_args::ReportArgs;
use crate::cli::values::DtypeArg;

#[derive(Args, Debug, Clone)]
pub struct CompareArgs {
    /// Side A: an hsdiff dump, safetensors, torch.save (.pt/.pth/.ckpt, .ckpt.gz), .npy or
    /// .npz file, a drafter pipeline's sample (SpecForge, vLLM speculators, Model-Optimizer,
    /// EAGLE ge_data) — or a folder or glob of them (a dataset, compared pair by pair).
    #[arg(value_name = "A")]
    pub a: PathBuf,

    /// Side B.
    #[arg(value_name = "B")]
    pub b: PathBuf,

    /// Compare A's tensor A_NAME with B's tensor B_NAME (names as in the files, or hsdiff's
    /// names); repeatable.
    #[arg(long = "map", value_name = "A_NAME=B_NAME")]
    pub map: Vec<String>,

    /// Compare B's layer i with A's layer i+K (embed counts as layer −1), e.g. when one side
    /// counts the embedding output as a layer.
    #[arg(
        long,
        value_name = "K",
        default_value_t = 0,
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i64).range(-1024..=1024)
    )]
    pub shift: i64,

    /// Checkpoint folder of the model both files were captured from: hsdiff computes the f64
    /// truth and each side's rounding floor on the files' token ids and judges every row
    /// against them. Default: the model a fingerprint names (the built-in model by its weights
    /// digest, or a folder that exists here); without one the report is uncalibrated.
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,

    /// Skip the f64 truth and floor runs even when a model is at hand: verdicts then use the
    /// depth-scaled static band alone.
    #[arg(long)]
    pub no_floor: bool,

    /// Compute dtype of files that record none (f64, f32, bf16, f16): sets the thresholds, and
    /// lets 16-bit integer numpy arrays be read as bf16 bit patterns. Without it, a file stored
    /// as f32/f64 whose every value is bf16-exact (f16-exact) is read as a bf16 (f16) run.
    #[arg(long, value_enum, value_name = "DTYPE")]
    pub dtype_hint: Option<DtypeArg>,

    /// The layer ids a drafter pipeline concatenated (both sides), in its own convention
    /// (docs/file-formats.md#drafter-pipelines), e.g. 1,16,31,46,61.
    #[arg(long, value_name = "LIST")]
    pub layer_ids: Option<String>,
    /// Layer ids of side A only.
    #[arg(long, value_name = "LIST")]
    pub layer_ids_a: Option<String>,
    /// Layer ids of side B only.
    #[arg(long, value_name = "LIST")]
    pub layer_ids_b: Option<String>,
    /// A drafter's config.json naming the layer ids (`dflash_config.target_layer_ids`,
    /// `eagle_aux_hidden_state_layer_ids`, …).
    #[arg(long, value_name = "FILE")]
    pub draft_config: Option<PathBuf>,

    /// Datasets: measure the floors on the first N pairs (with --model) and apply them to all,
    /// instead of the truth and floor of every pair.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub calibrate: Option<u64>,
    /// Datasets: compare every N-th pair from the I-th (0-based), for `hsdiff merge`; `auto/N`
    /// takes I from the scheduler (SLURM_ARRAY_TASK_ID − SLURM_ARRAY_TASK_MIN,
    /// JOB_COMPLETION_INDEX, or HSDIFF_SHARD_INDEX). With `--format json --out PART`, a PART
    /// that already holds this run's complete part is kept and the shard skipped.
    #[arg(long, value_name = "I/N|auto/N")]
    pub shard: Option<String>,

    /// Token ids the files were captured on, when they carry none (comma-separated, or @FILE):
    /// with a model they make the truth and the floor computable. Checked against the files'
    /// sequence length and against any ids they do carry. Two files only.
    #[arg(long, value_name = "IDS|@FILE", conflicts_with = "prompt")]
    pub tokens: Option<String>,
    /// The prompt the files were captured on (text, @FILE or a built-in prompt name),
    /// tokenised with --model's tokenizer; as --tokens otherwise.
    #[arg(long, value_name = "TEXT|@FILE|NAME")]
    pub prompt: Option<String>,

    /// Datasets: pairs of equal ids whose token ids differ are expected (listed, left out, and
    /// the exit code is that of the compared pairs); without it such a pair exits 1.
    #[arg(long)]
    pub allow_token_mismatch: bool,

    #[command(flatten)]
    pub report: ReportArgs,
}
