//! A scheduled search's driver: the process (`__sweep ROOT ID`) that looks at its trials'
//! runs every [`POLL`], hands what it saw to `SearchState::advance` and carries out what that
//! says: a new trial's run created and started with its pause point, a paused trial's run
//! resumed to the next rung. The state is saved in the manifest (atomically) before every act
//! and after, so a driver killed at any point is started again ([`super::resume`]) and goes on:
//! a trial whose run was not created yet is created then, the runs in flight kept training
//! under their own supervisors meanwhile. SIGTERM stops the search: every trial in flight is
//! stopped (it checkpoints) and the search is recorded `stopped`; `resume` resumes them.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ddp_trainer::spec::Spec;

use super::holder;
use crate::actions::{self, STOP_LIMIT, request_stop, wait_until_terminal};
use crate::files::lockfile;
use crate::runs::run::{Run, RunStatus, SupervisorEvent};
use crate::runs::workspace::{RunOrigin, Workspace};
use crate::sweep::trials::{Act, SearchState, SearchStatus, Seen, TrialState};
use crate::sweep::{SweepMember, SweepRecord};
use crate::{Error, Result};

/// How often the driver looks at its trials.
pub const POLL: Duration = Duration::from_millis(250);
/// Set (to anything) in a driver's environment, the driver exits right after it created a
/// trial's run and before it starts the run's supervisor: how the tests make the orphan a
/// driver killed at the worst moment leaves.
pub const CRASH_AFTER_CREATE: &str = "DDP_TEST_SWEEP_CRASH_AFTER_CREATE";

/// A queued run with no supervisor this long after its record was written was never started.
pub const ORPHAN_AFTER: Duration = Duration::from_secs(5);

/// Whether `run` is queued with no supervisor since [`ORPHAN_AFTER`] or longer: a trial's run
/// created by a driver that died before starting its supervisor (a supervisor records itself
/// as its first act).
fn orphan(run: &Run) -> bool {
    let age = std::fs::metadata(run.dir.join(crate::runs::run::RUN_JSON))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .unwrap_or_default();
    run.record.status == RunStatus::Queued
        && run.record.supervisor.is_none()
        && crate::engine::of_run(&run.record).supervised()
        && age >= ORPHAN_AFTER
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// The driver of search `id` in workspace `root`, until the search completes or is stopped.
pub fn drive(root: &Path, id: &str) -> Result<SearchStatus> {
    let handler = on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, handler);
        libc::signal(libc::SIGINT, handler);
    }
    let Some(_lock) = lockfile::try_lock(&super::driver_lock(root, id), Some(&holder(id)))? else {
        return Err(Error::Refused(format!(
            "sweep {id} already has a driver (see `ddp sweep show {id}`)"
        )));
    };
    let mut d = Driver::load(root, id)?;
    if d.state.status != SearchStatus::Running {
        // Completed, or stopped before this driver started: nothing to do.
        return Ok(d.state.status);
    }
    // Stopped trials go on; a trial whose run was not created yet (the last driver died
    // first) is created now.
    let mut acts = d.state.resume();
    for t in &d.state.trials {
        if t.state == TrialState::Running && t.run.is_empty() {
            acts.push(Act::Start {
                trial: t.number,
                pause_at: d.state.search.pause_at(t.target),
            });
        }
    }
    let max_parallel = d
        .record
        .max_parallel
        .unwrap_or(d.state.search.space.trials as usize);
    eprintln!(
        "sweep {id}: driver {} started, {} trials, {} at a time",
        std::process::id(),
        d.state.search.space.trials,
        max_parallel
    );
    loop {
        d.save()?;
        for act in std::mem::take(&mut acts) {
            d.act(act)?;
        }
        if STOP.load(Ordering::SeqCst) {
            d.stop_trials()?;
            return Ok(SearchStatus::Stopped);
        }
        if d.state.status != SearchStatus::Running {
            eprintln!("sweep {id}: {}", d.state.status.as_str());
            return Ok(d.state.status);
        }
        let wake = std::time::Instant::now() + POLL;
        while std::time::Instant::now() < wake && !STOP.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let seen = d.look()?;
        acts = d.state.advance(&seen, max_parallel);
    }
}

/// Stops search `id` whose driver is gone: its trials in flight are stopped here.
pub fn stop_without_driver(root: &Path, id: &str) -> Result<SweepRecord> {
    let Some(_lock) = lockfile::try_lock(&super::driver_lock(root, id), Some(&holder(id)))? else {
        return Err(Error::Refused(format!(
            "sweep {id}'s driver started meanwhile: stop it again"
        )));
    };
    let mut d = Driver::load(root, id)?;
    d.stop_trials()?;
    let mut record = d.record;
    record.search = Some(d.state);
    Ok(record)
}

/// The driver's state: the manifest (its search taken out while driving), the workspace, and
/// the run folders of the trials met so far.
struct Driver {
    ws: Workspace,
    record: SweepRecord,
    state: SearchState,
    dirs: HashMap<String, PathBuf>,
}

impl Driver {
    fn load(root: &Path, id: &str) -> Result<Driver> {
        let ws = Workspace::open(root)?;
        let mut record = SweepRecord::load(&ws.root, id)?;
        let state = record.search.take().ok_or_else(|| {
            Error::Invalid(format!("sweep {id} has no scheduler: nothing to drive"))
        })?;
        Ok(Driver {
            ws,
            record,
            state,
            dirs: HashMap::new(),
        })
    }

    /// Writes the manifest with the search's state (atomically).
    fn save(&mut self) -> Result<()> {
        self.record.search = Some(self.state.clone());
        let saved = self.record.save(&self.ws.root);
        self.record.search = None;
        saved
    }

    /// The folder of run `id`.
    fn dir(&mut self, id: &str) -> Result<PathBuf> {
        if let Some(d) = self.dirs.get(id) {
            return Ok(d.clone());
        }
        let dir = self.ws.run(id)?.dir;
        self.dirs.insert(id.to_string(), dir.clone());
        Ok(dir)
    }

    /// What the running trials' runs did. A paused trial whose run goes on again was promoted
    /// by hand (`ddp sweep promote`, `ddp resume`): it is running again, to the run's pause
    /// point (or its end).
    fn look(&mut self) -> Result<BTreeMap<u32, Seen>> {
        let paused: Vec<(u32, String)> = self
            .state
            .trials
            .iter()
            .filter(|t| t.state == TrialState::Paused)
            .map(|t| (t.number, t.run.clone()))
            .collect();
        let max = self.state.search.scheduler.asha.max;
        for (n, id) in paused {
            let Ok(run) = self.dir(&id).and_then(|d| Run::load(&d)) else {
                continue;
            };
            if run.record.status == RunStatus::Paused {
                continue;
            }
            let to = run
                .record
                .pause_at
                .as_deref()
                .and_then(|p| p.split_once(':'))
                .and_then(|(_, n)| n.parse().ok())
                .unwrap_or(max);
            self.state.promote_by_hand(n, to);
            eprintln!(
                "sweep {}: trial {n} promoted by hand to {to}",
                self.record.id
            );
        }
        let mut seen = BTreeMap::new();
        let running: Vec<(u32, String, u64)> = self
            .state
            .trials
            .iter()
            .filter(|t| t.state == TrialState::Running && !t.run.is_empty())
            .map(|t| (t.number, t.run.clone(), t.target))
            .collect();
        let max = self.state.search.scheduler.asha.max;
        for (n, id, target) in running {
            let run = match self.dir(&id).and_then(|d| Run::load_checked(&d)) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("sweep {}: trial {n}: run {id}: {e}", self.record.id);
                    seen.insert(n, Seen::Failed);
                    continue;
                }
            };
            if orphan(&run) {
                // Created by a driver that died before it started the run's supervisor.
                eprintln!(
                    "sweep {}: trial {n}: run {id} was never started: starting it",
                    self.record.id
                );
                let mut run = run;
                let mut child = actions::spawn_supervisor_or_fail(&mut run, true)?;
                std::thread::spawn(move || child.wait());
                seen.insert(n, Seen::InFlight);
                continue;
            }
            let s = match run.record.status {
                RunStatus::Queued | RunStatus::Running | RunStatus::Restarting => Seen::InFlight,
                RunStatus::Failed => Seen::Failed,
                RunStatus::Stopped => Seen::Stopped,
                status @ (RunStatus::Paused | RunStatus::Completed) => {
                    // A run resumed by hand to its end counts at the last rung.
                    let at = if status == RunStatus::Completed {
                        max
                    } else {
                        target
                    };
                    if let Some(t) = self.state.trial_mut(n) {
                        t.target = at;
                    }
                    let records = crate::metrics::read_metrics(run.metrics_path(0))?;
                    Seen::Reached(self.state.search.value_at(&records, at))
                }
            };
            seen.insert(n, s);
        }
        Ok(seen)
    }

    /// Carries out `act`, saving the state where it changed; a trial that cannot be started
    /// or resumed fails (the search goes on).
    fn act(&mut self, act: Act) -> Result<()> {
        let id = self.record.id.clone();
        let (n, outcome) = match act {
            Act::Start { trial, pause_at } => (trial, self.start(trial, pause_at)),
            Act::Resume { trial, pause_at } => {
                let run = self
                    .state
                    .trials
                    .iter()
                    .find(|t| t.number == trial)
                    .map(|t| t.run.clone())
                    .unwrap_or_default();
                let resumed = actions::resume_run_to(&self.ws.root, &run, pause_at.clone());
                let outcome = resumed.map(|s| {
                    if let Some(mut c) = s.supervisor {
                        std::thread::spawn(move || c.wait());
                    }
                });
                eprintln!(
                    "sweep {id}: trial {trial} resumed to {}",
                    pause_at.as_deref().unwrap_or("the end")
                );
                (trial, outcome)
            }
        };
        if let Err(e) = outcome {
            eprintln!("sweep {id}: trial {n}: {e}");
            if let Some(t) = self.state.trial_mut(n) {
                t.state = TrialState::Failed;
            }
            self.save()?;
        }
        Ok(())
    }

    /// Creates trial `n`'s run (its spec: the sweep's overrides, then the trial's), saves the
    /// state naming it, and starts its supervisor.
    fn start(&mut self, n: u32, pause_at: Option<String>) -> Result<()> {
        let t = self
            .state
            .trials
            .iter()
            .find(|t| t.number == n)
            .cloned()
            .ok_or_else(|| Error::Invalid(format!("no trial {n}")))?;
        let mut all = self.record.overrides.clone();
        all.extend(t.overrides.iter().cloned());
        let spec = Spec::load(&self.record.spec, &all)?;
        let origin = RunOrigin {
            command: self.record.command.clone(),
            name: Some(match &self.record.name {
                Some(name) => format!("{name}/{}", t.label),
                None => t.label.clone(),
            }),
            sweep: Some(self.record.id.clone()),
            trainer: self.record.trainer.clone(),
            code: None,
        };
        let mut run = self.ws.create_run_with(&spec, origin)?;
        run.update(|r| r.pause_at = pause_at)?;
        self.dirs.insert(run.record.id.clone(), run.dir.clone());
        if let Some(trial) = self.state.trial_mut(n) {
            trial.run = run.record.id.clone();
        }
        self.record.runs.push(SweepMember {
            run: run.record.id.clone(),
            label: t.label.clone(),
            overrides: t.overrides.clone(),
        });
        self.save()?;
        if std::env::var_os(CRASH_AFTER_CREATE).is_some() {
            // Fault injection for tests: the driver dies between a run and its supervisor.
            eprintln!(
                "sweep {}: {CRASH_AFTER_CREATE} is set: exiting",
                self.record.id
            );
            std::process::exit(70);
        }
        eprintln!(
            "sweep {}: trial {n} started as run {}",
            self.record.id, run.record.id
        );
        let mut child = actions::spawn_supervisor_or_fail(&mut run, false)?;
        std::thread::spawn(move || child.wait());
        Ok(())
    }

    /// Stops every trial in flight (each checkpoints) and records the search stopped: its
    /// stopped trials resume with it.
    fn stop_trials(&mut self) -> Result<()> {
        let running: Vec<(u32, String)> = self
            .state
            .trials
            .iter()
            .filter(|t| t.state == TrialState::Running && !t.run.is_empty())
            .map(|t| (t.number, t.run.clone()))
            .collect();
        let mut asked = Vec::new();
        for (n, id) in &running {
            let dir = self.dir(id)?;
            let mut run = Run::load(&dir)?;
            if orphan(&run) {
                // Never started (its driver died first): nothing runs to be asked.
                run.transition(SupervisorEvent::Stopped, |r| r.status = RunStatus::Stopped)?;
                asked.push((*n, dir));
                continue;
            }
            // A run whose supervisor is starting is asked again until it has one.
            let deadline = std::time::Instant::now() + ORPHAN_AFTER;
            loop {
                match request_stop(&run) {
                    Ok(_) => asked.push((*n, dir.clone())),
                    Err(Error::Refused(_)) if std::time::Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(100));
                        run = Run::load(&dir)?;
                        continue;
                    }
                    Err(e) => eprintln!("sweep {}: trial {n}: {e}", self.record.id),
                }
                break;
            }
        }
        for (n, dir) in asked {
            let ended = wait_until_terminal(&dir, STOP_LIMIT)?;
            // A trial that reached its pause point meanwhile is looked at by the next driver.
            if ended.record.status == RunStatus::Stopped
                && let Some(t) = self.state.trial_mut(n)
            {
                t.state = TrialState::Stopped;
            }
        }
        self.state.status = SearchStatus::Stopped;
        self.save()?;
        eprintln!("sweep {}: stopped", self.record.id);
        Ok(())
    }
}
