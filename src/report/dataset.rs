//! The dataset report (schema `hsdiff.dataset/v1`): many pairs of samples compared, one verdict.
//! Built by [`crate::commands::compare::dataset`] from one [`super::Report`] per pair, merged from shards by
//! `hsdiff merge`, printed by `printer::dataset`. Plain data: printers compute nothing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::compare::verdict::Verdict;

pub const DATASET_SCHEMA: &str = "hsdiff.dataset/v1";

/// The most shards a run is cut into (`--shard I/N`, and what a part may claim): far past any
/// cluster, and small enough that nothing sized by N can exhaust memory.
pub const MAX_SHARDS: usize = 1 << 24;

impl crate::util::json_doc::JsonDocument for DatasetReport {
    const WHAT: &'static str = "the dataset report";
}

/// Figures that may be NaN or infinite (a NaN row, a zero floor) are written as the strings
/// `"NaN"`, `"inf"`, `"-inf"`, so that `hsdiff merge` reads back exactly what a shard wrote
/// (JSON has no such numbers; serde_json would write null).
mod float {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Number(f64),
        Text(String),
    }

    fn to_repr(x: f64) -> Repr {
        if x.is_nan() {
            Repr::Text("NaN".into())
        } else if x.is_infinite() {
            Repr::Text(if x > 0.0 { "inf" } else { "-inf" }.into())
        } else {
            Repr::Number(x)
        }
    }

    fn from_repr<E: serde::de::Error>(r: Repr) -> Result<f64, E> {
        match r {
            Repr::Number(x) => Ok(x),
            Repr::Text(t) => match t.as_str() {
                "NaN" => Ok(f64::NAN),
                "inf" => Ok(f64::INFINITY),
                "-inf" => Ok(f64::NEG_INFINITY),
                other => Err(E::custom(format!("`{other}` is not a number"))),
            },
        }
    }

    pub fn serialize<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
        to_repr(*x).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        from_repr(Repr::deserialize(d)?)
    }

    pub mod option {
        use super::*;

        pub fn serialize<S: Serializer>(x: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
            x.map(to_repr).serialize(s)
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
            Option::<Repr>::deserialize(d)?.map(from_repr).transpose()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetReport {
    pub schema: String,
    /// The worst sample verdict (ok when no pair was compared is impossible: that is an error).
    pub verdict: Verdict,
    pub summary: String,
    /// The two sides as given (folders or globs).
    pub a: String,
    pub b: String,
    /// How each side's files were read (one line per distinct reading).
    pub formats_a: Vec<String>,
    pub formats_b: Vec<String>,
    /// `x_floor` when every compared sample was calibrated, else `rel_l2`: what `layers`
    /// aggregates.
    pub metric: String,
    /// How the floor was had: per sample with a model, from N samples, or none.
    pub calibration: String,
    /// One entry per compared pair, in pairing order.
    pub samples: Vec<SampleRow>,
    /// Per row name across samples, in forward order.
    pub layers: Vec<LayerRow>,
    /// Pairs whose token ids differ: named and left out. A finding (exit 1) unless
    /// `token_mismatches_allowed`.
    pub token_mismatches: Vec<Unpaired>,
    /// `--allow-token-mismatch`: the pairs left out for their token ids are listed, and the exit
    /// code is as for the compared pairs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub token_mismatches_allowed: bool,
    /// Samples of one side with no partner on the other.
    pub unpaired_a: Vec<Unpaired>,
    pub unpaired_b: Vec<Unpaired>,
    /// Samples that could not be compared (bad input): the run's exit code is 2.
    pub failed: Vec<Failed>,
    /// `--shard I/N`: this report covers every N-th pair from I; merged reports have none.
    #[serde(default)]
    pub shard: Option<Shard>,
    /// Pairs in the whole dataset (all shards).
    pub pairs_total: usize,
    /// Notes on the run as a whole (files not read).
    pub notes: Vec<String>,
    /// Notes drawn from the samples' rows (zero padding left out, tensors only one side held),
    /// remade whenever the samples change, so a merge of shards says what the whole run says.
    #[serde(default)]
    pub sample_notes: Vec<String>,
    pub command: Option<String>,
    /// A shard's part (`--shard`): the run it belongs to and the digest of the file. Last, so
    /// that the digest is the file's last string ([`super::dataset_part`]); absent from a whole
    /// run's report and from a merge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<super::dataset_part::PartHeader>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

/// One compared pair of samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleRow {
    /// Place in the pairing order (the same in every shard).
    pub pair: usize,
    pub id: String,
    /// B's id when it differs from A's (samples paired by token ids).
    pub id_b: Option<String>,
    /// `id` or `token ids`.
    pub paired_by: String,
    pub verdict: Verdict,
    pub first_divergent: Option<String>,
    /// The largest ×floor of any row (None: uncalibrated), its row, and the largest rel L2.
    #[serde(with = "float::option")]
    pub worst_x_floor: Option<f64>,
    pub worst_tensor: Option<String>,
    #[serde(with = "float")]
    pub worst_rel_l2: f64,
    /// Positions compared (the real ones).
    pub positions: usize,
    /// The positions `loss_mask` trains on, judged on their own (when not all of them).
    pub trained: Option<TrainedFigures>,
    /// The `loss_mask` trains on no position (all zero): nothing is compared at trained ones.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub untrained: bool,
    pub file_a: String,
    pub file_b: String,
    /// Each compared row: rel L2 and ×floor.
    pub rows: BTreeMap<String, RowFigures>,
    /// Row names in forward order (the keys of `rows`).
    pub order: Vec<String>,
    /// Positions both sides held as all-zero padding (no mask), left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zero_padding: Option<LeftOut>,
    /// Tensors only A, or only B, held: no row.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub only_a: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub only_b: Vec<String>,
    /// Tensors of A, or of B, that no name rule read and no `--map` named: no row.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unnamed_a: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unnamed_b: Vec<String>,
    /// Sides whose pipeline layer ids name other layers than their states are: the pair's
    /// headline clause for each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layer_id_slips: Vec<String>,
}

/// `left_out` of `of` stored positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftOut {
    pub left_out: usize,
    pub of: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RowFigures {
    #[serde(with = "float")]
    pub rel_l2: f64,
    #[serde(with = "float::option")]
    pub x_floor: Option<f64>,
    pub verdict: Verdict,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainedFigures {
    pub positions: usize,
    pub of: usize,
    pub verdict: Verdict,
    pub first_divergent: Option<String>,
    #[serde(with = "float::option")]
    pub worst_x_floor: Option<f64>,
    #[serde(with = "float")]
    pub worst_rel_l2: f64,
}

/// One row name across the samples that hold it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerRow {
    pub name: String,
    pub samples: usize,
    /// Of `metric` (the report's).
    #[serde(with = "float")]
    pub median: f64,
    #[serde(with = "float")]
    pub p95: f64,
    #[serde(with = "float")]
    pub max: f64,
    pub worst_sample: String,
    /// Samples whose row was flagged (drift or mismatch).
    pub flagged: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unpaired {
    pub id: String,
    pub file: String,
    /// For a token mismatch: the other side's file, and what differs.
    pub other: Option<String>,
    pub why: Option<String>,
    /// For a token mismatch: the kind of difference in words, without the positions (a
    /// leading token one side lacks, a shift by k, other ids), the same for pairs that differ
    /// alike.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failed {
    pub id: String,
    pub file_a: String,
    pub file_b: String,
    pub error: String,
}
