use std::path::Path;

use super::*;
use crate::weights::safetensors_file::SafetensorsFile;

/// Every key of a 3-layer model, in forward order.
fn every_key() -> Vec<Key> {
    let mut keys = vec![Key::InputIds, Key::Embed];
    for i in 0..3 {
        keys.extend(Op::ALL.iter().map(|&op| Key::Op(i, op)));
        keys.extend(RouterField::ALL.iter().map(|&f| Key::Router(i, f)));
        keys.push(Key::Layer(i));
    }
    for i in 0..3 {
        keys.extend(StateKind::ALL.iter().map(|&k| Key::State(i, k)));
    }
    keys.extend([Key::FinalNorm, Key::Logits]);
    keys.extend((0..3).map(Key::DecodeLayer));
    keys.push(Key::DecodeLogits);
    keys
}

#[test]
fn every_key_round_trips() {
    for key in every_key().into_iter().chain([
        Key::Layer(usize::MAX),
        Key::Op(10, Op::Q),
        Key::DecodeLayer(47),
    ]) {
        let name = key.to_string();
        assert_eq!(name.parse::<Key>(), Ok(key), "{name}");
    }
}

#[test]
fn names_are_today_s() {
    let names: Vec<String> = [
        Key::InputIds,
        Key::Embed,
        Key::Layer(3),
        Key::Op(3, Op::GatedNormOut),
        Key::State(2, StateKind::Recurrent),
        Key::State(2, StateKind::Conv),
        Key::Router(1, RouterField::TopkIds),
        Key::Router(1, RouterField::Logits),
        Key::Router(1, RouterField::Margin),
        Key::FinalNorm,
        Key::Logits,
        Key::DecodeLogits,
        Key::DecodeLayer(4),
    ]
    .iter()
    .map(Key::to_string)
    .collect();
    assert_eq!(
        names,
        [
            "input_ids",
            "embed",
            "layers.3",
            "layers.3.gated_norm_out",
            "state.layers.2.recurrent",
            "state.layers.2.conv",
            "router.1.topk_ids",
            "router.1.logits",
            "router.1.margin",
            "final_norm",
            "logits",
            "decode.logits",
            "decode.layers.4",
        ]
    );
}

#[test]
fn near_misses_are_refused() {
    let overflow = format!("layers.{}0", usize::MAX);
    for bad in [
        "",
        "layers",
        "layers.",
        "layers.x",
        "layers.-1",
        "layers.+1",
        "layers.03",
        "layers. 3",
        "layers.3.",
        "layers.3.nope",
        "layers.3.q.k",
        "layers.3.Q",
        "layers.3.conv",
        overflow.as_str(),
        "state.layers.3",
        "state.layers.3.other",
        "state.layers.x.recurrent",
        "state.layers.3.recurrent.",
        "router.",
        "router.3",
        "router.3.",
        "router.x.topk_ids",
        "router.3.topk",
        "decode.layers.",
        "decode.layers.3.q",
        "decode.embed",
        "Embed",
        "embed ",
        "model.layers.3",
        "hidden_states.3",
    ] {
        assert_eq!(
            bad.parse::<Key>(),
            Err(NotAKey(bad.to_string())),
            "`{bad}` parsed"
        );
    }
    assert_eq!(
        "layers.3.nope".parse::<Key>().unwrap_err().to_string(),
        "`layers.3.nope` is not an hsdiff tensor name"
    );
}

#[test]
fn order_is_forward_order() {
    let keys = every_key();
    let mut sorted = keys.clone();
    sorted.reverse();
    sorted.sort();
    assert_eq!(sorted, keys);
    // Numerically by layer, not by name.
    assert!(Key::Layer(2) < Key::Layer(10));
    assert!(Key::Op(10, Op::Beta) > Key::Layer(9));
    // The final states follow every layer and precede the final norm.
    assert!(Key::State(0, StateKind::Recurrent) > Key::Layer(usize::MAX));
    assert!(Key::State(usize::MAX, StateKind::Recurrent) < Key::FinalNorm);
}

/// tests/fixtures/tensor_names.txt without its comments.
fn golden_names() -> Vec<&'static str> {
    include_str!("../../../tests/fixtures/tensor_names.txt")
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

#[test]
fn the_golden_list_round_trips_in_forward_order_and_has_every_kind() {
    let names = golden_names();
    let keys: Vec<Key> = names
        .iter()
        .map(|n| n.parse().unwrap_or_else(|e| panic!("{e}")))
        .collect();
    for (key, name) in keys.iter().zip(&names) {
        assert_eq!(key.to_string(), *name);
    }
    let mut sorted = keys.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, keys, "not in forward order, or a name twice");
    // Every kind of key, with every op, state and router field, at layer 0 or outside the
    // layers.
    for key in every_key()
        .into_iter()
        .filter(|k| k.layer().is_none_or(|i| i == 0))
    {
        assert!(keys.contains(&key), "{key} is not in the list");
    }
}

#[test]
fn the_golden_files_names_are_keys() {
    // Written by golden/make.py (transformers' hooks), independently of this module.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("golden");
    let mut seen = 0;
    for dir in ["states", "decode"] {
        for model in std::fs::read_dir(root.join(dir)).expect("list golden/{states,decode}") {
            let model = model.expect("a golden folder entry").path();
            if !model.is_dir() {
                continue;
            }
            for file in std::fs::read_dir(&model).expect("list a golden model folder") {
                let file = file.expect("a golden file entry").path();
                if file.extension().is_some_and(|e| e == "safetensors") {
                    for name in SafetensorsFile::open(&file)
                        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
                        .names()
                    {
                        let key: Key = name
                            .parse()
                            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                        assert_eq!(key.to_string(), name);
                        seen += 1;
                    }
                }
            }
        }
    }
    assert!(
        seen > 100,
        "only {seen} names in golden/states and golden/decode"
    );
}

#[test]
fn layer_of_a_key() {
    assert_eq!(Key::Op(4, Op::K).layer(), Some(4));
    assert_eq!(Key::State(2, StateKind::Conv).layer(), Some(2));
    assert_eq!(Key::Embed.layer(), None);
    assert_eq!(Key::of("router.7.margin").and_then(Key::layer), Some(7));
}

#[test]
fn mapped_keys_are_their_names_and_follow_every_other_key() {
    // hsdiff's own names stay themselves; any other is a Mapped key, displayed as given.
    assert_eq!(Key::mapped("layers.3"), Key::Layer(3));
    let (mlp, attn) = (Key::mapped("model.layers.3.mlp"), Key::mapped("attn_out"));
    assert!(matches!(mlp, Key::Mapped(_)));
    assert_eq!(mlp.to_string(), "model.layers.3.mlp");
    assert_eq!(mlp, Key::mapped("model.layers.3.mlp"));
    assert_ne!(mlp, attn);
    // Ordered after the decode path's keys, by name among themselves; never read from a name.
    assert!(mlp > Key::DecodeLogits && attn < mlp);
    assert_eq!(Key::of("attn_out"), None);
    assert_eq!(mlp.layer(), None);
}
