//! The hsdiff names of an opened file's entries: a stacked `output_hidden_states` array split
//! into its sequence, the name conventions ([`super::naming`]) applied, and the renames the user
//! asks for (`--map`, `--shift`).

use std::path::Path;

use super::{Entry, FileFormat, FileSource, naming, npy};
use crate::capture::Key;
use crate::error::{Error, Result};

impl FileSource {
    /// A stacked `output_hidden_states` array (`torch.stack(hs)`: `[N, 1, T, D]`; or `[N, T, D]`
    /// alone in a `.npy`) becomes N entries of one sequence: N - 1 layers, at most the `layers`
    /// limit (the size check cannot bound N when the states are empty: `[10¹², 0, 4]`).
    pub(super) fn split_stacked(&mut self) -> Result<()> {
        // A lone array (a .npy, or a bare tensor torch.save'd) may be a stack of 3-D states.
        let lone =
            self.entries.len() == 1 && matches!(self.format, FileFormat::Npy | FileFormat::Torch);
        let mut out = Vec::with_capacity(self.entries.len());
        for e in std::mem::take(&mut self.entries) {
            let stacked = !e.fortran
                && e.seq.is_none()
                && !naming::is_ours(&e.raw)
                && e.shape.first().is_some_and(|&n| n > 1)
                && match e.shape.len() {
                    4 => e.shape[1] == 1,
                    3 => lone || e.raw.ends_with("hidden_states"),
                    _ => false,
                };
            let elem = match (e.dtype, e.bits16) {
                (Some(d), _) => d.size_in_bytes(),
                (None, _) => 2,
            };
            if !stacked {
                out.push(e);
                continue;
            }
            let n = e.shape[0];
            let layers = crate::util::limits::get().layers;
            if n - 1 > layers {
                return Err(Error::tensor(
                    &self.path,
                    &e.raw,
                    crate::util::limits::exceeded(
                        "read as a stack of hidden states, its number of layers",
                        n - 1,
                        "layers",
                        layers,
                    ),
                ));
            }
            let inner: Vec<usize> = e.shape[1..].to_vec();
            let Some(bytes) = npy::checked_bytes(&inner, elem) else {
                out.push(e);
                continue;
            };
            for i in 0..n {
                out.push(Entry {
                    raw: format!("{}.{i}", e.raw),
                    dtype: e.dtype,
                    bits16: e.bits16,
                    shape: inner.clone(),
                    fortran: false,
                    loc: e.loc.part(i * bytes, bytes),
                    seq: Some((e.raw.clone(), i, n)),
                });
            }
        }
        self.entries = out;
        Ok(())
    }

    pub(super) fn assign_names(&mut self) {
        let named: Vec<naming::Named> = self
            .entries
            .iter()
            .map(|e| naming::Named {
                raw: &e.raw,
                seq: e.seq.as_ref().map(|(s, i, n)| (s.as_str(), *i, *n)),
            })
            .collect();
        let a = naming::assign(&named);
        self.names = a.names;
        self.conventions.extend(a.conventions);
        self.index_keyed = a.index_keyed;
        self.sequence_len = a.sequence_len;
        self.clashes = a.clashes;
    }

    /// Refuses a name that two entries map to equally well (`h.1` and `blocks.1` both
    /// `layers.1`), naming both, unless `--map` chose one of them.
    pub fn check_unambiguous(&self) -> Result<()> {
        if let Some((name, list)) = self
            .clashes
            .iter()
            .find(|(n, _)| self.names.contains_key(*n))
        {
            let raws: Vec<String> = list
                .iter()
                .map(|&i| format!("`{}`", self.entries[i].raw))
                .collect();
            return Err(Error::tensor(
                &self.path,
                name,
                format!(
                    "{} all read as this name: say which to compare with --map (e.g. --map {}={name})",
                    raws.join(" and "),
                    self.entries[list[0]].raw
                ),
            ));
        }
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Names of the tensors as stored in the file.
    pub fn raw_names(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.raw.clone()).collect()
    }

    /// Tensors stored in the file that no name rule reads as one of hsdiff's names and no
    /// `--map` names, in file order: they are not compared, and the report says so. A drafter
    /// pipeline's reader picks the tensors it reads and describes them, so its files list none.
    pub fn unnamed(&self) -> Vec<String> {
        if self.pipeline.is_some() {
            return Vec::new();
        }
        let named: std::collections::BTreeSet<usize> = self
            .names
            .values()
            .chain(self.clashes.values().flatten())
            .copied()
            .collect();
        self.entries
            .iter()
            .enumerate()
            .filter(|(i, _)| !named.contains(i))
            .map(|(_, e)| e.raw.clone())
            .collect()
    }

    /// hsdiff names of the tensors this file holds.
    pub fn names(&self) -> Vec<String> {
        self.names.keys().cloned().collect()
    }

    /// hsdiff names of the tensors this file holds, in the order of their entries: a drafter
    /// pipeline's layers in the order of its ids.
    pub fn names_in_file_order(&self) -> Vec<String> {
        let mut named: Vec<(usize, &String)> = self.names.iter().map(|(n, &i)| (i, n)).collect();
        named.sort_unstable();
        named.into_iter().map(|(_, n)| n.clone()).collect()
    }

    pub fn has(&self, name: &str) -> bool {
        self.names.contains_key(name)
    }

    /// The name a tensor has in the file.
    pub fn raw_name(&self, name: &str) -> Option<&str> {
        self.names.get(name).map(|&i| self.entries[i].raw.as_str())
    }

    /// `--map`: the tensor called `from` in the file (raw name first, then hsdiff name) is
    /// compared under the name `to`.
    pub fn rename(&mut self, from: &str, to: &str) -> Result<()> {
        let idx = self
            .entries
            .iter()
            .position(|e| e.raw == from)
            .or_else(|| self.names.get(from).copied())
            .ok_or_else(|| {
                Error::tensor(&self.path, from, "named in --map, but not in this file")
            })?;
        self.names.retain(|n, i| *i != idx && n != to);
        self.names.insert(to.to_string(), idx);
        // The user chose which entry is `to`.
        self.clashes.remove(to);
        Ok(())
    }

    /// `--shift K`: layer i (embed = −1) is renamed i + K; names that fall below −1 are dropped.
    pub fn shift_layers(&mut self, k: i64) {
        if k == 0 {
            return;
        }
        let old = std::mem::take(&mut self.names);
        for (name, idx) in old {
            let (layer, op) = match Key::of(&name) {
                Some(Key::Embed) => (Some(-1), None),
                Some(Key::Op(i, op)) => (Some(i as i64), Some(op)),
                Some(Key::Layer(i)) => (Some(i as i64), None),
                _ => (None, None),
            };
            let renamed = match layer {
                None => Some(name),
                Some(l) => match (l.saturating_add(k), op) {
                    (-1, None) => Some(Key::Embed),
                    (j, None) if j >= 0 => Some(Key::Layer(j as usize)),
                    (j, Some(op)) if j >= 0 => Some(Key::Op(j as usize, op)),
                    _ => None,
                }
                .map(String::from),
            };
            if let Some(n) = renamed {
                self.names.insert(n, idx);
            }
        }
    }
}
