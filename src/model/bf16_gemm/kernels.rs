//! Which microkernels this CPU runs, and which one a product uses.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use half::bf16;

use super::{MR, NR, PackedBf16, matmul_with};

/// A microkernel of the bf16 GEMM. All of them give the same bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    Portable,
    /// `vdpbf16ps` (avx512f + avx512bf16).
    Avx512Bf16,
    /// f32 FMAs on AVX-512F under a flushing MXCSR.
    Avx512Fma,
    /// f32 FMAs on AVX2 + FMA under a flushing MXCSR.
    Avx2Fma,
}

impl Kernel {
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Portable => "portable",
            Kernel::Avx512Bf16 => "avx512-bf16",
            Kernel::Avx512Fma => "avx512-fma",
            Kernel::Avx2Fma => "avx2-fma",
        }
    }

    /// Whether this CPU can run the kernel.
    pub fn runs_here(self) -> bool {
        match self {
            Kernel::Portable => true,
            Kernel::Avx512Fma => WideKernel::Avx512.runs_here(),
            Kernel::Avx2Fma => WideKernel::Avx2.runs_here(),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512Bf16 => {
                use std::arch::is_x86_feature_detected as has;
                has!("avx512f") && has!("avx512bf16")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Kernel::Avx512Bf16 => false,
        }
    }

    /// The wide kernel an FMA kernel runs on.
    pub(super) fn fma(self) -> Option<WideKernel> {
        match self {
            Kernel::Avx512Fma => Some(WideKernel::Avx512),
            Kernel::Avx2Fma => Some(WideKernel::Avx2),
            Kernel::Portable | Kernel::Avx512Bf16 => None,
        }
    }

    /// The kernels this CPU can run, the portable one first.
    pub fn available() -> Vec<Kernel> {
        [
            Kernel::Portable,
            Kernel::Avx2Fma,
            Kernel::Avx512Fma,
            Kernel::Avx512Bf16,
        ]
        .into_iter()
        .filter(|k| k.runs_here())
        .collect()
    }

    /// The kernel [`matmul_many`](super::matmul_many) uses: of the machine kernels this CPU has, the one that ran a
    /// small product fastest (timed once per process, a few milliseconds); the portable one
    /// where there is none.
    pub fn chosen() -> Kernel {
        static CHOSEN: OnceLock<Kernel> = OnceLock::new();
        *CHOSEN.get_or_init(|| {
            let machine: Vec<Kernel> = Kernel::available()
                .into_iter()
                .filter(|&k| k != Kernel::Portable)
                .collect();
            match machine.as_slice() {
                [] => Kernel::Portable,
                [only] => *only,
                _ => machine
                    .into_iter()
                    .min_by_key(|&k| k.probe_time())
                    .unwrap_or(Kernel::Portable),
            }
        })
    }

    /// The best of five runs of a 192 × 512 × 1024 product (≈ 1 ms): enough rows and panels that,
    /// as in a forward pass, preparing the operands is a small part of the time.
    fn probe_time(self) -> Duration {
        let (m, n, k) = (32 * MR, 8 * NR, 1024);
        let x: Vec<bf16> = (0..m * k)
            .map(|i| bf16::from_f32(((i * 7919) % 257) as f32 / 257.0 - 0.5))
            .collect();
        let w: Vec<bf16> = (0..n * k)
            .map(|i| bf16::from_f32(((i * 104_729) % 263) as f32 / 2630.0 - 0.05))
            .collect();
        let w = PackedBf16::pack(&w, n, k);
        (0..6)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(matmul_with(self, &x, m, &w));
                t.elapsed()
            })
            .skip(1)
            .min()
            .unwrap_or(Duration::MAX)
    }
}

/// A machine microkernel of the f32 / f64 products ([`matmul_wide_many`](super::matmul_wide_many)) and of the FMA kernels of
/// the bf16 product. Both give the same bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WideKernel {
    /// AVX-512F: 512-bit vectors, 32 registers.
    Avx512,
    /// AVX2 + FMA: 256-bit vectors, 16 registers.
    Avx2,
}

impl WideKernel {
    pub fn name(self) -> &'static str {
        match self {
            WideKernel::Avx512 => "avx512",
            WideKernel::Avx2 => "avx2-fma",
        }
    }

    /// Whether this CPU can run the kernel.
    pub fn runs_here(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            match self {
                WideKernel::Avx512 => has!("avx512f"),
                WideKernel::Avx2 => has!("avx2") && has!("fma"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = self;
            false
        }
    }

    /// The kernels this CPU can run, the widest first.
    pub fn available() -> Vec<WideKernel> {
        [WideKernel::Avx512, WideKernel::Avx2]
            .into_iter()
            .filter(|k| k.runs_here())
            .collect()
    }

    /// The kernel [`matmul_wide_many`](super::matmul_wide_many) uses: the widest this CPU has, `None` where it has neither.
    pub fn chosen() -> Option<WideKernel> {
        WideKernel::available().first().copied()
    }
}
