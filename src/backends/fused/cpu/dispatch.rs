//! Run-time choice of the instruction set the hot loops are compiled for.
//!
//! The kernels are written as generic `#[inline(always)]` bodies over plain slices and
//! fixed-size lane arrays, and each public kernel instantiates them inside wrappers compiled with
//! `#[target_feature]` (AVX-512, AVX2+FMA) so that LLVM vectorises them for the machine at hand
//! without requiring `-C target-cpu=native` for the whole crate. The environment variable
//! `HSDIFF_FUSED_ISA` (`avx512`, `avx2`, `generic`) forces a level this CPU has, for testing every
//! path; a level it lacks (or an unknown name) makes the backend refuse to run.

use std::sync::OnceLock;

/// Instruction-set level of the compiled kernel variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Isa {
    /// AVX-512F/VL/BW/DQ + FMA + F16C.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx512,
    /// AVX2 + FMA + F16C.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Avx2,
    /// Whatever the crate is compiled for (SSE2 on a default x86-64 build), no FMA.
    Generic,
}

/// The best supported level, capped by `HSDIFF_FUSED_ISA` if set. Detected once.
pub(crate) fn isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(detect)
}

/// The instruction-set level the kernels run with on this machine, for fingerprints.
pub fn isa_name() -> &'static str {
    level_name(isa())
}

/// The variable that caps the level, for tests of every path.
const ISA_OVERRIDE: &str = "HSDIFF_FUSED_ISA";

/// The levels this CPU can run, best first (always ending in `Generic`).
fn supported() -> Vec<Isa> {
    let mut levels = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c");
        let avx512 = avx2
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512dq");
        if avx512 {
            levels.push(Isa::Avx512);
        }
        if avx2 {
            levels.push(Isa::Avx2);
        }
    }
    levels.push(Isa::Generic);
    levels
}

/// The level `HSDIFF_FUSED_ISA` asks for: `Ok(None)` when unset, an error when it names no
/// level or one this CPU lacks — a forced path that silently ran another would make a test of
/// that path pass without running it.
fn requested() -> std::result::Result<Option<Isa>, String> {
    let Ok(value) = std::env::var(ISA_OVERRIDE) else {
        return Ok(None);
    };
    let level = match value.as_str() {
        "avx512" => Isa::Avx512,
        "avx2" => Isa::Avx2,
        "generic" => Isa::Generic,
        other => {
            return Err(format!(
                "{ISA_OVERRIDE}={other:?} names no kernel level (avx512, avx2, generic)"
            ));
        }
    };
    if supported().contains(&level) {
        Ok(Some(level))
    } else {
        Err(format!(
            "{ISA_OVERRIDE}={value}: this CPU cannot run that kernel level (it runs {})",
            supported()
                .iter()
                .map(|l| level_name(*l))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }
}

/// Why the fused CPU kernels cannot run as `HSDIFF_FUSED_ISA` asks, if they cannot.
pub fn isa_override_error() -> Option<String> {
    requested().err()
}

fn level_name(isa: Isa) -> &'static str {
    match isa {
        Isa::Avx512 => "avx512",
        Isa::Avx2 => "avx2",
        Isa::Generic => "generic",
    }
}

/// The requested level if it is usable (the backend refuses to run otherwise, see
/// [`isa_override_error`]), else the best this CPU has.
fn detect() -> Isa {
    match requested() {
        Ok(Some(level)) => level,
        _ => supported()[0],
    }
}

/// Defines `$name(isa, args…)` that calls the generic body `$body::<…, FMA>(args…)` inside a
/// wrapper compiled for the chosen instruction set.
macro_rules! multiversion {
    (
        $(#[$meta:meta])*
        $vis:vis fn $name:ident<$($g:ident : $bound:path),*>($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)?
        => $body:ident
    ) => {
        $(#[$meta])*
        #[allow(clippy::too_many_arguments)]
        $vis fn $name<$($g: $bound),*>(isa: $crate::backends::fused::cpu::dispatch::Isa, $($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,f16c")]
            #[allow(clippy::too_many_arguments)]
            fn avx512<$($g: $bound),*>($($arg: $ty),*) $(-> $ret)? {
                $body::<$($g,)* true>($($arg),*)
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma,f16c")]
            #[allow(clippy::too_many_arguments)]
            fn avx2<$($g: $bound),*>($($arg: $ty),*) $(-> $ret)? {
                $body::<$($g,)* true>($($arg),*)
            }
            match isa {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `isa()` only returns Avx512 when the CPU reports these features.
                $crate::backends::fused::cpu::dispatch::Isa::Avx512 => unsafe { avx512::<$($g),*>($($arg),*) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `isa()` only returns Avx2 when the CPU reports these features.
                $crate::backends::fused::cpu::dispatch::Isa::Avx2 => unsafe { avx2::<$($g),*>($($arg),*) },
                _ => $body::<$($g,)* false>($($arg),*),
            }
        }
    };
}
pub(crate) use multiversion;
