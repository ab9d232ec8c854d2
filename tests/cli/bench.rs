//! `hsdiff bench core` end to end on a tiny geometry (no torch): the table, the closing lines
//! and the JSON file have the shape of a real run. No timing is asserted.

use std::process::Output;

use crate::common::{bench_core_tiny, repo_root};

fn hsdiff(args: &[&str]) -> Output {
    crate::common::hsdiff(args, &repo_root())
}

/// `bench core` at lengths 5 and 9, tiny otherwise.
fn tiny() -> Vec<&'static str> {
    bench_core_tiny("5,9")
}

#[test]
fn bench_core_prints_a_table_and_writes_json_of_every_case() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("bench.json");
    let work = dir.path().join("work");
    let mut args = tiny();
    let (json_arg, work_arg) = (json.to_str().expect("utf-8"), work.to_str().expect("utf-8"));
    args.extend([
        "--dtypes",
        "f32,bf16",
        "--skip",
        "reference@9,fused@bf16",
        "--json",
        json_arg,
        "--work-dir",
        work_arg,
    ]);
    let out = hsdiff(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("hsdiff bench: GDN core"), "{stdout}");
    assert!(lines[0].contains("Hk 1, Hv 2, dk = dv = 4"), "{stdout}");
    assert!(lines[1].starts_with("machine: ") && lines[1].contains("hsdiff threads 1"));
    assert!(lines[2].starts_with("timing: median of 1 calls after 0 warm-up call(s)"));
    assert!(stdout.contains("transformers: not run"), "{stdout}");
    assert!(
        stdout.contains("\nskipped by --skip: reference@9, fused@bf16\n"),
        "{stdout}"
    );
    // 2 lengths × 2 dtypes × 3 backends = 12 rows between the header rule and the bottom rule.
    let table: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with('│'))
        .collect();
    assert_eq!(table.len(), 13, "{stdout}");
    assert!(table[0].contains("ms/call (median)") && table[0].contains("rel L2 vs transformers"));
    for row in &table[1..] {
        // 11 columns (the GFLOP/s one included: `—` for core cases, which count no FLOPs).
        assert_eq!(row.matches('┆').count(), 10, "{row}");
        assert!(!row.contains("FAILED"), "{row}");
    }
    let skipped: Vec<&&str> = table
        .iter()
        .filter(|r| r.contains("skipped (--skip)"))
        .collect();
    assert_eq!(skipped.len(), 4, "{stdout}");
    assert!(stdout.contains("\n4 case(s) skipped by --skip (shown as `skipped`).\n"));
    assert!(stdout.contains("\nload after the run: "), "{stdout}");

    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written"))
            .expect("valid JSON");
    assert_eq!(doc["kind"], "core");
    assert_eq!(
        (doc["repeats"].as_u64(), doc["warmup"].as_u64()),
        (Some(1), Some(0))
    );
    assert_eq!(doc["threads"].as_u64(), Some(1));
    for key in ["machine", "load_after"] {
        assert!(doc[key].is_string(), "{key}");
    }
    let rows = doc["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 12);
    let measured: Vec<_> = rows.iter().filter(|r| r["status"] == "measured").collect();
    assert_eq!(measured.len(), 8);
    for r in &measured {
        for key in [
            "implementation",
            "median_ms",
            "tokens_per_s",
            "peak_rss_kib",
            "output",
        ] {
            assert!(!r[key].is_null(), "{key}: {r}");
        }
        assert_eq!(r["times_ms"].as_array().map(Vec::len), Some(1), "{r}");
        assert!(r["rel_l2_vs_torch"].is_null() && r["speedup_vs_torch"].is_null());
        assert!(
            r["median_ms"]
                .as_f64()
                .is_some_and(|t| t.is_finite() && t >= 0.0)
        );
    }
    let skipped: Vec<_> = rows.iter().filter(|r| r["status"] == "skipped").collect();
    assert_eq!(skipped.len(), 4);
    assert!(skipped.iter().all(|r| r["why"] == "--skip"));
    // The work folder holds nothing once the run is over (it was given, so it stays).
    assert_eq!(std::fs::read_dir(&work).expect("work dir").count(), 0);
}

#[test]
fn bench_core_markdown_has_one_line_per_case() {
    let mut args = tiny();
    args.extend(["--dtypes", "f32", "--backends", "fused", "--markdown"]);
    let out = hsdiff(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let table: Vec<&str> = stdout.lines().filter(|l| l.starts_with('|')).collect();
    assert_eq!(table.len(), 4, "{stdout}");
    assert!(
        table[0].starts_with("| T | dtype | implementation"),
        "{stdout}"
    );
    assert!(table[1].starts_with("|---|"), "{stdout}");
    assert!(table[2].starts_with("| 5 | f32   | fused/"), "{stdout}");
}

#[test]
fn bad_bench_options_are_one_line_naming_the_option() {
    // (extra arguments, how the line starts): hsdiff's own checks put the option first, clap's
    // (a typed value such as a backend) name it in its own words.
    for (extra, start) in [
        (&["--skip", "reference@fp8"][..], "--skip: "),
        (&["--skip", "refrence"][..], "--skip: "),
        (
            &["--backends", "fsued"][..],
            "invalid value 'fsued' for '--backends <BACKENDS>'",
        ),
        (&["--dtypes", "fp8"][..], "--dtypes: "),
        (
            &["--dtypes", "fp9"][..],
            "invalid value 'fp9' for '--dtypes <DTYPES>'",
        ),
        (&["--lengths", "0"][..], "--lengths: "),
    ] {
        let mut args = tiny();
        args.extend(extra);
        let out = hsdiff(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{extra:?}: nothing runs");
        assert_eq!(stderr.lines().count(), 1, "{extra:?}: {stderr}");
        assert!(
            stderr.starts_with(&format!("hsdiff: error: {start}")),
            "{stderr}"
        );
    }
}

#[test]
fn bench_case_reads_its_inputs_with_one_line_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let inputs = dir.path().join("inputs.safetensors");
    std::fs::write(&inputs, b"not a safetensors file").expect("write");
    let out_file = dir.path().join("out.safetensors");
    let out = hsdiff(&[
        "bench",
        "case",
        "--kind",
        "core",
        "--backend",
        "reference",
        "--inputs",
        inputs.to_str().expect("utf-8"),
        "--out",
        out_file.to_str().expect("utf-8"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("inputs.safetensors"), "{stderr}");
    assert!(!out_file.exists());
}

/// `bench case` declares its inputs to the output policy: `--out` naming the inputs file or a
/// file of the model folder is refused before anything is read, and the file is untouched.
#[test]
fn bench_case_never_writes_over_its_inputs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let inputs = dir.path().join("inputs.safetensors");
    std::fs::write(&inputs, b"the case inputs").expect("write");
    let model = dir.path().join("model");
    std::fs::create_dir(&model).expect("mkdir");
    std::fs::write(model.join("config.json"), b"{\"the\": \"config\"}").expect("write");
    let inputs_arg = inputs.to_str().expect("utf-8");
    let model_arg = model.to_str().expect("utf-8");
    let config = model.join("config.json");
    let dotted = dir.path().join(".").join("inputs.safetensors");
    for (kind, out_file, extra) in [
        ("core", &inputs, vec![]),
        ("core", &dotted, vec![]),
        ("forward", &config, vec!["--model", model_arg]),
    ] {
        let mut args = vec![
            "bench",
            "case",
            "--kind",
            kind,
            "--backend",
            "reference",
            "--inputs",
            inputs_arg,
            "--out",
            out_file.to_str().expect("utf-8"),
        ];
        args.extend(extra);
        let out = hsdiff(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{out_file:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("--out: is one of this command's inputs"),
            "{out_file:?}: {stderr}"
        );
    }
    assert_eq!(std::fs::read(&inputs).expect("reads"), b"the case inputs");
    assert_eq!(
        std::fs::read(&config).expect("reads"),
        b"{\"the\": \"config\"}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("lists").collect();
    assert_eq!(left.len(), 2, "stray files: {left:?}");
}

/// `bench gemm` on one narrow product: the table and the closing line on stdout, and a JSON
/// document whose rows carry GFLOP/s against the measured peak, keys sorted as ever. No timing
/// is asserted.
#[test]
fn bench_gemm_prints_a_table_and_writes_json_against_the_peak() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("gemm.json");
    let out = hsdiff(&[
        "bench",
        "gemm",
        "--seq",
        "8",
        "--columns",
        "16",
        "--shapes",
        "gate_proj",
        "--dtypes",
        "f32,f64",
        "--repeats",
        "1",
        "--json",
        json.to_str().expect("utf-8 path"),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("gate_proj (8 × 16 × 5120)"), "{stdout}");
    assert!(
        stdout
            .trim_end()
            .lines()
            .last()
            .unwrap_or_default()
            .starts_with("load after the run: "),
        "{stdout}"
    );
    let text = std::fs::read_to_string(&json).expect("the JSON file");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(doc["kind"], "gemm");
    assert_eq!(doc["seq"], 8);
    let rows = doc["rows"].as_array().expect("rows");
    // Each dtype: hsdiff's product and candle's.
    assert_eq!(rows.len(), 4, "{text}");
    for r in rows {
        let g = r["gflops"].as_f64().expect("gflops");
        assert!(g.is_finite() && g > 0.0, "{r}");
        assert_eq!(
            (r["m"].as_u64(), r["n"].as_u64()),
            (Some(8), Some(16)),
            "{r}"
        );
    }
    // serde_json's sorted map wrote the first versions' files: the keys keep that order.
    let at = |key: &str| text.find(&format!("\"{key}\"")).expect(key);
    assert!(
        at("fma_peak") < at("kind") && at("kind") < at("rows"),
        "{text}"
    );
    assert!(
        at("dtype") < at("gflops") && at("gflops") < at("isa"),
        "{text}"
    );
    assert!(text.ends_with("}\n"), "one trailing newline");
}
