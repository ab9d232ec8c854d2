//! Every file of `tests/fixtures/torch_sweep/` (200 archives written by torch 2.15's
//! `torch.save`, see tests/fixtures/torch_sweep/make.py) opens, and each tensor comes back with the
//! name, shape, dtype and values the manifest records (a sum and a position-weighted sum, so a
//! transposed read fails). The archives differ in file name (which
//! shifts every offset inside them), tensor count (1–64), dtype (bf16/f16/f32) and container
//! (flat dict, nested dicts, tuple, dict of list and tuple).

use std::path::PathBuf;

use candle_core::DType;
use hsdiff::formats::FileSource;
use serde_json::Value;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/torch_sweep")
}

#[test]
fn every_torch_written_file_opens_and_reads_back() {
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir().join("manifest.json")).expect("manifest"))
            .expect("manifest JSON");
    let files = manifest.as_object().expect("manifest object");
    assert!(files.len() >= 200, "{} files", files.len());
    let mut refused = Vec::new();
    let mut tensors = 0;
    for (file, spec) in files {
        let src = match FileSource::open(&dir().join(file), None) {
            Ok(s) => s,
            Err(e) => {
                refused.push(format!("{file}: {e}"));
                continue;
            }
        };
        let expect = spec["tensors"].as_object().expect("tensors");
        let mut raw = src.raw_names();
        raw.sort();
        let mut want: Vec<String> = expect.keys().cloned().collect();
        want.sort();
        assert_eq!(raw, want, "{file}: tensor names");
        for name in src.names() {
            let raw_name = src.raw_name(&name).expect("raw name").to_string();
            let t = src.get(&name).expect("reads").expect("present");
            let e = &expect[&raw_name];
            let dtype = match e["dtype"].as_str().expect("dtype") {
                "bf16" => DType::BF16,
                "f16" => DType::F16,
                _ => DType::F32,
            };
            assert_eq!(t.dtype(), dtype, "{file}: {raw_name} dtype");
            let shape: Vec<usize> = e["shape"]
                .as_array()
                .expect("shape")
                .iter()
                .map(|d| d.as_u64().expect("dim") as usize)
                .collect();
            // `get` reads a hidden state as [1, T, D]: a stored [T, D] gains the batch axis.
            let read_as = if shape.len() == 2 {
                [&[1], shape.as_slice()].concat()
            } else {
                shape.clone()
            };
            assert_eq!(t.dims(), read_as.as_slice(), "{file}: {raw_name} shape");
            let values = t
                .to_dtype(DType::F64)
                .and_then(|t| t.flatten_all())
                .and_then(|t| t.to_vec1::<f64>())
                .expect("values");
            let sum: f64 = values.iter().sum();
            // Row-major position i weighs (i mod 7) + 1, as in tests/fixtures/torch_sweep/make.py: a transposed
            // or permuted read keeps the plain sum but not this one.
            let weighted: f64 = values
                .iter()
                .enumerate()
                .map(|(i, v)| v * ((i % 7) + 1) as f64)
                .sum();
            // Same values summed in f64 in a possibly different order: agreement to f64 rounding.
            for (what, got) in [("sum", sum), ("weighted_sum", weighted)] {
                let want = e[what].as_f64().expect(what);
                assert!(
                    (got - want).abs() <= 1e-9 * (1.0 + want.abs()),
                    "{file}: {raw_name} {what} {got} vs {want}"
                );
            }
            tensors += 1;
        }
    }
    assert!(
        refused.is_empty(),
        "{} of {} refused:\n{}",
        refused.len(),
        files.len(),
        refused.join("\n")
    );
    assert!(tensors > 2000, "only {tensors} tensors read");
}
