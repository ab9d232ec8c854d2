//! Output targets: never an input (a model's files, the prompt, a drafter's config, a token-id
//! file, a file a model folder would hold), never the same file twice, `/dev/null` written in place; a replaced file keeps its
//! mode, a long legal name works, a signal leaves no temporary, and bench's work folder leaves
//! the user's files alone.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::harness::{Expect, args, expect, fifo, fixture, refused, s, write};
use crate::common::{self, copy_dir, golden_model_dir};

/// The two committed dumps and a copy of the golden dense model at `d/m` with a user's file
/// `notes.txt` in it, as strings for the command line.
fn with_model(d: &Path) -> (String, String, PathBuf) {
    let model = d.join("m");
    copy_dir(&golden_model_dir("qwen3_5_tiny"), &model);
    std::fs::write(model.join("notes.txt"), b"the user's notes").expect("write");
    let a = s(&fixture("dump_f32.safetensors"));
    let b = s(&fixture("dump_perturbed.safetensors"));
    (a, b, model)
}

/// After the case: nothing was replaced in the model folder, and no temp file is left anywhere.
fn model_left_alone(d: &Path) {
    let model = d.join("m");
    assert_eq!(
        std::fs::read(model.join("notes.txt")).expect("notes"),
        b"the user's notes"
    );
    let original = golden_model_dir("qwen3_5_tiny");
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        assert_eq!(
            std::fs::read(model.join(f)).expect("model file"),
            std::fs::read(original.join(f)).expect("original"),
            "{f} changed"
        );
    }
    for dir in [d, &model] {
        for e in std::fs::read_dir(dir).expect("list").flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            assert!(
                !n.contains(".hsdiff-") && !n.starts_with(".tmp"),
                "left behind: {n}"
            );
        }
    }
}

/// `compare A B --model M --out M/TARGET`, refused as an input.
fn out_in_model(d: &Path, target: &str) -> super::harness::Case {
    let (sa, sb, model) = with_model(d);
    let out = model.join(target);
    let sm = s(&model);
    refused(
        args(&["compare", &sa, &sb, "--model", &sm, "--out", &s(&out)]),
        &["inputs"],
    )
    .writing(out)
}

hostile!(compare_out_the_models_config_json, |d| {
    out_in_model(d, "config.json")
}, then model_left_alone);

hostile!(compare_out_the_models_weights, |d| {
    out_in_model(d, "model.safetensors")
}, then model_left_alone);

hostile!(compare_out_the_models_tokenizer, |d| {
    out_in_model(d, "tokenizer.json")
}, then model_left_alone);

hostile!(compare_out_a_users_file_in_the_model_folder, |d| {
    out_in_model(d, "notes.txt")
}, then model_left_alone);

hostile!(compare_out_a_model_file_not_there_yet, |d| {
    let (sa, sb, model) = with_model(d);
    let out = model.join("extra.safetensors");
    refused(
        args(&["compare", &sa, &sb, "--model", &s(&model), "--out", &s(&out)]),
        &["model file"],
    )
    .writing(out)
}, then model_left_alone);

hostile!(compare_out_r_svg_plot_dot_slash_r_svg, |d| {
    let (sa, sb, _) = with_model(d);
    let out = d.join("r.svg");
    let plot = d.join(".").join("r.svg");
    refused(
        args(&["compare", &sa, &sb, "--out", &s(&out), "--plot", &s(&plot)]),
        &["--plot and --out", "same file"],
    )
    .writing(out)
}, then model_left_alone);

hostile!(compare_out_r_png_plot_sub_dot_dot_r_png, |d| {
    let (sa, sb, _) = with_model(d);
    std::fs::create_dir(d.join("sub")).expect("mkdir");
    let out = d.join("r.png");
    let plot = d.join("sub/../r.png");
    refused(
        args(&["compare", &sa, &sb, "--out", &s(&out), "--plot", &s(&plot)]),
        &["same file"],
    )
    .writing(out)
}, then model_left_alone);

hostile!(compare_out_a_name_longer_than_the_file_system_takes, |d| {
    let (sa, sb, _) = with_model(d);
    let long = d.join("r".repeat(256));
    refused(
        args(&["compare", &sa, &sb, "--out", &s(&long)]),
        &["at most"],
    )
    .writing(long)
}, then model_left_alone);

hostile!(compare_out_a_fifo_nobody_reads, |d| {
    let (sa, sb, _) = with_model(d);
    let fifo = fifo(d, "fifo");
    refused(
        args(&["compare", &sa, &sb, "--out", &s(&fifo)]),
        &["no process reads"],
    )
}, then model_left_alone);

hostile!(compare_out_the_temporary_folder, |d| {
    let (sa, sb, _) = with_model(d);
    refused(
        args(&["compare", &sa, &sb, "--out", &s(d)]),
        &["directory"],
    )
}, then model_left_alone);

hostile!(bench_forward_json_the_models_config, |d| {
    let (_, _, model) = with_model(d);
    let config = model.join("config.json");
    refused(
        args(&[
            "bench",
            "forward",
            "--model",
            &s(&model),
            "--json",
            &s(&config),
            "--backends",
            "reference",
            "--dtypes",
            "f32",
            "--seq",
            "4",
            "--repeats",
            "1",
            "--warmup",
            "0",
        ]),
        &["inputs"],
    )
    .writing(config)
}, then model_left_alone);

hostile!(dump_out_the_prompt_file_it_reads, |d| {
    let (_, _, model) = with_model(d);
    let p = write(d, "p.txt", b"def f(x):\n    return x\n");
    refused(
        args(&[
            "dump",
            "--model",
            &s(&model),
            "--prompt",
            &format!("@{}", p.display()),
            "--out",
            &s(&p),
        ]),
        &["inputs"],
    )
    .writing(p)
}, then model_left_alone);

hostile!(compare_out_the_draft_config_it_reads, |d| {
    let (sa, sb, _) = with_model(d);
    let cfg = write(d, "draft.json", br#"{"target_layer_ids": [1, 2]}"#);
    refused(
        args(&["compare", &sa, &sb, "--draft-config", &s(&cfg), "--out", &s(&cfg)]),
        &["inputs"],
    )
    .writing(cfg)
}, then model_left_alone);

hostile!(compare_out_the_token_id_file_it_reads, |d| {
    let (sa, sb, _) = with_model(d);
    let ids = write(d, "ids.txt", b"[1, 2, 3]\n");
    refused(
        args(&[
            "compare",
            &sa,
            &sb,
            "--tokens",
            &format!("@{}", ids.display()),
            "--out",
            &s(&ids),
        ]),
        &["inputs"],
    )
    .writing(ids)
}, then model_left_alone);

hostile!(compare_out_dev_null_is_written_in_place, |d| {
    let (sa, sb, _) = with_model(d);
    expect(
        args(&["compare", &sa, &sb, "--out", "/dev/null"]),
        Expect::Flagged,
    )
}, then model_left_alone);

hostile!(dump_out_dev_null_is_written_in_place, |d| {
    let (_, _, model) = with_model(d);
    expect(
        args(&[
            "dump",
            "--model",
            &s(&model),
            "--tokens",
            "1,2,3",
            "--out",
            "/dev/null",
        ]),
        Expect::Clean,
    )
}, then model_left_alone);

#[test]
fn replacing_an_output_keeps_its_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = common::tempdir();
    let d = dir.path();
    let out = d.join("dump.safetensors");
    std::fs::write(&out, b"old").expect("write");
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    let model = s(&golden_model_dir("qwen3_5_tiny"));
    let o = common::hsdiff(
        &[
            "dump",
            "--model",
            &model,
            "--tokens",
            "1,2,3",
            "--out",
            &s(&out),
        ],
        d,
    );
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr_of(&o));
    let mode = std::fs::metadata(&out).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode, 0o640, "the replaced file's mode is kept");
}

/// A legal name 5 bytes short of the limit: its temp sibling is shortened, not refused.
#[test]
fn a_long_legal_output_name_works() {
    let dir = common::tempdir();
    let d = dir.path();
    let plot = d.join(format!("{}.svg", "p".repeat(246)));
    let (a, b) = (
        fixture("dump_f32.safetensors"),
        fixture("dump_perturbed.safetensors"),
    );
    let o = common::hsdiff(
        &[
            "compare",
            &s(&a),
            &s(&b),
            "--out",
            &s(&d.join("r.txt")),
            "--plot",
            &s(&plot),
        ],
        d,
    );
    assert_eq!(o.status.code(), Some(1), "{}", common::stderr_of(&o));
    assert!(plot.is_file() && d.join("r.txt").is_file());
}

/// SIGTERM while a dump runs: the reserved temp file goes with the process.
#[test]
fn a_signal_during_a_dump_leaves_no_temporary() {
    let dir = common::tempdir();
    let sig = dir.path().join("sig");
    std::fs::create_dir(&sig).expect("mkdir");
    let many: Vec<String> = (0..400).map(|i| (i % 200 + 1).to_string()).collect();
    let model = s(&golden_model_dir("qwen3_5_tiny"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_hsdiff"))
        .args([
            "dump",
            "--ops",
            "--model",
            &model,
            "--tokens",
            &many.join(","),
        ])
        .arg("--out")
        .arg(sig.join("out.safetensors"))
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let temp_seen = (0..600).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::read_dir(&sig)
            .expect("list")
            .flatten()
            .any(|e| e.file_name().to_string_lossy().contains(".hsdiff-"))
    });
    assert!(temp_seen, "the output was not reserved up front");
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill")
            .success()
    );
    let status = child.wait().expect("wait");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(15), "dies of the signal: {status:?}");
    let left: Vec<String> = std::fs::read_dir(&sig)
        .expect("list")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn bench_work_dir_never_touches_the_users_files() {
    let dir = common::tempdir();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("mkdir");
    let names = [
        "core-t5-f32.inputs.safetensors",
        "core-t5-f32.reference.safetensors",
    ];
    for n in names {
        std::fs::write(work.join(n), b"the user's file").expect("write");
    }
    let work_arg = s(&work);
    let mut args = common::bench_core_tiny("5");
    args.extend([
        "--backends",
        "reference",
        "--dtypes",
        "f32",
        "--work-dir",
        &work_arg,
    ]);
    let o = common::hsdiff(&args, dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr_of(&o));
    for n in names {
        assert_eq!(
            std::fs::read(work.join(n)).expect("still there"),
            b"the user's file"
        );
    }
    assert_eq!(std::fs::read_dir(&work).expect("list").count(), names.len());
}
