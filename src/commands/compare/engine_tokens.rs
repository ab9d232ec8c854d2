//! Token ids that differ in the way an engine's known failure makes them: the error then names
//! the failure, so the user fixes the capture rather than hunting a numerical bug.
//!
//! vLLM's `extract_hidden_states` speculative method, with `num_speculative_tokens` ≥ 1, read
//! only the first column of a multi-token output when choosing the next token, and the served
//! sequence came out with tokens repeated (vllm-project/vllm#56417, fixed by #56442): its
//! capture holds the ids of another run's tokens with some repeated in place.

use crate::error::Error;
use crate::formats::FileSource;
use crate::formats::pipelines::Pipeline;

/// The error for captures whose ids `x` (A) and `y` (B) differ, when the difference is an
/// engine's known failure; None otherwise (the generic message applies).
pub fn known_failure(a: &FileSource, b: &FileSource, x: &[u32], y: &[u32]) -> Option<Error> {
    let sides = [("A", a, x, y), ("B", b, y, x)];
    let (side, src, long, short) = sides
        .into_iter()
        .find(|(_, src, long, short)| is_vllm(src) && long.len() > short.len())?;
    let repeated = repeats(long, short)?;
    let at = repeated
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    Some(Error::Compare(format!(
        "token ids differ: {side} ({}) holds {} token ids, the other side {}: {side}'s are the other's with {} \
         repeated in place (positions {at} of {side}) — the failure of vLLM's extract_hidden_states \
         with num_speculative_tokens ≥ 1, which read only the first column of multi-token outputs \
         and repeated tokens (vllm-project/vllm#56417, fixed by vllm-project/vllm#56442); \
         re-capture with the fix or without speculative tokens. The two captures are of different \
         inputs and are not compared",
        src.path().display(),
        long.len(),
        short.len(),
        match repeated.len() {
            1 => "1 token".to_string(),
            n => format!("{n} tokens"),
        },
    )))
}

/// A capture read as vLLM's aux hidden states (`token_ids` + `hidden_states [T, k, H]`: what
/// `extract_hidden_states` and speculators write).
fn is_vllm(src: &FileSource) -> bool {
    src.pipeline.as_ref().map(|p| p.pipeline) == Some(Pipeline::Speculators)
}

/// The positions of `long` whose token repeats the one before it and whose removal leaves
/// `short`; None when `long` is not `short` with repeats inserted.
fn repeats(long: &[u32], short: &[u32]) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    let mut j = 0;
    for (i, &t) in long.iter().enumerate() {
        if short.get(j) == Some(&t) {
            j += 1;
        } else if i > 0 && long[i - 1] == t {
            out.push(i);
        } else {
            return None;
        }
    }
    (j == short.len() && !out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::repeats;

    #[test]
    fn repeats_inserted_in_place_are_found() {
        assert_eq!(
            repeats(&[5, 7, 7, 9, 9, 2], &[5, 7, 9, 2]),
            Some(vec![2, 4])
        );
        assert_eq!(repeats(&[7, 7, 7], &[7, 7]), Some(vec![2]));
        // A token that repeats nothing, or the same length: no such failure.
        assert_eq!(repeats(&[5, 8, 9], &[5, 9]), None);
        assert_eq!(repeats(&[5, 9], &[5, 9]), None);
        assert_eq!(repeats(&[5, 9, 3], &[5, 9]), None);
    }
}
