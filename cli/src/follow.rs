//! `ddp run` and `ddp resume`: start (or continue) a supervised run, then follow it in the
//! foreground with a progress bar and per-epoch lines until it ends.

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Result;
use ddp_workspaces::actions::{self, NewRun, SpecSummary, Started};
use ddp_workspaces::format::{self, opt_duration, percent};
use ddp_workspaces::metrics::{MetricKind, MetricRecord, fmt_lr, metrics_path};
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
    let bar = ProgressBar::new(epochs);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] [{bar:30}] epoch {pos}/{len} {msg}",
        )
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
            match m.kind {
                MetricKind::Train => {
                    last_train_loss = Some(m.loss);
                    bar.set_message(format!(
                        "step {} loss {:.4} lr {} {:.0} samples/s",
                        m.step,
                        m.loss,
                        fmt_lr(m.lr),
                        m.samples_per_sec * m.world_size as f64
                    ))
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
                MetricKind::Test => bar.set_position(epochs),
            }
        }
        if run.record.status.is_terminal() {
            bar.finish_and_clear();
            return Ok(report(&run));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The results table at the end of a foreground run; the exit code follows the status.
fn report(run: &Run) -> ExitCode {
    let s = Summary::of(run);
    let r = &run.record;
    let rows = vec![
        vec!["status".to_string(), r.status.to_string()],
        vec!["duration".into(), opt_duration(s.duration_s)],
        vec![
            "epochs".into(),
            format!("{} ({} steps)", s.epochs_done, s.steps),
        ],
        vec!["restarts".into(), r.restarts.to_string()],
        vec!["best val accuracy".into(), percent(s.best_val_accuracy)],
        vec!["test loss".into(), format::loss(s.test_loss)],
        vec!["test accuracy".into(), percent(s.test_accuracy)],
        vec!["folder".into(), run.dir.display().to_string()],
    ];
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
