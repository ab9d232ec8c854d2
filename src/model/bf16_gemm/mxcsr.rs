//! The MXCSR setting of the FMA kernels' bf16 products: `vdpbf16ps`'s denormal handling.

use std::arch::asm;

/// MXCSR bits: flush-to-zero (15) and denormals-are-zero (6).
const FTZ_DAZ: u32 = 0x8040;

/// Sets the MXCSR's flush-to-zero and denormals-are-zero bits on this thread until dropped, then
/// restores the caller's MXCSR. Only the FMA kernels (AVX-512 and AVX2) run while it is held (a task holds it
/// around its own microkernel calls and makes no rayon call meanwhile).
pub struct FlushDenormals {
    saved: u32,
}

impl FlushDenormals {
    pub fn new() -> Self {
        let mut saved = 0u32;
        // SAFETY: stmxcsr/ldmxcsr read and write 4 bytes at valid addresses; every x86_64 CPU
        // has SSE. The kernels' loads and stores order themselves after this statement (it may
        // touch memory), so no FMA of theirs runs under the caller's MXCSR.
        unsafe {
            asm!("stmxcsr [{}]", in(reg) &mut saved, options(nostack, preserves_flags));
            let flushing = saved | FTZ_DAZ;
            asm!("ldmxcsr [{}]", in(reg) &flushing, options(nostack, preserves_flags));
        }
        FlushDenormals { saved }
    }
}

impl Drop for FlushDenormals {
    fn drop(&mut self) {
        // SAFETY: as in `new`.
        unsafe { asm!("ldmxcsr [{}]", in(reg) &self.saved, options(nostack, preserves_flags)) };
    }
}
