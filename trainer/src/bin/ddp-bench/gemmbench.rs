//! `--what gemm`: the bf16 GEMM (`kernels::gemm_bf16`) against the f32 `gemm` crate
//! (`kernels::gemm::gemm`) on the GPT's matrix products, single-threaded and on 2 threads.
//!
//! Shapes: the baby GPT (embd 128, block 64, batch 12: 768 rows) and a 6-layer 384-wide GPT
//! (block 256, batch 8: 2,048 rows); per layer kind the forward `x·Wᵀ` (x row-major, `Wᵀ` a
//! transposed view of the out × in weight) and the weight gradient `dW = dYᵀ·X` (k = the rows).
//! Per shape and thread count, each round times, one after the other, the f32 GEMM, the bf16
//! GEMM with its packing, with the weight packed beforehand (forward products: what a step that
//! packs its weights once pays), and the bf16 kernel alone (both operands packed beforehand);
//! and the fallback (rounded f32 copies and the f32 GEMM: `Kernel::Fallback`);
//! the table shows each figure's median over the rounds (at least 5) in GFLOP/s and as a fraction
//! of the machine's peak: f32 FMA 2 units × 16 lanes × 2 flops per cycle and core, bf16
//! `vdpbf16ps` twice that, at the nominal clock of /proc/cpuinfo's `cpu MHz`.
//!
//! The header also gives each instruction's measured rate on one core (24 independent register
//! accumulators, no memory: `vfmadd231ps` and `vdpbf16ps` on zmm), the ceiling a GEMM meets on
//! this CPU whatever the nominal figures say.

use std::time::Instant;

use crate::rounds::median;
use crate::{Args, say};

use ddp_trainer::models::kernels::gemm::{Mat, gemm};
use ddp_trainer::models::kernels::gemm_bf16::{
    Kernel, PackedA, PackedB, gemm_bf16_packed_b, gemm_bf16_with, gemm_packed,
};

/// One product: `m × k · k × n`, a forward `x·Wᵀ` or a weight gradient `dYᵀ·X`.
struct Case {
    model: &'static str,
    layer: &'static str,
    m: usize,
    k: usize,
    n: usize,
    weight_grad: bool,
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for (model, rows, e) in [("baby", 768, 128), ("6x384", 2048, 384)] {
        for (layer, n_in, n_out) in [
            ("qkv", e, 3 * e),
            ("proj", e, e),
            ("fc", e, 4 * e),
            ("fc-proj", 4 * e, e),
        ] {
            out.push(Case {
                model,
                layer,
                m: rows,
                k: n_in,
                n: n_out,
                weight_grad: false,
            });
            out.push(Case {
                model,
                layer,
                m: n_out,
                k: rows,
                n: n_in,
                weight_grad: true,
            });
        }
    }
    out
}

/// Variants timed per case, in this order.
const VARIANTS: [&str; 5] = [
    "f32",
    "bf16",
    "bf16 W packed",
    "bf16 kernel",
    "bf16 fallback",
];

/// Per-call seconds of `f`, over enough calls to last about 40 ms (`reps`, fixed in round 1).
fn time(reps: &mut Option<usize>, mut f: impl FnMut()) -> f64 {
    let n = *reps.get_or_insert_with(|| {
        let t = Instant::now();
        f();
        (0.04 / t.elapsed().as_secs_f64().max(1e-6))
            .ceil()
            .clamp(1.0, 1000.0) as usize
    });
    let t = Instant::now();
    for _ in 0..n {
        f();
    }
    t.elapsed().as_secs_f64() / n as f64
}

/// The nominal clock in GHz (the first `cpu MHz` of /proc/cpuinfo).
fn nominal_ghz() -> Option<f64> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("cpu MHz"))?;
    Some(line.split(':').nth(1)?.trim().parse::<f64>().ok()? / 1000.0)
}

/// One core's measured GFLOP/s of f32 FMA and of bf16 dot products (AVX-512), if it has them.
#[cfg(target_arch = "x86_64")]
fn measured_peaks() -> Option<(f64, f64)> {
    use std::arch::x86_64::*;
    /// `n` rounds of 24 independent `acc = f(acc)`.
    macro_rules! chains {
        ($name:ident, $features:literal, $step:expr) => {
            #[target_feature(enable = $features)]
            fn $name(n: usize, seed: f32) -> f32 {
                let mut acc = [_mm512_set1_ps(seed); 24];
                let step = $step;
                for _ in 0..n {
                    for x in acc.iter_mut() {
                        *x = step(*x);
                    }
                }
                let sum = acc
                    .iter()
                    .fold(_mm512_setzero_ps(), |s, &x| _mm512_add_ps(s, x));
                _mm512_reduce_add_ps(sum)
            }
        };
    }
    chains!(fma, "avx512f", |x| {
        _mm512_fmadd_ps(_mm512_set1_ps(1e-3), _mm512_set1_ps(-1e-3), x)
    });
    chains!(dot, "avx512f,avx512bf16", |x| {
        let a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3), _mm512_set1_ps(2e-3));
        let b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(-1e-3), _mm512_set1_ps(3e-3));
        _mm512_dpbf16_ps(x, a, b)
    });
    if !Kernel::Avx512Bf16.is_available() {
        return None;
    }
    let n = 4_000_000;
    let rate = |f: &dyn Fn() -> f32, flops: f64| {
        (0..3)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(f());
                24.0 * n as f64 * flops / t.elapsed().as_secs_f64() / 1e9
            })
            .fold(0.0, f64::max)
    };
    let seed = std::hint::black_box(1.0f32);
    // SAFETY: the CPU has AVX512F and AVX512_BF16 (checked above).
    let f32_rate = rate(&|| unsafe { fma(n, seed) }, 32.0);
    // SAFETY: as above.
    let bf16_rate = rate(&|| unsafe { dot(n, seed) }, 64.0);
    Some((f32_rate, bf16_rate))
}

#[cfg(not(target_arch = "x86_64"))]
fn measured_peaks() -> Option<(f64, f64)> {
    None
}

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n as u32)
        .map(|i| ((i.wrapping_mul(2_654_435_761) ^ seed) % 1000) as f32 / 500.0 - 1.0)
        .collect()
}

/// Times every case and prints the table (or JSON lines).
pub fn bench_gemm(args: &Args) -> Result<(), String> {
    let kernel = Kernel::detect();
    let ghz = nominal_ghz();
    say(
        args,
        &format!(
            "bf16 GEMM: kernel {kernel:?}; nominal clock {} (/proc/cpuinfo cpu MHz; turbo may \
             exceed it); peak per core f32 FMA 64 flops/cycle, bf16 dot 128",
            ghz.map_or("unknown".into(), |g| format!("{g:.2} GHz"))
        ),
    );
    if let Some((f, b)) = measured_peaks() {
        say(
            args,
            &format!(
                "measured on one core (register-only, zmm): f32 FMA {f:.0} GFLOP/s, bf16 \
                 vdpbf16ps {b:.0} GFLOP/s ({:.2}x)",
                b / f
            ),
        );
    }
    let rounds = args.repeat.max(5) as usize;
    let cases = cases();
    let threads = [1usize, 2];
    // times[case][thread][variant] over rounds; reps[case][thread][variant].
    let mut times = vec![vec![vec![Vec::new(); VARIANTS.len()]; threads.len()]; cases.len()];
    let mut reps = vec![vec![[None; VARIANTS.len()]; threads.len()]; cases.len()];
    for round in 0..rounds {
        eprintln!("ddp-bench: gemm round {}/{rounds} ...", round + 1);
        for (ci, c) in cases.iter().enumerate() {
            let (m, k, n) = (c.m, c.k, c.n);
            let av = values(m * k, 1);
            let bv = values(k * n, 2);
            // Forward: a = x (m × k), b = Wᵀ of the n × k weight; gradient: a = dYᵀ of the
            // k × m output gradient, b = X (k × n).
            let (a, b) = if c.weight_grad {
                (Mat::row_major(&av, k, m).t(), Mat::row_major(&bv, k, n))
            } else {
                (Mat::row_major(&av, m, k), Mat::row_major(&bv, n, k).t())
            };
            let mut dst = vec![0f32; m * n];
            for (ti, &t) in threads.iter().enumerate() {
                let pb = PackedB::new(kernel, b, t);
                let pa = PackedA::new(kernel, a, t);
                let r = &mut reps[ci][ti];
                let out = &mut times[ci][ti];
                out[0].push(time(&mut r[0], || gemm(&mut dst, n, false, a, b, t)));
                out[1].push(time(&mut r[1], || {
                    gemm_bf16_with(kernel, &mut dst, n, false, a, b, t)
                }));
                if !c.weight_grad {
                    out[2].push(time(&mut r[2], || {
                        gemm_bf16_packed_b(&mut dst, n, false, a, &pb, t)
                    }));
                }
                out[3].push(time(&mut r[3], || {
                    gemm_packed(&mut dst, n, false, &pa, &pb, t)
                }));
                out[4].push(time(&mut r[4], || {
                    gemm_bf16_with(Kernel::Fallback, &mut dst, n, false, a, b, t)
                }));
            }
        }
    }
    if !args.json {
        println!(
            "\n{:<6} {:<8} {:<13} {:>16} {:>3} | GFLOP/s (% of peak: f32 {}, bf16 {} GFLOP/s per \
             thread); median of {rounds} rounds",
            "model",
            "layer",
            "product",
            "m x k x n",
            "thr",
            ghz.map_or("?".into(), |g| format!("{:.0}", 64.0 * g)),
            ghz.map_or("?".into(), |g| format!("{:.0}", 128.0 * g)),
        );
        let head: Vec<String> = VARIANTS.iter().map(|v| format!("{v:>19}")).collect();
        println!("{:52} {} {:>9}", "", head.join(" "), "bf16/f32");
    }
    for (ci, c) in cases.iter().enumerate() {
        let flops = 2.0 * (c.m * c.k * c.n) as f64;
        for (ti, &t) in threads.iter().enumerate() {
            let gf: Vec<Option<f64>> = times[ci][ti]
                .iter()
                .map(|ts| median(ts.clone()).map(|s| flops / s / 1e9))
                .collect();
            // The f32 GEMM and the fallback run f32 FMAs, the others vdpbf16ps.
            let per_cycle = |v: usize| if v == 0 || v == 4 { 64.0 } else { 128.0 };
            let peak = |v: usize| ghz.map(|g| g * t as f64 * per_cycle(v));
            let product = if c.weight_grad {
                "dW = dY^T.X"
            } else {
                "y = x.W^T"
            };
            let shape = format!("{}x{}x{}", c.m, c.k, c.n);
            if args.json {
                let fig = |v: usize| gf[v].map_or("null".into(), |g| format!("{g:.2}"));
                println!(
                    "{{\"bench\":\"gemm\",\"model\":\"{}\",\"layer\":\"{}\",\"product\":\"{product}\",\
                     \"m\":{},\"k\":{},\"n\":{},\"threads\":{t},\"f32_gflops\":{},\
                     \"bf16_gflops\":{},\"bf16_w_packed_gflops\":{},\"bf16_kernel_gflops\":{},\
                     \"bf16_fallback_gflops\":{},\"ghz_nominal\":{}}}",
                    c.model,
                    c.layer,
                    c.m,
                    c.k,
                    c.n,
                    fig(0),
                    fig(1),
                    fig(2),
                    fig(3),
                    fig(4),
                    ghz.map_or("null".into(), |g| format!("{g:.3}"))
                );
                continue;
            }
            let cells: Vec<String> = (0..VARIANTS.len())
                .map(|v| match (gf[v], peak(v)) {
                    (Some(g), Some(p)) => format!("{g:>9.1} ({:>5.1}%)", 100.0 * g / p),
                    (Some(g), None) => format!("{g:>19.1}"),
                    (None, _) => format!("{:>19}", "-"),
                })
                .collect();
            let ratio = match (gf[1], gf[0]) {
                (Some(b), Some(f)) => format!("{:>8.2}x", b / f),
                _ => "-".into(),
            };
            println!(
                "{:<6} {:<8} {product:<13} {shape:>16} {t:>3} {} {ratio}",
                c.model,
                c.layer,
                cells.join(" ")
            );
        }
    }
    Ok(())
}
