//! The protocol between the bench parent and its case processes (`hsdiff bench case` and
//! bench_torch.py): inputs and outputs travel as safetensors files named on the command
//! line; each result is one stdout line, [`RESULT_TAG`] then a [`Measurement`] as JSON. Other
//! stdout lines are shown indented on stderr; stderr passes through.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Marks the one stdout line of a case that carries a result.
pub const RESULT_TAG: &str = "HSDIFF_BENCH_RESULT ";

/// What one measured case reports.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Measurement {
    /// Row label: a backend name, or `torch_chunk` / `torch_recurrent` / `torch`.
    pub name: String,
    /// What ran, e.g. `fused/cpu-rayon-2t-avx512` or `transformers 5.24.0 torch_chunk_gated_delta_rule`.
    pub implementation: String,
    pub times_ms: Vec<f64>,
    /// Resident set size after loading the inputs (and model, for torch forward), before the
    /// first call.
    pub rss_before_kib: Option<u64>,
    /// Peak resident set size of the process (`VmHWM`).
    pub peak_rss_kib: Option<u64>,
    /// Name of the output tensor in the output file.
    pub output: String,
    /// Threads the measurement ran with, as the process saw them.
    pub threads: Option<usize>,
    /// Floating-point operations of the linear layers' products per call (hsdiff's forward
    /// cases; absent elsewhere, and from bench_torch.py).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product_flops: Option<f64>,
}

/// The stdout line that reports `m`.
pub fn result_line(m: &Measurement) -> Result<String> {
    let json = serde_json::to_string(m)
        .map_err(|e| Error::Internal(format!("cannot serialise the result: {e}")))?;
    Ok(format!("{RESULT_TAG}{json}"))
}

/// A result line's measurement; `None` for any other line.
pub fn parse_line(line: &str) -> Option<std::result::Result<Measurement, String>> {
    let json = line.strip_prefix(RESULT_TAG)?;
    Some(serde_json::from_str(json).map_err(|e| format!("unreadable result line ({e}): {json}")))
}

/// Runs a case process and collects its results; the error says why the case failed.
pub fn spawn(mut cmd: Command) -> std::result::Result<Vec<Measurement>, String> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))?;
    let mut results = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout)
            .lines()
            .map_while(std::result::Result::ok)
        {
            match parse_line(&line) {
                Some(m) => results.push(m?),
                None => eprintln!("  | {line}"),
            }
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for the case: {e}"))?;
    if !status.success() {
        return Err(format!(
            "the case process failed ({status}); see its stderr above"
        ));
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines_round_trip_and_other_lines_are_not_results() {
        let m = Measurement {
            name: "fused".into(),
            implementation: "fused/cpu-rayon-2t-avx2".into(),
            times_ms: vec![1.25, 0.75],
            rss_before_kib: Some(7000),
            peak_rss_kib: None,
            output: "out".into(),
            threads: Some(2),
            product_flops: Some(3.5e9),
        };
        let line = result_line(&m).expect("serialises");
        assert!(line.starts_with(RESULT_TAG));
        assert_eq!(parse_line(&line), Some(Ok(m)));
        assert_eq!(parse_line("loading weights …"), None);
        let bad = parse_line(&format!("{RESULT_TAG}{{\"name\": 3}}")).expect("a result line");
        assert!(
            bad.expect_err("unreadable")
                .starts_with("unreadable result line")
        );
    }
}
