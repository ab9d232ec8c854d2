//! Saved SGLang `return_hidden_states` responses (`.json`) that are broken or lie about their
//! sizes: refused in one line naming the file and the field, never a panic or a stack overflow.

use super::harness::{compare_bad, write};

/// A one-request response around `states` (the `meta_info.hidden_states` JSON text).
fn response(states: &str) -> Vec<u8> {
    format!(
        r#"{{"input_ids": [5, 6], "output_ids": [7, 8], "meta_info": {{"prompt_tokens": 2,
        "completion_tokens": 2, "hidden_states": {states}}}}}"#
    )
    .into_bytes()
}

hostile!(truncated_response, |d| {
    let mut b = response("[[[0.5, 0.25], [1.0, 2.0]], [0.5, 0.5]]");
    b.truncate(b.len() / 2);
    let p = write(d, "cut.json", &b);
    compare_bad(&p, &["sglang-return-hidden-states", "not JSON"])
});

hostile!(deeply_nested_states, |d| {
    let states = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let p = write(d, "deep.json", &response(&states));
    compare_bad(&p, &["sglang-return-hidden-states", "not JSON"])
});

hostile!(ragged_rows, |d| {
    let p = write(
        d,
        "ragged.json",
        &response("[[[0.5, 0.25], [1.0]], [0.5, 0.5]]"),
    );
    compare_bad(
        &p,
        &["`meta_info.hidden_states[0][1]` holds 1 values, the first row 2"],
    )
});

hostile!(a_state_that_is_no_number, |d| {
    let p = write(
        d,
        "text.json",
        &response(r#"[[[0.5, "x"], [1.0, 2.0]], [0.5, 0.5]]"#),
    );
    compare_bad(&p, &["`meta_info.hidden_states[0][0][1]`", "not a number"])
});

hostile!(counts_that_lie, |d| {
    let b = String::from_utf8(response("[[[0.5, 0.25], [1.0, 2.0]], [0.5, 0.5]]"))
        .expect("utf-8")
        .replace("\"prompt_tokens\": 2", "\"prompt_tokens\": 99999999999");
    let p = write(d, "counts.json", b.as_bytes());
    compare_bad(&p, &["prompt_tokens 99999999999"])
});

hostile!(no_prompt_ids, |d| {
    let b = String::from_utf8(response("[[[0.5, 0.25], [1.0, 2.0]], [0.5, 0.5]]"))
        .expect("utf-8")
        .replace("\"input_ids\": [5, 6], ", "");
    let p = write(d, "no_ids.json", b.as_bytes());
    compare_bad(
        &p,
        &["no `input_ids` list", "save the request's `input_ids`"],
    )
});
