//! The output policy for datasets, applied before any work: never over a sample a glob matches
//! or one deep in a side's folder, never a new capture where a later run would read it as a
//! sample, and one target per FIFO.

use std::path::{Path, PathBuf};

use super::craft::capture;
use super::harness::{Case, args, refused, s};

/// Sides `d/A` and `d/B`, each holding the samples `rels`.
fn sides(d: &Path, rels: &[&str]) -> (PathBuf, PathBuf) {
    let (a, b) = (d.join("A"), d.join("B"));
    for (k, rel) in rels.iter().enumerate() {
        for side in [&a, &b] {
            let p = side.join(rel);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(&p, capture(50 + k as u64, Vec::new())).expect("write sample");
        }
    }
    (a, b)
}

/// `compare A B --out OUT`, refused before any work with `needles`, OUT left as it was.
fn out_refused(a: &str, b: &str, out: &Path, needles: &[&str]) -> Case {
    refused(args(&["compare", a, b, "--out", &s(out)]), needles).writing(out.to_path_buf())
}

hostile!(dataset_out_on_a_sample_a_glob_matches, |d| {
    let (a, b) = sides(d, &["data_0.safetensors", "data_1.safetensors"]);
    let glob = |side: &Path| format!("{}/data_*.safetensors", s(side));
    out_refused(
        &glob(&a),
        &glob(&b),
        &a.join("data_1.safetensors"),
        &["is one of this command's inputs"],
    )
});

hostile!(dataset_out_on_a_sample_five_folders_down, |d| {
    let deep = "1/2/3/4/5/data_5.safetensors";
    let (a, b) = sides(d, &["data_0.safetensors", deep]);
    out_refused(
        &s(&a),
        &s(&b),
        &a.join(deep),
        &["is one of this command's inputs"],
    )
});

hostile!(
    dataset_out_adds_a_sample_to_an_input_folder,
    |d| {
        let (a, b) = sides(d, &["rows_0/data_0.safetensors"]);
        out_refused(
            &s(&a),
            &s(&b),
            &a.join("rows_0/data_9.pt"),
            &["would add a capture file", "read it as a sample"],
        )
    },
    then | d | {
        assert!(!d.join("A/rows_0/data_9.pt").exists());
    }
);

hostile!(out_and_plot_on_one_fifo, |d| {
    let (a, b) = sides(d, &["data_0.safetensors"]);
    let fifo = super::harness::fifo(d, "out.svg");
    // A reader that stays for the run (opened read-write: it never blocks), so that the first
    // reservation succeeds and the second is the one refused.
    let reader = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .expect("open the fifo");
    std::mem::forget(reader);
    refused(
        args(&[
            "compare",
            &s(&a.join("data_0.safetensors")),
            &s(&b.join("data_0.safetensors")),
            "--out",
            &s(&fifo),
            "--plot",
            &s(&fifo),
        ]),
        &["name the same FIFO"],
    )
});
