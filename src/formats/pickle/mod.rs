//! A pickle reader for torch.save's `data.pkl` that cannot be made to overflow the stack or eat
//! the machine: the virtual machine is a loop over an explicit stack, container nesting is
//! capped ([`Limits::pickle_depth`]), and every object made — including each copy a memo lookup
//! makes, the way a few hundred bytes can double a list forty times — is counted against
//! [`Limits::pickle_objects`]. Only data opcodes are understood; nothing is ever executed:
//! globals and reductions stay descriptions ([`Value::Global`], [`Value::Reduce`]).

mod vm;

use crate::util::limits::{self, Limits};
use vm::Vm;

/// A pickled value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    /// A bytes object (only its length is kept: torch keeps no tensor data in the pickle).
    Bytes(usize),
    List(Vec<Obj>),
    Tuple(Vec<Obj>),
    Dict(Vec<(Obj, Obj)>),
    Global {
        module: String,
        name: String,
    },
    Reduce {
        callable: Box<Obj>,
        args: Box<Obj>,
    },
    /// `BUILD`: an object and the state set on it.
    Build {
        obj: Box<Obj>,
        state: Box<Obj>,
    },
    /// `BINPERSID`: torch's reference to a storage.
    Persistent(Box<Obj>),
}

/// A value with the size of its tree, so that copies and nesting are charged in O(1).
#[derive(Debug, Clone, PartialEq)]
pub struct Obj {
    pub value: Value,
    depth: usize,
    nodes: usize,
}

impl Obj {
    fn leaf(value: Value) -> Self {
        Obj {
            value,
            depth: 1,
            nodes: 1,
        }
    }
}

/// What is wrong with a pickle, in words.
pub type Error = String;

/// Parses `bytes` (one pickle, ending in STOP) into its value.
pub fn parse(bytes: &[u8]) -> Result<Value, Error> {
    parse_with(bytes, limits::get())
}

/// [`parse`] under `limits` (the fuzz targets and tests pass small ones).
pub fn parse_with(bytes: &[u8], limits: &Limits) -> Result<Value, Error> {
    Vm::new(bytes, limits).run().map(|o| o.value)
}

#[cfg(test)]
mod tests;
