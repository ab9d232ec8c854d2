//! `hsdiff compare A B` on the committed fixtures of `tests/fixtures/compare/` (written by
//! `tests/fixtures/compare/make.py` from the golden tiny Qwen3.5 run with transformers): every
//! accepted format and name convention, the hidden_states convention, layer-shift detection,
//! the token-mismatch refusal, environment differences, exit codes, and malformed files.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use hsdiff::formats::FileSource;
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/compare")
        .join(name)
}

fn hsdiff(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hsdiff"))
        .args(args)
        .output()
        .expect("run hsdiff")
}

fn compare(a: &Path, b: &Path, extra: &[&str]) -> Output {
    let (a, b) = (a.to_string_lossy(), b.to_string_lossy());
    let mut args = vec!["compare", a.as_ref(), b.as_ref()];
    args.extend_from_slice(extra);
    hsdiff(&args)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `compare … --format json` on two fixtures; returns the exit code and the report.
fn compare_json(a: &str, b: &str, extra: &[&str]) -> (i32, Value) {
    let (code, report, _) = common::compare_json(&fixture(a), &fixture(b), extra);
    (code, report)
}

fn max_rel(r: &Value) -> f64 {
    r["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .map(|t| t["rel_l2"].as_f64().expect("rel_l2"))
        .fold(0.0, f64::max)
}

/// The rows of a file in the output_hidden_states convention: 9 entries of the 8-layer model.
fn hs_rows() -> Vec<String> {
    let mut v = vec!["embed".to_string()];
    v.extend((0..7).map(|i| format!("layers.{i}")));
    v.push("final_norm".to_string());
    v
}

#[test]
fn every_format_reads_like_the_dump() {
    // (file, rows beyond hs_rows, dtype of the thresholds, token ids)
    let cases: &[(&str, &[&str], &str, &str)] = &[
        ("hs_tuple.pt", &[], "f32", "only_a"),
        ("hs_bf16.pt", &[], "bf16", "only_a"),
        ("hs_dict.pt", &["logits"], "f32", "match"),
        ("hs_stacked.npy", &[], "f32", "only_a"),
        ("hs.npz", &[], "f32", "match"),
        ("hs_compressed.npz", &[], "f32", "only_a"),
        ("hooks.safetensors", &["layers.7"], "f32", "match"),
        ("dump_bf16.safetensors", &["layers.7"], "bf16", "match"),
    ];
    for (file, more, dtype, ids) in cases {
        let (code, r) = compare_json("dump_f32.safetensors", file, &[]);
        assert_eq!(code, 0, "{file}: {}", r["summary"]);
        assert_eq!(r["mode"], "files", "{file}");
        assert_eq!(r["thresholds"]["dtype"], *dtype, "{file}");
        assert_eq!(r["inputs"]["token_ids"], *ids, "{file}");
        assert_eq!(r["inputs"]["tokens"], 8, "{file}");
        let mut want = hs_rows();
        for m in *more {
            let at = if *m == "logits" {
                want.len()
            } else {
                want.len() - 1
            };
            want.insert(at, m.to_string());
        }
        assert_eq!(common::row_names(&r), want, "{file}");
        let tol = if *dtype == "bf16" { 4e-3 } else { 0.0 };
        assert!(max_rel(&r) <= tol, "{file}: max rel {}", max_rel(&r));
        assert!(r["alignment"].is_null(), "{file}");
        assert!(r["env_diff"].is_array(), "{file}");
    }
}

#[test]
fn hidden_states_last_entry_is_the_final_norm() {
    let src = FileSource::open(&fixture("hs_tuple.pt"), None).expect("opens");
    assert_eq!(src.raw_name("embed"), Some("0"));
    assert_eq!(src.raw_name("layers.0"), Some("1"));
    assert_eq!(src.raw_name("layers.6"), Some("7"));
    // hs[L] is after the final norm: final_norm, never layers.{L-1}.
    assert_eq!(src.raw_name("final_norm"), Some("8"));
    assert!(!src.has("layers.7"));
    let dict = FileSource::open(&fixture("hs_dict.pt"), None).expect("opens");
    assert_eq!(dict.raw_name("final_norm"), Some("hidden_states.8"));
    assert_eq!(dict.input_ids().expect("ids").map(|v| v.len()), Some(8));
    assert!(dict.fingerprint.is_some());
}

/// `x[:, 1:]` of a batch of one, saved as is, keeps the full tensor's batch stride and a storage
/// offset; torch calls it contiguous (a size-1 dimension's stride is any), and it reads as the
/// same values copied into fresh tensors, bit for bit.
#[test]
fn a_view_past_the_first_position_of_a_batch_of_one_is_read() {
    let (code, r) = compare_json("view_batch1.pt", "view_batch1_copy.pt", &[]);
    assert_eq!(code, 0, "{}", r["summary"]);
    let summary = r["summary"].as_str().expect("summary");
    assert!(summary.contains("are identical (bit for bit)"), "{summary}");
    assert_eq!(r["tensors"].as_array().map(Vec::len), Some(8), "{summary}");
}

/// The alignment check reads only the first tokens of each layer, straight from the map.
#[test]
fn head_reads_match_full_reads() {
    for file in [
        "dump_f32.safetensors",
        "hs_stacked.npy",
        "hs_tuple.pt",
        "hs_compressed.npz",
    ] {
        let src = FileSource::open(&fixture(file), None).expect("opens");
        for name in ["embed", "layers.3"] {
            let full = src.get(name).expect("get").expect("present");
            let head = src.get_head(name, 3).expect("head").expect("present");
            assert_eq!(head.dims(), [1, 3, 64], "{file} {name}");
            let want: Vec<f32> = full
                .narrow(1, 0, 3)
                .and_then(|t| t.flatten_all())
                .and_then(|t| t.to_vec1())
                .expect("values");
            let got: Vec<f32> = head
                .flatten_all()
                .and_then(|t| t.to_vec1())
                .expect("values");
            assert_eq!(got, want, "{file} {name}");
        }
    }
}

#[test]
fn hsdiff_dump_against_pytorch_hidden_states() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dump = dir.path().join("own.safetensors");
    let o = hsdiff(&[
        "dump",
        "--tokens",
        "17,200,45,300,3,99,150,7",
        "--dtype",
        "f32",
        "--out",
        dump.to_str().expect("utf-8"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = compare(&dump, &fixture("hs_tuple.pt"), &["--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(common::row_names(&r), hs_rows());
    assert!(max_rel(&r) < 1e-5, "max rel {}", max_rel(&r));
    // And against the PyTorch dump with ids: checked, equal.
    let o = compare(
        &dump,
        &fixture("dump_f32.safetensors"),
        &["--format", "json"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(r["inputs"]["token_ids_match"], true);
}

#[test]
fn layer_shift_is_detected_and_shift_aligns() {
    // shifted.safetensors holds hidden_states[i] as layers.{i}: the embedding counted as a layer.
    let (code, r) = compare_json("shifted.safetensors", "dump_f32.safetensors", &[]);
    assert_eq!(code, 1);
    let summary = r["summary"].as_str().expect("summary");
    // The shift explains the table: the headline leads with it, after the verdict word.
    assert!(
        summary.starts_with("mismatch: B looks shifted by +1 layer relative to A"),
        "{summary}"
    );
    assert_eq!(r["alignment"]["offset"], 1);
    assert_eq!(r["alignment"]["applied"], false);
    let e = &r["alignment"]["evidence"];
    assert!(e["diagonal_median_rel_l2"].as_f64().expect("diag") > 0.1);
    assert_eq!(e["shifted_median_rel_l2"].as_f64(), Some(0.0));
    assert_eq!(e["shifted_pairs"], 8);

    let (code, r) = compare_json(
        "shifted.safetensors",
        "dump_f32.safetensors",
        &["--shift", "1"],
    );
    assert_eq!(code, 0, "{}", r["summary"]);
    assert_eq!(r["alignment"]["applied"], true);
    assert_eq!(r["alignment"]["offset"], 1);
    assert_eq!(max_rel(&r), 0.0);
    assert_eq!(r["tensors"].as_array().map(Vec::len), Some(8));

    // The other way round the shift is −1.
    let (code, r) = compare_json("dump_f32.safetensors", "shifted.safetensors", &[]);
    assert_eq!(code, 1);
    assert_eq!(r["alignment"]["offset"], -1);
    let (code, _) = compare_json(
        "dump_f32.safetensors",
        "shifted.safetensors",
        &["--shift", "-1"],
    );
    assert_eq!(code, 0);
}

#[test]
fn different_token_ids_are_refused() {
    let o = compare(
        &fixture("dump_f32.safetensors"),
        &fixture("dump_tokens.safetensors"),
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("position 3"), "{err}");
    assert!(err.contains("dump_tokens.safetensors"), "{err}");
    assert!(
        err.contains("other ids from position 3 (A 300, B 301;"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
}

#[test]
fn environment_differences_are_flagged() {
    let (code, r) = compare_json("dump_f32.safetensors", "dump_fast.safetensors", &[]);
    assert_eq!(code, 0, "same numbers");
    let diffs = r["env_diff"].as_array().expect("env_diff");
    let get = |k: &str| {
        diffs
            .iter()
            .find(|d| d["key"] == k)
            .unwrap_or_else(|| panic!("no env_diff {k}: {diffs:?}"))
    };
    assert_eq!(get("fast_path")["matters"], true);
    assert_eq!(get("fast_path")["a"], "false");
    assert_eq!(get("fast_path")["b"], "true");
    assert_eq!(get("kernels.fla.available")["matters"], true);
    assert_eq!(get("kernels.causal_conv1d.available")["matters"], true);
    assert_eq!(get("linear_attention_impl")["matters"], true);
    // A package that is installed on one machine only (its version recorded there only).
    assert_eq!(get("kernels.fla.version")["matters"], true);
    assert_eq!(get("hostname")["matters"], false);
    assert_eq!(get("created")["matters"], false);
    let summary = r["summary"].as_str().expect("summary");
    assert!(
        summary.contains("environments differ in fast_path (false vs true)"),
        "{summary}"
    );

    let o = compare(
        &fixture("dump_f32.safetensors"),
        &fixture("dump_fast.safetensors"),
        &["--format", "markdown"],
    );
    let md = String::from_utf8_lossy(&o.stdout);
    assert!(md.contains("### Environment differences"), "{md}");
    assert!(
        md.contains("| fast_path | false | true | **yes** |"),
        "{md}"
    );
    let o = compare(
        &fixture("dump_f32.safetensors"),
        &fixture("dump_fast.safetensors"),
        &["--format", "table"],
    );
    let table = String::from_utf8_lossy(&o.stdout);
    // What ran differently leads; the rest is counted, and listed with --env all.
    assert!(table.contains("what ran differently"), "{table}");
    assert!(table.contains("implementation"), "{table}");
    assert!(!table.contains("hostname"), "{table}");
    assert!(table.contains("--env all lists them"), "{table}");
    let o = compare(
        &fixture("dump_f32.safetensors"),
        &fixture("dump_fast.safetensors"),
        &["--format", "table", "--env", "all"],
    );
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("environment differences"), "{table}");
    assert!(table.contains("hostname"), "{table}");

    // No differences: an empty list, and no clause in the summary.
    let (code, r) = compare_json("dump_f32.safetensors", "dump_f32.safetensors", &[]);
    assert_eq!(code, 0);
    assert_eq!(r["env_diff"].as_array().map(Vec::len), Some(0));
    assert!(!r["summary"].as_str().expect("s").contains("environments"));
}

#[test]
fn exit_codes() {
    let (code, r) = compare_json("dump_f32.safetensors", "dump_f32.safetensors", &[]);
    assert_eq!(code, 0);
    assert_eq!(r["verdict"], "ok");
    assert_eq!(r["inputs"]["token_ids_match"], true);

    let (code, r) = compare_json("dump_f32.safetensors", "dump_perturbed.safetensors", &[]);
    assert_eq!(code, 1);
    assert_eq!(r["verdict"], "mismatch");
    assert_eq!(r["first_divergent"], "layers.5");
    let (code, _) = compare_json(
        "dump_f32.safetensors",
        "dump_perturbed.safetensors",
        &["--fail-on", "never"],
    );
    assert_eq!(code, 0);
    // --layers keeps only the named layers.
    let (code, r) = compare_json(
        "dump_f32.safetensors",
        "dump_perturbed.safetensors",
        &["--layers", "1,2"],
    );
    assert_eq!(code, 0);
    assert_eq!(
        common::row_names(&r),
        ["embed", "layers.1", "layers.2", "final_norm"]
    );
}

#[test]
fn map_names_tensors_no_convention_knows() {
    let o = compare(
        &fixture("dump_f32.safetensors"),
        &fixture("custom.npz"),
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("custom.npz") && err.contains("--map"), "{err}");

    let (code, r) = compare_json(
        "dump_f32.safetensors",
        "custom.npz",
        &["--map", "layers.3=block3", "--map", "embed=emb"],
    );
    assert_eq!(code, 0, "{}", r["summary"]);
    assert_eq!(common::row_names(&r), ["embed", "layers.3"]);
    assert_eq!(max_rel(&r), 0.0);
    assert!(
        !r["notes"].to_string().contains("read as no hsdiff name"),
        "{}",
        r["notes"]
    );
    // A tensor neither a convention nor --map names is not compared, and the report says so.
    let (code, r) = compare_json(
        "dump_f32.safetensors",
        "custom.npz",
        &["--map", "layers.3=block3"],
    );
    assert_eq!(code, 0, "{}", r["summary"]);
    assert_eq!(common::row_names(&r), ["layers.3"]);
    let notes = common::strings(&r["notes"]);
    assert!(
        notes.contains(
            &"1 tensor of B read as no hsdiff name (emb), not compared: name them with --map \
              A_NAME=B_NAME (docs/file-formats.md lists the names)"
        ),
        "{notes:?}"
    );
    // Mapping the wrong tensor shows up as a mismatch.
    let (code, _) = compare_json(
        "dump_f32.safetensors",
        "custom.npz",
        &["--map", "layers.4=block3"],
    );
    assert_eq!(code, 1);
    // A name that is not in the file is an error naming it.
    let o = compare(
        &fixture("dump_f32.safetensors"),
        &fixture("custom.npz"),
        &["--map", "layers.3=block9"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("block9"), "{}", stderr(&o));
}

/// Folders of such files, compared as a dataset: each sample's unread tensor is listed in its
/// row (`unnamed_b`) and, grouped, in the dataset report's notes, as in a pair's report.
#[test]
fn a_dataset_lists_the_tensors_no_name_rule_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    for (side, file) in [(&a, "dump_f32.safetensors"), (&b, "custom.npz")] {
        std::fs::create_dir(side).expect("mkdir");
        let ext = Path::new(file).extension().expect("extension");
        for id in ["s0", "s1"] {
            let to = side.join(id).with_extension(ext);
            std::fs::copy(fixture(file), to).expect("copy");
        }
    }
    let (code, r, err) = common::compare_json(&a, &b, &["--map", "layers.3=block3"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(r["samples"].as_array().map(Vec::len), Some(2), "{r}");
    assert_eq!(r["samples"][0]["unnamed_b"], serde_json::json!(["emb"]));
    assert!(
        r["samples"][0].get("unnamed_a").is_none(),
        "{}",
        r["samples"][0]
    );
    let notes = common::strings(&r["sample_notes"]);
    // B's file holds two of A's tensors only: the rest of A's is one-sided, said first.
    assert_eq!(
        notes,
        [
            "in 2 of 2 samples (s0, s1): 10 tensors only in A (embed, layers.0, layers.1, \
             layers.2 and 6 more), not compared: B holds no such tensor",
            "in 2 of 2 samples (s0, s1): 1 tensor of B read as no hsdiff name (emb), not compared: \
             name them with --map A_NAME=B_NAME (docs/file-formats.md lists the names)"
        ],
    );
}

/// A `.npy` of bf16 bits (`t.view(torch.int16).numpy()`): read with `--dtype-hint bf16` only.
#[test]
fn bf16_bits_in_numpy_need_the_hint() {
    let st = std::fs::read(fixture("dump_bf16.safetensors")).expect("read");
    let file = safetensors::SafeTensors::deserialize(&st).expect("parse");
    let embed = file.tensor("embed").expect("embed");
    assert_eq!(embed.dtype(), safetensors::Dtype::BF16);
    let mut header = "{'descr': '<i2', 'fortran_order': False, 'shape': (1, 8, 64), }".to_string();
    while !(10 + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    npy.extend((header.len() as u16).to_le_bytes());
    npy.extend(header.as_bytes());
    npy.extend(embed.data());
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("embed.npy");
    std::fs::write(&path, npy).expect("write");

    let o = compare(&fixture("dump_bf16.safetensors"), &path, &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--dtype-hint bf16"), "{}", stderr(&o));
    let o = compare(
        &fixture("dump_bf16.safetensors"),
        &path,
        &["--dtype-hint", "bf16", "--format", "json"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(common::row_names(&r), ["embed"]);
    assert_eq!(max_rel(&r), 0.0);
}

/// Truncated, malformed and missing files: exit 2, one line naming the file, never a panic.
#[test]
fn broken_files_exit_2_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut broken: Vec<PathBuf> = Vec::new();
    for name in [
        "dump_f32.safetensors",
        "hs_tuple.pt",
        "hs_stacked.npy",
        "hs.npz",
        "hs_compressed.npz",
    ] {
        let bytes = std::fs::read(fixture(name)).expect("read");
        for cut in [
            0,
            5,
            9,
            60,
            bytes.len() / 3,
            bytes.len() / 2,
            bytes.len() - 1,
        ] {
            let path = dir.path().join(format!("cut{cut}_{name}"));
            std::fs::write(&path, &bytes[..cut]).expect("write");
            broken.push(path);
        }
    }
    let garbage = dir.path().join("garbage.pt");
    std::fs::write(&garbage, b"this is not a tensor file\n").expect("write");
    broken.push(garbage);
    let text_st = dir.path().join("text.safetensors");
    std::fs::write(&text_st, [0xffu8; 64]).expect("write");
    broken.push(text_st);
    for name in ["bad_short_storage.pt", "bad_view.pt", "bad_legacy.pt"] {
        broken.push(fixture(name));
    }
    broken.push(dir.path().join("missing.safetensors"));

    let good = fixture("dump_f32.safetensors");
    for path in &broken {
        for (a, b) in [(&good, path), (path, &good)] {
            let o = compare(a, b, &[]);
            let err = stderr(&o);
            assert_eq!(
                o.status.code(),
                Some(2),
                "{}: expected exit 2, stderr: {err}",
                path.display()
            );
            assert!(!err.contains("panicked"), "{}: {err}", path.display());
            let file_name = path.file_name().and_then(|n| n.to_str()).expect("name");
            assert!(
                err.contains(file_name),
                "{}: message does not name the file: {err}",
                path.display()
            );
            assert_eq!(
                err.lines()
                    .filter(|l| l.starts_with("hsdiff: error"))
                    .count(),
                1,
                "{err}"
            );
        }
    }
}

/// Random byte flips in the headers of every fixture format: exit 0, 1 or 2, never a panic.
#[test]
fn mutated_files_never_panic() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let dir = tempfile::tempdir().expect("tempdir");
    let good = fixture("dump_f32.safetensors");
    for name in [
        "dump_f32.safetensors",
        "hs_dict.pt",
        "hs_stacked.npy",
        "hs.npz",
        "hs_compressed.npz",
    ] {
        let bytes = std::fs::read(fixture(name)).expect("read");
        for round in 0..12 {
            let mut m = bytes.clone();
            for _ in 0..rng.random_range(1..4) {
                // Mostly the header / pickle / zip directory, sometimes anywhere.
                let at = if rng.random_bool(0.7) {
                    rng.random_range(0..m.len().min(600))
                } else {
                    rng.random_range(0..m.len())
                };
                m[at] = rng.random();
            }
            let path = dir.path().join(format!("m{round}_{name}"));
            std::fs::write(&path, &m).expect("write");
            let o = compare(&good, &path, &[]);
            let err = stderr(&o);
            assert!(
                matches!(o.status.code(), Some(0..=2)),
                "{}: {:?} {err}",
                path.display(),
                o.status
            );
            assert!(!err.contains("panicked"), "{}: {err}", path.display());
        }
    }
}
