//! The counts of SGLang's returned hidden states, checked before any is compared. An honest
//! request holds one row per token fed: the prompt's `prompt_tokens` rows (the first entry), then
//! one per decode step — `prompt_tokens + completion_tokens − 1` in all (the last output token is
//! never fed). Under speculative decoding SGLang kept one row per verify step instead of
//! `accept_len + 1`, and with a batch of several requests rows of a neighbour's stride window
//! (sgl-project/sglang#26163, fixed by #28496): fewer rows than tokens, or the counts of another
//! request of the batch.

/// One request's counts.
#[derive(Debug, Clone, Copy)]
pub struct Counts {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Rows of `meta_info.hidden_states[0]`, the prefill's.
    pub prefill_rows: usize,
    /// Rows in all.
    pub rows: usize,
}

impl Counts {
    /// The rows an honest request holds.
    fn expected(&self) -> usize {
        self.prompt_tokens + self.completion_tokens.saturating_sub(1)
    }

    fn adds_up(&self) -> bool {
        self.rows == self.expected() && self.prefill_rows == self.prompt_tokens
    }

    fn says(&self) -> String {
        format!(
            "{} rows (prefill {} + {} decode)",
            self.rows,
            self.prefill_rows,
            self.rows - self.prefill_rows
        )
    }

    fn wants(&self) -> String {
        format!(
            "{} tokens fed (prompt_tokens {} + completion_tokens {} − 1)",
            self.expected(),
            self.prompt_tokens,
            self.completion_tokens
        )
    }
}

const KNOWN: &str = "SGLang's return_hidden_states under speculative decoding \
                     (sgl-project/sglang#26163, fixed by #28496)";

/// Every request's counts add up; else the first that does not, named with the failure it fits.
/// One request's misattributed rows make its batch's others suspect too, so the file is refused
/// whole.
pub fn check(all: &[Counts]) -> std::result::Result<(), String> {
    let Some((r, c)) = all.iter().enumerate().find(|(_, c)| !c.adds_up()) else {
        return Ok(());
    };
    let other = all
        .iter()
        .enumerate()
        .find(|&(j, o)| j != r && c.rows == o.expected() && c.prefill_rows == o.prompt_tokens);
    Err(match other {
        Some((j, o)) => format!(
            "request {r}'s `meta_info.hidden_states` holds {}: request {j}'s count, {}, not its \
             own {}: states assigned to the wrong request of the batch, as {KNOWN} does; not \
             compared",
            c.says(),
            o.wants(),
            c.wants()
        ),
        None if c.rows < c.expected() => format!(
            "request {r}'s `meta_info.hidden_states` holds {} for {}: too few, as {KNOWN} \
             returns one state per verify step, not per accepted token; not compared",
            c.says(),
            c.wants()
        ),
        None => format!(
            "request {r}'s `meta_info.hidden_states` holds {} for {}: the rows do not stand \
             for the tokens (a prefill entry of other than prompt_tokens rows, or more rows \
             than tokens: before #28496 the last verify step could overrun max_new_tokens); \
             not compared",
            c.says(),
            c.wants()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(prompt: usize, completion: usize, prefill: usize, rows: usize) -> Counts {
        Counts {
            prompt_tokens: prompt,
            completion_tokens: completion,
            prefill_rows: prefill,
            rows,
        }
    }

    #[test]
    fn honest_counts_pass() {
        assert!(check(&[counts(14, 6, 14, 19), counts(23, 1, 23, 23)]).is_ok());
    }

    #[test]
    fn short_named() {
        let e = check(&[counts(14, 6, 14, 16)]).unwrap_err();
        assert!(
            e.contains("holds 16 rows (prefill 14 + 2 decode) for 19 tokens fed"),
            "{e}"
        );
        assert!(e.contains("#26163"), "{e}");
    }

    #[test]
    fn swapped_named_with_the_other_request() {
        let e = check(&[counts(14, 6, 23, 28), counts(23, 6, 14, 19)]).unwrap_err();
        assert!(
            e.contains("request 0's") && e.contains("request 1's count"),
            "{e}"
        );
    }

    #[test]
    fn too_many_rows_named() {
        let e = check(&[counts(14, 6, 14, 21)]).unwrap_err();
        assert!(e.contains("more rows than tokens"), "{e}");
    }
}
