//! What every front end does to runs, as library calls that return data and print nothing:
//! start a run ([`check_new_run`], [`start_run`]) or a sweep ([`check_new_sweep`],
//! [`start_sweep`]), resume one ([`resume_run`]), stop one ([`request_stop`], then optionally
//! [`wait_until_terminal`]), remove one ([`remove_run`]), scale an elastic one
//! ([`scale_run`]), and tag one ([`add_tags`], [`remove_tags`]). The `ddp` CLI is a thin layer over these; a TUI or a notebook kernel calls
//! the same functions and gets the same checks and messages.
//!
//! Where a run runs is its engine's business ([`crate::engine`]): the actions check, start,
//! resume, stop and scale a run through it. Starting a run here spawns its supervisor from
//! `std::env::current_exe()`: the front end's binary must call [`crate::run_hidden_command`]
//! first thing in `main`.
//!
//! Layout: `stop` holds stopping and removing a run ([`request_stop`], [`wait_until_terminal`],
//! [`remove_run`]); `scale` scaling an elastic run; `search` sweeps as the front ends start
//! them and scheduled searches (ASHA): planning, the search's own process (`__sweep`,
//! `search/driver.rs`) that creates, pauses and resumes its trials' runs, stopping and resuming
//! a search; this module the rest.

use std::path::{Path, PathBuf};
use std::process::Child;

use ddp_trainer::spec::Spec;

use crate::engine;
pub use crate::engine::{SpecSummary, Started, StopRequest, spawn_supervisor_or_fail};
pub use crate::request::{NewRun, NewSweep, RunOn};
use crate::runs::run::{Run, RunStatus};

mod scale;
pub mod search;
mod stop;
use crate::runs::workspace::{RunOrigin, Workspace};
use crate::sweep::{GridAxis, SweepPlan, SweepRecord};
use crate::{Error, Result};
pub use scale::scale_run;
pub use stop::{STOP_LIMIT, remove_run, request_stop, stop_and_wait, wait_until_terminal};

/// Loads and validates the spec of `req` (the file, the overrides, the replicas) and checks that
/// this machine can ever satisfy its devices, creating nothing. The same checks as
/// [`start_run`], for a front end to validate a "new run" form.
pub fn check_new_run(req: &NewRun) -> Result<SpecSummary> {
    if let Some(t) = &req.trainer {
        check_trainer(t)?;
    }
    Ok(SpecSummary::of(&load_new_spec(req)?))
}

/// Starts a new run: validates as [`check_new_run`] does before creating anything (the workspace
/// folder included), then creates the workspace if needed, the run (queued), and spawns the run's
/// supervisor. If the supervisor cannot be spawned the run is marked failed with the message
/// ([`Error::Supervisor`]).
pub fn start_run(root: &Path, req: &NewRun) -> Result<Started> {
    let spec = load_new_spec(req)?;
    let trainer = req.trainer.as_deref().map(check_trainer).transpose()?;
    let code = match (&req.code, &trainer) {
        (Some(code), Some(_)) => Some(std::fs::canonicalize(code).map_err(|e| Error::io(code, e))?),
        (Some(code), None) => {
            return Err(Error::Invalid(format!(
                "{}: a run with its own code needs the trainer built from it",
                code.display()
            )));
        }
        (None, _) => None,
    };
    let ws = Workspace::open_or_create(root)?;
    let run = ws.create_run_with(
        &spec,
        RunOrigin {
            command: req.command.clone(),
            name: req.name.clone(),
            sweep: None,
            trainer,
            code,
        },
    )?;
    let mut run = run;
    let engine = engine::for_request(req.on);
    engine.created(&mut run, &spec)?;
    engine.start(run, &spec, false)
}

/// Continues a stopped, failed or paused run (by address: id, prefix, `latest`, ...) from its
/// newest checkpoint, in the same folder, to the end; refuses any other status
/// ([`Error::Refused`]).
pub fn resume_run(root: &Path, address: &str) -> Result<Started> {
    resume_run_to(root, address, None)
}

/// [`resume_run`], pausing again at `pause_at` (`epoch:N`, `step:N`: a sweep's next rung).
pub fn resume_run_to(root: &Path, address: &str, pause_at: Option<String>) -> Result<Started> {
    let ws = Workspace::open(root)?;
    let mut run = ws.run(address)?;
    if !run.record.status.can_resume() {
        return Err(Error::Refused(format!(
            "run {} is {}: only a stopped, failed or paused run can be resumed",
            run.record.id, run.record.status
        )));
    }
    let spec = Spec::load(&run.spec_path(), &[])?;
    run.update(|r| {
        r.status = RunStatus::Queued;
        r.error = None;
        r.ended = None;
        r.supervisor = None;
        r.pause_at = pause_at;
    })?;
    engine::of_run(&run.record).start(run, &spec, true)
}

/// The spec of a new run, validated, with its devices checked against this machine.
/// `path` as the absolute path of an executable file, or an error saying what is wrong with it.
pub fn check_trainer(path: &Path) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| {
        Error::Invalid(format!(
            "--trainer {}: {e} (build it first, e.g. `cargo build --release -p ddp-custom-model`)",
            path.display()
        ))
    })?;
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        return Err(Error::Invalid(format!(
            "--trainer {}: not an executable file",
            path.display()
        )));
    }
    std::fs::canonicalize(path).map_err(|e| Error::io(path, e))
}

/// Why `spec` needs a trainer executable of the user's (`--trainer`): a custom model or data set.
fn own_parts(spec: &Spec) -> Option<String> {
    use ddp_trainer::spec::{DataName, ModelName};
    if spec.model.name == ModelName::Custom {
        Some("model.name = \"custom\" is your own model: give the executable that builds it with --trainer PATH (see docs/custom-models.md)".into())
    } else if spec.data.name == DataName::Custom {
        Some("data.name = \"custom\" is your own data set: give the executable that makes it with --trainer PATH (see docs/data.md, \"A data set written in Rust\")".into())
    } else {
        None
    }
}

fn load_new_spec(req: &NewRun) -> Result<Spec> {
    if let Some((engine, flags)) = req.foreign_options() {
        return Err(Error::Invalid(format!(
            "{} applies to runs on {}: add --on {} (or leave {} out to run on {})",
            flags.join(", "),
            engine.title(),
            engine.name(),
            if flags.len() == 1 { "it" } else { "them" },
            req.on.title(),
        )));
    }
    let spec = match &req.spec_text {
        Some(text) => Spec::parse_at(text, &req.spec, &req.all_overrides())?,
        None => {
            check_spec_file(&req.spec)?;
            Spec::load(&req.spec, &req.all_overrides())?
        }
    };
    if let Some(why) = own_parts(&spec)
        && req.trainer.is_none()
        && req.code.is_none()
    {
        return Err(Error::Invalid(format!("{}: {why}", req.spec.display())));
    }
    // What the engine the run goes to needs (devices and data here, Spark's client and master).
    engine::for_request(req.on).check(&spec, &req.spec)?;
    Ok(spec)
}

/// Refuses a missing spec file given relative to the current folder with a message that says
/// so, and suggests the path from the current folder where it exists from an ancestor
/// ([`crate::commands::missing_path`]). Other read errors are the spec loader's.
fn check_spec_file(spec: &Path) -> Result<()> {
    if spec.is_absolute() || spec.exists() {
        return Ok(());
    }
    let cwd = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    Err(Error::Invalid(crate::commands::missing_path(
        spec,
        &cwd,
        "the current folder",
        Path::exists,
    )))
}

// ---------------------------------------------------------------------------------------------
// Sweeps.

/// A sweep whose runs were created and whose supervisors were spawned.
#[derive(Debug)]
pub struct StartedSweep {
    pub sweep: SweepRecord,
    /// The runs, in the order of `sweep.runs`.
    pub runs: Vec<Run>,
    /// The supervisors that were spawned (reap them as for [`Started::supervisor`]).
    pub supervisors: Vec<Child>,
    /// The runs whose supervisor could not be spawned (id, [`Error::Supervisor`]); they are
    /// marked failed.
    pub not_started: Vec<(String, Error)>,
}

impl StartedSweep {
    /// Reaps every supervisor from background threads when they exit, and returns the sweep and
    /// its runs.
    pub fn reap_in_background(self) -> (SweepRecord, Vec<Run>) {
        for mut c in self.supervisors {
            std::thread::spawn(move || c.wait());
        }
        (self.sweep, self.runs)
    }
}

/// Parses the grid and validates every combination (each one's spec, with its overrides),
/// creating nothing. The same checks as [`start_sweep`].
pub fn check_new_sweep(req: &NewSweep) -> Result<SweepPlan> {
    let grid: Vec<GridAxis> = req.grid.iter().map(|g| g.parse()).collect::<Result<_>>()?;
    let overrides = sweep_overrides(req)?;
    let plan = SweepPlan::new(&req.spec, overrides, grid)?;
    check_plan(req, &plan)?;
    Ok(plan)
}

/// The overrides every run of sweep `req` shares (`--set`, then `--replicas`), once its
/// `--max-parallel`, trainer and spec file are checked.
pub fn sweep_overrides(req: &NewSweep) -> Result<Vec<String>> {
    let mut overrides = req.overrides.clone();
    if let Some(n) = req.replicas {
        overrides.push(format!("ddp.replicas={n}"));
    }
    if req.max_parallel == Some(0) {
        return Err(Error::Invalid("--max-parallel must be at least 1".into()));
    }
    if let Some(t) = &req.trainer {
        check_trainer(t)?;
    }
    check_spec_file(&req.spec)?;
    Ok(overrides)
}

/// Checks what a planned sweep's runs train: a model of their own needs `--trainer`, and their
/// data must be there and readable.
pub fn check_plan(req: &NewSweep, plan: &SweepPlan) -> Result<()> {
    if req.trainer.is_none()
        && let Some(why) = plan.runs.iter().find_map(|r| own_parts(&r.spec))
    {
        return Err(Error::Invalid(format!("{}: {why}", req.spec.display())));
    }
    check_sweep_data(plan)
}

/// [`ddp_trainer::preflight::check`] of every combination's data, each distinct one once (a grid
/// over `train.lr` reads its table once, a grid over `data.path` each file).
fn check_sweep_data(plan: &SweepPlan) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for run in &plan.runs {
        let s = &run.spec;
        // What the check reads: the data keys, the model's window, the hold-out seed.
        let key = serde_json::to_string(&(&s.data, &s.model, s.train.seed))
            .expect("a spec always serialises");
        if seen.insert(key) {
            ddp_trainer::preflight::check(s)?;
        }
    }
    Ok(())
}

/// Starts a sweep: validates as [`check_new_sweep`] does before creating anything, then creates
/// the workspace if needed, one queued run per combination and the sweep's manifest, and spawns
/// every run's supervisor (each waits for a sweep slot and for its devices by itself).
pub fn start_sweep(root: &Path, req: &NewSweep) -> Result<StartedSweep> {
    start_planned(root, req, &check_new_sweep(req)?)
}

/// Creates the runs of a checked `plan` of sweep `req` and starts their supervisors.
pub fn start_planned(root: &Path, req: &NewSweep, plan: &SweepPlan) -> Result<StartedSweep> {
    let trainer = req.trainer.as_deref().map(check_trainer).transpose()?;
    let ws = Workspace::open_or_create(root)?;
    let (sweep, mut runs) = crate::sweep::create(
        &ws,
        plan,
        req.name.clone(),
        req.max_parallel,
        req.command.clone(),
        trainer,
    )?;
    let mut supervisors = Vec::new();
    let mut not_started = Vec::new();
    for run in runs.iter_mut() {
        match spawn_supervisor_or_fail(run, false) {
            Ok(c) => supervisors.push(c),
            Err(e @ Error::Supervisor(_)) => not_started.push((run.record.id.clone(), e)),
            Err(e) => return Err(e),
        }
    }
    Ok(StartedSweep {
        sweep,
        runs,
        supervisors,
        not_started,
    })
}

// ---------------------------------------------------------------------------------------------
// Tags.

/// Tags are single non-empty lines; the first that is not is [`Error::Refused`].
pub fn validate_tags(tags: &[String]) -> Result<()> {
    match tags
        .iter()
        .find(|t| t.trim().is_empty() || t.contains('\n'))
    {
        Some(bad) => Err(Error::Refused(format!(
            "invalid tag {bad:?}: tags are single non-empty lines"
        ))),
        None => Ok(()),
    }
}

/// Adds `tags` (validated first) after the run's current tags, each once, and returns the tags
/// now. With no tags, nothing is written.
pub fn add_tags(run: &Run, tags: &[String]) -> Result<Vec<String>> {
    validate_tags(tags)?;
    let mut current = run.tags();
    for t in tags {
        if !current.contains(t) {
            current.push(t.clone());
        }
    }
    if !tags.is_empty() {
        run.set_tags(&current)?;
    }
    Ok(current)
}

/// Removes `tags` (validated first) from the run's tags and returns the tags now. With no tags,
/// nothing is written.
pub fn remove_tags(run: &Run, tags: &[String]) -> Result<Vec<String>> {
    validate_tags(tags)?;
    let mut current = run.tags();
    current.retain(|t| !tags.contains(t));
    if !tags.is_empty() {
        run.set_tags(&current)?;
    }
    Ok(current)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runs::run::{ProcessId, RunRecord};
    use std::time::Duration;

    const SPEC: &str = "name = 'mnist cnn'\n[model]\nname = 'mlp'\n[data]\nname = 'synthetic'\n[train]\nepochs = 3\n[restart]\nmax_restarts = 4\n";

    fn spec_file(dir: &Path) -> PathBuf {
        let p = dir.join("spec.toml");
        std::fs::write(&p, SPEC).unwrap();
        p
    }

    /// A workspace with one created (queued, never started) run in `status`.
    fn run_in(dir: &Path, status: RunStatus, supervisor: Option<ProcessId>) -> Run {
        let spec = Spec::load(&spec_file(dir), &[]).unwrap();
        let ws = Workspace::open_or_create(&dir.join("ws")).unwrap();
        let mut run = ws.create_run(&spec, vec![], None, None).unwrap();
        run.update(|r| {
            r.status = status;
            r.supervisor = supervisor;
        })
        .unwrap();
        run
    }

    #[test]
    fn check_new_run_summarises_the_spec() {
        let dir = tempfile::tempdir().unwrap();
        let mut req = NewRun::new(spec_file(dir.path()));
        req.overrides = vec!["train.epochs=5".into()];
        req.replicas = Some(3);
        let s = check_new_run(&req).unwrap();
        assert_eq!(
            s,
            SpecSummary {
                name: "mnist cnn".into(),
                experiment: "mnist-cnn".into(),
                model: "mlp".into(),
                data: "synthetic".into(),
                replicas: 3,
                epochs: 5,
                steps: None,
                max_restarts: 4,
            }
        );
    }

    #[test]
    fn bad_specs_create_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        let mut req = NewRun::new(spec_file(dir.path()));
        req.overrides = vec!["train.lrr=0.1".into()];
        let e = start_run(&root, &req).unwrap_err();
        assert!(e.to_string().contains("did you mean `train.lr`"), "{e}");
        assert_eq!(e.exit_code(), 2);
        // Devices this machine can never give.
        req.overrides = vec!["ddp.devices=[0, 99]".into()];
        req.replicas = Some(2);
        let e = start_run(&root, &req).unwrap_err();
        assert!(matches!(e, Error::Invalid(_)), "{e}");
        assert!(
            e.to_string().starts_with(&req.spec.display().to_string()),
            "{e}"
        );
        assert_eq!(e.exit_code(), 2);
        let e = start_run(&root, &NewRun::new(dir.path().join("missing.toml"))).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(!root.exists());
    }

    #[test]
    fn bad_data_read_whole_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        let text = dir.path().join("corpus.txt");
        let mut bytes = "to be or not to be\n".repeat(10).into_bytes();
        bytes[30] = 0xc3;
        std::fs::write(&text, &bytes).unwrap();
        let spec = dir.path().join("gpt.toml");
        std::fs::write(
            &spec,
            format!(
                "name = 'gpt'\n[model]\nname = 'gpt'\nlayers = 1\nheads = 1\nembd = 8\nblock = 4\n[data]\nname = 'text'\npath = '{}'\n[train]\nsteps = 2\n",
                text.display()
            ),
        )
        .unwrap();
        let want = format!(
            "{}: not a UTF-8 text file: the byte 0xc3 at offset 30 is not valid UTF-8; use \
             tokenizer = \"byte\" to train on its bytes",
            text.display()
        );
        let e = check_new_run(&NewRun::new(&spec)).unwrap_err();
        assert_eq!(e.to_string(), want);
        assert_eq!(e.exit_code(), 2);
        let e = start_run(&root, &NewRun::new(&spec)).unwrap_err();
        assert_eq!((e.to_string(), e.exit_code()), (want.clone(), 2));
        let sweep = NewSweep {
            spec: spec.clone(),
            grid: vec!["train.lr=0.1,0.01".into()],
            ..NewSweep::default()
        };
        let e = start_sweep(&root, &sweep).unwrap_err();
        assert_eq!((e.to_string(), e.exit_code()), (want, 2));
        assert!(!root.exists());
        // The byte tokenizer reads any bytes; a run on Slurm is checked on its nodes.
        let mut req = NewRun::new(&spec);
        req.overrides = vec!["data.tokenizer=\"byte\"".into()];
        check_new_run(&req).unwrap();
        let mut req = NewRun::new(&spec);
        req.on = RunOn::Slurm;
        check_new_run(&req).unwrap();
    }

    #[test]
    fn a_run_on_a_cluster_is_not_scaled() {
        let dir = tempfile::tempdir().unwrap();
        let mut run = RunRecord::sample()
            .status(RunStatus::Running)
            .in_dir(dir.path().join("run"));
        run.record.slurm = Some(crate::runs::run::SlurmJob::sample());
        std::fs::create_dir_all(&run.dir).unwrap();
        run.save().unwrap();
        let e = scale_run(&run, 1).unwrap_err();
        assert!(matches!(e, Error::Refused(_)), "{e}");
        assert!(e.to_string().contains("runs on Slurm"), "{e}");
        run.record.slurm = None;
        run.record.spark = Some(crate::runs::run::SparkApp::default());
        run.save().unwrap();
        let e = scale_run(&run, 1).unwrap_err();
        assert!(matches!(e, Error::Refused(_)), "{e}");
        assert!(e.to_string().contains("runs on Spark"), "{e}");
        assert!(!run.dir.join(ddp_trainer::launcher::SCALE_FILE).exists());
    }

    #[test]
    fn another_engines_options_are_refused_naming_it() {
        let mut req = NewRun::new("examples/mnist.toml");
        req.engine_options = vec![
            (RunOn::Slurm, "--nodes".into()),
            (RunOn::Slurm, "--time".into()),
        ];
        req.on = RunOn::Spark;
        let e = check_new_run(&req).unwrap_err();
        assert_eq!(
            (e.to_string(), e.exit_code()),
            (
                "--nodes, --time applies to runs on Slurm: add --on slurm (or leave them out \
                 to run on Spark)"
                    .to_string(),
                2
            )
        );
        req.engine_options = vec![(RunOn::Spark, "--master".into())];
        req.on = RunOn::Local;
        let e = check_new_run(&req).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--master applies to runs on Spark: add --on spark (or leave it out to run on this \
             machine)"
        );
    }

    #[test]
    fn a_missing_relative_spec_names_the_current_folder_and_the_path_that_exists() {
        // Tests run in the crate's folder; the repository's examples are one folder up.
        let cwd = std::env::current_dir().unwrap();
        let e = check_new_run(&NewRun::new("examples/mnist.toml")).unwrap_err();
        assert!(matches!(e, Error::Invalid(_)), "{e}");
        assert_eq!(
            e.to_string(),
            format!(
                "examples/mnist.toml: no such file (paths are relative to the current folder, {}); \
                 did you mean ../examples/mnist.toml?",
                cwd.display()
            )
        );
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn only_stopped_failed_or_paused_runs_resume() {
        let dir = tempfile::tempdir().unwrap();
        let run = run_in(dir.path(), RunStatus::Completed, None);
        let e = resume_run(&dir.path().join("ws"), "latest").unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "run {} is completed: only a stopped, failed or paused run can be resumed",
                run.record.id
            )
        );
        assert_eq!(e.exit_code(), 1);
        let e = resume_run(&dir.path().join("ws"), "nope").unwrap_err();
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn stop_requests() {
        let dir = tempfile::tempdir().unwrap();
        let done = run_in(dir.path(), RunStatus::Stopped, None);
        assert!(matches!(
            request_stop(&done).unwrap(),
            StopRequest::AlreadyTerminal(r) if r.record.status == RunStatus::Stopped
        ));
        let dir = tempfile::tempdir().unwrap();
        let starting = run_in(dir.path(), RunStatus::Queued, None);
        let e = request_stop(&starting).unwrap_err();
        assert!(
            e.to_string()
                .contains("has no supervisor yet (status queued)"),
            "{e}"
        );
        // A live "supervisor": a child process, which gets the SIGTERM.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let sup = ProcessId {
            pid: child.id(),
            start_ticks: 0,
        };
        let dir = tempfile::tempdir().unwrap();
        let live = run_in(dir.path(), RunStatus::Running, Some(sup));
        match request_stop(&live).unwrap() {
            StopRequest::Signalled { pid, run } => {
                assert_eq!(pid, child.id());
                assert_eq!(run.record.status, RunStatus::Running);
            }
            other => panic!("{other:?}"),
        }
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGTERM));
    }

    #[test]
    fn waiting_for_a_run_to_end() {
        let dir = tempfile::tempdir().unwrap();
        let done = run_in(dir.path(), RunStatus::Failed, None);
        let r = wait_until_terminal(&done.dir, Duration::ZERO).unwrap();
        assert_eq!(r.record.status, RunStatus::Failed);
        let dir = tempfile::tempdir().unwrap();
        let live = run_in(dir.path(), RunStatus::Running, Some(ProcessId::current()));
        let e = wait_until_terminal(&live.dir, Duration::from_millis(150)).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("did not stop within 150ms"), "{msg}");
        assert!(
            msg.contains(&format!("supervisor pid {}", std::process::id())),
            "{msg}"
        );
        assert!(msg.ends_with("logs/supervisor.log"), "{msg}");
        assert_eq!(e.exit_code(), 1);
    }

    #[test]
    fn only_ended_runs_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let live = run_in(dir.path(), RunStatus::Running, Some(ProcessId::current()));
        let e = remove_run(&live).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "run {0} is running: stop it first (`ddp stop {0}`)",
                live.record.id
            )
        );
        assert!(live.dir.is_dir());
        let mut done = live.clone();
        done.update(|r| r.status = RunStatus::Completed).unwrap();
        remove_run(&done).unwrap();
        assert!(!done.dir.exists());
    }

    #[test]
    fn tags() {
        let dir = tempfile::tempdir().unwrap();
        let run = run_in(dir.path(), RunStatus::Completed, None);
        let t = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            add_tags(&run, &t(&["a", "b", "a"])).unwrap(),
            t(&["a", "b"])
        );
        assert_eq!(
            add_tags(&run, &t(&["c", "b"])).unwrap(),
            t(&["a", "b", "c"])
        );
        assert_eq!(add_tags(&run, &[]).unwrap(), t(&["a", "b", "c"]));
        assert_eq!(remove_tags(&run, &t(&["b", "x"])).unwrap(), t(&["a", "c"]));
        assert_eq!(run.tags(), t(&["a", "c"]));
        for bad in ["", "  ", "two\nlines"] {
            let e = add_tags(&run, &t(&["ok", bad])).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("invalid tag {bad:?}: tags are single non-empty lines")
            );
            assert_eq!(e.exit_code(), 1);
            assert!(remove_tags(&run, &t(&[bad])).is_err());
        }
        assert_eq!(run.tags(), t(&["a", "c"]));
    }

    #[test]
    fn check_new_sweep_validates_every_combination() {
        let dir = tempfile::tempdir().unwrap();
        let mut req = NewSweep {
            spec: spec_file(dir.path()),
            grid: vec!["train.lr=0.1,0.01".into(), "train.batch_size=16,32".into()],
            replicas: Some(1),
            ..NewSweep::default()
        };
        let plan = check_new_sweep(&req).unwrap();
        assert_eq!(plan.runs.len(), 4);
        assert!(plan.runs.iter().all(|r| r.spec.ddp.replicas == 1));
        req.max_parallel = Some(0);
        let e = check_new_sweep(&req).unwrap_err();
        assert_eq!(e.to_string(), "--max-parallel must be at least 1");
        req.max_parallel = None;
        req.grid.push("train.momentum=fast".into());
        assert_eq!(check_new_sweep(&req).unwrap_err().exit_code(), 2);
        let root = dir.path().join("ws");
        assert!(start_sweep(&root, &req).is_err());
        assert!(!root.exists());
    }
}
