//! A torch.save archive larger than 4 GiB, the zip64 way torch writes one: a 4.3 GB storage
//! (`archive/data/0`, its sizes in a zip64 extra field), a second storage whose local header
//! lies past 4 GiB (its offset in the zip64 extra field), and the central directory past 4 GiB
//! (zip64 end record and locator). The file is sparse — only the headers and the few real
//! values are written — so it takes kilobytes of disk and runs in CI.
//!
//! Both tensors must read back exactly: `layers.0` from the far end of the big storage and
//! `layers.1` from the storage past the 4 GiB mark.

use std::io::{Seek, SeekFrom, Write};

use candle_core::DType;
use hsdiff::formats::FileSource;

/// Just over 4 GiB, so that sizes and offsets need zip64.
const BIG: u64 = (1 << 32) + (64 << 20);
const N: usize = 32; // values per tensor: [1, 4, 8]

fn values(seed: u32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(12345);
    (0..N)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            (x >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        })
        .collect()
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn pk_str(s: &str) -> Vec<u8> {
    let mut b = vec![b'X'];
    b.extend((s.len() as u32).to_le_bytes());
    b.extend(s.as_bytes());
    b
}

fn pk_int(i: u64) -> Vec<u8> {
    let mut b = vec![0x8a, 8];
    b.extend(i.to_le_bytes());
    b
}

/// `_rebuild_tensor_v2` of a [1, 4, 8] f32 tensor at element `offset` of storage `key`.
fn pk_tensor(key: &str, numel: u64, offset: u64) -> Vec<u8> {
    let mut b = b"ctorch._utils\n_rebuild_tensor_v2\n((".to_vec();
    b.extend(pk_str("storage"));
    b.extend(b"ctorch\nFloatStorage\n");
    b.extend(pk_str(key));
    b.extend(pk_str("cpu"));
    b.extend(pk_int(numel));
    b.extend(b"tQ");
    b.extend(pk_int(offset));
    b.push(b'(');
    for d in [1u64, 4, 8] {
        b.extend(pk_int(d));
    }
    b.extend(b"t(");
    for s in [32u64, 8, 1] {
        b.extend(pk_int(s));
    }
    b.push(b't');
    b.push(0x89);
    b.extend(b"ccollections\nOrderedDict\n)Rt");
    b.push(b'R');
    b
}

struct Entry {
    name: &'static str,
    offset: u64,
    size: u64,
}

/// A local header; sizes ≥ 4 GiB go to a zip64 extra field.
fn local_header(name: &str, size: u64) -> Vec<u8> {
    let big = size >= 0xFFFF_FFFF;
    let mut h = b"PK\x03\x04".to_vec();
    h.extend([45, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    let field = if big { 0xFFFF_FFFF } else { size as u32 };
    h.extend(field.to_le_bytes());
    h.extend(field.to_le_bytes());
    h.extend((name.len() as u16).to_le_bytes());
    h.extend((if big { 20u16 } else { 0 }).to_le_bytes());
    h.extend(name.as_bytes());
    if big {
        h.extend(1u16.to_le_bytes());
        h.extend(16u16.to_le_bytes());
        h.extend(size.to_le_bytes());
        h.extend(size.to_le_bytes());
    }
    h
}

/// A central-directory header; sizes and offsets ≥ 4 GiB go to the zip64 extra field, in
/// APPNOTE's order (uncompressed, compressed, local header offset).
fn central_header(e: &Entry) -> Vec<u8> {
    let big_size = e.size >= 0xFFFF_FFFF;
    let big_off = e.offset >= 0xFFFF_FFFF;
    let mut extra = Vec::new();
    if big_size {
        extra.extend(e.size.to_le_bytes());
        extra.extend(e.size.to_le_bytes());
    }
    if big_off {
        extra.extend(e.offset.to_le_bytes());
    }
    let mut h = b"PK\x01\x02".to_vec();
    h.extend([45, 3, 45, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    let size = if big_size { 0xFFFF_FFFF } else { e.size as u32 };
    h.extend(size.to_le_bytes());
    h.extend(size.to_le_bytes());
    h.extend((e.name.len() as u16).to_le_bytes());
    let extra_len = if extra.is_empty() { 0 } else { extra.len() + 4 };
    h.extend((extra_len as u16).to_le_bytes());
    // comment length, disk, internal and external attributes
    h.extend([0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    let off = if big_off {
        0xFFFF_FFFF
    } else {
        e.offset as u32
    };
    h.extend(off.to_le_bytes());
    h.extend(e.name.as_bytes());
    if !extra.is_empty() {
        h.extend(1u16.to_le_bytes());
        h.extend((extra.len() as u16).to_le_bytes());
        h.extend(extra);
    }
    h
}

#[test]
fn a_zip64_archive_over_4_gib_opens_and_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big.pt");
    let mut f = std::fs::File::create(&path).expect("create");
    let (v0, v1) = (values(1), values(2));
    let big_numel = BIG / 4;
    let pickle = {
        let mut p = vec![0x80, 2, b'}', b'('];
        p.extend(pk_str("layers.0"));
        p.extend(pk_tensor("0", big_numel, big_numel - N as u64));
        p.extend(pk_str("layers.1"));
        p.extend(pk_tensor("1", N as u64, 0));
        p.extend(b"u.");
        p
    };
    let mut entries = Vec::new();
    let mut at = 0u64;
    // data.pkl
    let h = local_header("archive/data.pkl", pickle.len() as u64);
    f.write_all(&h).expect("write");
    f.write_all(&pickle).expect("write");
    entries.push(Entry {
        name: "archive/data.pkl",
        offset: at,
        size: pickle.len() as u64,
    });
    at += (h.len() + pickle.len()) as u64;
    // data/0: 4.3 GB, a hole but for its last N values.
    let h = local_header("archive/data/0", BIG);
    f.write_all(&h).expect("write");
    entries.push(Entry {
        name: "archive/data/0",
        offset: at,
        size: BIG,
    });
    let data0 = at + h.len() as u64;
    f.seek(SeekFrom::Start(data0 + BIG - (N * 4) as u64))
        .expect("seek");
    f.write_all(&bytes(&v0)).expect("write");
    at = data0 + BIG;
    // data/1: past 4 GiB.
    let d1 = bytes(&v1);
    let h = local_header("archive/data/1", d1.len() as u64);
    f.write_all(&h).expect("write");
    f.write_all(&d1).expect("write");
    entries.push(Entry {
        name: "archive/data/1",
        offset: at,
        size: d1.len() as u64,
    });
    at += (h.len() + d1.len()) as u64;
    // Central directory, zip64 end record, locator, end record.
    let cd_offset = at;
    let mut cd = Vec::new();
    for e in &entries {
        cd.extend(central_header(e));
    }
    f.write_all(&cd).expect("write");
    let zip64_eocd = cd_offset + cd.len() as u64;
    let mut tail = b"PK\x06\x06".to_vec();
    tail.extend(44u64.to_le_bytes());
    tail.extend([45, 3, 45, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    tail.extend((entries.len() as u64).to_le_bytes());
    tail.extend((entries.len() as u64).to_le_bytes());
    tail.extend((cd.len() as u64).to_le_bytes());
    tail.extend(cd_offset.to_le_bytes());
    tail.extend(b"PK\x06\x07\0\0\0\0");
    tail.extend(zip64_eocd.to_le_bytes());
    tail.extend(1u32.to_le_bytes());
    tail.extend(b"PK\x05\x06\0\0\0\0");
    tail.extend((entries.len() as u16).to_le_bytes());
    tail.extend((entries.len() as u16).to_le_bytes());
    tail.extend((cd.len() as u32).to_le_bytes());
    tail.extend(0xFFFF_FFFFu32.to_le_bytes());
    tail.extend([0, 0]);
    f.write_all(&tail).expect("write");
    drop(f);
    assert!(std::fs::metadata(&path).expect("stat").len() > 1 << 32);

    let src = FileSource::open(&path, None).expect("a zip64 archive over 4 GiB opens");
    for (name, want) in [("layers.0", &v0), ("layers.1", &v1)] {
        let t = src.get(name).expect("reads").expect("present");
        assert_eq!(t.dtype(), DType::F32);
        assert_eq!(t.dims(), &[1, 4, 8]);
        let got: Vec<f32> = t.flatten_all().and_then(|t| t.to_vec1()).expect("values");
        assert_eq!(&got, want, "{name}");
    }
}
