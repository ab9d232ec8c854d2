//! The pickle virtual machine: a loop over an explicit stack of data opcodes, charging every
//! object it makes against the limits.

use std::collections::HashMap;

use super::{Error, Obj, Value};
use crate::util::limits::{self, Limits};

pub(super) struct Vm<'a> {
    bytes: &'a [u8],
    pos: usize,
    stack: Vec<Obj>,
    marks: Vec<usize>,
    memo: HashMap<u32, Obj>,
    /// Objects made so far (memo copies included).
    made: usize,
    limits: &'a Limits,
}

impl<'a> Vm<'a> {
    pub(super) fn new(bytes: &'a [u8], limits: &'a Limits) -> Self {
        Vm {
            bytes,
            pos: 0,
            stack: Vec::new(),
            marks: Vec::new(),
            memo: HashMap::new(),
            made: 0,
            limits,
        }
    }

    fn take(&mut self, n: usize) -> Result<&[u8], Error> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or("the pickle ends in the middle of an instruction (truncated?)")?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, Error> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, Error> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, Error> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, Error> {
        let b = self.take(8)?;
        let mut a = [0; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn len64(&mut self) -> Result<usize, Error> {
        let n = self.u64()?;
        usize::try_from(n).map_err(|_| format!("a length of {n} bytes"))
    }

    fn string(&mut self, n: usize) -> Result<String, Error> {
        let b = self.take(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| "a string that is not UTF-8".to_string())
    }

    fn line(&mut self) -> Result<String, Error> {
        let rest = &self.bytes[self.pos..];
        let n = rest
            .iter()
            .position(|&c| c == b'\n')
            .ok_or("a GLOBAL name without its newline (truncated?)")?;
        let s = self.string(n)?;
        self.pos += 1;
        Ok(s)
    }

    /// Charges `n` new objects against the budget.
    fn charge(&mut self, n: usize) -> Result<(), Error> {
        self.made = self.made.saturating_add(n);
        let cap = self.limits.pickle_objects;
        if self.made > cap {
            return Err(limits::exceeded(
                "the number of pickled objects (memo copies included)",
                self.made,
                "pickle-objects",
                cap,
            ));
        }
        Ok(())
    }

    fn push(&mut self, value: Value) -> Result<(), Error> {
        self.charge(1)?;
        self.stack.push(Obj::leaf(value));
        Ok(())
    }

    /// A container of `items`; its depth is checked against the cap here, where it grows.
    fn node(&self, items: impl Iterator<Item = (usize, usize)>) -> Result<(usize, usize), Error> {
        let (depth, nodes) = items.fold((0, 1usize), |(d, n), (cd, cn)| {
            (d.max(cd), n.saturating_add(cn))
        });
        let depth = depth + 1;
        if depth > self.limits.pickle_depth {
            return Err(limits::exceeded(
                "the nesting depth of the pickle",
                depth,
                "pickle-depth",
                self.limits.pickle_depth,
            ));
        }
        Ok((depth, nodes))
    }

    fn make(&mut self, value: Value) -> Result<Obj, Error> {
        let children: Vec<(usize, usize)> = match &value {
            Value::List(v) | Value::Tuple(v) => v.iter().map(|o| (o.depth, o.nodes)).collect(),
            Value::Dict(v) => v
                .iter()
                .flat_map(|(k, o)| [(k.depth, k.nodes), (o.depth, o.nodes)])
                .collect(),
            Value::Reduce {
                callable: a,
                args: b,
            }
            | Value::Build { obj: a, state: b } => {
                vec![(a.depth, a.nodes), (b.depth, b.nodes)]
            }
            Value::Persistent(a) => vec![(a.depth, a.nodes)],
            _ => Vec::new(),
        };
        let (depth, nodes) = self.node(children.into_iter())?;
        self.charge(1)?;
        Ok(Obj {
            value,
            depth,
            nodes,
        })
    }

    fn pop(&mut self) -> Result<Obj, Error> {
        self.stack
            .pop()
            .ok_or_else(|| "pops an empty stack".to_string())
    }

    fn top(&mut self) -> Result<&mut Obj, Error> {
        self.stack
            .last_mut()
            .ok_or_else(|| "works on an empty stack".to_string())
    }

    /// The objects pushed since the last MARK (which is removed).
    fn pop_mark(&mut self) -> Result<Vec<Obj>, Error> {
        let at = self.marks.pop().ok_or("a MARK is missing")?;
        if at > self.stack.len() {
            return Err("a MARK is missing".into());
        }
        Ok(self.stack.split_off(at))
    }

    /// Adds items to the list / dict / set below them on the stack, updating its size.
    fn extend(&mut self, items: Vec<Obj>, pairs: bool) -> Result<(), Error> {
        let depth_cap = self.limits.pickle_depth;
        let target = self.top()?;
        // An OrderedDict (a state dict) is filled like a dict.
        if let Value::Reduce { callable, .. } = &target.value
            && matches!(&callable.value, Value::Global { module, name } if module == "collections" && name == "OrderedDict")
        {
            target.value = Value::Dict(Vec::new());
        }
        let add_depth = items.iter().map(|o| o.depth).max().unwrap_or(0) + 1;
        let add_nodes = items.iter().fold(0usize, |n, o| n.saturating_add(o.nodes));
        match (&mut target.value, pairs) {
            (Value::Dict(d), true) => {
                if !items.len().is_multiple_of(2) {
                    return Err("SETITEMS with an odd number of objects".into());
                }
                let mut it = items.into_iter();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    d.push((k, v));
                }
            }
            (Value::List(l), false) => l.extend(items),
            (Value::Build { .. } | Value::Reduce { .. } | Value::Global { .. }, _) => {
                // Items added to an object hsdiff does not read (a set, a custom class):
                // kept out; the object stays a description.
            }
            _ => return Err("adds items to something that is not a list or dict".into()),
        }
        target.depth = target.depth.max(add_depth);
        target.nodes = target.nodes.saturating_add(add_nodes);
        if target.depth > depth_cap {
            return Err(limits::exceeded(
                "the nesting depth of the pickle",
                target.depth,
                "pickle-depth",
                depth_cap,
            ));
        }
        Ok(())
    }

    // Copies are charged before they are made, so a refused copy costs nothing.
    fn memo_put(&mut self, key: u32) -> Result<(), Error> {
        let nodes = self.top()?.nodes;
        self.charge(nodes)?;
        let obj = self.top()?.clone();
        self.memo.insert(key, obj);
        Ok(())
    }

    fn memo_get(&mut self, key: u32) -> Result<(), Error> {
        let nodes = self
            .memo
            .get(&key)
            .map(|o| o.nodes)
            .ok_or_else(|| format!("refers to memo entry {key}, which was never stored"))?;
        self.charge(nodes)?;
        if let Some(obj) = self.memo.get(&key).cloned() {
            self.stack.push(obj);
        }
        Ok(())
    }

    fn tuple(&mut self, n: usize) -> Result<(), Error> {
        if self.stack.len() < n {
            return Err("builds a tuple from an empty stack".into());
        }
        let items = self.stack.split_off(self.stack.len() - n);
        let o = self.make(Value::Tuple(items))?;
        self.stack.push(o);
        Ok(())
    }

    pub(super) fn run(&mut self) -> Result<Obj, Error> {
        loop {
            let at = self.pos;
            let op = self.u8()?;
            match op {
                0x80 => {
                    let v = self.u8()?;
                    if v > 5 {
                        return Err(format!("pickle protocol {v} is not supported"));
                    }
                }
                0x95 => {
                    self.u64()?; // FRAME: a length hint only
                }
                b'.' => {
                    let top = self.pop()?;
                    return Ok(top);
                }
                b'(' => self.marks.push(self.stack.len()),
                b'N' => self.push(Value::None)?,
                0x88 => self.push(Value::Bool(true))?,
                0x89 => self.push(Value::Bool(false))?,
                b'J' => {
                    let v = self.u32()? as i32;
                    self.push(Value::Int(i64::from(v)))?;
                }
                b'K' => {
                    let v = self.u8()?;
                    self.push(Value::Int(i64::from(v)))?;
                }
                b'M' => {
                    let v = self.u16()?;
                    self.push(Value::Int(i64::from(v)))?;
                }
                0x8a | 0x8b => {
                    let n = if op == 0x8a {
                        self.u8()? as usize
                    } else {
                        self.u32()? as usize
                    };
                    if n > 8 {
                        return Err(format!("an integer of {n} bytes (at most 8 are read)"));
                    }
                    let b = self.take(n)?;
                    let mut buf = if b.last().is_some_and(|&x| x & 0x80 != 0) {
                        [0xFF; 8]
                    } else {
                        [0; 8]
                    };
                    buf[..n].copy_from_slice(b);
                    self.push(Value::Int(i64::from_le_bytes(buf)))?;
                }
                b'G' => {
                    let b = self.take(8)?;
                    let mut a = [0; 8];
                    a.copy_from_slice(b);
                    self.push(Value::Float(f64::from_be_bytes(a)))?;
                }
                b'X' | 0x8c | 0x8d => {
                    let n = match op {
                        b'X' => self.u32()? as usize,
                        0x8c => self.u8()? as usize,
                        _ => self.len64()?,
                    };
                    let s = self.string(n)?;
                    self.push(Value::Str(s))?;
                }
                b'B' | b'C' | 0x8e => {
                    let n = match op {
                        b'B' => self.u32()? as usize,
                        b'C' => self.u8()? as usize,
                        _ => self.len64()?,
                    };
                    self.take(n)?;
                    self.push(Value::Bytes(n))?;
                }
                b'}' => self.push(Value::Dict(Vec::new()))?,
                b']' => self.push(Value::List(Vec::new()))?,
                b')' => self.push(Value::Tuple(Vec::new()))?,
                0x8f => self.push(Value::Global {
                    module: "builtins".into(),
                    name: "set".into(),
                })?,
                b'd' | b'l' => {
                    let items = self.pop_mark()?;
                    let empty = if op == b'd' {
                        Value::Dict(Vec::new())
                    } else {
                        Value::List(Vec::new())
                    };
                    self.push(empty)?;
                    self.extend(items, op == b'd')?;
                }
                b't' | 0x91 => {
                    let items = self.pop_mark()?;
                    let o = self.make(Value::Tuple(items))?;
                    self.stack.push(o);
                }
                0x85 => self.tuple(1)?,
                0x86 => self.tuple(2)?,
                0x87 => self.tuple(3)?,
                b'a' => {
                    let v = self.pop()?;
                    self.extend(vec![v], false)?;
                }
                b'e' | 0x90 => {
                    let items = self.pop_mark()?;
                    self.extend(items, false)?;
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    self.extend(vec![k, v], true)?;
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    self.extend(items, true)?;
                }
                b'q' => {
                    let k = self.u8()?;
                    self.memo_put(u32::from(k))?;
                }
                b'r' => {
                    let k = self.u32()?;
                    self.memo_put(k)?;
                }
                0x94 => {
                    let k = u32::try_from(self.memo.len()).map_err(|_| "too many memo entries")?;
                    self.memo_put(k)?;
                }
                b'h' => {
                    let k = self.u8()?;
                    self.memo_get(u32::from(k))?;
                }
                b'j' => {
                    let k = self.u32()?;
                    self.memo_get(k)?;
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    self.push(Value::Global { module, name })?;
                }
                0x93 => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    let (Value::Str(module), Value::Str(name)) = (module.value, name.value) else {
                        return Err("STACK_GLOBAL with names that are not strings".into());
                    };
                    self.push(Value::Global { module, name })?;
                }
                b'R' | 0x81 => {
                    let args = self.pop()?;
                    let callable = self.pop()?;
                    let o = self.make(Value::Reduce {
                        callable: Box::new(callable),
                        args: Box::new(args),
                    })?;
                    self.stack.push(o);
                }
                b'b' => {
                    let state = self.pop()?;
                    let obj = self.pop()?;
                    // State set on a dict (a state dict's `_metadata`) is not tensor data.
                    let o = if matches!(obj.value, Value::Dict(_)) {
                        obj
                    } else {
                        self.make(Value::Build {
                            obj: Box::new(obj),
                            state: Box::new(state),
                        })?
                    };
                    self.stack.push(o);
                }
                b'Q' => {
                    let pid = self.pop()?;
                    let o = self.make(Value::Persistent(Box::new(pid)))?;
                    self.stack.push(o);
                }
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let nodes = self.top()?.nodes;
                    self.charge(nodes)?;
                    let top = self.top()?.clone();
                    self.stack.push(top);
                }
                other => {
                    return Err(format!(
                        "unsupported pickle opcode 0x{other:02x} at byte {at}"
                    ));
                }
            }
        }
    }
}
