//! Sweeps as every front end starts them (`ddp sweep`, `%ddp sweep`, the TUI), and the
//! scheduled searches among them: a grid, or a random search, whose runs each train to their
//! end is planned and created at once ([`crate::actions::start_planned`]); a search with a
//! scheduler (`--scheduler asha`, or a sweep file's `[scheduler]`) is run by a process of its
//! own, the sweep's driver (`__sweep ROOT ID`, [`driver::drive`]), which creates, pauses and
//! resumes its trials' runs as the scheduler says and keeps the search's state in the sweep's
//! manifest. Like a run's supervisor it survives every front end; killed, it is started again
//! with [`resume`] and goes on where the manifest says.
//!
//! Layout:
//! - this file: planning a request ([`start`]), stopping and resuming a search, the driver's
//!   lock;
//! - `driver.rs`: the driver's loop (look at the trials, `SearchState::advance`, act).
//!
//! `crate::present::search` puts a search in words for `ddp sweep show`.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use ddp_trainer::spec::Spec;

use crate::actions::{self, StartedSweep, check_plan, sweep_overrides};
use crate::files::lockfile::{self, Holder};
use crate::request::{NewSweep, SchedulerRequest};
use crate::runs::run::{ProcessId, now};
use crate::runs::workspace::{Workspace, new_run_id};
use crate::sweep::asha::{Asha, Mode};
use crate::sweep::file::{Method, Metric, Scheduler, SweepFile, Unit};
use crate::sweep::space::{Dist, Param};
use crate::sweep::trials::{Search, SearchState, SearchStatus, TrialSpace};
use crate::sweep::{Combination, GridAxis, SweepPlan, SweepRecord};
use crate::{Error, Result};

pub mod driver;

/// What [`start`] started.
#[derive(Debug)]
pub enum SweepStarted {
    /// Runs that each train to their end, all created and started.
    Runs(StartedSweep),
    /// A scheduled search: its manifest, and its driver process (reap it, or let it be).
    Search { sweep: SweepRecord, driver: Child },
}

/// Starts sweep `req`: checks everything first (every trial's spec, the data, the
/// scheduler), creating nothing on an error; then creates the runs of a grid or a random
/// search and starts them, or the manifest of a scheduled search and its driver.
pub fn start(root: &Path, req: &NewSweep) -> Result<SweepStarted> {
    match plan(req)? {
        Planned::Runs(plan) => Ok(SweepStarted::Runs(actions::start_planned(
            root, req, &plan,
        )?)),
        Planned::Search {
            search,
            max_parallel,
            overrides,
        } => {
            let trainer = req
                .trainer
                .as_deref()
                .map(actions::check_trainer)
                .transpose()?;
            let ws = Workspace::open_or_create(root)?;
            let sweep = SweepRecord {
                id: new_run_id(),
                name: req.name.clone(),
                spec: std::fs::canonicalize(&req.spec).unwrap_or_else(|_| req.spec.clone()),
                overrides,
                grid: Vec::new(),
                max_parallel,
                created: now(),
                command: req.command.clone(),
                runs: Vec::new(),
                trainer,
                search: Some(SearchState::new(search)),
            };
            sweep.save(&ws.root)?;
            let driver = spawn_driver(&ws.root, &sweep.id)?;
            Ok(SweepStarted::Search { sweep, driver })
        }
    }
}

/// A checked request: runs to create, or a search to drive.
enum Planned {
    Runs(SweepPlan),
    Search {
        search: Search,
        max_parallel: Option<usize>,
        overrides: Vec<String>,
    },
}

/// Checks `req` and plans it; every trial's spec is loaded and its data checked.
fn plan(req: &NewSweep) -> Result<Planned> {
    let file = match &req.file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
            Some(SweepFile::parse(&text, path)?)
        }
        None => None,
    };
    if file.is_none() && req.params.is_empty() && req.scheduler.is_none() {
        return actions::check_new_sweep(req).map(Planned::Runs);
    }
    let overrides = sweep_overrides(req)?;
    let base = Spec::load(&req.spec, &overrides)?;
    let (method, params, trials, seed, scheduler, max_parallel) = match file {
        Some(f) => (
            f.method,
            f.params,
            f.trials,
            f.seed,
            f.scheduler,
            req.max_parallel.or(f.max_parallel),
        ),
        None => {
            let (method, params) = if req.params.is_empty() {
                let axes: Vec<GridAxis> =
                    req.grid.iter().map(|g| g.parse()).collect::<Result<_>>()?;
                let params = axes
                    .into_iter()
                    .map(|a| Param {
                        key: a.key,
                        dist: Dist::Choice(a.values),
                    })
                    .collect();
                (Method::Grid, params)
            } else {
                let params = req
                    .params
                    .iter()
                    .map(|p| p.parse())
                    .collect::<Result<Vec<Param>>>()?;
                (Method::Random, params)
            };
            let scheduler = req
                .scheduler
                .as_ref()
                .map(|s| scheduler(s, &base))
                .transpose()?;
            (
                method,
                params,
                req.trials,
                req.seed.unwrap_or(0),
                scheduler,
                req.max_parallel,
            )
        }
    };
    if max_parallel == Some(0) {
        return Err(Error::Invalid("--max-parallel must be at least 1".into()));
    }
    let Some(scheduler) = scheduler else {
        // Every trial to its end: the runs of a plan, as a grid's.
        let space = TrialSpace::new(method, params, trials, seed)?;
        let combos = (0..space.trials)
            .map(|n| {
                Ok(Combination {
                    overrides: space.values(n)?,
                    label: space.label(n)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let plan = SweepPlan::of(&req.spec, overrides, Vec::new(), combos)?;
        check_plan(req, &plan)?;
        return Ok(Planned::Runs(plan));
    };
    let search = Search::new(method, params, trials, seed, scheduler)?;
    let combos = (0..search.space.trials)
        .map(|n| {
            Ok(Combination {
                overrides: search.overrides(n)?,
                label: search.label(n)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let plan = SweepPlan::of(&req.spec, overrides.clone(), Vec::new(), combos)?;
    check_plan(req, &plan)?;
    if let Some(run) = plan.runs.iter().find(|r| r.spec.data.val_fraction <= 0.0) {
        return Err(Error::Invalid(format!(
            "{}: the scheduler compares trials by {} at each rung, which needs a validation \
             part: set data.val_fraction above 0 (trial {})",
            req.spec.display(),
            search.metric_name(),
            run.combination.label
        )));
    }
    Ok(Planned::Search {
        search,
        max_parallel,
        overrides,
    })
}

/// The scheduler of the command line, its defaults from the spec `base`.
fn scheduler(s: &SchedulerRequest, base: &Spec) -> Result<Scheduler> {
    if s.name != "asha" {
        return Err(Error::Invalid(format!(
            "--scheduler {}: no such scheduler (asha is the one there is)",
            s.name
        )));
    }
    let metric = match s.metric.as_deref().unwrap_or("val_loss") {
        "val_loss" => Metric::ValLoss,
        "val_accuracy" => Metric::ValAccuracy,
        "perplexity" => Metric::Perplexity,
        other => {
            return Err(Error::Invalid(format!(
                "--metric {other}: expected val_loss, val_accuracy or perplexity"
            )));
        }
    };
    let mode = match s.mode.as_deref() {
        None => metric.mode(),
        Some("min") => Mode::Min,
        Some("max") => Mode::Max,
        Some(other) => {
            return Err(Error::Invalid(format!(
                "--mode {other}: expected min or max"
            )));
        }
    };
    let unit = match s.unit.as_deref().unwrap_or("epochs") {
        "epochs" => Unit::Epochs,
        "steps" => Unit::Steps,
        other => {
            return Err(Error::Invalid(format!(
                "--unit {other}: expected epochs or steps"
            )));
        }
    };
    let max = match (s.max, unit) {
        (Some(m), _) => m,
        (None, Unit::Epochs) => base.train.epochs as u64,
        (None, Unit::Steps) => base.train.steps.ok_or_else(|| {
            Error::Invalid(
                "--unit steps: give --max-budget N, or set train.steps in the spec".into(),
            )
        })?,
    };
    let asha = Asha::new(s.min.unwrap_or(1), max, s.eta.unwrap_or(3), mode)
        .map_err(|e| Error::Invalid(format!("--scheduler asha: {e}")))?;
    Ok(Scheduler { asha, metric, unit })
}

/// `<ws>/locks/sweep-<id>-driver.lock`: held by a search's driver while it runs.
pub fn driver_lock(root: &Path, id: &str) -> PathBuf {
    lockfile::lock_path(root, &format!("sweep-{id}-driver.lock"))
}

/// The pid of the driver of search `id`, when one runs.
pub fn driver_pid(root: &Path, id: &str) -> Result<Option<u32>> {
    Ok(lockfile::holder(&driver_lock(root, id))?.and_then(|h| h.pid))
}

/// `<ws>/sweeps/<id>.log`: what a search's driver says.
pub fn driver_log(root: &Path, id: &str) -> PathBuf {
    crate::sweep::manifest_path(root, id).with_extension("log")
}

/// Starts the driver of search `id` as a detached process (`__sweep ROOT ID`).
pub fn spawn_driver(root: &Path, id: &str) -> Result<Child> {
    let cmd = crate::invocation::HiddenCommand::Sweep {
        root: root.to_path_buf(),
        id: id.to_string(),
    };
    crate::engine::detach::spawn_detached(cmd.to_args(), &driver_log(root, id))
}

/// The search of sweep `address` (id, prefix, name, `latest`): its manifest, which must hold
/// a scheduled search.
pub fn find(root: &Path, address: &str) -> Result<SweepRecord> {
    let ws = Workspace::open(root)?;
    let (runs, _) = ws.runs()?;
    let id = crate::sweep::resolve(&ws.root, crate::sweep::sweeps_of(&runs), address)?;
    SweepRecord::load(&ws.root, &id)
}

/// How long [`stop`] waits for a driver to stop its trials.
pub const STOP_LIMIT: Duration = Duration::from_secs(180);

/// Stops search `address`: its driver (SIGTERM) stops the trials in flight (each checkpoints)
/// and records the search `stopped`; without a driver, this process does it. Returns the
/// manifest as it ended.
pub fn stop(root: &Path, address: &str) -> Result<SweepRecord> {
    let record = find(root, address)?;
    let id = record.id.clone();
    let state = search_of(&record)?;
    if state.status != SearchStatus::Running {
        return Err(Error::Refused(format!(
            "sweep {id} is already {}",
            state.status.as_str()
        )));
    }
    if let Some(pid) = driver_pid(root, &id)? {
        // SAFETY: kill(2) with a pid read from the lock's holder.
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        let start = Instant::now();
        loop {
            let now = SweepRecord::load(root, &id)?;
            let stopped = now
                .search
                .as_ref()
                .is_some_and(|s| s.status != SearchStatus::Running);
            if driver_pid(root, &id)?.is_none() {
                if stopped {
                    return Ok(now);
                }
                // It died before it could stop the trials (killed, or before its handler).
                return driver::stop_without_driver(root, &id);
            }
            if start.elapsed() > STOP_LIMIT {
                return Err(Error::Supervisor(format!(
                    "sweep {id}'s driver (pid {pid}) did not stop its trials within {} s; see {}",
                    STOP_LIMIT.as_secs(),
                    driver_log(root, &id).display()
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    driver::stop_without_driver(root, &id)
}

/// Starts the driver of search `address` again (after `stop`, or after it was killed): it
/// resumes the stopped trials and goes on. Refused while a driver runs or once the search has
/// completed.
pub fn resume(root: &Path, address: &str) -> Result<(SweepRecord, Child)> {
    let record = find(root, address)?;
    let id = record.id.clone();
    let state = search_of(&record)?;
    if let Some(pid) = driver_pid(root, &id)? {
        return Err(Error::Refused(format!(
            "sweep {id} is running: its driver is process {pid}"
        )));
    }
    if state.status == SearchStatus::Completed {
        return Err(Error::Refused(format!(
            "sweep {id} has completed: nothing is left to train"
        )));
    }
    let driver = restart_driver(root, &id)?;
    Ok((record, driver))
}

/// Marks search `id` running and starts its driver. The mark is made under the driver's lock:
/// a driver goes on only with a running search, so a `stop` just after this wins.
fn restart_driver(root: &Path, id: &str) -> Result<Child> {
    {
        let Some(_lock) = lockfile::try_lock(&driver_lock(root, id), Some(&holder(id)))? else {
            let pid = driver_pid(root, id)?.map_or("starting".into(), |p| p.to_string());
            return Err(Error::Refused(format!(
                "sweep {id} is running: its driver is process {pid}"
            )));
        };
        let mut record = SweepRecord::load(root, id)?;
        if let Some(s) = record.search.as_mut() {
            s.status = SearchStatus::Running;
        }
        record.save(root)?;
    }
    spawn_driver(root, id)
}

/// Promotes paused trial `trial` (`t03` or `3`) of search `address` by hand: its run is resumed
/// to the next rung (the search's driver takes it as running again). Returns the run's id and
/// the budget it trains to.
pub fn promote(root: &Path, address: &str, trial: &str) -> Result<(String, u64)> {
    let record = find(root, address)?;
    let state = search_of(&record)?;
    let n: u32 = trial
        .trim_start_matches('t')
        .parse()
        .map_err(|_| Error::Invalid(format!("`{trial}` is no trial: give its number, e.g. t03")))?;
    let t = state.trials.iter().find(|t| t.number == n).ok_or_else(|| {
        Error::NotFound(format!(
            "sweep {} has no trial t{n:02} ({} started)",
            record.id,
            state.trials.len()
        ))
    })?;
    if t.state != crate::sweep::trials::TrialState::Paused {
        return Err(Error::Refused(format!(
            "trial t{n:02} is {}: only a paused trial can be promoted",
            t.state.as_str()
        )));
    }
    let rungs = state.search.rungs();
    let at = t.last().map_or(0, |r| r.budget);
    let to = rungs
        .iter()
        .copied()
        .find(|&b| b > at)
        .unwrap_or(state.search.scheduler.asha.max);
    let started = actions::resume_run_to(root, &t.run, state.search.pause_at(to))?;
    if let Some(mut c) = started.supervisor {
        std::thread::spawn(move || c.wait());
    }
    // A search that was over (or stopped) goes on for this trial.
    if driver_pid(root, &record.id)?.is_none() {
        let mut driver = restart_driver(root, &record.id)?;
        std::thread::spawn(move || driver.wait());
    }
    Ok((t.run.clone(), to))
}

/// The search of sweep `record`; refused for a sweep without a scheduler.
fn search_of(record: &SweepRecord) -> Result<&SearchState> {
    record.search.as_ref().ok_or_else(|| not_a_search(record))
}

fn not_a_search(record: &SweepRecord) -> Error {
    Error::Refused(format!(
        "sweep {} has no scheduler: its runs each train to their end (stop or resume them \
         with `ddp stop` / `ddp resume`)",
        record.id
    ))
}

/// This process as the driver's lock holder of search `id`.
fn holder(id: &str) -> Holder {
    let mut h = Holder::this_process(id);
    h.pid = Some(ProcessId::current().pid);
    h
}
