//! `ddp run` and `ddp resume`: start (or continue) a supervised run, then follow it in the
//! foreground with a progress bar and a line per validation until it ends (epochs, or a language
//! model's steps with its perplexity and tokens/s).

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Result;
use ddp_workspaces::actions::{self, NewRun, SpecSummary, Started};
use ddp_workspaces::follow::events::blocking::Next;
use ddp_workspaces::follow::events::{RunEvent, RunWatchOptions, WatchFrom};
use ddp_workspaces::metrics::{MetricKind, MetricRecord, fmt_lr, is_language_model};
use ddp_workspaces::present::format::{self, opt_duration, percent};
use ddp_workspaces::runs::run::RunsOn;
use ddp_workspaces::{Run, RunStatus, Summary, Workspace, engine::policy};
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
    start(root, actions::start_run(root, &req)?, detach)
}

pub fn resume(root: &Path, address: &str, detach: bool) -> Result<ExitCode> {
    start(root, actions::resume_run(root, address)?, detach)
}

fn start(root: &Path, started: Started, detach: bool) -> Result<ExitCode> {
    let run = &started.run;
    println!(
        "run {} ({}) in {}",
        run.record.id,
        run.record.experiment,
        run.dir.display()
    );
    if let RunsOn::Slurm(job) = run.record.runs_on() {
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
    follow(&Workspace::open(root)?, &run, &spec)
}

/// Shows progress until the run ends, following it with the workspace's watcher (as the
/// dashboard and the notebook do); Ctrl-C stops the run (and keeps following until it has).
fn follow(ws: &Workspace, run: &Run, spec: &SpecSummary) -> Result<ExitCode> {
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
    // The metrics in full, no old log lines (the progress is drawn from rank 0's metrics).
    let options = RunWatchOptions {
        log_backlog: Some(0),
        ..RunWatchOptions::default()
    };
    let mut watch = ws.watch_blocking(run, WatchFrom::Start, options)?;
    let mut sent_stop = false;
    let mut last_status = None;
    let mut last_train_loss: Option<f64> = None;
    let mut ended = false;
    loop {
        // How often Ctrl-C is looked at; once the run has ended, how long its last lines take.
        let limit = if ended {
            watch.settle_time()
        } else {
            Duration::from_millis(100)
        };
        let event = match watch.next_within(limit) {
            Next::Event(e) => e,
            Next::Quiet | Next::Ended if ended => break,
            Next::Quiet | Next::Ended => {
                if interrupted() && !sent_stop {
                    let now = Run::load_checked(&run.dir)?;
                    if now.record.supervisor.is_some() {
                        bar.println(
                            "interrupted: stopping the run (replicas finish their step)...",
                        );
                        // A failure means the supervisor is gone: the next read marks it failed.
                        let _ = actions::request_stop(&now);
                        sent_stop = true;
                    }
                }
                continue;
            }
        };
        match event {
            RunEvent::Status(record) => {
                if last_status != Some(record.status) && record.status == RunStatus::Restarting {
                    bar.println(format!(
                        "restarting (restart {} of {})",
                        record.restarts, spec.max_restarts
                    ));
                }
                last_status = Some(record.status);
                ended = record.status.is_terminal();
            }
            RunEvent::Metric(m) if m.rank == 0 => {
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
            _ => {}
        }
    }
    bar.finish_and_clear();
    Ok(report(&Run::load_checked(&run.dir)?))
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

/// The results table at the end of a foreground run; the exit code follows the status
/// ([`policy::exit_code`]: 2 for a replica's configuration or data error). A run that failed on
/// such an error before any figure has no table: its error (the replica's error line) says it.
fn report(run: &Run) -> ExitCode {
    let s = Summary::of(run);
    let r = &run.record;
    let code = policy::exit_code(r);
    if policy::failed_on_bad_input(r) && s.steps == 0 {
        eprintln!("ddp: run {} failed: {}", r.id, failure(r));
        return ExitCode::from(code as u8);
    }
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
            eprintln!("ddp: run {} failed: {}", r.id, failure(r));
            ExitCode::from(code as u8)
        }
    }
}

/// Why a run failed, as its record says.
fn failure(r: &ddp_workspaces::RunRecord) -> &str {
    r.error.as_deref().unwrap_or("see its logs")
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
        let s = ddp_workspaces::index::summary::summarize(
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

    #[test]
    fn a_language_model_that_failed_before_its_first_record_shows_its_own_rows() {
        let dir = tempfile::tempdir().unwrap();
        let run = ddp_workspaces::RunRecord::sample()
            .status(RunStatus::Failed)
            .in_dir(dir.path());
        std::fs::write(
            run.spec_path(),
            "name = 'g'\n[model]\nname = 'gpt'\n[data]\nname = 'tokens'\n[train]\nsteps = 9\n",
        )
        .unwrap();
        let rows = figure_rows(&Summary::of(&run));
        assert_eq!(
            table::render(&["run", "x"], &rows),
            "run             x\n\
             val loss        -\n\
             val perplexity  -\n\
             tokens/s        -\n"
        );
    }
}
