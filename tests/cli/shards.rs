//! Shards on a real dataset (`tests/fixtures/pipelines/qwen3_5_tiny`: a SpecForge DFlash dump
//! against the eval box's dumps, sample 1 carrying the planted bug): `--shard auto/N` from each
//! scheduler's variables and each refusal, resume of a complete part and redo of anything
//! else at `--out`, and `merge` that refuses every tampered, foreign, missing or repeated part
//! and otherwise equals the unsharded run.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The variables `--shard auto/N` reads: cleared for every run, so that a test run inside a
/// Slurm job or a Kubernetes pod sees only what the test sets.
const SCHEDULER_VARS: [&str; 6] = [
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_STEP",
    "SLURM_ARRAY_TASK_COUNT",
    "JOB_COMPLETION_INDEX",
    "HSDIFF_SHARD_INDEX",
];

/// Variables set for one run.
type Env<'a> = &'a [(&'a str, &'a str)];

fn fx(rel: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pipelines/qwen3_5_tiny")
        .join(rel)
        .display()
        .to_string()
}

fn model() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("golden/qwen3_5_tiny")
        .display()
        .to_string()
}

/// The dataset and its options, as every run here gives them: calibrated with the model (the
/// planted bug is 11× the floor; uncalibrated, the depth-scaled band lets it pass).
fn dataset_args() -> Vec<String> {
    vec![
        "compare".into(),
        fx("specforge_dflash"),
        fx("eval"),
        "--draft-config".into(),
        fx("draft_config.json"),
        "--model".into(),
        model(),
    ]
}

fn run(args: &[String], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hsdiff"));
    c.args(args).env_remove("RUST_BACKTRACE");
    for v in SCHEDULER_VARS {
        c.env_remove(v);
    }
    c.envs(env.iter().copied());
    c.output().expect("run hsdiff")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exit code")
}

/// `compare` of the dataset with `extra`.
fn compare(extra: &[&str], env: &[(&str, &str)]) -> Output {
    let mut args = dataset_args();
    args.extend(extra.iter().map(|s| s.to_string()));
    run(&args, env)
}

/// Shard `shard` written as a part to `out`.
fn part(shard: &str, out: &Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let out = out.display().to_string();
    let mut all = vec!["--shard", shard, "--format", "json", "--out", &out];
    all.extend(extra);
    compare(&all, env)
}

fn merge(parts: &[&Path], extra: &[&str]) -> Output {
    let mut args: Vec<String> = vec!["merge".into()];
    args.extend(parts.iter().map(|p| p.display().to_string()));
    args.extend(extra.iter().map(|s| s.to_string()));
    run(&args, &[])
}

/// The one error line of a refused run (exit 2), checked to name `needles`.
fn refused(o: &Output, needles: &[&str], case: &str) {
    let err = stderr(o);
    assert_eq!(code(o), 2, "{case}: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(lines.len(), 1, "{case}: {err}");
    for n in needles {
        assert!(lines[0].contains(n), "{case}: `{n}` not in {err}");
    }
    assert!(!err.contains("panicked"), "{case}: {err}");
}

fn without_command(mut v: Value) -> Value {
    v.as_object_mut().expect("object").remove("command");
    v
}

fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).expect("read")).expect("JSON")
}

/// A part rewritten as `edit` makes it and its digest made again, as a forger would.
fn forge(src: &Path, dst: &Path, edit: impl FnOnce(&mut Value)) {
    let mut v = read_json(src);
    edit(&mut v);
    v["part"]["digest"] = Value::String(format!("sha256:{}", "0".repeat(64)));
    let mut bytes = serde_json::to_vec_pretty(&v).expect("JSON");
    bytes.push(b'\n');
    let bytes = hsdiff::report::dataset_part::stamp(bytes).expect("stamp");
    std::fs::write(dst, bytes).expect("write");
}

/// The three parts of the dataset, one from each scheduler's variables, merged: the unsharded
/// run's report. Then every refusal of `auto/N` and of absurd shard values.
#[test]
fn auto_shards_from_each_scheduler_merge_into_the_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let whole = compare(&["--format", "json"], &[]);
    assert_eq!(code(&whole), 1, "{}", stderr(&whole));
    let whole: Value = serde_json::from_slice(&whole.stdout).expect("JSON");
    let slurm = [
        ("SLURM_ARRAY_TASK_ID", "2"),
        ("SLURM_ARRAY_TASK_MIN", "1"),
        ("SLURM_ARRAY_TASK_COUNT", "3"),
    ];
    let cases: [(Env, usize, &str); 3] = [
        (&slurm, 1, "SLURM_ARRAY_TASK_ID=2 − SLURM_ARRAY_TASK_MIN=1"),
        (
            &[("JOB_COMPLETION_INDEX", "2")],
            2,
            "JOB_COMPLETION_INDEX=2",
        ),
        (&[("HSDIFF_SHARD_INDEX", "0")], 0, "HSDIFF_SHARD_INDEX=0"),
    ];
    let mut parts = Vec::new();
    for (env, index, said) in cases {
        let out = dir.path().join(format!("part{index}.json"));
        let o = part("auto/3", &out, &[], env);
        assert!(matches!(code(&o), 0 | 1), "{said}: {}", stderr(&o));
        let line = format!("hsdiff: --shard auto/3: index {index} from {said}");
        assert!(stderr(&o).lines().any(|l| l == line), "{}", stderr(&o));
        assert_eq!(read_json(&out)["shard"]["index"], index);
        parts.push(out);
    }
    let refs: Vec<&Path> = parts.iter().map(PathBuf::as_path).collect();
    let o = merge(&refs, &["--format", "json"]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let merged: Value = serde_json::from_slice(&o.stdout).expect("merged JSON");
    assert!(merged.get("part").is_none());
    assert_eq!(without_command(merged), without_command(whole.clone()));
    // The merged exit code is merge's own --fail-on, from the rows.
    assert_eq!(code(&merge(&refs, &["--fail-on", "never"])), 0);

    let out = dir.path().join("refused.json");
    let refusals: [(&str, Env, &[&str]); 9] = [
        (
            "auto/3",
            &[],
            &["--shard", "no shard index in the environment"],
        ),
        (
            "auto/3",
            &[("JOB_COMPLETION_INDEX", "1"), ("HSDIFF_SHARD_INDEX", "2")],
            &[
                "two shard indices",
                "JOB_COMPLETION_INDEX=1",
                "HSDIFF_SHARD_INDEX=2",
            ],
        ),
        (
            "auto/3",
            &[("HSDIFF_SHARD_INDEX", "one")],
            &["not a whole number"],
        ),
        (
            "auto/3",
            &[
                ("SLURM_ARRAY_TASK_ID", "1"),
                ("SLURM_ARRAY_TASK_MIN", "1"),
                ("SLURM_ARRAY_TASK_COUNT", "4"),
            ],
            &["SLURM_ARRAY_TASK_COUNT=4", "not 3"],
        ),
        (
            "auto/3",
            &[("JOB_COMPLETION_INDEX", "3")],
            &["index 3 is not below N = 3"],
        ),
        ("3/3", &[], &["--shard", "3/3"]),
        // N past the dataset's pairs: one shard per pair at most.
        ("0/4", &[], &["--shard", "0/4", "3 pairs"]),
        ("0/1000000000000", &[], &["--shard", "2^24"]),
        ("0/18446744073709551615", &[], &["--shard", "2^24"]),
    ];
    for (shard, env, needles) in refusals {
        let o = part(shard, &out, &[], env);
        refused(&o, needles, shard);
        assert!(!out.exists(), "{shard}: a part was written");
    }
}

/// A complete part of this run at `--out` is the shard's result (skipped, its exit code); a
/// truncated, edited or foreign file there, or another shard's part, is redone.
#[test]
fn resume_skips_a_complete_part_and_redoes_anything_else() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("part1.json");
    // Shard 1/3 holds sample 1, the planted bug: exit code 1.
    let first = part("1/3", &out, &[], &[]);
    assert_eq!(code(&first), 1, "{}", stderr(&first));
    let made = std::fs::read(&out).expect("part");
    let shown = out.display().to_string();

    let again = part("1/3", &out, &[], &[]);
    assert_eq!(code(&again), 1, "{}", stderr(&again));
    let skipped = format!(
        "hsdiff: {shown}: a complete part of this run (shard 1/3, digest verified): skipped"
    );
    assert!(
        stderr(&again).lines().any(|l| l == skipped),
        "{}",
        stderr(&again)
    );
    assert!(!stderr(&again).contains("pairs compared"), "the shard ran");
    assert_eq!(std::fs::read(&out).expect("part"), made);
    // Its exit code is the part's own under the run's --fail-on: the same run with
    // `--fail-on never` is another run (redone), exit 0.
    let never = part("1/3", &out, &["--fail-on", "never"], &[]);
    assert_eq!(code(&never), 0);
    assert!(
        stderr(&never).contains("redone: a part of another run: options.fail_on"),
        "{}",
        stderr(&never)
    );

    let other_shard = dir.path().join("part0.json");
    let o = part("0/3", &other_shard, &[], &[]);
    assert!(matches!(code(&o), 0 | 1), "{}", stderr(&o));
    let text = String::from_utf8(made.clone()).expect("utf8");
    let cases: [(&str, Vec<u8>, &str); 5] = [
        (
            "partial",
            made[..made.len() / 2].to_vec(),
            "not a whole dataset report",
        ),
        (
            "tampered",
            text.replacen("\"mismatch\"", "\"ok\"", 1).into_bytes(),
            "digest does not hold",
        ),
        (
            "another shard",
            std::fs::read(&other_shard).expect("part 0"),
            "a part of shard 0/3, not 1/3",
        ),
        (
            "unsharded report",
            compare(&["--format", "json"], &[]).stdout,
            "not a shard's part",
        ),
        (
            "foreign",
            b"{\"hello\": 1}\n".to_vec(),
            "not a whole dataset report",
        ),
    ];
    for (case, bytes, why) in cases {
        std::fs::write(&out, &bytes).expect("write");
        let o = part("1/3", &out, &[], &[]);
        assert_eq!(code(&o), 1, "{case}: {}", stderr(&o));
        let redone: Vec<String> = stderr(&o)
            .lines()
            .filter(|l| l.contains("redone"))
            .map(str::to_string)
            .collect();
        assert_eq!(redone.len(), 1, "{case}: {}", stderr(&o));
        assert!(
            redone[0].starts_with(&format!("hsdiff: {shown}: redone: ")) && redone[0].contains(why),
            "{case}: {}",
            redone[0]
        );
        // Redone whole: the part made again is a complete part of this run.
        let check = part("1/3", &out, &[], &[]);
        assert!(
            stderr(&check).contains("skipped"),
            "{case}: {}",
            stderr(&check)
        );
    }
}

/// `merge` takes nothing on trust: every tampered, foreign, missing or repeated part is refused
/// with one line naming it, whether or not its digest was forged to match.
#[test]
fn merge_refuses_tampered_foreign_missing_and_repeated_parts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let parts: Vec<PathBuf> = (0..3)
        .map(|i| {
            let out = d.join(format!("part{i}.json"));
            let o = part(&format!("{i}/3"), &out, &[], &[]);
            assert!(matches!(code(&o), 0 | 1), "{}", stderr(&o));
            out
        })
        .collect();
    let [p0, p1, p2] = [&parts[0], &parts[1], &parts[2]].map(PathBuf::as_path);
    assert_eq!(code(&merge(&[p0, p1, p2], &[])), 1);

    let edited = d.join("edited.json");
    let text = std::fs::read_to_string(p1).expect("part 1");
    std::fs::write(&edited, text.replace("\"mismatch\"", "\"ok\"")).expect("write");
    refused(
        &merge(&[p0, &edited, p2], &[]),
        &["edited.json", "digest does not hold"],
        "edited verdict",
    );
    // The same edit with the digest forged: the verdict no longer follows from the rows.
    let forged = d.join("forged.json");
    forge(p1, &forged, |v| v["samples"][0]["verdict"] = "ok".into());
    refused(
        &merge(&[p0, &forged, p2], &[]),
        &["forged.json", "do not follow from its rows"],
        "forged verdict",
    );
    let emptied = d.join("emptied.json");
    forge(p1, &emptied, |v| v["samples"] = Value::Array(Vec::new()));
    refused(
        &merge(&[p0, &emptied, p2], &[]),
        &["emptied.json", "holds 0 of the 1 pairs shard 1/3 selects"],
        "emptied pairs",
    );
    let carrying = d.join("carrying.json");
    let zero = read_json(p0);
    forge(p1, &carrying, |v| v["samples"] = zero["samples"].clone());
    refused(
        &merge(&[p0, &carrying, p2], &[]),
        &["carrying.json", "pair 0, not one of shard 1/3's pairs"],
        "shard 1 carrying shard 0's samples",
    );
    let total = d.join("total.json");
    forge(p1, &total, |v| v["pairs_total"] = 6.into());
    refused(
        &merge(&[p0, &total, p2], &[]),
        &["total.json", "of pairs_total 6"],
        "wrong pairs_total",
    );
    let absurd = d.join("absurd.json");
    forge(p1, &absurd, |v| {
        v["shard"]["count"] = 1_000_000_000_000u64.into();
        v["part"]["shard"]["count"] = 1_000_000_000_000u64.into();
        v["part"]["run"]["shards"] = 1_000_000_000_000u64.into();
    });
    refused(
        &merge(&[&absurd], &[]),
        &["absurd.json", "no shard"],
        "absurd count",
    );
    // A part made by the tool with other layer ids (the same ids, from --layer-ids).
    let other = d.join("other-ids.json");
    let ids = "--layer-ids=1,2,4,5,6";
    let mut args = vec![
        "compare".to_string(),
        fx("specforge_dflash"),
        fx("eval"),
        ids.to_string(),
        "--model".into(),
        model(),
    ];
    args.extend(["--shard", "1/3", "--format", "json", "--out"].map(String::from));
    args.push(other.display().to_string());
    let o = run(&args, &[]);
    assert!(matches!(code(&o), 0 | 1), "{}", stderr(&o));
    refused(
        &merge(&[p0, &other, p2], &[]),
        &["other-ids.json", "another run", "options.layer_ids_a"],
        "different --layer-ids",
    );
    refused(
        &merge(&[p0, p2], &[]),
        &["shard 1/3 is missing"],
        "missing shard",
    );
    let copy = d.join("copy.json");
    std::fs::copy(p0, &copy).expect("copy");
    refused(
        &merge(&[p0, p1, p2, &copy], &[]),
        &["copy.json", "shard 0/3 again", "part0.json"],
        "duplicate shard",
    );
    let whole = d.join("whole.json");
    let o = compare(
        &["--format", "json", "--out", &whole.display().to_string()],
        &[],
    );
    assert_eq!(code(&o), 1);
    refused(
        &merge(&[&whole], &[]),
        &["whole.json", "not a shard's part"],
        "unsharded report",
    );
    // Options merge cannot honour are refused, not ignored.
    let o = merge(&[p0, p1, p2], &["--layers", "4"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("--layers"), "{}", stderr(&o));
}

/// Parts of two runs that differ only in `--dtype-hint` (each written by a real `--shard` run)
/// are refused, the option named — never merged into one verdict.
#[test]
fn merge_refuses_parts_of_another_dtype_hint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (p0, p1) = (
        dir.path().join("part0.json"),
        dir.path().join("hinted.json"),
    );
    let o = part("0/2", &p0, &[], &[]);
    assert!(matches!(code(&o), 0 | 1), "{}", stderr(&o));
    let o = part("1/2", &p1, &["--dtype-hint", "bf16"], &[]);
    assert!(matches!(code(&o), 0 | 1), "{}", stderr(&o));
    refused(
        &merge(&[&p0, &p1], &[]),
        &["hinted.json", "another run", "options.dtype_hint"],
        "different --dtype-hint",
    );
}
