//! Crafted-file builders: safetensors headers, stored zip archives, torch.save pickles, npy
//! headers and small captures, all from bytes written here so each case controls every field.

/// A safetensors file from a raw header text and data bytes, as written (no check).
pub fn safetensors(header: &str, data: &[u8]) -> Vec<u8> {
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend(header.as_bytes());
    b.extend(data);
    b
}

/// CRC-32 (IEEE), as zip entries record it.
fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// A zip archive of stored entries, as torch and np.savez write them (without zip64).
pub fn zip(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in entries {
        let offset = out.len() as u32;
        let crc = crc32(data);
        let mut local = b"PK\x03\x04".to_vec();
        local.extend([20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        local.extend(crc.to_le_bytes());
        local.extend((data.len() as u32).to_le_bytes());
        local.extend((data.len() as u32).to_le_bytes());
        local.extend((name.len() as u16).to_le_bytes());
        local.extend(0u16.to_le_bytes());
        local.extend(name.as_bytes());
        out.extend(&local);
        out.extend(*data);
        let mut c = b"PK\x01\x02".to_vec();
        c.extend([20, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        c.extend(crc.to_le_bytes());
        c.extend((data.len() as u32).to_le_bytes());
        c.extend((data.len() as u32).to_le_bytes());
        c.extend((name.len() as u16).to_le_bytes());
        c.extend([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        c.extend(offset.to_le_bytes());
        c.extend(name.as_bytes());
        central.extend(c);
    }
    let cd_offset = out.len() as u32;
    out.extend(&central);
    out.extend(b"PK\x05\x06\0\0\0\0");
    out.extend((entries.len() as u16).to_le_bytes());
    out.extend((entries.len() as u16).to_le_bytes());
    out.extend((central.len() as u32).to_le_bytes());
    out.extend(cd_offset.to_le_bytes());
    out.extend([0, 0]);
    out
}

/// Pickle opcodes for the values torch.save writes.
pub mod pk {
    pub fn str(s: &str) -> Vec<u8> {
        let mut b = vec![b'X'];
        b.extend((s.len() as u32).to_le_bytes());
        b.extend(s.as_bytes());
        b
    }
    pub fn int(i: i64) -> Vec<u8> {
        let mut b = vec![0x8a, 8];
        b.extend(i.to_le_bytes());
        b
    }
    pub fn tuple(items: &[i64]) -> Vec<u8> {
        let mut b = vec![b'('];
        for &i in items {
            b.extend(int(i));
        }
        b.push(b't');
        b
    }
    pub fn global(module: &str, name: &str) -> Vec<u8> {
        format!("c{module}\n{name}\n").into_bytes()
    }
    /// `_rebuild_tensor_v2(storage(key, class, numel), offset, shape, stride, False, OrderedDict())`
    pub fn tensor(key: &str, class: &str, offset: i64, shape: &[i64], stride: &[i64]) -> Vec<u8> {
        let numel = shape.iter().fold(1i64, |a, &d| a.wrapping_mul(d));
        let mut b = global("torch._utils", "_rebuild_tensor_v2");
        b.push(b'(');
        b.push(b'(');
        b.extend(str("storage"));
        b.extend(global("torch", class));
        b.extend(str(key));
        b.extend(str("cpu"));
        b.extend(int(numel));
        b.push(b't');
        b.push(b'Q');
        b.extend(int(offset));
        b.extend(tuple(shape));
        b.extend(tuple(stride));
        b.push(0x89);
        b.extend(global("collections", "OrderedDict"));
        b.push(b')');
        b.push(b'R');
        b.push(b't');
        b.push(b'R');
        b
    }
    pub fn dict(items: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let mut b = vec![b'}', b'('];
        for (k, v) in items {
            b.extend(str(k));
            b.extend(v);
        }
        b.push(b'u');
        b
    }
    pub fn file(obj: Vec<u8>) -> Vec<u8> {
        let mut b = vec![0x80, 2];
        b.extend(obj);
        b.push(b'.');
        b
    }
}

/// A torch.save archive: `pickle` as `archive/data.pkl` plus storages `archive/data/{key}`.
pub fn torch_file(pickle: &[u8], storages: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let names: Vec<String> = storages
        .iter()
        .map(|(k, _)| format!("archive/data/{k}"))
        .collect();
    let mut entries: Vec<(&str, &[u8])> = vec![("archive/data.pkl", pickle)];
    for (n, (_, d)) in names.iter().zip(storages) {
        entries.push((n.as_str(), d.as_slice()));
    }
    entries.push(("archive/version", b"3\n"));
    zip(&entries)
}

/// f32 values of a seeded pseudo-random sequence (no zeros, no constants).
pub fn values(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut out = Vec::with_capacity(n * 4);
    for _ in 0..n {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let v = ((x >> 40) as f32 / (1u64 << 24) as f32) - 0.5;
        out.extend(v.to_le_bytes());
    }
    out
}

/// A good torch.save file: {"layers.0": [1, 4, 8] f32, "layers.1": [1, 4, 8] f32}.
pub fn good_torch(seed: u64) -> Vec<u8> {
    let p = pk::file(pk::dict(&[
        (
            "layers.0",
            pk::tensor("0", "FloatStorage", 0, &[1, 4, 8], &[32, 8, 1]),
        ),
        (
            "layers.1",
            pk::tensor("1", "FloatStorage", 0, &[1, 4, 8], &[32, 8, 1]),
        ),
    ]));
    torch_file(&p, &[("0", values(32, seed)), ("1", values(32, seed + 1))])
}

/// An npy v1 file: `header` padded as numpy pads it, then `data`.
pub fn npy(header: &str, data: &[u8]) -> Vec<u8> {
    let mut text = header.to_string();
    while !(10 + text.len() + 1).is_multiple_of(64) {
        text.push(' ');
    }
    text.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend((text.len() as u16).to_le_bytes());
    b.extend(text.as_bytes());
    b.extend(data);
    b
}

/// A safetensors file: (name, dtype, shape, little-endian bytes) and the `hsdiff` metadata.
pub fn st_file(
    tensors: &[(&str, safetensors::Dtype, Vec<usize>, Vec<u8>)],
    meta: Option<&str>,
) -> Vec<u8> {
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, shape, bytes)| {
            let v = safetensors::tensor::TensorView::new(*d, shape.clone(), bytes).expect("view");
            (n.to_string(), v)
        })
        .collect();
    let meta =
        meta.map(|m| std::collections::HashMap::from([("hsdiff".to_string(), m.to_string())]));
    safetensors::serialize(views, meta).expect("serialize")
}

/// Little-endian bytes of `v`.
pub fn i64_bytes(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Tokens and hidden width of [`capture`].
pub const T: usize = 6;
pub const H: usize = 8;

/// A capture of T tokens: input_ids, layers.0, layers.1 (seeded values) plus `extra`.
pub fn capture(
    seed: u64,
    extra: Vec<(&'static str, safetensors::Dtype, Vec<usize>, Vec<u8>)>,
) -> Vec<u8> {
    capture_with(seed, extra, None)
}

/// [`capture`] with a fingerprint (`hsdiff` metadata).
pub fn capture_with(
    seed: u64,
    extra: Vec<(&'static str, safetensors::Dtype, Vec<usize>, Vec<u8>)>,
    meta: Option<&str>,
) -> Vec<u8> {
    use safetensors::Dtype as D;
    let mut t = vec![
        (
            "input_ids",
            D::I64,
            vec![1, T],
            i64_bytes(&[3, 1, 4, 1, 5, 9]),
        ),
        ("layers.0", D::F32, vec![1, T, H], values(T * H, seed)),
        ("layers.1", D::F32, vec![1, T, H], values(T * H, seed + 1)),
    ];
    for e in extra {
        t.retain(|x| x.0 != e.0);
        t.push(e);
    }
    st_file(&t, meta)
}

/// `router.1.topk_ids` [1, rows, k] holding `ids`.
pub fn router(ids: &[i64], k: usize) -> (&'static str, safetensors::Dtype, Vec<usize>, Vec<u8>) {
    (
        "router.1.topk_ids",
        safetensors::Dtype::I64,
        vec![1, ids.len() / k, k],
        i64_bytes(ids),
    )
}

/// Router ids for `rows` tokens choosing `k` experts each, among experts 0..k+2.
pub fn ids_for(rows: usize, k: usize) -> Vec<i64> {
    (0..rows * k)
        .map(|i| (i % k) as i64 + (i / k % 3) as i64)
        .collect()
}
