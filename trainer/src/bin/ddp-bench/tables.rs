//! The tables `ddp-bench` prints: training (ours, PyTorch's, the ratios), sampling, the
//! all-reduce and lock-step figures.

use crate::allreduce::{AR_WORLD, ArFigure, SIZES};
use crate::procs::kib_to_mb;
use crate::rounds::{Comparison, Setup, TrainResults, median, median_and_range};
use crate::train::{Model, TrainFigure, Workload};
use crate::{lockstep, sampling, train};

pub fn print_train_table(setup: &Setup, figures: &[TrainFigure]) {
    let gpt = setup.workloads.iter().any(|w| w.model == Model::Gpt);
    let (unit, quality) = if gpt {
        ("tokens", "val loss")
    } else {
        ("samples", "test acc")
    };
    println!();
    println!(
        "Training throughput: batch {} per replica, ddp-trainer --standalone; {}",
        setup.workloads.first().map_or(0, |w| w.batch),
        data_summary(&setup.workloads)
    );
    if setup.rounds > 1 {
        println!(
            "median of {} rounds (each scaling and vs 1 thread against its own round's world 1 x \
             1 thread; scaling range in brackets)",
            setup.rounds
        );
    }
    println!(
        "{:<8} {:>5} {:>7} {:>8} {:>9} {:>10} {:>8} {:>11} {:>9} {:>7} {:>11} {:>15}",
        "model",
        "world",
        "threads",
        unit,
        "train s",
        format!("{unit}/s"),
        "scaling",
        "vs 1 thread",
        quality,
        "wall s",
        "peak RSS MB",
        "scaling range"
    );
    for f in figures {
        let range = percent_range(f.scaling_range, setup.rounds);
        println!(
            "{:<8} {:>5} {:>7} {:>8} {:>9.2} {:>10.1} {:>8} {:>11} {:>9} {:>7.1} {:>11} {:>15}",
            f.model.short(),
            f.config.world_label(),
            f.config.threads,
            f.samples,
            f.train_s,
            f.samples_per_s,
            percent(f.scaling, 1),
            f.vs_one_thread
                .map_or("-".to_string(), |v| format!("{v:.2}x")),
            if gpt {
                f.val_loss.map_or("-".to_string(), |l| format!("{l:.4}"))
            } else {
                percent(f.test_acc, 2)
            },
            f.wall_s,
            f.peak_rss_kib
                .map_or("-".to_string(), |k| format!("{:.0}", kib_to_mb(k))),
            range
        );
    }
    let against_pair: Vec<String> = figures
        .iter()
        .filter_map(|f| {
            let v = f.vs_pair?;
            let range = percent_range(f.vs_pair_range, setup.rounds);
            Some(
                format!("{} {:.1}% {range}", f.model.short(), 100.0 * v)
                    .trim_end()
                    .to_string(),
            )
        })
        .collect();
    if !against_pair.is_empty() {
        println!(
            "world 2 against 1+1 (each round's world 2 {unit}/s over its own 1+1's; median, range \
             in brackets): {}",
            against_pair.join(", ")
        );
    }
    println!(
        "{unit}/s = training {unit} of all ranks / training time of the slowest rank (sum of its \
         train records' {unit} / {unit}_per_sec); scaling = world-2 {unit}/s / (2 x world-1)"
    );
    println!(
        "world 1+1 = two independent world-1 runs at the same time (no communication): the scaling \
         this machine allows two replicas at all"
    );
    println!(
        "threads = CPU threads per replica; vs 1 thread = samples/s / world-1 x 1-thread samples/s; \
         peak RSS = the largest process of the run (launcher or replica; 1 MB = 1e6 bytes)"
    );
}

/// "cnn, mlp: MNIST sample, 3 epochs; resnet18: 512 synthetic 3x32x32 images (128 test), 1 epoch".
pub fn data_summary(workloads: &[Workload]) -> String {
    let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
    for w in workloads {
        let description = w.describe();
        match groups.iter_mut().find(|(d, _)| *d == description) {
            Some((_, models)) => models.push(w.model.short()),
            None => groups.push((description, vec![w.model.short()])),
        }
    }
    groups
        .iter()
        .map(|(d, models)| format!("{}: {d}", models.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// "97.50%" (with `digits` decimals), or "-".
pub fn percent(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".to_string(), |v| format!("{:.digits$}%", 100.0 * v))
}

pub fn print_comparisons(setup: &Setup, results: &TrainResults) {
    let Some(torch) = &setup.torch else {
        return;
    };
    for c in &results.comparisons {
        print_comparison(setup, &torch.version, c);
    }
    if !results.comparisons.is_empty() {
        println!(
            "ratio = ddp / PyTorch (above 1: ddp has more samples/s, or uses more memory); best = \
             ddp: the best of world 1 x 1 thread, world 1 x {t} and world 2 (not 1+1); PyTorch: \
             the better of its two; PyTorch's samples/s = rank 0's epoch times between barriers \
             (torch_ref.py); its tokens/s = the training loop between barriers (torch_gpt.py)",
            t = train::threads_text(setup.threads)
        );
    }
}

/// The GPT: the median time to sample from each round's world-2 model.
pub fn print_sampling(figures: &[sampling::SampleFigure]) {
    let mut sorted = figures.to_vec();
    sorted.sort_by(|a, b| a.generate_s.total_cmp(&b.generate_s));
    if let Some(median) = sorted.get(sorted.len() / 2) {
        println!();
        if sorted.len() > 1 {
            println!(
                "median of {} rounds (each round's world-2 model):",
                sorted.len()
            );
        }
        sampling::print_sample(median);
    }
}

pub fn print_comparison(setup: &Setup, version: &str, c: &Comparison) {
    println!();
    let (script, unit) = match c.workload.model {
        Model::Gpt => ("torch_gpt.py", "tokens/s"),
        _ => ("torch_ref.py", "samples/s"),
    };
    println!(
        "ddp-trainer vs PyTorch {version} ({script}): {}, {}, batch {} per replica",
        c.workload.model.short(),
        c.workload.describe(),
        c.workload.batch
    );
    if setup.rounds > 1 {
        println!(
            "median of {} rounds (ddp and PyTorch alternate within a round); ratio = ddp median / \
             PyTorch median",
            setup.rounds
        );
    }
    println!(
        "{:<32} {:>13} {:>17} {:>7}",
        "configuration",
        format!("ddp {unit}"),
        format!("PyTorch {unit}"),
        "ratio"
    );
    for r in &c.rows {
        println!(
            "{:<32} {:>13.1} {:>17.1} {:>7.2}",
            r.label, r.ours, r.torch, r.ratio
        );
    }
}

/// Per engine and size the median algbw over the rounds (and its range), then each of our engines
/// against gloo (medians' ratio) when PyTorch ran.
pub fn print_allreduce_table(figures: &[ArFigure], rounds: u32) {
    let mut engines: Vec<&str> = Vec::new();
    for f in figures {
        if !engines.contains(&f.engine.as_str()) {
            engines.push(&f.engine);
        }
    }
    let algbw = |engine: &str, bytes: usize| -> Vec<f64> {
        figures
            .iter()
            .filter(|f| f.engine == engine && f.fig.bytes == bytes)
            .map(|f| f.fig.algbw_gbps)
            .collect()
    };
    println!();
    println!(
        "All-reduce: world {AR_WORLD} on this host, sum of f32, each run the median of 10 after \
         3 warm-ups; algbw in GB/s, {}",
        if rounds > 1 {
            format!("median of {rounds} alternating rounds [min-max]")
        } else {
            "one round".to_string()
        }
    );
    print!("{:<20}", "engine");
    for bytes in SIZES {
        print!(" {:>20}", format!("{} MiB", bytes >> 20));
    }
    println!();
    for engine in &engines {
        print!("{engine:<20}");
        for bytes in SIZES {
            let mut xs = algbw(engine, bytes);
            xs.sort_by(f64::total_cmp);
            let cell = match (median(xs.clone()), xs.first(), xs.last()) {
                (Some(m), Some(lo), Some(hi)) if xs.len() > 1 => {
                    format!("{m:.2} [{lo:.2}-{hi:.2}]")
                }
                (Some(m), _, _) => format!("{m:.2}"),
                _ => "-".to_string(),
            };
            print!(" {cell:>20}");
        }
        println!();
    }
    if engines.contains(&"gloo") {
        for engine in engines.iter().filter(|e| e.starts_with("ddp")) {
            print!("{:<20}", format!("{engine}/gloo"));
            for bytes in SIZES {
                let ratio = median(algbw(engine, bytes))
                    .zip(median(algbw("gloo", bytes)))
                    .map_or("-".to_string(), |(a, g)| format!("{:.2}x", a / g));
                print!(" {ratio:>20}");
            }
            println!();
        }
    }
    println!(
        "ddp-tcp: TCP ring over loopback; ddp-shm: shared memory, direct copies between the \
         processes; ddp-shm-staged: shared memory staged through the segment (DDP_SHM_DIRECT=0); \
         gloo: torch_allreduce.py; memcpy: one process copying a buffer of that size (the \
         machine's memory bandwidth at the time)"
    );
    println!("algbw = bytes / median time (1 GB = 1e9 bytes); busbw = algbw x 2(W-1)/W");
}

/// "[88.0–99.2%]" for a range over several rounds, else "".
pub fn percent_range(range: Option<(f64, f64)>, rounds: u32) -> String {
    match range {
        Some((lo, hi)) if rounds > 1 => format!("[{:.1}–{:.1}%]", 100.0 * lo, 100.0 * hi),
        _ => String::new(),
    }
}

pub fn print_lockstep_table(figures: &[lockstep::LockstepFigure], rounds: u32) {
    println!();
    println!(
        "Lock-step: 2 threads pinned to cores 0 and 1, {} steps each, with a barrier after every \
         step (as world 2) or free-running (as 1+1: both threads' steps over the slower one's \
         time); steps/s, {}",
        lockstep::STEPS,
        if rounds > 1 {
            format!("median of {rounds} rounds, lock-step/free per round [min-max]")
        } else {
            "one round".to_string()
        }
    );
    println!(
        "{:<40} {:>10} {:>10} {:>24}",
        "work per step", "lock-step", "free", "lock-step/free"
    );
    for work in lockstep::Work::ALL {
        let of = |f: fn(&lockstep::LockstepFigure) -> f64| -> Vec<f64> {
            figures.iter().filter(|x| x.work == work).map(f).collect()
        };
        let (ratio, range) = median_and_range(of(lockstep::LockstepFigure::ratio).into_iter());
        let cell = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
        let ratio = format!("{} {}", percent(ratio, 1), percent_range(range, rounds));
        let ratio = ratio.trim_end();
        println!(
            "{:<40} {:>10} {:>10} {:>24}",
            work.describe(),
            cell(median(of(|f| f.lockstep))),
            cell(median(of(|f| f.free))),
            ratio
        );
    }
    println!(
        "no trainer code and no communication: what meeting at every step costs on this machine, \
         the ceiling of world 2 against 1+1"
    );
}

// ---------------------------------------------------------------------------------------------
// Helpers
