//! `compare`, `check` and the backend diff given hostile flag values — layers, shifts, maps,
//! formats, verdict levels — and inputs or outputs that are folders, FIFOs, devices, missing, of
//! another token sequence, or each other.

use std::path::{Path, PathBuf};

use super::harness::{args, fifo, fixture, refused, s};
use crate::common::{copy_dir, golden_model_dir};

/// The committed f32 dump.
fn a() -> String {
    s(&fixture("dump_f32.safetensors"))
}

/// The committed f32 dump, perturbed.
fn b() -> String {
    s(&fixture("dump_perturbed.safetensors"))
}

/// `compare A B EXTRA…` of the two committed dumps.
fn compare_ab(extra: &[&str]) -> Vec<String> {
    let (a, b) = (a(), b());
    let mut all = vec!["compare", a.as_str(), b.as_str()];
    all.extend_from_slice(extra);
    args(&all)
}

/// A copy of the golden dense model at `d/modelcopy`.
fn model_copy(d: &Path) -> PathBuf {
    let input_copy = d.join("modelcopy");
    copy_dir(&golden_model_dir("qwen3_5_tiny"), &input_copy);
    input_copy
}

hostile!(compare_layers_999, |_d| {
    refused(compare_ab(&["--layers", "999"]), &["999"])
});

hostile!(compare_layers_minus_1, |_d| {
    refused(compare_ab(&["--layers", "-1"]), &["-1"])
});

hostile!(compare_layers_junk, |_d| {
    refused(compare_ab(&["--layers", "a,b"]), &["--layers"])
});

hostile!(compare_shift_1000, |_d| {
    refused(compare_ab(&["--shift", "1000"]), &["1000"])
});

hostile!(compare_shift_minus_1000, |_d| {
    refused(compare_ab(&["--shift=-1000"]), &["-1000"])
});

hostile!(compare_map_junk, |_d| {
    refused(compare_ab(&["--map", "nothing"]), &["--map"])
});

hostile!(compare_tokens_at_without_a_file, |_d| {
    refused(
        compare_ab(&["--tokens", "@"]),
        &["--tokens", "names no file"],
    )
});

hostile!(compare_prompt_at_without_a_file, |_d| {
    refused(
        compare_ab(&["--prompt", "@"]),
        &[
            "--prompt",
            "`@` names no file: give @FILE, or the prompt itself",
        ],
    )
});

hostile!(compare_map_missing, |_d| {
    refused(compare_ab(&["--map", "no.such=layers.0"]), &["no.such"])
});

hostile!(compare_dtype_hint_f7, |_d| {
    refused(compare_ab(&["--dtype-hint", "f7"]), &["f7"])
});

hostile!(compare_format_pdf, |_d| {
    refused(compare_ab(&["--format", "pdf"]), &["pdf"])
});

hostile!(compare_fail_on_sometimes, |_d| {
    refused(compare_ab(&["--fail-on", "sometimes"]), &["sometimes"])
});

hostile!(compare_out_equal_to_a, |_d| {
    refused(compare_ab(&["--out", &a()]), &["inputs"])
});

hostile!(compare_out_a_directory, |d| {
    refused(compare_ab(&["--out", &s(d)]), &["not a regular file"])
});

hostile!(compare_plot_gif, |d| {
    let report = d.join("report.md");
    refused(
        compare_ab(&["--out", &s(&report), "--plot", &s(&d.join("p.gif"))]),
        &["--plot", "gif"],
    )
    .writing(report)
});

hostile!(compare_plot_equals_out, |d| {
    refused(
        compare_ab(&[
            "--out",
            &s(&d.join("same.svg")),
            "--plot",
            &s(&d.join("same.svg")),
        ]),
        &["same file"],
    )
    .writing(d.join("same.svg"))
});

hostile!(compare_plot_equal_to_b, |d| {
    let sa = a();
    refused(
        args(&[
            "compare",
            &sa,
            &s(&fixture("hs_tuple.pt")),
            "--plot",
            &s(&d.join("x.svg")),
            "--out",
            &s(&fixture("hs_tuple.pt")),
        ]),
        &["inputs"],
    )
});

hostile!(compare_plot_in_missing_folder, |d| {
    let report = d.join("report.md");
    refused(
        compare_ab(&["--out", &s(&report), "--plot", &s(&d.join("none/p.svg"))]),
        &["p.svg", "does not exist"],
    )
    .writing(report)
});

hostile!(compare_one_file, |_d| {
    let sa = a();
    refused(args(&["compare", &sa]), &["B"])
});

hostile!(compare_a_directory_with_nothing_to_pair, |d| {
    // A folder is a dataset (docs/datasets.md): nothing in this one pairs with B.
    let sb = b();
    refused(args(&["compare", &s(d), &sb]), &["error"])
});

hostile!(compare_a_fifo, |d| {
    let sb = b();
    let fifo = fifo(d, "fifo");
    refused(args(&["compare", &s(&fifo), &sb]), &["FIFO"])
});

hostile!(compare_dev_zero, |_d| {
    let sb = b();
    refused(args(&["compare", "/dev/zero", &sb]), &["device"])
});

hostile!(compare_missing_file, |_d| {
    let sb = b();
    refused(args(&["compare", "/no/such.pt", &sb]), &["/no/such.pt"])
});

hostile!(compare_different_tokens, |_d| {
    let sa = a();
    refused(
        args(&["compare", &sa, &s(&fixture("dump_tokens.safetensors"))]),
        &["token"],
    )
});

hostile!(check_layers_999, |_d| {
    refused(args(&["check", "--layers", "999"]), &["999"])
});

hostile!(check_golden_a_fifo, |d| {
    let fifo = fifo(d, "fifo");
    refused(args(&["check", "--golden", &s(&fifo)]), &["FIFO"])
});

hostile!(check_out_a_directory, |d| {
    refused(args(&["check", "--out", &s(d)]), &["not a regular file"])
});

hostile!(diff_plot_jpg, |d| {
    let m = s(&golden_model_dir("qwen3_5_tiny"));
    refused(
        args(&[
            "--a",
            "reference",
            "--b",
            "chunked",
            "--model",
            &m,
            "--tokens",
            "1,2",
            "--plot",
            &s(&d.join("x.jpg")),
        ]),
        &["--plot"],
    )
});

hostile!(diff_out_equal_to_config, |d| {
    let input_copy = model_copy(d);
    refused(
        args(&[
            "--a",
            "reference",
            "--b",
            "chunked",
            "--model",
            &s(&input_copy),
            "--tokens",
            "1,2",
            "--out",
            &s(&input_copy.join("config.json")),
        ]),
        &["inputs"],
    )
});

hostile!(diff_one_backend, |_d| {
    let m = s(&golden_model_dir("qwen3_5_tiny"));
    refused(args(&["--a", "reference", "--model", &m]), &["--b"])
});
