//! Writing output files safely: a target is validated before any work starts (a regular file or
//! nothing yet, in an existing folder, not one of the inputs), and written to a temp file in the
//! target's own folder that is renamed over it only once complete — a full disk or a failure
//! half-way leaves the old file (or none) in place, never a truncated one.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{Error, Result};
use crate::input::io_words;

/// Files a model folder holds that an output must never replace.
fn is_model_file(name: &str) -> bool {
    name == "config.json"
        || name == "tokenizer.json"
        || name.ends_with(".safetensors")
        || name.ends_with(".safetensors.index.json")
}

/// Checks that `path` can take an output: `what` names the option (`--out`, `--plot`) in
/// messages; `inputs` are the files and folders the command reads.
pub fn check_target(path: &Path, what: &str, inputs: &[&Path]) -> Result<()> {
    let refuse = |msg: String| Error::file(path, format!("{what}: {msg}"));
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| refuse("needs a file name".into()))?;
    let dir = parent(path);
    if !dir.is_dir() {
        return Err(refuse(format!(
            "the folder {} does not exist",
            dir.display()
        )));
    }
    match std::fs::metadata(path) {
        Ok(meta) => {
            if !meta.is_file() {
                return Err(refuse(
                    "exists and is not a regular file (a directory, device or pipe): hsdiff only replaces regular files".into(),
                ));
            }
            for input in inputs {
                let Ok(im) = std::fs::metadata(input) else {
                    continue;
                };
                let same = im.dev() == meta.dev() && im.ino() == meta.ino();
                let inside = im.is_dir() && is_model_file(name) && same_dir(input, dir);
                if same || inside {
                    return Err(refuse(format!(
                        "is one of this command's inputs ({}): choose another file",
                        input.display()
                    )));
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(refuse(io_words(&e))),
    }
    Ok(())
}

/// `--out` and `--plot` of a report command: each a valid target, and not the same file.
pub fn check_report_targets(
    out: Option<&Path>,
    plot: Option<&Path>,
    inputs: &[&Path],
) -> Result<()> {
    if let Some(out) = out {
        check_target(out, "--out", inputs)?;
    }
    if let Some(plot) = plot {
        check_target(plot, "--plot", inputs)?;
        if out.is_some_and(|o| o == plot) {
            return Err(Error::file(plot, "--out and --plot name the same file"));
        }
    }
    Ok(())
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Writes `path` through a temp file: `write` fills the temp file at the path it is given, then
/// the temp file is flushed to disk and renamed over `path`. On any error the temp file is
/// removed and `path` is untouched.
pub fn write_with(path: &Path, write: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    check_target(path, "output", &[])?;
    let tmp = TempPath::new(path)?;
    write(&tmp.0)?;
    let file = File::open(&tmp.0).map_err(|e| Error::file(path, io_words(&e)))?;
    file.sync_all()
        .map_err(|e| Error::file(path, format!("cannot write: {}", io_words(&e))))?;
    // The target may have changed while the work ran: still a regular file or nothing?
    check_target(path, "output", &[])?;
    std::fs::rename(&tmp.0, path)
        .map_err(|e| Error::file(path, format!("cannot write: {}", io_words(&e))))?;
    tmp.keep();
    Ok(())
}

/// Writes `bytes` to `path` atomically (see [`write_with`]).
pub fn write_bytes(path: &Path, bytes: &[u8]) -> Result<()> {
    write_with(path, |tmp| {
        let mut f = OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(tmp)
            .map_err(|e| Error::file(path, format!("cannot write: {}", io_words(&e))))?;
        f.write_all(bytes)
            .map_err(|e| Error::file(path, format!("cannot write: {}", io_words(&e))))
    })
}

/// A temp file next to the target, removed on drop unless kept.
struct TempPath(PathBuf, bool);

static COUNTER: AtomicUsize = AtomicUsize::new(0);

impl TempPath {
    fn new(target: &Path) -> Result<Self> {
        let name = target
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("output");
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = parent(target).join(format!(".{name}.hsdiff-{}-{n}.tmp", std::process::id()));
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| {
                Error::file(
                    target,
                    format!("cannot create a temp file next to it: {}", io_words(&e)),
                )
            })?;
        Ok(TempPath(tmp, false))
    }

    fn keep(mut self) {
        self.1 = true;
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        if !self.1 {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_atomically_and_cleans_up_on_failure() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("report.txt");
        write_bytes(&target, b"first").expect("writes");
        assert_eq!(std::fs::read(&target).expect("reads"), b"first");
        let failed = write_with(&target, |tmp| {
            std::fs::write(tmp, b"half").expect("partial");
            Err(Error::file("/tmp/hsdiff-output-test", "disk full"))
        });
        assert!(failed.is_err());
        assert_eq!(std::fs::read(&target).expect("reads"), b"first");
        let left: Vec<_> = std::fs::read_dir(dir.path()).expect("lists").collect();
        assert_eq!(left.len(), 1, "temp file left behind");
    }

    #[test]
    fn refuses_bad_targets() {
        let dir = tempfile::tempdir().expect("tempdir");
        let input = dir.path().join("a.pt");
        std::fs::write(&input, b"x").expect("writes");
        assert!(check_target(&input, "--out", &[&input]).is_err());
        assert!(check_target(dir.path(), "--out", &[]).is_err());
        assert!(check_target(Path::new("/dev/null"), "--out", &[]).is_err());
        assert!(check_target(&dir.path().join("no/such/x"), "--out", &[]).is_err());
        let cfg = dir.path().join("config.json");
        std::fs::write(&cfg, b"{}").expect("writes");
        assert!(check_target(&cfg, "--out", &[dir.path()]).is_err());
        assert!(check_target(&dir.path().join("new.json"), "--out", &[&input]).is_ok());
    }
}
