//! The names SGLang gives its dump files, and which files make one sample.
//!
//! The dumper names a file by its tags joined with `___`
//! (`step=0___rank=0___dump_index=7___name=non_intrusive__model.layers.3.output.0___recompute_status=disabled___layer_id=3.pt`;
//! versions before the `step` counter: `forward_pass_id=1___rank=0___name=…___dump_index=…`).
//! One forward pass (`step` / `forward_pass_id`) of one folder is one sample. The tensor dump
//! of `--debug-tensor-dump-output-folder` writes `TP{t}_PP{p}_Rank{r}_pid{pid}/Pass{n:05}.pt`,
//! one file per forward pass and rank.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The tags of a dumper file's name, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tags(pub Vec<(String, String)>);

impl Tags {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The forward pass: `step` (the current dumper) or `forward_pass_id` (older ones).
    pub fn step(&self) -> Option<&str> {
        self.get("step").or_else(|| self.get("forward_pass_id"))
    }

    pub fn name(&self) -> Option<&str> {
        self.get("name")
    }
}

/// The tags of `path` when its file name is a dumper file's: `key=value` parts joined by `___`,
/// ending `.pt`, with a `name` and a forward pass.
pub fn parse(path: &Path) -> Option<Tags> {
    let file = path.file_name()?.to_str()?;
    let stem = file.strip_suffix(".pt")?;
    let mut tags = Vec::new();
    for part in stem.split("___") {
        let (k, v) = part.split_once('=')?;
        if k.is_empty() || !k.bytes().all(|c| c.is_ascii_lowercase() || c == b'_') {
            return None;
        }
        tags.push((k.to_string(), v.to_string()));
    }
    let tags = Tags(tags);
    (tags.name().is_some_and(|n| !n.is_empty()) && tags.step().is_some()).then_some(tags)
}

/// A `Pass{n}.pt` of the tensor dump, in a `TP{t}_PP{p}_Rank{r}_pid{pid}` folder: (pass number,
/// the folder's tensor-parallel rank, pipeline-parallel rank).
pub fn parse_pass(path: &Path) -> Option<(u64, u64, u64)> {
    let file = path.file_name()?.to_str()?;
    let n = file.strip_prefix("Pass")?.strip_suffix(".pt")?;
    if n.is_empty() || !n.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let dir = path.parent()?.file_name()?.to_str()?;
    let rest = dir.strip_prefix("TP")?;
    let (tp, rest) = rest.split_once("_PP")?;
    let (pp, rest) = rest.split_once("_Rank")?;
    let (rank, pid) = rest.split_once("_pid")?;
    let num = |s: &str| s.parse::<u64>().ok();
    num(rank)?;
    num(pid)?;
    Some((num(n)?, num(tp)?, num(pp)?))
}

/// The sample id of an SGLang dump file: `step=S` (the forward pass) or `pass=N`.
pub fn sample_id(path: &Path) -> Option<String> {
    if let Some(tags) = parse(path) {
        let key = if tags.get("step").is_some() {
            "step"
        } else {
            "forward_pass_id"
        };
        return tags.step().map(|s| format!("{key}={s}"));
    }
    parse_pass(path).map(|(n, _, _)| format!("pass={n}"))
}

/// The files of one dataset side with each SGLang dump's forward passes made one file each (the
/// pass's `input_ids` file when it has one, else its first): a dumper folder holds one file per
/// tensor, and every file of a pass is read when that file is opened. `Pass{n}.pt` files of more
/// than one tensor-parallel rank are refused: the tensor dump records no split dim.
pub fn collapse(files: Vec<PathBuf>) -> Result<Vec<PathBuf>> {
    let served = super::served::served_folders(&files);
    let mut out: Vec<PathBuf> = Vec::new();
    // (folder, pass) → index in `out` of the file standing for it.
    let mut passes: BTreeMap<(PathBuf, String), usize> = BTreeMap::new();
    // (root, pass number) → the rank folders holding it.
    let mut tensor_dumps: BTreeMap<(PathBuf, u64), Vec<PathBuf>> = BTreeMap::new();
    for f in files {
        if let Some(tags) = parse(&f) {
            let dir = f.parent().map(Path::to_path_buf).unwrap_or_default();
            let key = (dir, tags.step().unwrap_or_default().to_string());
            match passes.get(&key) {
                Some(&i) => {
                    if tags.name() == Some("input_ids")
                        && parse(&out[i]).is_some_and(|t| t.name() != Some("input_ids"))
                    {
                        out[i] = f;
                    }
                }
                None => {
                    passes.insert(key, out.len());
                    out.push(f);
                }
            }
            continue;
        }
        if let Some((n, _, _)) = parse_pass(&f) {
            let rank_dir = f.parent().map(Path::to_path_buf).unwrap_or_default();
            let root = rank_dir.parent().map(Path::to_path_buf).unwrap_or_default();
            tensor_dumps.entry((root, n)).or_default().push(rank_dir);
        }
        out.push(f);
    }
    // A served folder's request is read from the pass it begins in.
    let out = super::served::drop_continuations(out, &served)?;
    for ((root, n), dirs) in &tensor_dumps {
        if dirs.len() > 1 {
            let names: Vec<String> = dirs
                .iter()
                .filter_map(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
                .collect();
            return Err(Error::file(
                root,
                format!(
                    "sglang-tensor-dump: Pass{n:05}.pt is written by {} ranks ({}); \
                     --debug-tensor-dump-output-folder records no split dim to join them by: \
                     compare one rank's folder",
                    dirs.len(),
                    names.join(", ")
                ),
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dumper_names() {
        let t = parse(Path::new(
            "d/step=2___rank=1___dump_index=7___name=non_intrusive__model.layers.3.output.0___recompute_status=disabled___layer_id=3.pt",
        ));
        let t = t.expect("a dumper name");
        assert_eq!(t.step(), Some("2"));
        assert_eq!(t.get("rank"), Some("1"));
        assert_eq!(t.name(), Some("non_intrusive__model.layers.3.output.0"));
        assert_eq!(t.get("layer_id"), Some("3"));
        let old = parse(Path::new(
            "forward_pass_id=1___rank=0___name=input_ids___dump_index=1.pt",
        ));
        assert_eq!(
            old.and_then(|t| t.step().map(str::to_string)),
            Some("1".into())
        );
        assert!(parse(Path::new("data_0.pt")).is_none());
        assert!(parse(Path::new("step=1___rank=0.pt")).is_none());
        assert_eq!(
            sample_id(Path::new("x/step=4___rank=0___name=input_ids.pt")).as_deref(),
            Some("step=4")
        );
    }

    #[test]
    fn pass_names() {
        assert_eq!(
            parse_pass(Path::new("out/TP1_PP0_Rank1_pid4242/Pass00003.pt")),
            Some((3, 1, 0))
        );
        assert_eq!(parse_pass(Path::new("out/x/Pass00003.pt")), None);
        assert_eq!(
            parse_pass(Path::new("out/TP0_PP0_Rank0_pid1/Pass.pt")),
            None
        );
    }

    #[test]
    fn passes_collapse_to_one_file() -> Result<()> {
        let f = |s: &str| PathBuf::from(s);
        let got = collapse(vec![
            f("d/step=0___rank=0___dump_index=2___name=x.pt"),
            f("d/step=0___rank=0___dump_index=1___name=input_ids.pt"),
            f("d/step=1___rank=0___dump_index=3___name=x.pt"),
            f("other/data_0.ckpt"),
        ])?;
        assert_eq!(
            got,
            [
                f("d/step=0___rank=0___dump_index=1___name=input_ids.pt"),
                f("d/step=1___rank=0___dump_index=3___name=x.pt"),
                f("other/data_0.ckpt"),
            ]
        );
        let two_ranks = collapse(vec![
            f("o/TP0_PP0_Rank0_pid1/Pass00000.pt"),
            f("o/TP1_PP0_Rank1_pid2/Pass00000.pt"),
        ]);
        assert!(two_ranks.is_err());
        Ok(())
    }
}
