//! What a bench run measures: backends, dtypes, repeats, threads, the PyTorch side, and the cases
//! skipped. The command line checks the options into a [`Plan`] before anything runs.

use std::path::PathBuf;

use candle_core::DType;

use crate::backends::BackendKind;

/// Rows of scripts/bench_torch.py that `--skip` can name besides the backends: `torch` (the
/// whole script) and `torch_recurrent` (its token-by-token rule).
pub const TORCH_CASES: &[&str] = &["torch", "torch_recurrent"];

/// One `--skip` spec: a case name, and qualifiers that must all match the case's sequence
/// length or dtype (none: every length and dtype).
#[derive(Debug, Clone, PartialEq)]
pub struct SkipSpec {
    pub name: String,
    pub lengths: Vec<usize>,
    pub dtypes: Vec<DType>,
}

impl SkipSpec {
    pub fn matches(&self, name: &str, seq: usize, dtype: DType) -> bool {
        self.name == name
            && self.lengths.iter().all(|&n| n == seq)
            && self.dtypes.iter().all(|&d| d == dtype)
    }
}

/// The `--skip` specs of a run, as given and as parsed.
#[derive(Debug, Clone, Default)]
pub struct SkipList {
    given: Vec<String>,
    specs: Vec<SkipSpec>,
}

impl SkipList {
    /// The specs as the user wrote them (`given`) and as parsed, one for one.
    pub fn new(given: Vec<String>, specs: Vec<SkipSpec>) -> Self {
        SkipList { given, specs }
    }

    /// Whether some spec names this case.
    pub fn skips(&self, name: &str, seq: usize, dtype: DType) -> bool {
        self.specs.iter().any(|s| s.matches(name, seq, dtype))
    }

    /// The specs as the user wrote them.
    pub fn given(&self) -> &[String] {
        &self.given
    }
}

/// transformers' side of a run: a Python with torch + transformers, and the script it runs
/// (`--torch-script`; None: the one built in, [`super::torch_script`]).
#[derive(Debug, Clone)]
pub struct TorchSide {
    pub python: PathBuf,
    pub script: Option<PathBuf>,
}

/// A checked run plan.
#[derive(Debug, Clone)]
pub struct Plan {
    pub backends: Vec<BackendKind>,
    pub dtypes: Vec<DType>,
    pub repeats: usize,
    pub warmup: usize,
    /// Threads of each hsdiff case (RAYON_NUM_THREADS) and of torch.
    pub threads: usize,
    pub skips: SkipList,
    pub torch: Option<TorchSide>,
    pub seed: u64,
    pub work_dir: Option<PathBuf>,
    pub keep: bool,
}
