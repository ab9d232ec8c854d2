//! The PyTorch side of `hsdiff bench --torch PYTHON` (`bench_torch.py`, beside this file). The
//! binary carries it, so the bench runs wherever the binary was installed (`cargo install`, the
//! wheel) with no checkout; each run writes it into its own work folder, which nobody else
//! writes to, and removes it with the folder. `--torch-script FILE` runs another copy instead.

use std::path::{Path, PathBuf};

use crate::error::Result;

/// bench_torch.py as it was when this binary was built.
const SOURCE: &str = include_str!("bench_torch.py");

/// Writes the built-in script into `work` (a run's own folder) and returns its path.
pub fn write_into(work: &Path) -> Result<PathBuf> {
    let path = work.join("bench_torch.py");
    crate::util::output::write_bytes(&path, SOURCE.as_bytes())?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_script_is_written_whole_into_the_work_folder() {
        let work = tempfile::tempdir().expect("temp dir");
        let path = write_into(work.path()).expect("written");
        assert_eq!(path, work.path().join("bench_torch.py"));
        assert_eq!(std::fs::read_to_string(&path).expect("reads"), SOURCE);
        // It stands alone: no import of the checkout's generators or package.
        assert!(SOURCE.contains("HSDIFF_BENCH_RESULT"));
        assert!(!SOURCE.contains("sys.path.insert") && !SOURCE.contains("make_golden"));
    }
}
