//! torch.save archives cut short or whose zip structure lies: entry counts, directory offsets and
//! sizes, compression methods, encryption, duplicate and missing entries, the legacy format.

use std::path::Path;

use super::craft::{good_torch, zip};
use super::harness::{Case, compare_bad, fixture, write};

/// A good torch.save archive cut to `at(its length)` bytes.
fn cut_torch(d: &Path, file: &str, at: impl FnOnce(usize) -> usize) -> Case {
    let good = good_torch(7);
    let p = write(d, file, &good[..at(good.len())]);
    compare_bad(&p, &[])
}

hostile!(torch_cut_at_4_bytes, |d| { cut_torch(d, "cut0.pt", |_| 4) });
hostile!(torch_cut_at_30_bytes, |d| {
    cut_torch(d, "cut1.pt", |_| 30)
});
hostile!(torch_cut_at_100_bytes, |d| {
    cut_torch(d, "cut2.pt", |_| 100)
});
hostile!(torch_cut_at_half, |d| {
    cut_torch(d, "cut3.pt", |n| n / 2)
});
hostile!(torch_cut_inside_the_directory, |d| {
    cut_torch(d, "cut4.pt", |n| n - 60)
});
hostile!(torch_cut_before_the_end_record, |d| {
    cut_torch(d, "cut5.pt", |n| n - 22)
});
hostile!(torch_cut_one_byte_short, |d| {
    cut_torch(d, "cut6.pt", |n| n - 1)
});

/// Where a good archive's end-of-directory record and central directory start.
struct Layout {
    good: Vec<u8>,
    eocd: usize,
    cd_offset: usize,
}

impl Layout {
    fn new() -> Layout {
        let good = good_torch(7);
        let eocd = good.len() - 22;
        let cd_offset = u32::from_le_bytes(good[eocd + 16..eocd + 20].try_into().unwrap()) as usize;
        Layout {
            good,
            eocd,
            cd_offset,
        }
    }

    /// The good archive with `bytes` written at `at`.
    fn patch(&self, at: usize, bytes: &[u8]) -> Vec<u8> {
        let mut b = self.good.clone();
        b[at..at + bytes.len()].copy_from_slice(bytes);
        b
    }
}

/// `bytes` as `d/file`, refused by compare with `needles`.
fn bad(d: &Path, file: &str, bytes: &[u8], needles: &[&str]) -> Case {
    compare_bad(&write(d, file, bytes), needles)
}

hostile!(zip_entry_count_huge, |d| {
    let z = Layout::new();
    let b = z.patch(z.eocd + 8, &[0xFE, 0xFF, 0xFE, 0xFF]);
    bad(d, "entry_count_huge.pt", &b, &["entries"])
});

hostile!(zip_directory_past_end, |d| {
    let z = Layout::new();
    let b = z.patch(z.eocd + 16, &(z.good.len() as u32 * 2).to_le_bytes());
    bad(d, "directory_past_end.pt", &b, &["directory"])
});

hostile!(zip_directory_size_huge, |d| {
    let z = Layout::new();
    let b = z.patch(z.eocd + 12, &u32::MAX.to_le_bytes());
    bad(d, "directory_size_huge.pt", &b, &[])
});

hostile!(zip64_marker_without_locator, |d| {
    let z = Layout::new();
    let b = z.patch(z.eocd + 16, &u32::MAX.to_le_bytes());
    bad(d, "zip64_marker_without_locator.pt", &b, &["zip64"])
});

hostile!(zip_size_claims_2_pow_32_minus_2, |d| {
    let z = Layout::new();
    let b = z.patch(z.cd_offset + 24, &0xFFFF_FFFEu32.to_le_bytes());
    bad(d, "size_claims_2^32-2.pt", &b, &["data.pkl"])
});

hostile!(zip_compressed_size_lies, |d| {
    let z = Layout::new();
    let b = z.patch(z.cd_offset + 20, &0xFFFF_FFF0u32.to_le_bytes());
    bad(d, "compressed_size_lies.pt", &b, &["data.pkl"])
});

hostile!(zip_method_99, |d| {
    let z = Layout::new();
    let b = z.patch(z.cd_offset + 10, &[99, 0]);
    bad(d, "method_99.pt", &b, &["compression method"])
});

hostile!(zip_deflate_size_bomb, |d| {
    let z = Layout::new();
    let mut b = z.patch(z.cd_offset + 10, &[8, 0]);
    b[z.cd_offset + 24..z.cd_offset + 28].copy_from_slice(&0x7FFF_FFFFu32.to_le_bytes());
    bad(d, "deflate_size_bomb.pt", &b, &["deflate"])
});

hostile!(zip_encrypted, |d| {
    let z = Layout::new();
    let b = z.patch(z.cd_offset + 8, &[1, 0]);
    bad(d, "encrypted.pt", &b, &["encrypted"])
});

hostile!(zip_local_header_offset_wrong, |d| {
    let z = Layout::new();
    let b = z.patch(z.cd_offset + 42, &7u32.to_le_bytes());
    bad(d, "local_header_offset_wrong.pt", &b, &["local header"])
});

hostile!(zip_directory_signature_broken, |d| {
    let z = Layout::new();
    let b = z.patch(z.cd_offset, b"XX");
    bad(d, "directory_signature_broken.pt", &b, &["signature"])
});

hostile!(zip_split_archive, |d| {
    let z = Layout::new();
    let b = z.patch(z.eocd + 4, &[1, 0]);
    bad(d, "split_archive.pt", &b, &["multi-disk"])
});

hostile!(zip_duplicate_entry, |d| {
    let dup = zip(&[
        ("archive/data.pkl", b"\x80\x02}."),
        ("archive/data.pkl", b"\x80\x02}."),
    ]);
    bad(d, "dup.pt", &dup, &["twice"])
});

hostile!(zip_without_data_pkl, |d| {
    let no_pkl = zip(&[("archive/other", b"x")]);
    bad(d, "nopkl.pt", &no_pkl, &["neither data.pkl"])
});

hostile!(legacy_torch_save, |_d| {
    compare_bad(&fixture("bad_legacy.pt"), &["legacy"])
});
