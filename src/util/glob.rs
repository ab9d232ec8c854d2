//! Which files a dataset side reads: names a capture can have, and glob patterns (`*` and `?`
//! within one name, `**` for any folders).
//! A path that exists is itself, never a pattern (a file may be named `q?.safetensors`).
//! Matching never backtracks without bound: a name is matched by the two-pointer wildcard
//! match (at most length of pattern × length of name steps), a path's components by a table
//! over (pattern component, path component).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// File names a capture can have: a dataset side reads these, and no output adds one to an
/// input folder.
pub const CAPTURE_SUFFIXES: &[&str] = &[
    ".ckpt",
    ".ckpt.gz",
    ".pt",
    ".pth",
    ".bin",
    ".safetensors",
    ".st",
    ".npz",
    ".npy",
];

/// Whether a file named `name` is a capture by its name (case aside).
pub fn is_capture_name(name: &[u8]) -> bool {
    let name = name.to_ascii_lowercase();
    CAPTURE_SUFFIXES
        .iter()
        .any(|s| name.ends_with(s.as_bytes()))
}

/// A pattern: the folder it is matched under, and its components from the first with a wildcard.
#[derive(Debug, Clone)]
pub struct Glob {
    pub root: PathBuf,
    pub components: Vec<Vec<u8>>,
}

fn has_wildcard(s: &[u8]) -> bool {
    s.iter().any(|&b| b == b'*' || b == b'?')
}

/// The pattern `spec` is, or None: no wildcard, or a path that exists as written.
pub fn pattern(spec: &Path) -> Option<Glob> {
    let bytes = spec.as_os_str().as_bytes();
    if !has_wildcard(bytes) || std::fs::symlink_metadata(spec).is_ok() {
        return None;
    }
    let parts: Vec<&[u8]> = bytes.split(|&b| b == b'/').collect();
    let first = parts.iter().position(|p| has_wildcard(p)).unwrap_or(0);
    let root = parts[..first].join(&b'/');
    let root = match (root.is_empty(), bytes.starts_with(b"/")) {
        (true, true) => PathBuf::from("/"),
        (true, false) => PathBuf::from("."),
        (false, _) => PathBuf::from(OsStr::from_bytes(&root)),
    };
    let components = parts[first..]
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| p.to_vec())
        .collect();
    Some(Glob { root, components })
}

impl Glob {
    /// Whether `rel`, a path under the root, matches the whole pattern.
    pub fn matches(&self, rel: &Path) -> bool {
        components_match(&self.components, &components_of(rel), false)
    }

    /// Whether a folder at `rel` under the root may hold a match (the pattern goes on below it).
    pub fn may_hold(&self, rel: &Path) -> bool {
        components_match(&self.components, &components_of(rel), true)
    }
}

fn components_of(rel: &Path) -> Vec<&[u8]> {
    rel.components().map(|c| c.as_os_str().as_bytes()).collect()
}

/// `pattern` against `parts`; with `prefix`, whether `parts` is matched by a part of the pattern
/// that leaves some of it to match deeper. A table of (i, j): pattern[i..] against parts[j..].
fn components_match(pattern: &[Vec<u8>], parts: &[&[u8]], prefix: bool) -> bool {
    let (np, ns) = (pattern.len(), parts.len());
    // done[i][j]: pattern[i..] matches parts[j..].
    let mut done = vec![vec![false; ns + 1]; np + 1];
    done[np][ns] = !prefix;
    for i in (0..np).rev() {
        // Parts used up: a prefix match when pattern is left.
        done[i][ns] = prefix || (pattern[i] == b"**" && done[i + 1][ns]);
        for j in (0..ns).rev() {
            done[i][j] = if pattern[i] == b"**" {
                done[i + 1][j] || done[i][j + 1]
            } else {
                name_matches(&pattern[i], parts[j]) && done[i + 1][j + 1]
            };
        }
    }
    done[0][0]
}

/// `*` and `?` within one name: greedy, going back only to the last `*` seen, which is enough
/// because a later `*` can absorb whatever an earlier one would have.
pub fn name_matches(p: &[u8], s: &[u8]) -> bool {
    let (mut i, mut j) = (0, 0);
    // The last `*` of the pattern and the name position it is tried from.
    let mut star: Option<(usize, usize)> = None;
    while j < s.len() {
        if i < p.len() && (p[i] == b'?' || (p[i] != b'*' && p[i] == s[j])) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == b'*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&b| b == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(s: &str) -> Glob {
        Glob {
            root: PathBuf::from("."),
            components: s.split('/').map(|c| c.as_bytes().to_vec()).collect(),
        }
    }

    #[test]
    fn components_and_folders() {
        assert!(glob("rows_*/data_*.ckpt").matches(Path::new("rows_0-5000/data_12.ckpt")));
        assert!(!glob("rows_*/data_*.ckpt").matches(Path::new("rows_0-5000/x/data_12.ckpt")));
        assert!(glob("**/hs_?.safetensors").matches(Path::new("a/b/hs_3.safetensors")));
        assert!(glob("**/hs_?.safetensors").matches(Path::new("hs_3.safetensors")));
        assert!(!glob("**/hs_?.safetensors").matches(Path::new("hs_31.safetensors")));
        assert!(glob("a/**").matches(Path::new("a/b/c")));
        assert!(glob("rows_*/data_*.ckpt").may_hold(Path::new("rows_1")));
        assert!(!glob("rows_*/data_*.ckpt").may_hold(Path::new("rows_1/x")));
        assert!(glob("**/x").may_hold(Path::new("a/b/c/d")));
    }

    #[test]
    fn names() {
        for (p, s, want) in [
            ("*", "", true),
            ("a*b", "ab", true),
            ("a*b", "axxbxb", true),
            ("a*b", "axxbx", false),
            ("*a*a*", "banana", true),
            ("?", "", false),
            ("d?t*", "data_1", true),
            ("*x", "abc", false),
        ] {
            assert_eq!(name_matches(p.as_bytes(), s.as_bytes()), want, "{p} {s}");
        }
    }

    #[test]
    fn many_stars_against_a_long_name_stay_fast() {
        // Exponential for a backtracking matcher; here at most 28 × 205 steps.
        let p = "*a".repeat(14);
        let s = "a".repeat(204) + "b";
        assert!(!name_matches(p.as_bytes(), s.as_bytes()));
        let many = vec![b"**".to_vec(); 40];
        let parts: Vec<&[u8]> = vec![b"x"; 40];
        assert!(components_match(&many, &parts, false));
    }

    #[test]
    fn an_existing_path_is_no_pattern() {
        let dir = tempfile::tempdir().expect("tempdir");
        let literal = dir.path().join("q?.safetensors");
        assert!(pattern(&literal).is_some());
        std::fs::write(&literal, b"x").expect("write");
        assert!(pattern(&literal).is_none());
        let g = pattern(&dir.path().join("*/d*")).expect("a glob");
        assert_eq!(g.root, dir.path());
        assert_eq!(g.components, vec![b"*".to_vec(), b"d*".to_vec()]);
    }
}
