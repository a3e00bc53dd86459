//! `ddp run` and `ddp resume`: start (or continue) a supervised run, then follow it in the
//! foreground with a progress bar and per-epoch lines until it ends.

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Result, bail};
use ddp_trainer::metrics::{MetricKind, MetricRecord};
use ddp_trainer::spec::Spec;
use ddp_workspaces::supervisor::spawn_supervisor;
use ddp_workspaces::tail::{LineTailer, TailFrom};
use ddp_workspaces::{Run, RunStatus, Workspace};
use indicatif::{ProgressBar, ProgressStyle};

use super::{list, table};

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

pub fn run(
    root: &Path,
    spec_path: &Path,
    mut overrides: Vec<String>,
    replicas: Option<usize>,
    detach: bool,
    name: Option<String>,
) -> Result<ExitCode> {
    if let Some(n) = replicas {
        overrides.push(format!("ddp.replicas={n}"));
    }
    let spec = Spec::load(spec_path, &overrides)?;
    check_devices(&spec, spec_path)?;
    let ws = Workspace::open_or_create(root)?;
    let command: Vec<String> = std::env::args().collect();
    let run = ws.create_run(&spec, command, name, None)?;
    start(run, &spec, detach, false)
}

/// Refuses a spec whose devices can never be satisfied (more GPUs asked than exist, a list that
/// does not match the replicas) before anything is created. GPUs held by other runs are not a
/// reason to refuse: the run waits for them.
fn check_devices(spec: &Spec, spec_path: &Path) -> Result<()> {
    use ddp_workspaces::devices;
    let discovery = devices::discover()?;
    let request = devices::DeviceRequest::from_spec(&spec.ddp);
    devices::plan(
        &request,
        &discovery,
        &Default::default(),
        devices::available_cores(),
    )
    .map_err(|e| ddp_workspaces::Error::Invalid(format!("{}: {e}", spec_path.display())))?;
    Ok(())
}

pub fn resume(root: &Path, address: &str, detach: bool) -> Result<ExitCode> {
    let ws = Workspace::open(root)?;
    let mut run = ws.run(address)?;
    if !matches!(run.record.status, RunStatus::Stopped | RunStatus::Failed) {
        bail!(
            "run {} is {}: only a stopped or failed run can be resumed",
            run.record.id,
            run.record.status
        );
    }
    let spec = Spec::load(&run.spec_path(), &[])?;
    run.update(|r| {
        r.status = RunStatus::Queued;
        r.error = None;
        r.ended = None;
        r.supervisor = None;
    })?;
    start(run, &spec, detach, true)
}

fn start(mut run: Run, spec: &Spec, detach: bool, resume: bool) -> Result<ExitCode> {
    let mut child = match spawn_supervisor(&run.dir, resume) {
        Ok(c) => c,
        Err(e) => {
            let msg = format!("could not start the supervisor: {e}");
            run.update(|r| {
                r.status = RunStatus::Failed;
                r.error = Some(msg.clone());
            })?;
            bail!(msg);
        }
    };
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
    // Reap the supervisor when it exits (it outlives us if we are interrupted: that is fine).
    std::thread::spawn(move || child.wait());
    follow(&run.dir, spec)
}

/// Shows progress until the run ends; Ctrl-C stops the run (and keeps following until it has).
fn follow(dir: &Path, spec: &Spec) -> Result<ExitCode> {
    catch_interrupt();
    let epochs = spec.train.epochs as u64;
    let bar = ProgressBar::new(epochs);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] [{bar:30}] epoch {pos}/{len} {msg}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    let mut metrics = LineTailer::new(dir.join("metrics/rank-0.jsonl"), TailFrom::Start);
    let mut sent_stop = false;
    let mut last_status = None;
    let mut last_train_loss: Option<f64> = None;
    loop {
        let run = Run::load_checked(dir)?;
        if interrupted() && !sent_stop {
            if let Some(sup) = &run.record.supervisor {
                bar.println("interrupted: stopping the run (replicas finish their step)...");
                // SAFETY: kill(2) on the supervisor pid recorded for this run.
                unsafe { libc::kill(sup.pid as i32, libc::SIGTERM) };
                sent_stop = true;
            }
        }
        if last_status != Some(run.record.status) {
            if run.record.status == RunStatus::Restarting {
                bar.println(format!(
                    "restarting (restart {} of {})",
                    run.record.restarts, spec.restart.max_restarts
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
                        ddp_trainer::report::fmt_lr(m.lr),
                        m.samples_per_sec * m.world_size as f64
                    ))
                }
                MetricKind::Val => {
                    bar.set_position(m.epoch as u64);
                    bar.println(format!(
                        "epoch {}/{epochs}  train loss {}  val loss {:.4}  val accuracy {}",
                        m.epoch,
                        last_train_loss.map_or("-".to_string(), |l| format!("{l:.4}")),
                        m.loss,
                        table::percent(m.accuracy)
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
    let s = list::summarize(run, &run.metrics().unwrap_or_default());
    let r = &run.record;
    let rows = vec![
        vec!["status".to_string(), r.status.to_string()],
        vec![
            "duration".into(),
            s.duration_s
                .map(table::duration)
                .unwrap_or_else(|| "-".into()),
        ],
        vec![
            "epochs".into(),
            format!("{} ({} steps)", s.epochs_done, s.steps),
        ],
        vec!["restarts".into(), r.restarts.to_string()],
        vec![
            "best val accuracy".into(),
            table::percent(s.best_val_accuracy),
        ],
        vec![
            "test loss".into(),
            s.test_loss
                .map(|v| format!("{v:.4}"))
                .unwrap_or_else(|| "-".into()),
        ],
        vec!["test accuracy".into(), table::percent(s.test_accuracy)],
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
