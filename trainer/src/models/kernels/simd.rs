//! Running a kernel compiled for the widest vector instructions the CPU has.
//!
//! The crate is built for baseline x86-64 (SSE2), so that one executable runs on any x86-64
//! machine. [`widest_simd!`] defines a function whose body is also compiled for AVX2 + FMA and
//! for AVX-512 (x86-64-v3 and v4), and picks one of the three copies at run time. The copies
//! compute the same bits: Rust never contracts `a * b + c` into an FMA, and the loops that the
//! compiler vectorises sum in the order they are written, whatever the register width.

use std::sync::OnceLock;

/// The instruction sets a [`widest_simd!`] function has copies for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Baseline,
    Avx2,
    Avx512,
}

/// The widest [`Level`] this CPU runs (detected once).
pub fn level() -> Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Level {
    use std::arch::is_x86_feature_detected as has;
    if has!("avx512f") && has!("avx512vl") && has!("avx512bw") && has!("avx512dq") {
        Level::Avx512
    } else if has!("avx2") && has!("fma") {
        Level::Avx2
    } else {
        Level::Baseline
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> Level {
    Level::Baseline
}

/// Defines the function it wraps so that its body runs compiled for the widest [`Level`] the
/// CPU has: the body becomes an inlined inner function, called from an AVX-512 copy, an AVX2
/// copy or directly. Everything the body calls must inline into it (`#[inline(always)]` helpers,
/// not closures handed to other functions) to be compiled for the wider instructions too.
macro_rules! widest_simd {
    ($(#[$doc:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$doc])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn body($($arg: $ty),*) $(-> $ret)? $body

            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
                fn avx512($($arg: $ty),*) $(-> $ret)? {
                    body($($arg),*)
                }

                #[target_feature(enable = "avx2,fma")]
                fn avx2($($arg: $ty),*) $(-> $ret)? {
                    body($($arg),*)
                }

                match $crate::models::kernels::simd::level() {
                    // SAFETY: `level` found every feature this copy is compiled for.
                    $crate::models::kernels::simd::Level::Avx512 => return unsafe { avx512($($arg),*) },
                    // SAFETY: as above.
                    $crate::models::kernels::simd::Level::Avx2 => return unsafe { avx2($($arg),*) },
                    $crate::models::kernels::simd::Level::Baseline => {}
                }
            }
            body($($arg),*)
        }
    };
}

pub(crate) use widest_simd;

#[cfg(test)]
mod tests {
    use super::*;

    widest_simd! {
        /// A vectorisable sum in 8 lanes.
        fn lanes_sum(xs: &[f32]) -> f32 {
            let mut acc = [0f32; 8];
            for block in xs.chunks_exact(8) {
                for (a, x) in acc.iter_mut().zip(block) {
                    *a += x;
                }
            }
            acc.iter().sum::<f32>() + xs.chunks_exact(8).remainder().iter().sum::<f32>()
        }
    }

    #[test]
    fn every_copy_gives_the_baseline_bits() {
        let xs: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.731).sin()).collect();
        let mut acc = [0f32; 8];
        for block in xs.chunks_exact(8) {
            for (a, x) in acc.iter_mut().zip(block) {
                *a += x;
            }
        }
        let want = acc.iter().sum::<f32>() + xs.chunks_exact(8).remainder().iter().sum::<f32>();
        assert_eq!(lanes_sum(&xs).to_bits(), want.to_bits(), "{:?}", level());
    }
}
