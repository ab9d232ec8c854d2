//! Captured hidden states of one run, and the dump files that carry them between machines.

pub mod dump;
pub mod envdiff;
pub mod fingerprint;
pub mod key;

use std::collections::BTreeMap;

use candle_core::Tensor;

pub use key::{Key, Op, RouterField, StateKind};

/// Tensors captured from one forward pass, by key: iterated in forward order ([`Key`]'s `Ord`).
#[derive(Clone, Default)]
pub struct Captures {
    pub input_ids: Vec<u32>,
    tensors: BTreeMap<Key, Tensor>,
}

impl Captures {
    pub fn new(input_ids: Vec<u32>) -> Self {
        Captures {
            input_ids,
            tensors: BTreeMap::new(),
        }
    }

    /// Adds `key`'s tensor. A forward captures each key once: a second tensor under one key
    /// replaces the first.
    pub fn insert(&mut self, key: Key, t: Tensor) {
        self.tensors.insert(key, t);
    }

    pub fn get(&self, key: Key) -> Option<&Tensor> {
        self.tensors.get(&key)
    }

    /// The captures in forward order.
    pub fn iter(&self) -> impl Iterator<Item = (Key, &Tensor)> {
        self.tensors.iter().map(|(k, t)| (*k, t))
    }

    /// The keys in forward order.
    pub fn keys(&self) -> impl Iterator<Item = Key> + '_ {
        self.tensors.keys().copied()
    }

    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }
}
