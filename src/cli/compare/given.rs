//! `compare`'s list-valued options read into the values the library takes: the drafter
//! pipelines' layer ids (for both sides or one), the token ids or prompt of files that carry
//! none, and the tensor maps.

use super::CompareArgs;
use crate::cli::common::at_file;
use crate::commands::compare::pair::TensorMap;
use crate::commands::compare::tokens::GivenIds;
use crate::error::{Error, Result};
use crate::util::input::parse_token_list;

/// `--layer-ids`, `--layer-ids-a`, `--layer-ids-b`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LayerIdLists {
    pub both: Option<Vec<usize>>,
    pub a: Option<Vec<usize>>,
    pub b: Option<Vec<usize>>,
}

/// The layer id lists, each checked; ids for both sides given once (a list or a drafter's
/// config, not both).
pub fn layer_ids(args: &CompareArgs) -> Result<LayerIdLists> {
    let list = |arg: &Option<String>, option: &str| {
        arg.as_deref().map(|l| layer_list(l, option)).transpose()
    };
    let both = list(&args.layer_ids, "--layer-ids")?;
    if both.is_some() && args.draft_config.is_some() {
        return Err(Error::argument(
            "--draft-config",
            "give the layer ids once: --layer-ids or --draft-config",
        ));
    }
    Ok(LayerIdLists {
        both,
        a: list(&args.layer_ids_a, "--layer-ids-a")?,
        b: list(&args.layer_ids_b, "--layer-ids-b")?,
    })
}

/// `1,16,31` → ids.
fn layer_list(arg: &str, option: &str) -> Result<Vec<usize>> {
    let ids: Option<Vec<usize>> = arg
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().ok())
        .collect();
    ids.filter(|v| !v.is_empty()).ok_or_else(|| {
        Error::argument(
            option,
            format!("expects comma-separated layer ids, e.g. 1,16,31; got `{arg}`"),
        )
    })
}

/// `--tokens IDS|@FILE` or `--prompt TEXT|@FILE|NAME` (clap lets only one through).
pub fn token_ids(tokens: Option<&str>, prompt: Option<&str>) -> Result<Option<GivenIds>> {
    if let Some(arg) = tokens {
        return Ok(Some(
            match at_file(arg, "--tokens", "the ids themselves")? {
                Some(path) => GivenIds::TokensFile(path),
                None => GivenIds::Tokens(parse_token_list(arg)?),
            },
        ));
    }
    let Some(arg) = prompt else {
        return Ok(None);
    };
    Ok(Some(match at_file(arg, "--prompt", "the prompt itself")? {
        Some(path) => GivenIds::PromptFile(path),
        None => GivenIds::Prompt(arg.to_string()),
    }))
}

/// `--map A_NAME=B_NAME`, each split at its first `=`.
pub fn maps(maps: &[String]) -> Result<Vec<TensorMap>> {
    maps.iter()
        .map(|m| {
            let (a, b) = m.split_once('=').ok_or_else(|| {
                Error::argument("--map", format!("expects A_NAME=B_NAME, got `{m}`"))
            })?;
            Ok(TensorMap {
                a: a.to_string(),
                b: b.to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_lists() {
        assert_eq!(
            layer_list("1, 16,31", "--layer-ids").ok(),
            Some(vec![1, 16, 31])
        );
        assert!(layer_list("1,x", "--layer-ids").is_err());
        assert!(layer_list("", "--layer-ids").is_err());
    }

    #[test]
    fn token_ids_and_prompts() {
        assert_eq!(
            token_ids(Some("3, 1,4"), None).ok(),
            Some(Some(GivenIds::Tokens(vec![3, 1, 4])))
        );
        assert_eq!(
            token_ids(Some("@ids.txt"), None).ok(),
            Some(Some(GivenIds::TokensFile("ids.txt".into())))
        );
        let empty = token_ids(Some("@"), None).err().map(|e| e.to_string());
        assert_eq!(
            empty.as_deref(),
            Some("--tokens: `@` names no file: give @FILE, or the ids themselves")
        );
        let empty = token_ids(None, Some("@")).err().map(|e| e.to_string());
        assert_eq!(
            empty.as_deref(),
            Some("--prompt: `@` names no file: give @FILE, or the prompt itself")
        );
        assert_eq!(
            token_ids(None, Some("@p.txt")).ok(),
            Some(Some(GivenIds::PromptFile("p.txt".into())))
        );
        assert_eq!(
            token_ids(None, Some("fizzbuzz")).ok(),
            Some(Some(GivenIds::Prompt("fizzbuzz".into())))
        );
    }

    #[test]
    fn maps_split_at_the_first_equals() {
        let m = maps(&["a=b=c".to_string()]).ok();
        assert_eq!(
            m,
            Some(vec![TensorMap {
                a: "a".into(),
                b: "b=c".into()
            }])
        );
        assert!(maps(&["ab".to_string()]).is_err());
    }
}
