//! The training benchmark's rounds: per model and round, our configurations alternating with
//! PyTorch's, each run's scaling and "vs 1 thread" against its own round's world 1 × 1 thread,
//! then the medians over the rounds and the ddp / PyTorch comparison (the ratio of the medians).

use crate::procs::kib_to_mb;
use crate::sampling::{SampleFigure, time_sampling};
use crate::torch::{Torch, TorchFigure, torch_configs};
use crate::train::{Config, GptShape, Model, TrainFigure, Trainer, Workload, threads_text};

/// What the training benchmark runs, found and checked before anything runs.
pub struct Setup<'a> {
    pub trainer: Trainer<'a>,
    /// `--compare-torch`.
    pub torch: Option<Torch<'a>>,
    pub workloads: Vec<Workload>,
    /// Threads per replica of the world-1 "all cores" configuration (`--threads`).
    pub threads: usize,
    /// `--repeat`.
    pub rounds: u32,
    /// `--json`: print a line per run as it ends.
    pub json: bool,
}

/// The medians of every model, ours, and the comparisons with PyTorch (if asked for).
pub struct TrainResults {
    pub figures: Vec<TrainFigure>,
    pub comparisons: Vec<Comparison>,
    /// The GPT: sampling from each round's world-2 model.
    pub sampling: Vec<SampleFigure>,
}

/// ddp-trainer against PyTorch for one model.
pub struct Comparison {
    pub workload: Workload,
    pub rows: Vec<CompareRow>,
}

/// One line of a comparison: medians over the rounds and their ratio.
pub struct CompareRow {
    pub label: String,
    pub ours: f64,
    pub torch: f64,
    /// ours / torch (of the medians).
    pub ratio: f64,
}

/// One round of one model.
#[derive(Default)]
struct Round {
    ours: Vec<TrainFigure>,
    torch: Vec<TorchFigure>,
    sample: Option<SampleFigure>,
}

impl Round {
    fn ours_at(&self, config: Config) -> Option<&TrainFigure> {
        self.ours.iter().find(|f| f.config == config)
    }

    fn torch_at(&self, config: Config) -> Option<&TorchFigure> {
        self.torch.iter().find(|f| f.config == config)
    }

    /// Our best samples/s, 1+1 left out (it is two jobs, not one).
    fn ours_best(&self) -> Option<f64> {
        self.ours
            .iter()
            .filter(|f| !f.config.independent)
            .map(|f| f.samples_per_s)
            .max_by(f64::total_cmp)
    }

    fn torch_best(&self) -> Option<f64> {
        self.torch
            .iter()
            .map(|f| f.samples_per_s)
            .max_by(f64::total_cmp)
    }
}

/// A run of the schedule.
#[derive(Clone, Copy)]
enum Step {
    Ours(Config),
    Torch(Config),
}

/// Our configurations of a round: world 1 × 1 thread, world 1 × `threads` (if more than 1),
/// world 2 × 1 thread, and 1+1 × 1 thread.
pub fn our_configs(threads: usize) -> Vec<Config> {
    let mut configs = vec![Config::ddp(1, 1)];
    if threads > 1 {
        configs.push(Config::ddp(1, threads));
    }
    configs.extend([Config::ddp(2, 1), Config::PAIR]);
    configs
}

/// Ours and PyTorch's in alternation (ours, torch, ours, torch, ..., then the rest of ours), so
/// each PyTorch run sits next to our run of the same configuration.
fn schedule(ours: &[Config], torch: &[Config]) -> Vec<Step> {
    (0..ours.len().max(torch.len()))
        .flat_map(|i| {
            [
                ours.get(i).copied().map(Step::Ours),
                torch.get(i).copied().map(Step::Torch),
            ]
        })
        .flatten()
        .collect()
}

pub fn bench_training(setup: &Setup) -> Result<TrainResults, String> {
    let mut results = TrainResults {
        figures: Vec::new(),
        comparisons: Vec::new(),
        sampling: Vec::new(),
    };
    for w in &setup.workloads {
        let mut rounds = Vec::new();
        for round in 0..setup.rounds {
            rounds.push(run_round(setup, w, round)?);
        }
        results
            .sampling
            .extend(rounds.iter().filter_map(|r| r.sample.clone()));
        results.figures.extend(median_figures(&rounds));
        if setup.torch.is_some() {
            results.comparisons.push(compare(w, &rounds, setup.threads));
        }
    }
    Ok(results)
}

fn run_round(setup: &Setup, w: &Workload, round: u32) -> Result<Round, String> {
    let tag = format!("-r{round}");
    let ours = our_configs(setup.threads);
    let torch: Vec<Config> = match &setup.torch {
        Some(_) => torch_configs(setup.threads).to_vec(),
        None => Vec::new(),
    };
    let mut r = Round::default();
    for step in schedule(&ours, &torch) {
        announce(setup, w, step, round);
        match (step, &setup.torch) {
            (Step::Ours(c), _) => r.ours.push(setup.trainer.run(w, c, &tag)?),
            (Step::Torch(c), Some(t)) => r.torch.push(t.run(w, c, &tag, None)?),
            (Step::Torch(_), None) => unreachable!("PyTorch runs only with --compare-torch"),
        }
    }
    set_relative_figures(&mut r.ours);
    // Sampling times the baby GPT (`sampling.rs` loads that shape).
    if w.model == Model::Gpt
        && w.gpt == GptShape::BABY
        && let Some(f) = r.ours_at(Config::ddp(2, 1))
    {
        eprintln!("ddp-bench: sampling from the world-2 model ...");
        r.sample = Some(time_sampling(&f.run_dir)?);
    }
    if setup.json {
        for f in &r.ours {
            println!("{}", f.json_line(w, round));
        }
        for f in &r.torch {
            println!("{}", f.json_line(w, round));
        }
        if let Some(s) = &r.sample {
            println!("{}", s.json_line(Some(round)));
        }
    }
    Ok(r)
}

/// The progress line of a run, on stderr.
fn announce(setup: &Setup, w: &Workload, step: Step, round: u32) {
    let of = format!("round {}/{}", round + 1, setup.rounds);
    match step {
        Step::Ours(c) if c.independent => eprintln!(
            "ddp-bench: training {} twice at world 1 at the same time (the machine's ceiling; \
             {of}) ...",
            w.model.spec_name()
        ),
        Step::Ours(c) => eprintln!(
            "ddp-bench: training {} at world {} ({}, batch {} per replica, {} per replica; {of}) \
             ...",
            w.model.spec_name(),
            c.world,
            w.describe(),
            w.batch,
            threads_text(c.threads)
        ),
        Step::Torch(c) if w.model == Model::Gpt => eprintln!(
            "ddp-bench: PyTorch: torch_gpt.py at world {} ({} per process; {of}) ...",
            c.world,
            threads_text(c.threads)
        ),
        Step::Torch(c) => eprintln!(
            "ddp-bench: PyTorch: torch_ref.py --model {} at world {} ({} per process; {of}) ...",
            w.model.short(),
            c.world,
            threads_text(c.threads)
        ),
    }
}

/// Scaling (world 2 and 1+1: samples/s over 2 × world 1 × 1 thread) and "vs 1 thread" (world 1
/// with more threads: samples/s over world 1 × 1 thread), against the round's own world 1; world
/// 2 against the round's own 1+1.
fn set_relative_figures(figures: &mut [TrainFigure]) {
    let sps_at = |figures: &[TrainFigure], c: Config| {
        figures
            .iter()
            .find(|f| f.config == c)
            .map(|f| f.samples_per_s)
    };
    if let Some(pair) = sps_at(figures, Config::PAIR) {
        for f in figures.iter_mut().filter(|f| f.config == Config::ddp(2, 1)) {
            f.vs_pair = Some(f.samples_per_s / pair);
        }
    }
    let Some(base) = sps_at(figures, Config::ddp(1, 1)) else {
        return;
    };
    for f in figures.iter_mut() {
        if f.config.world == 2 {
            f.scaling = Some(f.samples_per_s / (2.0 * base));
        } else if f.config.threads > 1 {
            f.vs_one_thread = Some(f.samples_per_s / base);
        }
    }
}

/// Per configuration, the median over the rounds.
fn median_figures(rounds: &[Round]) -> Vec<TrainFigure> {
    let configs: Vec<Config> = rounds[0].ours.iter().map(|f| f.config).collect();
    configs
        .into_iter()
        .map(|c| median_figure(rounds.iter().filter_map(|r| r.ours_at(c)).collect()))
        .collect()
}

/// The run with the median samples/s, its scaling, "vs 1 thread" and "vs 1+1" replaced by the
/// medians of the rounds' (each against the runs of its own round), with their ranges.
fn median_figure(mut runs: Vec<&TrainFigure>) -> TrainFigure {
    let (scaling, scaling_range) = median_and_range(runs.iter().filter_map(|f| f.scaling));
    let (vs_pair, vs_pair_range) = median_and_range(runs.iter().filter_map(|f| f.vs_pair));
    let vs_one_thread = median(runs.iter().filter_map(|f| f.vs_one_thread).collect());
    runs.sort_by(|a, b| a.samples_per_s.total_cmp(&b.samples_per_s));
    let mut f = runs[runs.len() / 2].clone();
    (f.scaling, f.scaling_range) = (scaling, scaling_range);
    (f.vs_pair, f.vs_pair_range) = (vs_pair, vs_pair_range);
    f.vs_one_thread = vs_one_thread;
    f
}

/// The median of `values` and their lowest and highest (`None`s if there are none).
pub fn median_and_range(values: impl Iterator<Item = f64>) -> (Option<f64>, Option<(f64, f64)>) {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    match (values.first(), values.last()) {
        (Some(&lo), Some(&hi)) => (Some(values[values.len() / 2]), Some((lo, hi))),
        _ => (None, None),
    }
}

/// The middle value (the upper one of an even count, as [`median_figure`]).
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

/// World 2 × 1 thread, world 1 × all cores, the best of each, and the peak RSS at world 2.
fn compare(w: &Workload, rounds: &[Round], threads: usize) -> Comparison {
    let (two, all_cores) = (Config::ddp(2, 1), Config::ddp(1, threads));
    let sps_of = |c: Config| {
        move |r: &Round| -> (Option<f64>, Option<f64>) {
            (
                r.ours_at(c).map(|f| f.samples_per_s),
                r.torch_at(c).map(|f| f.samples_per_s),
            )
        }
    };
    let rss_of = |r: &Round| {
        let mb = |kib: Option<u64>| kib.map(kib_to_mb);
        (
            mb(r.ours_at(two).and_then(|f| f.peak_rss_kib)),
            mb(r.torch_at(two).and_then(|f| f.peak_rss_kib)),
        )
    };
    let rows = [
        paired_row(two.label(), rounds, sps_of(two)),
        paired_row(all_cores.label(), rounds, sps_of(all_cores)),
        paired_row("best".to_string(), rounds, |r| {
            (r.ours_best(), r.torch_best())
        }),
        paired_row(format!("peak RSS MB, {}", two.label()), rounds, rss_of),
    ];
    Comparison {
        workload: w.clone(),
        rows: rows.into_iter().flatten().collect(),
    }
}

/// The medians of ours and PyTorch's figure over the rounds that have both, and their ratio;
/// `None` if no round has both.
fn paired_row(
    label: String,
    rounds: &[Round],
    figures: impl Fn(&Round) -> (Option<f64>, Option<f64>),
) -> Option<CompareRow> {
    let pairs: Vec<(f64, f64)> = rounds
        .iter()
        .filter_map(|r| match figures(r) {
            (Some(ours), Some(torch)) => Some((ours, torch)),
            _ => None,
        })
        .collect();
    let ours = median(pairs.iter().map(|p| p.0).collect())?;
    let torch = median(pairs.iter().map(|p| p.1).collect())?;
    Some(CompareRow {
        label,
        ours,
        torch,
        ratio: ours / torch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::Model;

    fn figure(config: Config, samples_per_s: f64) -> TrainFigure {
        TrainFigure {
            model: Model::Mlp,
            config,
            samples: 1000,
            train_s: 1000.0 / samples_per_s,
            samples_per_s,
            test_acc: None,
            val_loss: None,
            run_dir: std::path::PathBuf::new(),
            wall_s: 1.0,
            peak_rss_kib: None,
            scaling: None,
            scaling_range: None,
            vs_one_thread: None,
            vs_pair: None,
            vs_pair_range: None,
        }
    }

    fn round(w1: f64, w1t2: f64, w2: f64, pair: f64) -> Round {
        let mut ours = vec![
            figure(Config::ddp(1, 1), w1),
            figure(Config::ddp(1, 2), w1t2),
            figure(Config::ddp(2, 1), w2),
            figure(Config::PAIR, pair),
        ];
        set_relative_figures(&mut ours);
        Round {
            ours,
            torch: Vec::new(),
            sample: None,
        }
    }

    #[test]
    fn each_round_is_compared_with_its_own_runs() {
        let r = round(100.0, 170.0, 180.0, 200.0);
        let at = |c| r.ours_at(c).unwrap();
        assert_eq!(at(Config::ddp(2, 1)).scaling, Some(0.9));
        assert_eq!(at(Config::ddp(2, 1)).vs_pair, Some(0.9));
        assert_eq!(at(Config::PAIR).scaling, Some(1.0));
        assert_eq!(at(Config::PAIR).vs_pair, None);
        assert_eq!(at(Config::ddp(1, 2)).vs_one_thread, Some(1.7));
        assert_eq!(at(Config::ddp(1, 1)).vs_pair, None);
    }

    #[test]
    fn medians_take_the_rounds_ratios_not_the_ratio_of_medians() {
        let rounds = [
            round(100.0, 170.0, 100.0, 200.0),
            round(90.0, 160.0, 190.0, 180.0),
            round(110.0, 187.0, 210.0, 210.0),
        ];
        let medians = median_figures(&rounds);
        let at = |c| medians.iter().find(|f| f.config == c).unwrap();
        // World 2 against 1+1 per round: 0.5, 190/180, 1.0 (the ratio of the medians would be
        // 190 / 200 = 0.95).
        let two = at(Config::ddp(2, 1));
        assert_eq!(two.vs_pair, Some(1.0));
        assert_eq!(two.vs_pair_range, Some((0.5, 190.0 / 180.0)));
        // Scalings 100/200, 190/180, 210/220: the middle one.
        assert_eq!(two.scaling, Some(210.0 / 220.0));
        assert_eq!(two.samples_per_s, 190.0);
        // 1.7, 160/90, 1.7.
        assert_eq!(at(Config::ddp(1, 2)).vs_one_thread, Some(1.7));
    }
}
