//! `dump` given hostile flag values: token lists, prompts from devices, FIFOs, folders and
//! huge or empty files, unknown dtypes, devices, backends, limits and flags, a missing model —
//! and output targets that are folders, FIFOs, missing folders or the run's own inputs.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::harness::{Case, Expect, args, dump_case, expect, fifo, refused, s, write};
use crate::common::{copy_dir, golden_model_dir};

/// `dump` of the golden dense model with `extra` (`tag` names the output), refused with
/// `needles`.
fn bad_flags(d: &Path, tag: &str, extra: &[&str], needles: &[&str]) -> Case {
    dump_case(tag, d, &golden_model_dir("qwen3_5_tiny"), extra, needles)
}

/// `@PATH`: the prompt read from a file.
fn at(p: &Path) -> String {
    format!("@{}", p.display())
}

/// A prompt file of about 10 MB (a short function repeated).
fn big_prompt(d: &Path) -> PathBuf {
    let big_prompt = d.join("big.txt");
    let mut f = std::fs::File::create(&big_prompt).expect("create");
    let line = "def f(x):\n    return x\n".repeat(1000);
    for _ in 0..440 {
        f.write_all(line.as_bytes()).expect("write");
    }
    big_prompt
}

hostile!(dump_tokens_minus_1, |d| {
    bad_flags(d, "tokens -1", &["--tokens", "-1"], &["-1"])
});

hostile!(dump_tokens_word, |d| {
    bad_flags(d, "tokens word", &["--tokens", "1,two,3"], &["two"])
});

hostile!(dump_tokens_float, |d| {
    bad_flags(d, "tokens float", &["--tokens", "1.5"], &["1.5"])
});

hostile!(dump_tokens_2_pow_40, |d| {
    bad_flags(
        d,
        "tokens 2^40",
        &["--tokens", "1099511627776"],
        &["1099511627776"],
    )
});

hostile!(dump_tokens_empty, |d| {
    bad_flags(d, "tokens empty", &["--tokens", ""], &["--tokens"])
});

hostile!(dump_tokens_only_commas, |d| {
    bad_flags(d, "tokens only commas", &["--tokens", ",,,"], &["--tokens"])
});

hostile!(dump_tokens_30k, |d| {
    let many_tokens: String = (0..30_000)
        .map(|i| (i % 300).to_string())
        .collect::<Vec<_>>()
        .join(",");
    bad_flags(
        d,
        "tokens 30k",
        &["--tokens", &many_tokens],
        &["30000", "--limit tokens"],
    )
});

hostile!(dump_token_out_of_vocab, |d| {
    bad_flags(
        d,
        "token out of vocab",
        &["--tokens", "1,99999"],
        &["99999"],
    )
});

hostile!(dump_prompt_from_dev_zero, |d| {
    bad_flags(
        d,
        "prompt from /dev/zero",
        &["--prompt", "@/dev/zero"],
        &["/dev/zero", "device"],
    )
});

hostile!(dump_prompt_at_without_a_file, |d| {
    bad_flags(
        d,
        "prompt @",
        &["--prompt", "@"],
        &[
            "--prompt",
            "`@` names no file: give @FILE, or the prompt itself",
        ],
    )
});

hostile!(dump_tokens_at_without_a_file, |d| {
    bad_flags(
        d,
        "tokens @",
        &["--tokens", "@"],
        &[
            "--tokens",
            "`@` names no file: give @FILE, or the ids themselves",
        ],
    )
});

hostile!(dump_tokens_file_read, |d| {
    let ids = write(d, "ids.txt", b"[1, 2,\n3]\n");
    let out = d.join("out.safetensors");
    let model = s(&golden_model_dir("qwen3_5_tiny"));
    expect(
        args(&[
            "dump", "--out", &s(&out), "--model", &model, "--backend", "reference", "--tokens",
            &at(&ids),
        ]),
        Expect::Clean,
    )
}, then |d: &Path| {
    let bytes = std::fs::read(d.join("out.safetensors")).expect("dump written");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    let ids = st.tensor("input_ids").expect("input_ids");
    assert_eq!(ids.shape().iter().product::<usize>(), 3, "{:?}", ids.shape());
});

hostile!(dump_out_onto_its_tokens_file_refused, |d| {
    let ids = write(d, "ids.safetensors", b"1,2,3");
    let model = s(&golden_model_dir("qwen3_5_tiny"));
    refused(
        args(&[
            "dump",
            "--out",
            &s(&ids),
            "--model",
            &model,
            "--backend",
            "reference",
            "--tokens",
            &at(&ids),
        ]),
        &["ids.safetensors", "one of this command's inputs"],
    )
    .writing(ids.clone())
});

hostile!(dump_prompt_from_a_fifo, |d| {
    let at_fifo = at(&fifo(d, "fifo"));
    bad_flags(d, "prompt from a FIFO", &["--prompt", &at_fifo], &["FIFO"])
});

hostile!(dump_prompt_from_a_directory, |d| {
    let at_dir = at(d);
    bad_flags(
        d,
        "prompt from a directory",
        &["--prompt", &at_dir],
        &["directory"],
    )
});

hostile!(dump_prompt_file_missing, |d| {
    bad_flags(
        d,
        "prompt file missing",
        &["--prompt", "@/no/such/prompt.txt"],
        &["/no/such/prompt.txt", "no such file"],
    )
});

hostile!(dump_prompt_of_10_mb, |d| {
    let at_big = at(&big_prompt(d));
    bad_flags(
        d,
        "prompt 10 MB",
        &["--prompt", &at_big],
        &["--limit prompt-bytes"],
    )
});

hostile!(dump_prompt_not_utf_8, |d| {
    let at_latin = at(&write(d, "latin1.txt", b"caf\xe9 cr\xe8me"));
    bad_flags(d, "prompt not UTF-8", &["--prompt", &at_latin], &["UTF-8"])
});

hostile!(dump_prompt_file_empty, |d| {
    let at_empty = at(&write(d, "empty.txt", b""));
    bad_flags(d, "prompt file empty", &["--prompt", &at_empty], &["empty"])
});

hostile!(dump_prompt_and_tokens, |d| {
    bad_flags(
        d,
        "prompt and tokens",
        &["--prompt", "hi", "--tokens", "1"],
        &["--tokens"],
    )
});

hostile!(dump_dtype_f8, |d| {
    bad_flags(d, "dtype f8", &["--dtype", "f8"], &["f8"])
});

hostile!(dump_device_tpu, |d| {
    bad_flags(d, "device tpu", &["--device", "tpu"], &["tpu"])
});

hostile!(dump_device_cuda_99, |d| {
    bad_flags(d, "device cuda:99", &["--device", "cuda:99"], &["cuda"])
});

hostile!(dump_backend_unknown, |d| {
    bad_flags(d, "backend unknown", &["--backend", "warp"], &["warp"])
});

hostile!(dump_limit_unknown, |d| {
    bad_flags(d, "limit unknown", &["--limit", "speed=3"], &["speed"])
});

hostile!(dump_limit_zero, |d| {
    bad_flags(d, "limit zero", &["--limit", "tokens=0"], &["tokens"])
});

hostile!(dump_limit_no_value, |d| {
    bad_flags(d, "limit no value", &["--limit", "tokens"], &["NAME=VALUE"])
});

hostile!(dump_unknown_flag, |d| {
    bad_flags(d, "unknown flag", &["--frobnicate"], &["--frobnicate"])
});

hostile!(dump_model_missing, |d| {
    bad_flags(
        d,
        "model missing",
        &["--model", "/no/such/model"],
        &["/no/such/model"],
    )
});

hostile!(dump_model_is_a_file, |d| {
    bad_flags(
        d,
        "model is a file",
        &["--model", "/etc/hostname"],
        &["/etc/hostname"],
    )
});

/// A copy of the golden dense model at `d/modelcopy`, so that a run that wrote over its inputs
/// would not touch the committed one.
fn model_copy(d: &Path) -> PathBuf {
    let input_copy = d.join("modelcopy");
    copy_dir(&golden_model_dir("qwen3_5_tiny"), &input_copy);
    input_copy
}

/// `dump --out OUT` of `model`, refused with `needles`; an output with an extension is checked
/// to be untouched.
fn bad_target(out: PathBuf, model: &Path, needles: &[&str]) -> Case {
    let c = refused(
        args(&[
            "dump",
            "--out",
            &s(&out),
            "--model",
            &s(model),
            "--tokens",
            "1,2,3",
        ]),
        needles,
    );
    if out.extension().is_some() {
        c.writing(out)
    } else {
        c
    }
}

hostile!(dump_out_is_a_directory, |d| {
    let needles = ["directory", "not a regular file"];
    bad_target(d.to_path_buf(), &model_copy(d), &needles)
});

hostile!(dump_out_is_a_fifo_nobody_reads, |d| {
    let needles = ["FIFO", "no process reads"];
    bad_target(fifo(d, "fifo"), &model_copy(d), &needles)
});

hostile!(dump_out_in_a_missing_folder, |d| {
    let out = d.join("no/such/dir/out.safetensors");
    bad_target(out, &model_copy(d), &["does not exist"])
});

hostile!(dump_out_is_the_models_weights, |d| {
    let model = model_copy(d);
    bad_target(model.join("model.safetensors"), &model, &["inputs"])
});

hostile!(dump_out_is_the_models_config, |d| {
    let model = model_copy(d);
    bad_target(model.join("config.json"), &model, &["inputs"])
});

hostile!(dump_out_is_the_prompt_file, |d| {
    let prompt_file = write(d, "prompt.txt", b"def add(a, b):\n    return a + b\n");
    refused(
        args(&[
            "dump",
            "--out",
            &s(&prompt_file),
            "--model",
            &s(&golden_model_dir("qwen3_5_tiny")),
            "--prompt",
            &format!("@{}", prompt_file.display()),
        ]),
        &["inputs"],
    )
});
