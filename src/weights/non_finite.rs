//! Non-finite values stored in a checkpoint's float weights. A run reads only the embedding rows
//! of its own tokens (and, in a MoE layer, the experts its tokens are routed to), so a NaN
//! elsewhere never reaches its outputs: the comparison can be benign while the checkpoint is
//! broken for every prompt that reads that row. The scan reads every float tensor once, as
//! stored (bit tests on the stored code, no conversion), in parallel over fixed-size chunks.

use std::path::PathBuf;

use rayon::prelude::*;
use safetensors::Dtype;

/// Elements per chunk of the parallel scan: large enough that a chunk's bookkeeping is noise,
/// small enough that one large tensor spreads over every core.
const CHUNK: usize = 1 << 20;

/// One tensor holding NaN or ±Inf, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NonFiniteTensor {
    pub name: String,
    pub file: PathBuf,
    pub shape: Vec<usize>,
    pub nan: u64,
    pub inf: u64,
    /// Flat index of the first non-finite element.
    pub first: usize,
}

impl NonFiniteTensor {
    /// The first non-finite element's index in the tensor's shape (`[300, 5]`).
    pub fn first_index(&self) -> Vec<usize> {
        let mut rest = self.first;
        let mut index = vec![0; self.shape.len()];
        for (slot, &dim) in index.iter_mut().zip(&self.shape).rev() {
            if dim > 0 {
                *slot = rest % dim;
                rest /= dim;
            }
        }
        index
    }

    /// "1 NaN in `model.embed_tokens.weight` (first at [300, 5], model.safetensors)".
    pub fn describe(&self) -> String {
        let counts = match (self.nan, self.inf) {
            (n, 0) => format!("{n} NaN"),
            (0, i) => format!("{i} Inf"),
            (n, i) => format!("{n} NaN and {i} Inf"),
        };
        let file = self
            .file
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.file.display().to_string());
        format!(
            "{counts} in `{}` (first at {:?}, {file})",
            self.name,
            self.first_index()
        )
    }
}

/// How one stored dtype marks a non-finite element: its exponent bits `exp` all set (for e4m3,
/// whose one non-finite pattern per sign is NaN, every bit but the sign), then NaN when the
/// mantissa bits `man` are not all clear, ±Inf otherwise.
#[derive(Clone, Copy)]
struct Codes {
    bytes: usize,
    exp: u64,
    man: u64,
    nan_only: bool,
}

impl Codes {
    fn of(dtype: Dtype) -> Option<Codes> {
        let ieee = |bytes, exp, man| Codes {
            bytes,
            exp,
            man,
            nan_only: false,
        };
        Some(match dtype {
            Dtype::BF16 => ieee(2, 0x7f80, 0x007f),
            Dtype::F16 => ieee(2, 0x7c00, 0x03ff),
            Dtype::F32 => ieee(4, 0x7f80_0000, 0x007f_ffff),
            Dtype::F64 => ieee(8, 0x7ff0_0000_0000_0000, 0x000f_ffff_ffff_ffff),
            Dtype::F8_E5M2 => ieee(1, 0x7c, 0x03),
            Dtype::F8_E4M3 => Codes {
                bytes: 1,
                exp: 0x7f,
                man: 0,
                nan_only: true,
            },
            _ => return None,
        })
    }

    /// `v` repeated in every lane of a 64-bit word.
    fn lanes(self, v: u64) -> u64 {
        (0..8 / self.bytes).fold(0, |w, i| w | v << (i * self.bytes * 8))
    }

    /// Whether some element of `words` (a whole number of 8-byte words) may be non-finite:
    /// eight bytes at a time, an element whose exponent bits are all set is a zero lane of
    /// `(w & exp) ^ exp`, which the classic zero-lane test finds (exact here: the lanes' top
    /// bit, the sign, is masked off). A few word operations per eight bytes even in an
    /// unoptimised build.
    fn may_hold_non_finite(self, words: &[u8]) -> bool {
        let (exp, ones, tops) = (
            self.lanes(self.exp),
            self.lanes(1),
            self.lanes(1 << (self.bytes * 8 - 1)),
        );
        let mut found = 0u64;
        for word in words.chunks_exact(8) {
            let w = u64::from_le_bytes(word.try_into().unwrap_or_default());
            let x = (w & exp) ^ exp;
            found |= x.wrapping_sub(ones) & !x & tops;
        }
        found != 0
    }

    /// NaN count, Inf count and the first non-finite element's index within `data`.
    fn count(self, data: &[u8]) -> (u64, u64, Option<usize>) {
        let (mut nan, mut inf, mut first) = (0u64, 0u64, None);
        // The whole words are tested at once; only where they may hold one (and in the few
        // bytes past the last whole word) is each element looked at.
        let whole = data.len() - data.len() % 8;
        let from = if self.may_hold_non_finite(&data[..whole]) {
            0
        } else {
            whole
        };
        for (i, word) in data[from..].chunks_exact(self.bytes).enumerate() {
            let i = from / self.bytes + i;
            let mut le = [0u8; 8];
            le[..self.bytes].copy_from_slice(word);
            let bits = u64::from_le_bytes(le);
            if bits & self.exp == self.exp {
                if self.nan_only || bits & self.man != 0 {
                    nan += 1;
                } else {
                    inf += 1;
                }
                first.get_or_insert(i);
            }
        }
        (nan, inf, first)
    }
}

/// The non-finite elements of one stored tensor (`None` when every element is finite or the
/// dtype is not a float type).
pub fn scan_tensor(
    name: &str,
    file: PathBuf,
    (dtype, shape): (Dtype, &[usize]),
    data: &[u8],
) -> Option<NonFiniteTensor> {
    let codes = Codes::of(dtype)?;
    let width = codes.bytes;
    let per_chunk = CHUNK * width;
    let (nan, inf, first) = data
        .par_chunks(per_chunk)
        .enumerate()
        .map(|(c, chunk)| {
            let (nan, inf, first) = codes.count(chunk);
            (nan, inf, first.map(|i| c * CHUNK + i))
        })
        .reduce(|| (0, 0, None), |x, y| (x.0 + y.0, x.1 + y.1, x.2.or(y.2)));
    let first = first?;
    Some(NonFiniteTensor {
        name: name.to_string(),
        file,
        shape: shape.to_vec(),
        nan,
        inf,
        first,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::cases::SplitMix;

    /// Random finite bf16 values with NaN and ±Inf planted at random places.
    fn planted(n: usize, seed: u64) -> (Vec<u8>, u64, u64, usize) {
        let mut rng = SplitMix::new(seed);
        let mut vals: Vec<half::bf16> = (0..n)
            .map(|_| half::bf16::from_f64(rng.normal() * 3.0))
            .collect();
        let (mut nan, mut inf, mut first) = (0, 0, usize::MAX);
        for k in 0..7 {
            let at = (rng.next_u64() % n as u64) as usize;
            let already = !vals[at].is_finite();
            vals[at] = if k % 2 == 0 {
                half::bf16::NAN
            } else {
                half::bf16::NEG_INFINITY
            };
            if !already {
                if k % 2 == 0 { nan += 1 } else { inf += 1 }
            }
            first = first.min(at);
        }
        let bytes = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        (bytes, nan, inf, first)
    }

    #[test]
    fn every_planted_nan_and_inf_is_counted_across_chunks_with_the_first_one_located() {
        // Over two chunks, so the reduction across chunks is exercised.
        let n = CHUNK + 12_345;
        let (bytes, nan, inf, first) = planted(n, 0x5eed);
        let found = scan_tensor(
            "w",
            PathBuf::from("m.safetensors"),
            (Dtype::BF16, &[n / 5, 5]),
            &bytes,
        )
        .expect("planted values are found");
        assert_eq!((found.nan, found.inf, found.first), (nan, inf, first));
        assert_eq!(found.first_index(), vec![first / 5, first % 5]);
    }

    #[test]
    fn finite_weights_of_every_float_dtype_give_nothing_and_one_nan_each_is_found() {
        let mut rng = SplitMix::new(11);
        let xs: Vec<f64> = (0..1000).map(|_| rng.normal() * 100.0).collect();
        let f32s: Vec<u8> = xs.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect();
        let f64s: Vec<u8> = xs.iter().flat_map(|&x| x.to_le_bytes()).collect();
        let f16s: Vec<u8> = (xs.iter())
            .flat_map(|&x| half::f16::from_f64(x / 100.0).to_le_bytes())
            .collect();
        let e4m3: Vec<u8> = (0..1000).map(|i| (i % 0x7f) as u8).collect();
        let cases = [
            (Dtype::F32, f32s, 4, f32::NAN.to_le_bytes().to_vec()),
            (Dtype::F64, f64s, 8, f64::NAN.to_le_bytes().to_vec()),
            (Dtype::F16, f16s, 2, half::f16::NAN.to_le_bytes().to_vec()),
            (Dtype::F8_E4M3, e4m3, 1, vec![0x7f]),
        ];
        for (dtype, mut bytes, width, nan) in cases {
            let file = PathBuf::from("m.safetensors");
            assert_eq!(
                scan_tensor("w", file.clone(), (dtype, &[1000]), &bytes),
                None
            );
            let at = 1 + (rng.next_u64() % 998) as usize;
            bytes[at * width..(at + 1) * width].copy_from_slice(&nan);
            let found = scan_tensor("w", file, (dtype, &[1000]), &bytes).expect("NaN found");
            assert_eq!((found.nan, found.inf, found.first), (1, 0, at), "{dtype:?}");
        }
    }

    #[test]
    fn every_bf16_and_fp8_code_is_classed_as_its_value_is_at_every_lane() {
        let mut rng = SplitMix::new(29);
        let filler: Vec<u8> = (0..24)
            .flat_map(|_| half::bf16::from_f64(rng.normal()).to_le_bytes())
            .collect();
        for code in 0..=u16::MAX {
            let v = half::bf16::from_bits(code).to_f32();
            let at = (rng.next_u64() % 24) as usize;
            let mut bytes = filler.clone();
            bytes[2 * at..2 * at + 2].copy_from_slice(&code.to_le_bytes());
            let found = scan_tensor("w", PathBuf::from("m"), (Dtype::BF16, &[24]), &bytes);
            let want =
                (!v.is_finite()).then_some((u64::from(v.is_nan()), u64::from(v.is_infinite()), at));
            assert_eq!(found.map(|f| (f.nan, f.inf, f.first)), want, "{code:#06x}");
        }
        for format in [Dtype::F8_E4M3, Dtype::F8_E5M2] {
            let table = crate::fp8::Fp8Format::of(format).map(|f| f.table());
            for code in 0..=u8::MAX {
                let v = table.map_or(0.0, |t| t[code as usize]);
                let at = (rng.next_u64() % 24) as usize;
                let mut bytes = vec![0x38u8; 24];
                bytes[at] = code;
                let found = scan_tensor("w", PathBuf::from("m"), (format, &[24]), &bytes);
                let want = (!v.is_finite()).then_some((
                    u64::from(v.is_nan()),
                    u64::from(v.is_infinite()),
                    at,
                ));
                assert_eq!(
                    found.map(|f| (f.nan, f.inf, f.first)),
                    want,
                    "{format:?} {code:#04x}"
                );
            }
        }
    }

    #[test]
    fn integer_tensors_are_not_scanned() {
        let bytes = vec![0xffu8; 64];
        assert_eq!(
            scan_tensor("ids", PathBuf::from("m"), (Dtype::I64, &[8]), &bytes),
            None
        );
    }
}
