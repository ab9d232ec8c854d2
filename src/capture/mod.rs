//! Captured hidden states of one run, and the dump files that carry them between machines.

pub mod dump;
pub mod key;
pub mod names;

use candle_core::Tensor;

/// Tensors captured from one forward pass, in the order they were produced.
#[derive(Clone, Default)]
pub struct Captures {
    pub input_ids: Vec<u32>,
    tensors: Vec<(String, Tensor)>,
}

impl Captures {
    pub fn new(input_ids: Vec<u32>) -> Self {
        Captures {
            input_ids,
            tensors: Vec::new(),
        }
    }

    pub fn push(&mut self, name: impl Into<String>, t: Tensor) {
        self.tensors.push((name.into(), t));
    }

    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Tensor)> {
        self.tensors.iter().map(|(n, t)| (n.as_str(), t))
    }

    pub fn names(&self) -> Vec<&str> {
        self.tensors.iter().map(|(n, _)| n.as_str()).collect()
    }

    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }
}
