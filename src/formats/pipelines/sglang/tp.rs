//! Tensor-parallel shards of one dumped tensor, joined as the dump's metadata says.
//!
//! Each rank's `meta` carries its rank (`sglang_parallel_info` / `megatron_parallel_info`:
//! `tp_rank`, `tp_size`, or the same keys at the top level) and, when the dump call gave one,
//! `dims`: the layout in SGLang's comparator notation (`debug_utils/comparator/dims_spec`):
//! `t h[tp]` — split along `h`, joined by concatenation in rank order; `t h[tp:partial]` — each
//! rank holds a partial sum (an all-reduce not yet done, as with fused all-reduce + add-norm),
//! joined by summing; `t h # tp:replicated` — every rank holds the whole tensor. Without `dims`
//! a multi-rank tensor is refused: whole copies and partial sums look alike (SGLang #28925 is a
//! nightly test that summed eight whole copies).

use candle_core::{DType, Tensor};
use serde_json::{Map, Value as Json};

/// One rank's copy of a tensor.
pub struct Shard {
    pub tensor: Tensor,
    pub meta: Map<String, Json>,
    /// The rank from the file name (`rank=R`), for messages.
    pub file_rank: String,
}

/// How the shards of a tensor are joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Join {
    Concat(usize),
    Sum,
    Replicated,
}

/// (tp_rank, tp_size) from a rank's meta, as SGLang's comparator reads them.
fn tp_of(meta: &Map<String, Json>) -> Option<(usize, usize)> {
    let num = |m: &Map<String, Json>, k: &str| m.get(k).and_then(Json::as_u64).map(|x| x as usize);
    for key in ["sglang_parallel_info", "megatron_parallel_info"] {
        if let Some(Json::Object(info)) = meta.get(key)
            && !info.keys().any(|k| k.ends_with("_error"))
            && let (Some(r), Some(s)) = (num(info, "tp_rank"), num(info, "tp_size"))
        {
            return Some((r, s));
        }
    }
    Some((num(meta, "tp_rank")?, num(meta, "tp_size")?))
}

/// How `dims` (for a tensor of `rank` axes) says tensor-parallel shards join.
pub fn parse_dims(dims: &str, rank: usize) -> Result<Join, String> {
    let (shape, declared) = dims.split_once('#').unwrap_or((dims, ""));
    let tokens: Vec<&str> = shape.split_whitespace().collect();
    if tokens.len() != rank {
        return Err(format!(
            "`dims` \"{dims}\" names {} axes, the tensor has {rank}",
            tokens.len()
        ));
    }
    let mut join = None;
    for (axis, tok) in tokens.iter().enumerate() {
        // `h[tp]` (the comparator's notation) or `h(tp)` (its first version).
        let mods = tok
            .split_once('[')
            .and_then(|(_, m)| m.strip_suffix(']'))
            .or_else(|| tok.split_once('(').and_then(|(_, m)| m.strip_suffix(')')));
        for m in mods.into_iter().flat_map(|m| m.split(',')).map(str::trim) {
            let (axis_name, quals) = m.split_once(':').unwrap_or((m, ""));
            let partial = quals.split('+').any(|q| q.trim() == "partial");
            join = match (axis_name, join) {
                ("tp", _) if partial => Some(Join::Sum),
                ("tp", _) => Some(Join::Concat(axis)),
                // The first notation's `h(tp,partial)`.
                ("partial", Some(_)) => Some(Join::Sum),
                _ => {
                    return Err(format!(
                        "`dims` \"{dims}\" shards axis `{axis_name}`: hsdiff joins tensor-parallel (tp) shards only"
                    ));
                }
            };
        }
    }
    if declared.split_whitespace().any(|t| t == "tp:replicated") {
        if join.is_some() {
            return Err(format!(
                "`dims` \"{dims}\" declares tp both sharded and replicated"
            ));
        }
        join = Some(Join::Replicated);
    }
    join.ok_or_else(|| {
        format!("`dims` \"{dims}\" says neither how tp shards split (`h[tp]`, `h[tp:partial]`) nor `# tp:replicated`")
    })
}

/// "rank 0 [5, 8], rank 1 [5, 8]": the shards' ranks and shapes, for messages.
fn seen(shards: &[Shard]) -> String {
    let shapes: Vec<String> = shards
        .iter()
        .map(|s| format!("rank {} {:?}", s.file_rank, s.tensor.dims()))
        .collect();
    shapes.join(", ")
}

/// Joins the copies of `name` that the ranks dumped. Returns the tensor and how it was joined
/// (None: one rank, no tensor parallelism).
pub fn join(name: &str, mut shards: Vec<Shard>) -> Result<(Tensor, Option<Join>), String> {
    let tps: Vec<Option<(usize, usize)>> = shards.iter().map(|s| tp_of(&s.meta)).collect();
    if let [None] | [Some((_, 1))] = tps[..] {
        let one = shards.pop().ok_or_else(|| format!("`{name}`: no file"))?;
        return Ok((one.tensor, None));
    }
    let how = how_ranks_join(name, &shards, &tps)?;
    shards.sort_by_key(|s| tp_of(&s.meta).map_or(0, |t| t.0));
    let tensors: Vec<&Tensor> = shards.iter().map(|s| &s.tensor).collect();
    let joined = match how {
        Join::Concat(axis) => Tensor::cat(&tensors, axis).map_err(|e| {
            format!(
                "`{name}`: shards {} do not join along axis {axis}: {e}",
                seen(&shards)
            )
        })?,
        Join::Sum => {
            whole_copies(name, &tensors)?;
            sum(&tensors).map_err(|e| format!("`{name}`: shards {}: {e}", seen(&shards)))?
        }
        Join::Replicated => {
            same(&tensors).map_err(|e| format!("`{name}`: {e}"))?;
            tensors[0].clone()
        }
    };
    Ok((joined, Some(how)))
}

/// How the copies of `name` from several ranks join, from their meta (`tps`: each one's
/// tp_rank and tp_size); refused when the meta is missing, disagrees or names other ranks.
fn how_ranks_join(
    name: &str,
    shards: &[Shard],
    tps: &[Option<(usize, usize)>],
) -> Result<Join, String> {
    let Some(all) = tps.iter().copied().collect::<Option<Vec<_>>>() else {
        let ranks: Vec<&str> = shards.iter().map(|s| s.file_rank.as_str()).collect();
        return Err(format!(
            "`{name}` is dumped by {} ranks ({}) without tp_rank/tp_size in its meta: cannot tell how they join",
            shards.len(),
            ranks.join(", ")
        ));
    };
    let size = all[0].1;
    if size == 1 {
        return Err(format!(
            "`{name}` is dumped {} times in one forward pass ({})",
            shards.len(),
            seen(shards)
        ));
    }
    if all.iter().any(|t| t.1 != size) {
        return Err(format!(
            "`{name}`: the ranks' meta disagree on tp_size ({:?})",
            all.iter().map(|t| t.1).collect::<Vec<_>>()
        ));
    }
    if let Some((shard, (r, _))) = shards.iter().zip(&all).find(|(_, t)| t.0 >= size) {
        return Err(format!(
            "`{name}`: the meta of rank {}'s file says tp_rank {r} of tp_size {size}, and tp ranks run \
             from 0 to tp_size − 1",
            shard.file_rank
        ));
    }
    let mut got: Vec<usize> = all.iter().map(|t| t.0).collect();
    got.sort_unstable();
    let dims: Vec<Option<&str>> = shards
        .iter()
        .map(|s| s.meta.get("dims").and_then(Json::as_str))
        .collect();
    let dims_of = dims[0];
    if dims.iter().any(|d| *d != dims_of) {
        return Err(format!(
            "`{name}`: the ranks' meta disagree on `dims` ({dims:?})"
        ));
    }
    let Some(d) = dims_of else {
        return Err(format!(
            "`{name}` is dumped by {} of tp_size {size} ranks ({}) and its meta has no `dims` \
             saying how they join (split along an axis, tp:partial sums or tp:replicated): \
             refused, as whole copies and partial sums look alike; dump with dims=… \
             (e.g. \"t h[tp]\") or with tensor parallelism 1",
            shards.len(),
            seen(shards)
        ));
    };
    let how = parse_dims(d, shards[0].tensor.rank()).map_err(|e| format!("`{name}`: {e}"))?;
    // Every rank of 0..size once, checked without a list of tp_size entries (tp_size comes
    // from the file).
    let every_rank = got.len() == size && got.iter().enumerate().all(|(i, &r)| i == r);
    if how != Join::Replicated && !every_rank {
        return Err(format!(
            "`{name}`: `dims` \"{d}\" splits it over tp_size {size} ranks, but the dump holds tp ranks {got:?}"
        ));
    }
    if how == Join::Replicated && got.windows(2).any(|w| w[0] == w[1]) {
        return Err(format!("`{name}`: a tp rank dumped it twice ({got:?})"));
    }
    Ok(how)
}

/// The one tensor every rank dumped alike (the token ids); refused when the copies differ.
pub fn identical(name: &str, mut shards: Vec<Shard>) -> Result<Tensor, String> {
    let tensors: Vec<&Tensor> = shards.iter().map(|s| &s.tensor).collect();
    if tensors.len() > 1 {
        same(&tensors).map_err(|_| {
            format!(
                "`{name}` differs between the ranks that dumped it ({})",
                shards
                    .iter()
                    .map(|s| format!("rank {}", s.file_rank))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?;
    }
    shards
        .pop()
        .map(|s| s.tensor)
        .ok_or_else(|| format!("`{name}`: no file"))
}

/// Partial sums that are equal bit for bit on every rank are whole copies (the all-reduce had
/// run): summing them would make the layer n× its value, as SGLang #28925's test did.
fn whole_copies(name: &str, ts: &[&Tensor]) -> Result<(), String> {
    if ts.len() > 1 && same(ts).is_ok() {
        return Err(format!(
            "`{name}` is declared `tp:partial`, but its {} ranks' copies are equal bit for bit: \
             whole copies (the all-reduce already done), not partial sums, and summing them would \
             make the layer {}× its value (SGLang #28925); refused: dump it with \
             `# tp:replicated` if every rank holds the whole tensor",
            ts.len(),
            ts.len()
        ));
    }
    Ok(())
}

/// The sum of partial sums, in f32, rounded back to their dtype.
fn sum(ts: &[&Tensor]) -> candle_core::Result<Tensor> {
    let dtype = ts[0].dtype();
    let mut acc = ts[0].to_dtype(DType::F32)?;
    for t in &ts[1..] {
        acc = (acc + t.to_dtype(DType::F32)?)?;
    }
    acc.to_dtype(dtype)
}

/// Checks that "replicated" copies are the same tensor (bit for bit).
fn same(ts: &[&Tensor]) -> Result<(), String> {
    let bits = |t: &Tensor| -> Result<Vec<u64>, String> {
        let v: Vec<f64> = t
            .flatten_all()
            .and_then(|t| t.to_dtype(DType::F64))
            .and_then(|t| t.to_vec1())
            .map_err(|e| e.to_string())?;
        Ok(v.into_iter().map(f64::to_bits).collect())
    };
    let first = bits(ts[0])?;
    for (r, t) in ts.iter().enumerate().skip(1) {
        if t.dims() != ts[0].dims() || bits(t)? != first {
            return Err(format!(
                "declared `tp:replicated`, but tp rank {r}'s copy differs from rank 0's"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;
    use serde_json::json;

    fn shard(t: Tensor, tp_rank: usize, dims: Option<&str>) -> Shard {
        let mut meta = Map::new();
        meta.insert(
            "sglang_parallel_info".into(),
            json!({"tp_rank": tp_rank, "tp_size": 2}),
        );
        if let Some(d) = dims {
            meta.insert("dims".into(), json!(d));
        }
        Shard {
            tensor: t,
            meta,
            file_rank: tp_rank.to_string(),
        }
    }

    #[test]
    fn dims_notation() {
        assert_eq!(parse_dims("t h[tp]", 2), Ok(Join::Concat(1)));
        assert_eq!(parse_dims("t(tp) h", 2), Ok(Join::Concat(0)));
        assert_eq!(parse_dims("t h[tp:partial]", 2), Ok(Join::Sum));
        assert_eq!(parse_dims("t h(tp,partial)", 2), Ok(Join::Sum));
        assert_eq!(parse_dims("t h # tp:replicated", 2), Ok(Join::Replicated));
        assert!(parse_dims("t h", 2).is_err());
        assert!(parse_dims("t[cp:zigzag] h", 2).is_err());
        assert!(parse_dims("t h[tp]", 3).is_err());
    }

    #[test]
    fn shards_join_by_their_dims() -> candle_core::Result<()> {
        let cpu = &Device::Cpu;
        let full = Tensor::randn(0f32, 1f32, (3, 8), cpu)?;
        let halves = || -> candle_core::Result<(Tensor, Tensor)> {
            Ok((
                full.narrow(1, 0, 4)?.contiguous()?,
                full.narrow(1, 4, 4)?.contiguous()?,
            ))
        };
        // Rank order comes from the meta, not from the order the files were found in.
        let (a, b) = halves()?;
        let (got, how) = join(
            "x",
            vec![shard(b, 1, Some("t h[tp]")), shard(a, 0, Some("t h[tp]"))],
        )
        .map_err(candle_core::Error::msg)?;
        assert_eq!(how, Some(Join::Concat(1)));
        assert_eq!(
            got.flatten_all()?.to_vec1::<f32>()?,
            full.flatten_all()?.to_vec1::<f32>()?
        );
        // Partial sums: two random parts of the whole.
        let p0 = Tensor::randn(0f32, 1f32, (3, 8), cpu)?;
        let p1 = (&full - &p0)?;
        let (got, how) = join(
            "x",
            vec![
                shard(p0, 0, Some("t h[tp:partial]")),
                shard(p1, 1, Some("t h[tp:partial]")),
            ],
        )
        .map_err(candle_core::Error::msg)?;
        assert_eq!(how, Some(Join::Sum));
        let err = (got - &full)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(err < 1e-5, "{err}");
        // Replicated copies that differ are refused.
        let other = Tensor::randn(0f32, 1f32, (3, 8), cpu)?;
        let refused = join(
            "x",
            vec![
                shard(full.clone(), 0, Some("t h # tp:replicated")),
                shard(other, 1, Some("t h # tp:replicated")),
            ],
        );
        assert!(refused.is_err());
        // Bit-identical "partial sums" are whole copies: refused, not summed into 2×.
        let copies = join(
            "x",
            vec![
                shard(full.clone(), 0, Some("t h[tp:partial]")),
                shard(full.clone(), 1, Some("t h[tp:partial]")),
            ],
        )
        .err()
        .unwrap_or_default();
        assert!(copies.contains("equal bit for bit"), "{copies}");
        // A rank at or past tp_size, and a tp_size no list of ranks is made for.
        let mut past = shard(full.clone(), 0, Some("t h # tp:replicated"));
        past.meta.insert(
            "sglang_parallel_info".into(),
            json!({"tp_rank": 5, "tp_size": 2}),
        );
        let msg = join(
            "x",
            vec![shard(full.clone(), 0, Some("t h # tp:replicated")), past],
        )
        .err()
        .unwrap_or_default();
        assert!(msg.contains("tp_rank 5 of tp_size 2"), "{msg}");
        let mut huge = shard(full.clone(), 0, Some("t h[tp]"));
        huge.meta.insert(
            "sglang_parallel_info".into(),
            json!({"tp_rank": 0, "tp_size": 1u64 << 62}),
        );
        assert!(join("x", vec![huge]).is_err());
        // No dims: refused, with the shapes seen.
        let (a, b) = halves()?;
        let msg = join("x", vec![shard(a, 0, None), shard(b, 1, None)])
            .err()
            .unwrap_or_default();
        assert!(
            msg.contains("has no `dims`") && msg.contains("rank 0 [3, 4]"),
            "{msg}"
        );
        Ok(())
    }
}
