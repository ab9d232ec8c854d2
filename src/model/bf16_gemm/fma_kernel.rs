//! The register-blocked FMA microkernel of every ISA variant ([`super::avx2_fma`],
//! [`super::avx512_fma`], [`super::avx512_f64`]), written once: the variants differ only in their
//! vector type and intrinsics, lanes, accumulators per row and prefetches, never in the order of
//! the arithmetic, so one body keeps their results bit-identical by construction.

/// Defines `unsafe fn $name<const R: usize, const FRESH: bool>(a, hi, lo, pairs, c)` on raw
/// pointers, from the variant's intrinsics (`ops`: zero, load, store, add, fused multiply-add;
/// `splat`: a broadcast of the value a pointer points to): `R` rows of one row block of `a` (for each pair, `MR` rows of its even and odd
/// element) times the planes `hi`, `lo` of `pairs` pairs (`$strip` values a pair), accumulated
/// into `c` (`R` rows `NR` apart, `$lanes · vectors` columns each): continuing `c`'s sum, or,
/// `FRESH`, summed from zero and then added to `c`. Per pair, the odd (high) halves first, then
/// the even ones (`vdpbf16ps`'s order); per row, `weights` vectors of the plane at a time, `groups`
/// times across the row. `prefetch_a` lists the offsets (in values) of the next row block's
/// operand fetched at each pair. Also defines `$rows::<FRESH>(rows, a, hi, lo, pairs, c)`,
/// which runs `$name` for `rows` rows (any of `row_counts`; another count does nothing).
///
/// With a leading `pub fn block;`, also defines `pub unsafe fn block::<FRESH>(a, hi, lo, pairs, c,
/// rows)` on slices: `rows` ≤ `MR` rows of one row block, planes of `NR` columns, the bounds
/// checked, then the kernel (the AVX-512 variants take one row block per call).
///
/// `MR` and `NR` resolve where the macro is used, as do the intrinsics.
macro_rules! fma_kernel {
    (
        $(#[$block_attr:meta])*
        pub fn block;
        $(#[$attr:meta])*
        fn $name:ident, $rows:ident on $features:literal for $t:ty { $($args:tt)* }
    ) => {
        $(#[$block_attr])*
        pub unsafe fn block<const FRESH: bool>(a: &[$t], hi: &[$t], lo: &[$t], pairs: usize, c: &mut [$t], rows: usize) {
            assert!(rows <= MR && c.len() >= rows * NR && a.len() >= pairs * MR * 2);
            assert!(hi.len() >= pairs * NR && lo.len() >= pairs * NR);
            let (a, hi, lo, c) = (a.as_ptr(), hi.as_ptr(), lo.as_ptr(), c.as_mut_ptr());
            // SAFETY: bounds asserted above; the feature (and for the bf16 product the MXCSR)
            // guaranteed by the caller.
            unsafe { $rows::<FRESH>(rows, a, hi, lo, pairs, c) }
        }

        fma_kernel! {
            $(#[$attr])*
            fn $name, $rows on $features for $t { $($args)* }
        }
    };
    (
        $(#[$attr:meta])*
        fn $name:ident, $rows:ident on $features:literal for $t:ty {
            ops: $zero:path, $load:path, $store:path, $add:path, $fmadd:path;
            splat: |$x:ident| $splat:expr;
            lanes: $lanes:literal, strip: $strip:expr, weights: [$($wj:literal),+], groups: $groups:literal;
            prefetch_a: [$($ahead:literal),*], row_counts: [$($r:literal),+];
        }
    ) => {
        $(#[$attr])*
        #[target_feature(enable = $features)]
        unsafe fn $name<const R: usize, const FRESH: bool>(
            a: *const $t,
            hi: *const $t,
            lo: *const $t,
            pairs: usize,
            c: *mut $t,
        ) {
            const W: usize = [$($wj),+].len();
            // SAFETY: every pointer stays inside the slices whose lengths the caller checked.
            unsafe {
                let mut acc = [[$zero(); W * $groups]; R];
                // A fresh block sums from zero and adds its sum to `c` at the end; otherwise the
                // block continues `c`'s accumulation.
                for (r, acc) in acc.iter_mut().enumerate().filter(|_| !FRESH) {
                    for (j, v) in acc.iter_mut().enumerate() {
                        *v = $load(c.add(r * NR + $lanes * j));
                    }
                }
                for p in 0..pairs {
                    // The next row block's operand, read at the same pace as this one's: it
                    // comes from L2 or L3, and the hardware prefetcher restarts at every block.
                    $(_mm_prefetch::<_MM_HINT_T0>(
                        a.wrapping_add((pairs + p) * MR * 2 + $ahead) as *const i8,
                    );)*
                    for (plane, half) in [(hi, 1), (lo, 0)] {
                        for group in 0..$groups {
                            let wp = plane.add(p * $strip + $lanes * W * group);
                            let w = [$($load(wp.add($lanes * $wj))),+];
                            for (r, acc) in acc.iter_mut().enumerate() {
                                let $x = a.add((p * MR + r) * 2 + half);
                                let x = $splat;
                                for (v, &w) in acc[W * group..][..W].iter_mut().zip(&w) {
                                    *v = $fmadd(w, x, *v);
                                }
                            }
                        }
                    }
                }
                for (r, acc) in acc.iter().enumerate() {
                    for (j, v) in acc.iter().enumerate() {
                        let at = c.add(r * NR + $lanes * j);
                        $store(at, if FRESH { $add($load(at), *v) } else { *v });
                    }
                }
            }
        }

        /// The kernel for `rows` rows; a count it has no body for does nothing.
        ///
        /// # Safety
        /// As for the kernel.
        #[inline(always)]
        unsafe fn $rows<const FRESH: bool>(
            rows: usize,
            a: *const $t,
            hi: *const $t,
            lo: *const $t,
            pairs: usize,
            c: *mut $t,
        ) {
            // SAFETY: guaranteed by the caller.
            unsafe {
                match rows {
                    $($r => $name::<$r, FRESH>(a, hi, lo, pairs, c),)+
                    _ => {}
                }
            }
        }
    };
}
