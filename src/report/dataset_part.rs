//! The header of a shard's part (`--shard I/N --format json`): the run the part belongs to —
//! inputs as given with a digest of their listings, every option that changes the result, the
//! hsdiff version — its shard, the pairs it failed, and a digest of the file itself. A resumed
//! shard and `hsdiff merge` trust a part only when its run is theirs and its digest holds.
//!
//! The digest is sha256 over the part file's bytes exactly as hsdiff writes them (pretty JSON,
//! the header last), with the digest's own 64 hex digits read as zeros. Any edit of the file —
//! a verdict, a row, the header, the formatting — breaks it; it is an integrity check, not a
//! signature (whoever edits a part can recompute it), which is why `merge` also checks that the
//! rows are the ones the shard's index selects and that the verdict follows from them.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::dataset::Shard;

pub const PART_SCHEMA: &str = "hsdiff.part/v1";

/// What precedes the digest's hex digits in the file.
const DIGEST_KEY: &[u8] = b"\"digest\": \"sha256:";
const HEX_DIGITS: usize = 64;

/// The digest a header carries until the file is stamped.
pub fn unstamped() -> String {
    format!("sha256:{}", "0".repeat(HEX_DIGITS))
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartHeader {
    pub schema: String,
    pub run: RunIdentity,
    pub shard: Shard,
    /// This shard's pairs that could not be compared (named in the report's `failed`): with
    /// the samples' `pair`, every pair the shard's index selects, each once.
    pub failed_pairs: Vec<usize>,
    /// `sha256:` and 64 hex digits (see the module's description). Last of the file.
    pub digest: String,
}

/// What makes two shards parts of one run: equal in every part of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunIdentity {
    /// hsdiff's version.
    pub hsdiff: String,
    pub a: InputListing,
    pub b: InputListing,
    /// `--model DIR`: the folder and a digest of its files.
    pub model: Option<InputListing>,
    pub options: RunOptions,
    /// N of `--shard I/N`.
    pub shards: usize,
}

/// One input: as given on the command line, and what it listed when the part was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputListing {
    pub given: String,
    /// Files listed (samples' files, and files not read as captures).
    pub files: usize,
    /// sha256 over each listed file's path, size and modification time, in listing order.
    pub listing: String,
}

/// The options that change a shard's rows or exit code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunOptions {
    pub dtype_hint: Option<String>,
    /// The layer ids each side was read with (`--layer-ids`, `--layer-ids-a/-b`,
    /// `--draft-config`), and where they came from.
    pub layer_ids_a: Option<LayerIdsUsed>,
    pub layer_ids_b: Option<LayerIdsUsed>,
    /// `--layers`.
    pub layers: Option<Vec<usize>>,
    /// `--map`, `--shift`.
    pub map: Vec<String>,
    pub shift: i64,
    pub no_floor: bool,
    /// `--calibrate N`.
    pub calibrate: Option<usize>,
    /// `--fail-on`: the shard's exit code.
    pub fail_on: String,
    /// `--allow-token-mismatch`: the exit code when pairs were left out for their token ids.
    pub allow_token_mismatch: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerIdsUsed {
    pub ids: Vec<usize>,
    pub from: String,
}

/// `bytes` as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// sha256 of `bytes`, as hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Where the digest's hex digits start in `bytes`: after the last digest key.
fn digits_at(bytes: &[u8]) -> Option<usize> {
    let at = bytes
        .windows(DIGEST_KEY.len())
        .rposition(|w| w == DIGEST_KEY)?
        + DIGEST_KEY.len();
    (at + HEX_DIGITS <= bytes.len()).then_some(at)
}

/// The part's rendered JSON (header digest [`unstamped`]) with its digest filled in.
pub fn stamp(mut bytes: Vec<u8>) -> Option<Vec<u8>> {
    let at = digits_at(&bytes)?;
    if bytes[at..at + HEX_DIGITS].iter().any(|&b| b != b'0') {
        return None;
    }
    let digest = sha256_hex(&bytes);
    bytes[at..at + HEX_DIGITS].copy_from_slice(digest.as_bytes());
    Some(bytes)
}

/// Whether the file `bytes` carries the digest `claimed` (its header's) and the digest holds;
/// the reason when not.
pub fn check_digest(bytes: &[u8], claimed: &str) -> Result<(), String> {
    let Some(hex_claimed) = claimed.strip_prefix("sha256:") else {
        return Err(format!("its digest `{claimed}` is no sha256 digest"));
    };
    let at = digits_at(bytes).ok_or("its digest is not where hsdiff writes it")?;
    if &bytes[at..at + HEX_DIGITS] != hex_claimed.as_bytes() {
        return Err("its digest is not where hsdiff writes it (the file was rewritten)".into());
    }
    let mut zeroed = bytes.to_vec();
    zeroed[at..at + HEX_DIGITS].fill(b'0');
    if sha256_hex(&zeroed) != hex_claimed {
        return Err(
            "its digest does not hold: the file was changed after hsdiff wrote it".to_string(),
        );
    }
    Ok(())
}

/// The first field in which two runs differ, with both values: `options.layer_ids_a
/// ({…} vs {…})`.
pub fn first_difference(x: &RunIdentity, y: &RunIdentity) -> Option<String> {
    let (x, y) = (serde_json::to_value(x).ok()?, serde_json::to_value(y).ok()?);
    difference(&x, &y, "")
}

fn difference(x: &serde_json::Value, y: &serde_json::Value, at: &str) -> Option<String> {
    use serde_json::Value;
    if x == y {
        return None;
    }
    if let (Value::Object(a), Value::Object(b)) = (x, y) {
        for (k, v) in a {
            let path = if at.is_empty() {
                k.clone()
            } else {
                format!("{at}.{k}")
            };
            if let Some(d) = difference(v, b.get(k).unwrap_or(&Value::Null), &path) {
                return Some(d);
            }
        }
    }
    Some(format!("{at} ({x} vs {y})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(digest: &str) -> Vec<u8> {
        format!(
            "{{\n  \"samples\": [1.5],\n  \"part\": {{\n    \"digest\": \"{digest}\"\n  }}\n}}\n"
        )
        .into_bytes()
    }

    #[test]
    fn a_stamped_file_holds_and_any_edit_breaks_it() {
        let stamped = stamp(doc(&unstamped())).expect("stamp");
        let text = String::from_utf8(stamped.clone()).expect("utf8");
        let claimed = text
            .split("\"digest\": \"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .expect("digest")
            .to_string();
        assert_ne!(claimed, unstamped());
        assert_eq!(check_digest(&stamped, &claimed), Ok(()));
        let edited = text.replace("1.5", "1.6").into_bytes();
        assert!(check_digest(&edited, &claimed).is_err());
        let other = doc(&format!("sha256:{}", "a".repeat(64)));
        assert!(check_digest(&other, &claimed).is_err());
        assert!(check_digest(&stamped, "md5:00").is_err());
        // Stamped once only: a file whose digest is already filled in is not stamped again.
        assert!(stamp(stamped).is_none());
    }
}
