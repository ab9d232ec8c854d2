use candle_core::{DType, Device};

use super::*;
use crate::backends::Reference;
use crate::backends::cases::SplitMix;
use crate::capture::{Captures, Op, RouterField};
use crate::model::{Model, RunOptions};
use crate::util::progress::Progress;
use crate::weights::config::LayerType;

/// Wants only what `keys` holds, and says which it was asked about.
struct Only {
    keys: Vec<Key>,
    got: Vec<Key>,
}

impl Observer for Only {
    fn wants(&self, key: Key) -> bool {
        self.keys.contains(&key)
    }
    fn record(&mut self, key: Key, _t: Tensor) {
        self.got.push(key);
    }
    fn feed(&self, _layer: usize) -> Result<Option<Tensor>> {
        Ok(None)
    }
}

fn setup() -> (Model, Vec<u32>) {
    // The built-in model's files (golden/qwen3_5_tiny), read from the repository.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/qwen3_5_tiny");
    let model = Model::load(&dir).expect("golden model");
    let mut rng = SplitMix::new(0x0b5e);
    let v = model.config.vocab_size as u64;
    let ids = (0..9).map(|_| (rng.next_u64() % v) as u32).collect();
    (model, ids)
}

fn opts() -> RunOptions<'static> {
    RunOptions {
        dtype: DType::F32,
        device: Device::Cpu,
        backend: &Reference,
    }
}

fn linear_layer(model: &Model) -> usize {
    let types = &model.config.layer_types;
    types
        .iter()
        .position(|t| *t == LayerType::LinearAttention)
        .expect("a linear-attention layer")
}

#[test]
fn the_observer_gets_exactly_what_it_wants() {
    let (model, ids) = setup();
    let i = linear_layer(&model);
    let keys = vec![
        Key::Logits,
        Key::State(i, crate::capture::StateKind::Recurrent),
        Key::Layer(i),
        Key::Op(i, Op::CoreOut),
    ];
    let mut only = Only {
        keys: keys.clone(),
        got: Vec::new(),
    };
    model
        .observe(&ids, &opts(), &mut only, &Progress::hidden(), None)
        .expect("run");
    only.got.sort();
    let mut want = keys;
    want.sort();
    assert_eq!(only.got, want);
}

#[test]
fn a_run_fed_its_own_layer_outputs_is_the_same_run() {
    let (model, ids) = setup();
    let own = model.run(&ids, &opts(), &Progress::hidden()).expect("run");
    let mut fed = Recorder::new(&ids).fed_by(Some(&own));
    model
        .observe(&ids, &opts(), &mut fed, &Progress::hidden(), None)
        .expect("fed run");
    let fed = fed.into_captures();
    assert!(own.keys().eq(fed.keys()));
    for (key, t) in own.iter() {
        let (a, b) = (
            t.flatten_all().and_then(|t| t.to_vec1::<f32>()),
            fed.get(key)
                .expect("same keys")
                .flatten_all()
                .and_then(|t| t.to_vec1::<f32>()),
        );
        assert_eq!(a.expect("f32"), b.expect("f32"), "{key}");
    }
    // A feed lacking a layer's input is refused, naming it.
    let short = Captures::new(ids.clone());
    let err = model
        .observe(
            &ids,
            &opts(),
            &mut Recorder::new(&ids).fed_by(Some(&short)),
            &Progress::hidden(),
            None,
        )
        .expect_err("no embed to feed");
    assert!(err.to_string().contains("has no `embed`"), "{err}");
}

/// The golden MoE model's own router choices, per MoE layer, and its run.
fn moe_run() -> (Model, Vec<u32>, Captures) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("golden/qwen3_next_moe_tiny");
    let model = Model::load(&dir).expect("golden MoE model");
    let mut rng = SplitMix::new(0x40e);
    let v = model.config.vocab_size as u64;
    let ids: Vec<u32> = (0..12).map(|_| (rng.next_u64() % v) as u32).collect();
    let own = model.run(&ids, &opts(), &Progress::hidden()).expect("run");
    (model, ids, own)
}

fn experts(caps: &Captures, layer: usize) -> Vec<Vec<u32>> {
    let t = caps
        .get(Key::Router(layer, RouterField::TopkIds))
        .expect("router ids");
    let rows: Vec<Vec<i64>> = t.squeeze(0).and_then(|t| t.to_vec2()).expect("i64 [T, k]");
    rows.iter()
        .map(|r| r.iter().map(|&e| e as u32).collect())
        .collect()
}

/// `key`'s values as f32 (flip gaps are f64; −1 and the hidden states are exact in f32).
fn values(caps: &Captures, key: Key) -> Vec<f32> {
    caps.get(key)
        .expect("captured")
        .flatten_all()
        .and_then(|t| t.to_dtype(DType::F32))
        .and_then(|t| t.to_vec1())
        .expect("f32")
}

/// `caps`' runs' every capture, bit for bit, as `(name, f64 bits)`.
fn bits(caps: &Captures) -> Vec<(String, Vec<u64>)> {
    caps.iter()
        .map(|(key, t)| {
            let v: Vec<f64> = t
                .flatten_all()
                .and_then(|t| t.to_dtype(DType::F64))
                .and_then(|t| t.to_vec1())
                .expect("numbers");
            (key.to_string(), v.iter().map(|x| x.to_bits()).collect())
        })
        .collect()
}

#[test]
fn a_run_resumed_where_its_routing_parts_from_another_is_the_whole_run_bit_for_bit() {
    let (model, ids, _) = moe_run();
    let recorded = |routes: Option<&Routes>, base: Option<(&Captures, usize)>| {
        let mut r = Recorder::new(&ids)
            .with_states(true)
            .with_router_logits(true)
            .routed_by(routes)
            .resuming(base);
        model
            .observe(&ids, &opts(), &mut r, &Progress::hidden(), None)
            .expect("run");
        r.into_captures()
    };
    let own = recorded(None, None);
    // The last MoE layer's token 7 sent to its best expert left out in place of its k-th.
    let layer = (0..model.config.num_hidden_layers)
        .rfind(|&i| model.config.is_moe_layer(i))
        .expect("a MoE layer");
    assert!(layer > 0, "a layer before it to share");
    let mut sets = experts(&own, layer);
    *sets[7].last_mut().expect("k experts") = best_left_out(&model, &own, layer)[7];
    let mut routes = Routes::default();
    routes.insert(layer, sets);
    assert_eq!(Routes::first_difference(Some(&routes), None), Some(layer));
    let whole = recorded(Some(&routes), None);
    let resumed = recorded(Some(&routes), Some((&own, layer)));
    assert_eq!(bits(&resumed), bits(&whole));
    assert_ne!(
        values(&whole, Key::Layer(layer)),
        values(&own, Key::Layer(layer)),
        "the forced expert moves the layer"
    );
}

/// Per token, the expert of largest recorded router logit that `layer`'s router left out.
fn best_left_out(model: &Model, caps: &Captures, layer: usize) -> Vec<u32> {
    let count = model.config.moe.as_ref().expect("MoE").num_experts;
    let logits = values(caps, Key::Router(layer, RouterField::Logits));
    (experts(caps, layer).iter().enumerate())
        .map(|(t, set)| {
            let row = &logits[t * count..(t + 1) * count];
            (0..count as u32)
                .filter(|e| !set.contains(e))
                .max_by(|&x, &y| row[x as usize].total_cmp(&row[y as usize]))
                .expect("an expert left out")
        })
        .collect()
}

#[test]
fn the_recorded_router_logits_rank_the_choices_by_flip_gap() {
    let (model, ids, _) = moe_run();
    let observed = |routes: Option<&Routes>, logits: bool| {
        let mut r = Recorder::new(&ids)
            .with_router_logits(logits)
            .routed_by(routes);
        model
            .observe(&ids, &opts(), &mut r, &Progress::hidden(), None)
            .expect("run");
        r.into_captures()
    };
    let own = observed(None, true);
    let layer = (0..model.config.num_hidden_layers)
        .find(|&i| model.config.is_moe_layer(i))
        .expect("a MoE layer");
    let chosen = experts(&own, layer);
    let count = model.config.moe.as_ref().expect("MoE").num_experts as u32;
    let left_out: Vec<Vec<u32>> = (chosen.iter())
        .map(|set| (0..count).filter(|e| !set.contains(e)).collect())
        .collect();
    // Each token's k-th expert swapped for its j-th left-out one: the flip gap (the logit
    // change that would make the router choose it) is least for the one of largest logit.
    let mut least: Vec<(f32, u32)> = vec![(f32::INFINITY, count); ids.len()];
    for j in 0..left_out[0].len() {
        let sets: Vec<Vec<u32>> = (chosen.iter().zip(&left_out))
            .map(|(set, out)| {
                let mut set = set.clone();
                *set.last_mut().expect("k experts") = out[j];
                set
            })
            .collect();
        let mut routes = Routes::default();
        routes.insert(layer, sets);
        let gaps = values(
            &observed(Some(&routes), false),
            Key::Router(layer, RouterField::FlipGap),
        );
        for (t, &g) in gaps.iter().enumerate() {
            if g < least[t].0 {
                least[t] = (g, left_out[t][j]);
            }
        }
    }
    let best = best_left_out(&model, &own, layer);
    for (t, &(_, nearest)) in least.iter().enumerate() {
        assert_eq!(best[t], nearest, "token {t}");
    }
    // Not asked for: not recorded.
    let plain = observed(None, false);
    assert!(plain.get(Key::Router(layer, RouterField::Logits)).is_none());
}

#[test]
fn a_run_forced_to_its_own_routing_is_the_same_run_and_another_set_moves_it() {
    let (model, ids, own) = moe_run();
    let moe: Vec<usize> = (0..model.config.num_hidden_layers)
        .filter(|&i| model.config.is_moe_layer(i))
        .collect();
    let mut routes = Routes::default();
    for &i in &moe {
        routes.insert(i, experts(&own, i));
    }
    let mut forced = Recorder::new(&ids).routed_by(Some(&routes));
    model
        .observe(&ids, &opts(), &mut forced, &Progress::hidden(), None)
        .expect("forced run");
    let forced = forced.into_captures();
    let last = Key::Layer(model.config.num_hidden_layers - 1);
    assert_eq!(values(&forced, last), values(&own, last));
    let gaps = values(&forced, Key::Router(moe[0], RouterField::FlipGap));
    assert!(gaps.iter().all(|&g| g == -1.0), "{gaps:?}");

    // Token 5 of the first MoE layer sent to two experts the router did not choose.
    let (layer, token) = (moe[0], 5);
    let mut sets = experts(&own, layer);
    let count = model.config.moe.as_ref().expect("MoE").num_experts as u32;
    let other: Vec<u32> = (0..count).filter(|e| !sets[token].contains(e)).collect();
    sets[token] = other[..sets[token].len()].to_vec();
    routes.insert(layer, sets.clone());
    let mut moved = Recorder::new(&ids).routed_by(Some(&routes));
    model
        .observe(&ids, &opts(), &mut moved, &Progress::hidden(), None)
        .expect("moved run");
    let moved = moved.into_captures();
    assert_eq!(experts(&moved, layer), sets);
    let gaps = values(&moved, Key::Router(layer, RouterField::FlipGap));
    assert!(gaps[token] > 0.0, "{gaps:?}");
    assert!(
        gaps.iter()
            .enumerate()
            .all(|(t, &g)| (t == token) != (g == -1.0)),
        "{gaps:?}"
    );
    let (a, b) = (
        values(&own, Key::Layer(layer)),
        values(&moved, Key::Layer(layer)),
    );
    let h = model.config.hidden_size;
    assert_eq!(
        a[..token * h],
        b[..token * h],
        "tokens before it keep their output"
    );
    assert_ne!(a[token * h..(token + 1) * h], b[token * h..(token + 1) * h]);

    // Routes that do not fit the block are refused.
    sets[token] = vec![count; sets[token].len()];
    routes.insert(layer, sets);
    let err = model
        .observe(
            &ids,
            &opts(),
            &mut Recorder::new(&ids).routed_by(Some(&routes)),
            &Progress::hidden(),
            None,
        )
        .expect_err("no such expert");
    assert!(err.to_string().contains("forced routing: token 5"), "{err}");
}

#[test]
fn a_token_given_no_experts_keeps_the_routers_own_choice() {
    let (model, ids, own) = moe_run();
    let layer = (0..model.config.num_hidden_layers)
        .find(|&i| model.config.is_moe_layer(i))
        .expect("a MoE layer");
    let forced = |routes: &Routes| {
        let mut r = Recorder::new(&ids).routed_by(Some(routes));
        model
            .observe(&ids, &opts(), &mut r, &Progress::hidden(), None)
            .expect("forced run");
        r.into_captures()
    };
    // Token 5 sent to experts the router did not choose, every other token to its own choice:
    // given in full, or as no experts at all.
    let token = 5;
    let mut full = experts(&own, layer);
    let count = model.config.moe.as_ref().expect("MoE").num_experts as u32;
    let other: Vec<u32> = (0..count).filter(|e| !full[token].contains(e)).collect();
    full[token] = other[..full[token].len()].to_vec();
    let mut sparse = vec![Vec::new(); ids.len()];
    sparse[token] = full[token].clone();
    let (mut whole, mut few) = (Routes::default(), Routes::default());
    whole.insert(layer, full);
    few.insert(layer, sparse);
    let (whole, few) = (forced(&whole), forced(&few));
    assert_eq!(bits(&few), bits(&whole));
    let gaps = values(&few, Key::Router(layer, RouterField::FlipGap));
    assert!(
        gaps.iter()
            .enumerate()
            .all(|(t, &g)| (t == token) != (g == -1.0)),
        "{gaps:?}"
    );
}
