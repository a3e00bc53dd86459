//! `ddp run` and `ddp resume`: start (or continue) a supervised run, then follow it in the
//! foreground with a progress bar and a line per validation until it ends (epochs, or a language
//! model's steps with its perplexity and tokens/s).

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Result;
use ddp_workspaces::actions::{self, NewRun, SpecSummary, Started};
use ddp_workspaces::format::{self, opt_duration, percent};
use ddp_workspaces::metrics::{MetricKind, MetricRecord, fmt_lr, is_language_model, metrics_path};
use ddp_workspaces::tail::{LineTailer, TailFrom};
use ddp_workspaces::{Run, RunStatus, Summary};
use indicatif::{ProgressBar, ProgressStyle};

use crate::table;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// From now on Ctrl-C (SIGINT) only sets a flag, read with [`interrupted`].
pub(super) fn catch_interrupt() {
    let handler = on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic.
    unsafe { libc::signal(libc::SIGINT, handler) };
}

/// Whether Ctrl-C was pressed since [`catch_interrupt`].
pub(super) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

pub fn run(root: &Path, req: NewRun, detach: bool) -> Result<ExitCode> {
    start(actions::start_run(root, &req)?, detach)
}

pub fn resume(root: &Path, address: &str, detach: bool) -> Result<ExitCode> {
    start(actions::resume_run(root, address)?, detach)
}

fn start(started: Started, detach: bool) -> Result<ExitCode> {
    let run = &started.run;
    println!(
        "run {} ({}) in {}",
        run.record.id,
        run.record.experiment,
        run.dir.display()
    );
    if let Some(job) = &run.record.slurm {
        // A run on Slurm is the job's: the workspace's watcher follows it from here.
        println!(
            "submitted Slurm job {} ({}): follow with `ddp logs -f {}` or `ddp show {}`, stop with `ddp stop {}`",
            job.job_id,
            run.dir.join("job.sbatch").display(),
            run.record.id,
            run.record.id,
            run.record.id
        );
        return Ok(ExitCode::SUCCESS);
    }
    if detach {
        println!(
            "detached: follow with `ddp logs -f {}`, stop with `ddp stop {}`",
            run.record.id, run.record.id
        );
        return Ok(ExitCode::SUCCESS);
    }
    let spec = started.spec.clone();
    // The supervisor outlives us if we are interrupted: that is fine.
    let run = started.reap_in_background();
    follow(&run.dir, &spec)
}

/// Shows progress until the run ends; Ctrl-C stops the run (and keeps following until it has).
fn follow(dir: &Path, spec: &SpecSummary) -> Result<ExitCode> {
    catch_interrupt();
    let epochs = spec.epochs as u64;
    // A run counted in steps (a language model) progresses by steps, not epochs.
    let (unit, len) = match spec.steps {
        Some(steps) => ("step", steps),
        None => ("epoch", epochs),
    };
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{spinner}} [{{elapsed_precise}}] [{{bar:30}}] {unit} {{pos}}/{{len}} {{msg}}"
        ))
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    let mut metrics = LineTailer::new(metrics_path(dir, 0), TailFrom::Start);
    let mut sent_stop = false;
    let mut last_status = None;
    let mut last_train_loss: Option<f64> = None;
    loop {
        let run = Run::load_checked(dir)?;
        if interrupted() && !sent_stop && run.record.supervisor.is_some() {
            bar.println("interrupted: stopping the run (replicas finish their step)...");
            // A failure means the supervisor is gone: the next read marks the run failed.
            let _ = actions::request_stop(&run);
            sent_stop = true;
        }
        if last_status != Some(run.record.status) {
            if run.record.status == RunStatus::Restarting {
                bar.println(format!(
                    "restarting (restart {} of {})",
                    run.record.restarts, spec.max_restarts
                ));
            }
            last_status = Some(run.record.status);
        }
        for line in metrics.poll()? {
            let Ok(m) = serde_json::from_str::<MetricRecord>(&line) else {
                continue;
            };
            let lm = is_language_model(&m);
            match m.kind {
                MetricKind::Train => {
                    last_train_loss = Some(m.loss);
                    if lm {
                        bar.set_position(m.step);
                    }
                    bar.set_message(train_message(&m));
                }
                MetricKind::Val if lm => {
                    bar.set_position(m.step);
                    bar.println(format!(
                        "step {}/{len}  train loss {}  {}",
                        m.step,
                        format::loss(last_train_loss),
                        val_figures(&m)
                    ));
                }
                MetricKind::Val => {
                    bar.set_position(m.epoch as u64);
                    bar.println(format!(
                        "epoch {}/{epochs}  train loss {}  val loss {:.4}  val accuracy {}",
                        m.epoch,
                        format::loss(last_train_loss),
                        m.loss,
                        percent(m.accuracy)
                    ));
                }
                MetricKind::Test => bar.set_position(len),
            }
        }
        if run.record.status.is_terminal() {
            bar.finish_and_clear();
            return Ok(report(&run));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The progress bar's message after a train record: its step, loss, learning rate and the run's
/// throughput (a language model's in tokens/s).
fn train_message(m: &MetricRecord) -> String {
    let world = m.world_size as f64;
    let rate = match m.tokens_per_sec {
        Some(t) => format!("{:.0} tokens/s", t * world),
        None => format!("{:.0} samples/s", m.samples_per_sec * world),
    };
    format!(
        "step {} loss {:.4} lr {} {rate}",
        m.step,
        m.loss,
        fmt_lr(m.lr)
    )
}

/// A language model's validation: `val loss 1.4500  perplexity 4.26  bits/char 2.092`.
fn val_figures(m: &MetricRecord) -> String {
    let bits = format::bits(m.bits_per_char, m.bits_per_byte)
        .map(|b| format!("  {b}"))
        .unwrap_or_default();
    format!(
        "val loss {:.4}  perplexity {}{bits}",
        m.loss,
        format::perplexity(m.perplexity)
    )
}

/// The rows of the results table between the restarts and the folder: a language model's
/// last validation and throughput, or the accuracies and the test.
fn figure_rows(s: &Summary) -> Vec<Vec<String>> {
    if !s.language_model {
        return vec![
            vec!["best val accuracy".into(), percent(s.best_val_accuracy)],
            vec!["test loss".into(), format::loss(s.test_loss)],
            vec!["test accuracy".into(), percent(s.test_accuracy)],
        ];
    }
    let mut rows = vec![
        vec!["val loss".into(), format::loss(s.final_val_loss)],
        vec![
            "val perplexity".into(),
            format::perplexity(s.final_val_perplexity),
        ],
    ];
    if let Some(bits) = format::bits(s.final_val_bits_per_char, s.final_val_bits_per_byte) {
        let (unit, value) = bits.split_once(' ').unwrap_or((&bits, ""));
        rows.push(vec![format!("val {unit}"), value.to_string()]);
    }
    rows.push(vec!["tokens/s".into(), format::rate(s.tokens_per_sec)]);
    rows
}

/// The results table at the end of a foreground run; the exit code follows the status.
fn report(run: &Run) -> ExitCode {
    let s = Summary::of(run);
    let r = &run.record;
    let progress = if s.language_model {
        vec!["steps".into(), s.steps.to_string()]
    } else {
        vec![
            "epochs".into(),
            format!("{} ({} steps)", s.epochs_done, s.steps),
        ]
    };
    let mut rows = vec![
        vec!["status".to_string(), r.status.to_string()],
        vec!["duration".into(), opt_duration(s.duration_s)],
        progress,
        vec!["restarts".into(), r.restarts.to_string()],
    ];
    rows.extend(figure_rows(&s));
    rows.push(vec!["folder".into(), run.dir.display().to_string()]);
    print!("{}", table::render(&["run", &r.id], &rows));
    match r.status {
        RunStatus::Completed => ExitCode::SUCCESS,
        RunStatus::Stopped => ExitCode::from(143),
        _ => {
            eprintln!(
                "ddp: run {} failed: {}",
                r.id,
                r.error.as_deref().unwrap_or("see its logs")
            );
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ddp_workspaces::test_util::{lm_metrics, metric};

    #[test]
    fn a_language_models_lines_and_results() {
        let m = lm_metrics();
        assert_eq!(
            train_message(&m[4]),
            "step 1200 loss 1.4000 lr 0.0005 16640 tokens/s"
        );
        assert_eq!(
            val_figures(&m[5]),
            "val loss 1.4500  perplexity 4.26  bits/char 2.092"
        );
        let image = metric(MetricKind::Train, 1, 7, 0.5, None);
        assert_eq!(
            train_message(&image),
            "step 7 loss 0.5000 lr 0.01 200 samples/s"
        );
        let s = ddp_workspaces::summary::summarize(
            &ddp_workspaces::RunRecord::sample().in_dir("/r"),
            &m,
        );
        assert_eq!(
            table::render(&["run", "x"], &figure_rows(&s)),
            "run             x\n\
             val loss        1.4500\n\
             val perplexity  4.26\n\
             val bits/char   2.092\n\
             tokens/s        16640\n"
        );
        let image = Summary {
            test_accuracy: Some(0.969),
            ..Summary::default()
        };
        assert_eq!(
            figure_rows(&image)[2],
            ["test accuracy".to_string(), "96.90%".into()]
        );
    }
}
