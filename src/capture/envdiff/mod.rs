//! Environment differences between the two sides of a report: their fingerprints compared key
//! by key, each differing key classified as one that can change the numbers (`matters`: the
//! linear-attention implementation, kernel packages present or not, dtype, device, weights,
//! tokenizer, library versions, …) or one that cannot (hostname, time, paths, hsdiff's version).
//!
//! Fingerprints are treated as generic JSON: nested objects are flattened to dotted keys
//! (`linear_attention_impl.causal_conv1d_fn.implementation`), so fields a writer adds flow
//! through without changes here. A key that is unknown counts as mattering unless its name says
//! it is a host, a time or a path.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::capture::fingerprint::Fingerprint;

mod keys;

pub use keys::{matters, ran_differently};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvDiff {
    /// Dotted key in the fingerprint JSON.
    pub key: String,
    /// The value on side A (`null`: not recorded).
    pub a: Option<String>,
    pub b: Option<String>,
    /// Whether this difference can change the hidden states.
    pub matters: bool,
}

/// Flattens a JSON object into `(dotted key, value as text)`; arrays are joined with commas.
fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        Value::Null => {}
        Value::String(s) if prefix.ends_with("dtype") => {
            out.push((prefix.to_string(), normalise_dtype(s).to_string()))
        }
        Value::String(s) => out.push((prefix.to_string(), s.clone())),
        Value::Array(items) => out.push((
            prefix.to_string(),
            items
                .iter()
                .map(|x| match x {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect::<Vec<_>>()
                .join(","),
        )),
        other => out.push((prefix.to_string(), other.to_string())),
    }
}

/// One spelling per dtype: PyTorch writers say `float32` or `torch.bfloat16`, hsdiff says `f32`.
fn normalise_dtype(s: &str) -> &str {
    match s.trim_start_matches("torch.") {
        "float64" | "double" | "f64" => "f64",
        "float32" | "float" | "f32" => "f32",
        "bfloat16" | "bf16" => "bf16",
        "float16" | "half" | "f16" => "f16",
        _ => s,
    }
}

/// Whether a fingerprint holds anything (files written without one give an empty record).
pub fn is_recorded(fp: &Fingerprint) -> bool {
    fp != &Fingerprint::default()
}

/// Every key whose value differs between the two fingerprints, mattering ones first. Keys one
/// writer records and the other does not are listed but do not matter (different writers record
/// different things); with no fingerprint on one side there is nothing to compare.
pub fn env_diff(a: &Fingerprint, b: &Fingerprint) -> Vec<EnvDiff> {
    if !is_recorded(a) || !is_recorded(b) {
        return Vec::new();
    }
    let (Ok(va), Ok(vb)) = (serde_json::to_value(a), serde_json::to_value(b)) else {
        return Vec::new();
    };
    diff_values(&va, &vb)
}

/// [`env_diff`] on raw JSON.
pub fn diff_values(a: &Value, b: &Value) -> Vec<EnvDiff> {
    let (mut fa, mut fb) = (Vec::new(), Vec::new());
    flatten("", a, &mut fa);
    flatten("", b, &mut fb);
    let ma: std::collections::BTreeMap<_, _> = fa.into_iter().collect();
    let mb: std::collections::BTreeMap<_, _> = fb.into_iter().collect();
    let mut keys: Vec<&String> = ma.keys().chain(mb.keys()).collect();
    keys.sort();
    keys.dedup();
    // hsdiff dumps record the number of tokens and model names that the ids check and the
    // digests already cover; "model" is a path or a name when a digest is present on both sides.
    let digests = ["weights_digest", "config_sha256"]
        .iter()
        .any(|k| ma.contains_key(*k) && mb.contains_key(*k));
    // Two files from the same writer at the same version record the same keys; one it leaves
    // out is absent on that machine (`fla` dropped because the package is not installed), which
    // matters. An older version of the writer (an old dump) records fewer keys.
    let same_writer = ma.get("source").is_some_and(|s| !s.is_empty())
        && ["source", "tool", "tool_version"]
            .iter()
            .all(|k| ma.get(*k) == mb.get(*k));
    let mut out: Vec<EnvDiff> = keys
        .into_iter()
        .filter_map(|k| {
            let (x, y) = (ma.get(k), mb.get(k));
            if x == y {
                return None;
            }
            // Otherwise a key one side lacks matters only inside a section that differs in a
            // mattering key both sides record (`kernels.fla.version` next to
            // `kernels.fla.available`): a package present on one machine only. In a section
            // that agrees on what both record, it is a writer that records more (an old dump
            // beside a new one); a section only one side records is just a different writer.
            let recorded_by_both = x.is_some() && y.is_some();
            let section_differs = k.rsplit_once('.').is_some_and(|(parent, _)| {
                let p = format!("{parent}.");
                ma.range(p.clone()..)
                    .take_while(|(key, _)| key.starts_with(&p))
                    .any(|(key, v)| mb.get(key).is_some_and(|w| w != v) && matters(key))
            });
            let both = same_writer || recorded_by_both || section_differs;
            let m = both && matters(k) && !(k == "model" && digests);
            Some(EnvDiff {
                key: k.clone(),
                a: x.cloned(),
                b: y.cloned(),
                matters: m,
            })
        })
        .collect();
    out.sort_by_key(|d| (!(d.matters && ran_differently(&d.key)), !d.matters));
    out
}

/// When the two sides asked for different linear-attention implementations but ran the same
/// ones (`hsdiff-capture --ab auto,torch` where no kernel package imports): a clause saying the
/// comparison tests nothing, for the headline. `a`, `b` are the two fingerprints.
pub fn same_implementations(diffs: &[EnvDiff], a: &Fingerprint, b: &Fingerprint) -> Option<String> {
    let records = |fp: &Fingerprint| {
        serde_json::to_value(fp)
            .ok()
            .and_then(|v| v.get("linear_attention_impl").map(|i| i.to_string()))
    };
    let (ia, ib) = (records(a)?, records(b)?);
    let requested: Vec<&EnvDiff> = diffs
        .iter()
        .filter(|d| d.key.starts_with("linear_attention_request."))
        .collect();
    let ran_apart = diffs.iter().any(|d| {
        d.key.starts_with("linear_attention_impl.")
            && matches!(
                d.key.rsplit('.').next(),
                Some("actual" | "implementation" | "fast")
            )
    });
    if requested.is_empty() || ran_apart || ia.is_empty() || ib.is_empty() {
        return None;
    }
    let asked: Vec<String> = requested
        .iter()
        .map(|d| {
            format!(
                "{} {} vs {}",
                d.key.trim_start_matches("linear_attention_request."),
                d.a.as_deref().unwrap_or("—"),
                d.b.as_deref().unwrap_or("—")
            )
        })
        .collect();
    Some(format!(
        "both sides ran the same linear-attention implementations although different ones were \
         requested ({}): this comparison does not test one implementation against another",
        asked.join(", ")
    ))
}

/// "linear_attention_impl (fla vs torch fallback), device (cuda:0 vs cpu)" for the summary.
pub fn summary_clause(diffs: &[EnvDiff]) -> Option<String> {
    // What ran differently leads; `env_diff` sorts those first.
    let m: Vec<&EnvDiff> = diffs.iter().filter(|d| d.matters).collect();
    if m.is_empty() {
        return None;
    }
    let short = |s: &Option<String>| {
        let s = s.as_deref().unwrap_or("—");
        if s.chars().count() > 32 {
            format!("{}…", s.chars().take(31).collect::<String>())
        } else {
            s.to_string()
        }
    };
    let mut parts: Vec<String> = m
        .iter()
        .take(3)
        .map(|d| format!("{} ({} vs {})", d.key, short(&d.a), short(&d.b)))
        .collect();
    if m.len() > 3 {
        parts.push(format!("{} more", m.len() - 3));
    }
    Some(format!("environments differ in {}", parts.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn classification() {
        for k in [
            "linear_attention_impl",
            "fast_path",
            "kernels.fla.available",
            "causal_conv1d",
            "dtype",
            "device",
            "weights_digest",
            "config_sha256",
            "tokenizer_sha256",
            "torch",
            "transformers",
            "attn_implementation",
            "implementation",
            "backend",
            "cpu_features",
        ] {
            assert!(matters(k), "{k} should matter");
        }
        for k in [
            "hostname",
            "created",
            "tool_version",
            "git_commit",
            "model_path",
            "linear_attention_impl.causal_conv1d_fn.calls",
            "output_dir",
            "threads",
        ] {
            assert!(!matters(k), "{k} should not matter");
        }
    }

    #[test]
    fn nested_keys_and_one_sided() {
        let a = json!({"format": "hsdiff.dump/v1", "hostname": "a", "kernels": {"fla": true}, "only_a": "x",
            "pkgs": {"causal_conv1d": {"available": false}}});
        let b = json!({"format": "hsdiff.dump/v1", "hostname": "b", "kernels": {"fla": false},
            "pkgs": {"causal_conv1d": {"available": true, "version": "1.5"}}});
        let d = diff_values(&a, &b);
        assert_eq!(d[0].key, "kernels.fla");
        assert!(d[0].matters);
        let host = d.iter().find(|x| x.key == "hostname").expect("hostname");
        assert!(!host.matters);
        let one = d.iter().find(|x| x.key == "only_a").expect("only_a");
        assert!(!one.matters && one.b.is_none());
        // Same writer: a key only one side records (a package missing there) matters.
        let same = diff_values(
            &json!({"source": "pytorch", "fla": "0.3.2", "hostname": "a"}),
            &json!({"source": "pytorch", "hostname": "b"}),
        );
        assert!(
            same.iter()
                .any(|x| x.key == "fla" && x.matters && x.b.is_none())
        );
        let v = d
            .iter()
            .find(|x| x.key == "pkgs.causal_conv1d.version")
            .expect("version");
        assert!(v.matters && v.a.is_none());
        let s = summary_clause(&d).expect("clause");
        assert!(
            s.starts_with("environments differ in kernels.fla (true vs false)"),
            "{s}"
        );
    }

    #[test]
    fn per_function_explanations_and_strict_f64_checks_are_informational() {
        for k in [
            "linear_attention_impl.causal_conv1d_fn.reason",
            "linear_attention_impl.causal_conv1d_fn.requested",
            "linear_attention_impl.causal_conv1d_fn.environment_implementation",
            "strict_f64.method",
            "strict_f64.rewrites.Tensor.float",
            "strict_f64.layer0_gdn_vs_numpy_rel_l2",
        ] {
            assert!(!matters(k), "{k} should not matter");
        }
        for k in [
            "linear_attention_impl.causal_conv1d_fn.implementation",
            "linear_attention_impl.causal_conv1d_fn.actual",
            "linear_attention_impl.causal_conv1d_fn.fast",
            "mode",
        ] {
            assert!(matters(k), "{k} should matter");
        }
        // A forced run and an auto run that ended on the same kernel: only the explanation differs.
        let record = |requested: &str, reason: &str| {
            json!({"source": "pytorch", "tool": "hsdiff-capture 0.3.0", "linear_attention_impl":
                {"chunk_gated_delta_rule": {"requested": requested, "actual": "fla", "reason": reason,
                    "implementation": "fla.ops.gated_delta_rule.chunk_gated_delta_rule", "fast": true}}})
        };
        let d = diff_values(
            &record("auto", "environment's choice"),
            &record("fla", "asked for fla; already the environment's choice"),
        );
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(d.iter().all(|x| !x.matters), "{d:?}");
    }

    #[test]
    fn keys_an_old_dump_does_not_record_do_not_matter() {
        let old = json!({"source": "pytorch", "tool": "hsdiff-capture 0.2.0", "linear_attention_impl":
            {"causal_conv1d_fn": {"implementation": "causal_conv1d.causal_conv1d_fn", "calls": 4}}});
        let new = |implementation: &str| {
            json!({"source": "pytorch", "tool": "hsdiff-capture 0.3.0", "linear_attention_impl":
                {"causal_conv1d_fn": {"implementation": implementation, "calls": 4, "actual": "fla",
                    "fast": true, "package": "causal_conv1d"}}})
        };
        let d = diff_values(&old, &new("causal_conv1d.causal_conv1d_fn"));
        let one_sided: Vec<&EnvDiff> = d.iter().filter(|x| x.a.is_none()).collect();
        assert_eq!(one_sided.len(), 3, "{d:?}");
        assert!(d.iter().all(|x| !x.matters), "{d:?}");
        // The same section with a different implementation: its new keys are part of that change.
        let d = diff_values(&old, &new("torch_causal_conv1d_fn"));
        let get = |k: &str| d.iter().find(|x| x.key == k).expect(k);
        assert!(get("linear_attention_impl.causal_conv1d_fn.implementation").matters);
        assert!(get("linear_attention_impl.causal_conv1d_fn.fast").matters);
        // The same version of the writer records the same keys: one it lacks is missing there.
        let mut same_version = new("causal_conv1d.causal_conv1d_fn");
        same_version["tool"] = json!("hsdiff-capture 0.2.0");
        let d = diff_values(&old, &same_version);
        assert!(
            get_matters(&d, "linear_attention_impl.causal_conv1d_fn.fast"),
            "{d:?}"
        );
    }

    fn get_matters(d: &[EnvDiff], key: &str) -> bool {
        d.iter().any(|x| x.key == key && x.matters)
    }

    #[test]
    fn requests_are_informational_and_the_same_implementations_are_said() {
        let fp = |req: &str, actual: &str| -> Fingerprint {
            serde_json::from_value(json!({
                "format": "hsdiff.dump/v1", "source": "pytorch", "tool": "hsdiff-capture 0.1",
                "linear_attention_request": {"conv": req, "core": req, "norm": req},
                "linear_attention_impl": {"chunk_gated_delta_rule": {"requested": req, "actual": actual}},
            }))
            .expect("fingerprint")
        };
        // auto and torch asked for, torch ran on both: nothing ran differently, and the
        // headline says the comparison tests nothing.
        let (a, b) = (fp("auto", "torch"), fp("torch", "torch"));
        let d = env_diff(&a, &b);
        assert!(!d.is_empty() && d.iter().all(|x| !x.matters), "{d:?}");
        assert_eq!(summary_clause(&d), None);
        let clause = same_implementations(&d, &a, &b).expect("said");
        assert!(clause.contains("conv auto vs torch"), "{clause}");
        // fla against torch: a real A/B, no such clause, and what ran matters.
        let (a, b) = (fp("auto", "fla"), fp("torch", "torch"));
        let d = env_diff(&a, &b);
        assert!(same_implementations(&d, &a, &b).is_none());
        assert!(get_matters(
            &d,
            "linear_attention_impl.chunk_gated_delta_rule.actual"
        ));
    }
}
