//! Sweeps (`ddp sweep`): one run per combination of a grid of spec overrides, grouped under a
//! sweep id, with an optional limit on how many of them are in flight at once.
//!
//! # Layout
//!
//! - this file: plans, manifests, addressing, slots;
//! - `grid.rs`: `--grid` axes, their combinations and the runs' short labels;
//! - `trials.rs`: a scheduled search's state in the manifest and the step that applies what
//!   its trials did and says what to start or resume (ASHA), pure;
//! - `space.rs`: search spaces (`KEY=KIND:ARGS` parameters) and each trial's values, a function
//!   of the seed and the trial's number;
//! - `asha.rs`: asynchronous successive halving as a pure policy (rungs, verdicts, promotions);
//! - `file.rs`: a sweep file (TOML: the space, the method, the scheduler), read and checked;
//! - `tests.rs`: this file's tests.
//!
//! A sweep is planned first ([`SweepPlan::new`]): the grid (`--grid KEY=V1,V2,...`, parsed by
//! [`GridAxis`]) is expanded into its cartesian product ([`combinations`]) and every
//! combination's overrides go through `Spec::load`, so an unknown key or a bad value fails the
//! whole sweep, naming the key, before anything exists. [`create`] then makes one queued run per
//! combination, each with `run.json`'s `sweep` set to the sweep id, and writes the sweep's
//! manifest `<ws>/sweeps/<id>.json` ([`SweepRecord`]). Sweep ids look like run ids
//! (`<YYYYmmdd-HHMMSS>-<6 hex>`, UTC); a sweep is addressed ([`resolve`]) by its id, a unique
//! prefix of it, its `--name`, or `latest`.
//!
//! # Slots: the parallelism limit (`--max-parallel N`)
//!
//! The limit lives in the manifest (`max_parallel`), not in a process of the CLI, so it holds
//! after `ddp sweep --detach` has returned. Every run's supervisor is started at once; before it
//! asks for devices, a supervisor whose run belongs to a sweep with a limit takes one of the
//! sweep's N slots ([`wait_for_slot`]): an exclusive `flock(2)` on
//! `<ws>/locks/sweep-<id>-slot-<k>.lock` for some k in `0..N` (the GPU locks' mechanism, see
//! [`crate::files::lockfile`]). Until it gets one the run stays `queued`, with a `queued` event
//! "waiting for a sweep slot: ..." each time the slots' holders change. It keeps its slot until
//! the supervisor exits: through restarts and while it waits for GPUs, so at most N runs of the
//! sweep are past that point at any time. The kernel frees the slot of a killed supervisor. Runs
//! waiting for a slot get them in no particular order. `ddp resume` of a run of the sweep reads
//! the manifest again and takes a slot like the first time; a run whose manifest is gone runs
//! without a limit. A slot file holds `{"run": ..., "pid": ...}` of its holder while held.

use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ddp_trainer::spec::Spec;
use serde::{Deserialize, Serialize};

use crate::files::lockfile::{self, Holder, LockFile};
use crate::runs::run::{Run, RunRecord, now};
use crate::runs::workspace::{RunOrigin, Unreadable, Workspace, nearest, new_run_id};
use crate::{Error, Result};

/// The folder of a workspace that holds the sweep manifests.
pub const SWEEPS_DIR: &str = "sweeps";

/// A validated sweep, ready to create: every run's resolved spec.
#[derive(Debug, Clone)]
pub struct SweepPlan {
    pub spec_path: PathBuf,
    /// `--set` overrides shared by every run (applied before the grid's).
    pub overrides: Vec<String>,
    pub grid: Vec<GridAxis>,
    pub runs: Vec<PlannedRun>,
}

#[derive(Debug, Clone)]
pub struct PlannedRun {
    pub combination: Combination,
    pub spec: Spec,
}

impl SweepPlan {
    /// Loads `spec_path` with `overrides`, then with each combination of `grid` on top (a grid
    /// value wins over a `--set` of the same key). Any error fails the plan, naming the
    /// combination and the key.
    pub fn new(spec_path: &Path, overrides: Vec<String>, grid: Vec<GridAxis>) -> Result<SweepPlan> {
        let combos = combinations(&grid)?;
        SweepPlan::of(spec_path, overrides, grid, combos)
    }

    /// The plan of one run per combination in `combos` (a grid's, or a random search's trials).
    pub fn of(
        spec_path: &Path,
        overrides: Vec<String>,
        grid: Vec<GridAxis>,
        combos: Vec<Combination>,
    ) -> Result<SweepPlan> {
        // The file and the shared overrides alone first, so their errors read as usual.
        Spec::load(spec_path, &overrides)?;
        let n = combos.len();
        let mut runs = Vec::with_capacity(n);
        for (i, combination) in combos.into_iter().enumerate() {
            let mut all = overrides.clone();
            all.extend(combination.overrides.iter().cloned());
            let spec = Spec::load(spec_path, &all).map_err(|e| {
                Error::Invalid(format!(
                    "sweep combination {} of {n} ({}): {e}",
                    i + 1,
                    combination.overrides.join(" ")
                ))
            })?;
            runs.push(PlannedRun { combination, spec });
        }
        Ok(SweepPlan {
            spec_path: spec_path.to_path_buf(),
            overrides,
            grid,
            runs,
        })
    }
}

/// `<ws>/sweeps/<id>.json`: what a sweep is, written once when it is created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepRecord {
    pub id: String,
    /// `--name` given to `ddp sweep`, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The spec file the runs were made from (their resolved specs are frozen in their folders).
    pub spec: PathBuf,
    /// The `--set` overrides shared by every run.
    #[serde(default)]
    pub overrides: Vec<String>,
    pub grid: Vec<GridAxis>,
    /// At most this many runs of the sweep in flight (`--max-parallel`); none: no limit beyond
    /// the device queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel: Option<usize>,
    /// Unix seconds.
    pub created: f64,
    /// The command that created the sweep.
    #[serde(default)]
    pub command: Vec<String>,
    /// The runs, in combination order (a scheduled search's: as its trials were created).
    pub runs: Vec<SweepMember>,
    /// The executable the runs' replicas run (`--trainer`), for a search's trials created later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trainer: Option<PathBuf>,
    /// A scheduled search's state (`ddp sweep --scheduler asha`), written by the sweep's
    /// process; none: a sweep of runs that each train to their end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<trials::SearchState>,
}

/// One run of a sweep, as the manifest lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepMember {
    pub run: String,
    pub label: String,
    pub overrides: Vec<String>,
}

/// `<ws>/sweeps/<id>.json`.
pub fn manifest_path(ws_root: &Path, id: &str) -> PathBuf {
    ws_root.join(SWEEPS_DIR).join(format!("{id}.json"))
}

/// Sweep ids end up in file names: only what [`new_run_id`] makes (letters, digits, `-`, `_`,
/// `.`, not leading `.`) is accepted from a `run.json` or the command line.
fn check_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!("`{id}` is not a sweep id")))
    }
}

impl SweepRecord {
    /// Reads the manifest of sweep `id`; `Error::NotFound` when there is none.
    pub fn load(ws_root: &Path, id: &str) -> Result<SweepRecord> {
        check_id(id)?;
        let path = manifest_path(ws_root, id);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(Error::NotFound(format!(
                    "sweep {id} has no manifest ({} is missing)",
                    path.display()
                )));
            }
            Err(e) => return Err(Error::io(&path, e)),
        };
        serde_json::from_str(&text).map_err(|e| Error::Corrupt {
            path,
            msg: format!("not a valid sweep manifest ({e})"),
        })
    }

    /// Writes the manifest atomically (temp file and rename).
    pub fn save(&self, ws_root: &Path) -> Result<()> {
        check_id(&self.id)?;
        let dir = ws_root.join(SWEEPS_DIR);
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let bytes = serde_json::to_vec_pretty(self).expect("a sweep record always serialises");
        crate::files::fsutil::write_atomic(&manifest_path(ws_root, &self.id), &bytes)?;
        Ok(())
    }

    /// The member entry of run `run_id`, if it is one of this sweep's runs.
    pub fn member(&self, run_id: &str) -> Option<&SweepMember> {
        self.runs.iter().find(|m| m.run == run_id)
    }
}

/// Every sweep manifest of the workspace, oldest first; unreadable ones separately.
pub fn list(ws_root: &Path) -> Result<(Vec<SweepRecord>, Vec<Unreadable>)> {
    let dir = ws_root.join(SWEEPS_DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok((vec![], vec![])),
        Err(e) => return Err(Error::io(&dir, e)),
    };
    let mut ids: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".json")
                .map(str::to_string)
        })
        .filter(|id| check_id(id).is_ok())
        .collect();
    ids.sort();
    let (mut good, mut bad) = (Vec::new(), Vec::new());
    for id in ids {
        match SweepRecord::load(ws_root, &id) {
            Ok(r) => good.push(r),
            Err(e) => bad.push(Unreadable {
                dir: manifest_path(ws_root, &id),
                error: e.to_string(),
            }),
        }
    }
    Ok((good, bad))
}

/// The `sweep` fields of `runs`, what [`resolve`] looks among.
pub fn sweeps_of(runs: &[Run]) -> impl Iterator<Item = &str> {
    runs.iter().filter_map(|r| r.record.sweep.as_deref())
}

/// Finds a sweep id by full id, `--name` (the newest sweep of that name), unique id prefix or
/// `latest`, among the manifests and `run_sweeps`, the `sweep` fields of the workspace's runs (a
/// sweep whose manifest was deleted still groups its runs). An unknown address gets the closest
/// ids and names.
pub fn resolve<'a>(
    ws_root: &Path,
    run_sweeps: impl IntoIterator<Item = &'a str>,
    address: &str,
) -> Result<String> {
    let (manifests, _) = list(ws_root)?;
    let of_runs: Vec<&str> = run_sweeps.into_iter().collect();
    let mut ids: BTreeSet<&str> = manifests.iter().map(|m| m.id.as_str()).collect();
    ids.extend(of_runs);
    if ids.contains(address) {
        return Ok(address.to_string());
    }
    if address == "latest" {
        return ids
            .last()
            .map(|s| s.to_string())
            .ok_or_else(|| Error::NotFound("the workspace has no sweeps yet".into()));
    }
    if let Some(m) = manifests
        .iter()
        .filter(|m| m.name.as_deref() == Some(address))
        .max_by(|a, b| a.id.cmp(&b.id))
    {
        return Ok(m.id.clone());
    }
    let prefixed: Vec<&str> = ids
        .iter()
        .copied()
        .filter(|id| id.starts_with(address))
        .collect();
    match prefixed.as_slice() {
        [one] => Ok(one.to_string()),
        [] => {
            if ids.is_empty() {
                return Err(Error::NotFound(format!(
                    "no sweep `{address}`: the workspace has no sweeps"
                )));
            }
            let mut candidates: Vec<&str> = ids.iter().copied().collect();
            candidates.extend(manifests.iter().filter_map(|m| m.name.as_deref()));
            let near = nearest(address, &candidates);
            let hint = if near.is_empty() {
                format!(
                    " (sweeps: {})",
                    ids.iter()
                        .rev()
                        .take(5)
                        .copied()
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            } else {
                format!(
                    "; did you mean {}?",
                    near.iter()
                        .map(|c| format!("`{c}`"))
                        .collect::<Vec<_>>()
                        .join(" or ")
                )
            };
            Err(Error::NotFound(format!("no sweep `{address}`{hint}")))
        }
        many => Err(Error::Invalid(format!(
            "`{address}` matches {} sweeps ({}); give more of the id",
            many.len(),
            many.iter().take(5).copied().collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// The runs of sweep `id` among `runs`: in the manifest's (combination) order where it has one,
/// then any others by id.
pub fn members<'a>(ws_root: &Path, runs: &'a [Run], id: &str) -> Vec<&'a Run> {
    let order: Vec<String> = SweepRecord::load(ws_root, id)
        .map(|m| m.runs.into_iter().map(|m| m.run).collect())
        .unwrap_or_default();
    let mut out: Vec<&Run> = runs
        .iter()
        .filter(|r| r.record.sweep.as_deref() == Some(id))
        .collect();
    out.sort_by_key(|r| {
        (
            order
                .iter()
                .position(|o| *o == r.record.id)
                .unwrap_or(usize::MAX),
            r.record.id.clone(),
        )
    });
    out
}

/// Creates the sweep of `plan`: one queued run per combination (named `NAME/label`, or `label`
/// without a name) grouped under a new sweep id, and its manifest. If any run cannot be created
/// the ones already made are removed. Every run records `trainer` (`--trainer`) when given. Starts nothing: the caller starts each run's supervisor.
pub fn create(
    ws: &Workspace,
    plan: &SweepPlan,
    name: Option<String>,
    max_parallel: Option<usize>,
    command: Vec<String>,
    trainer: Option<PathBuf>,
) -> Result<(SweepRecord, Vec<Run>)> {
    if max_parallel == Some(0) {
        return Err(Error::Invalid(
            "--max-parallel must be at least 1".to_string(),
        ));
    }
    let id = new_run_id();
    let mut runs: Vec<Run> = Vec::with_capacity(plan.runs.len());
    for p in &plan.runs {
        let run_name = match &name {
            Some(n) => format!("{n}/{}", p.combination.label),
            None => p.combination.label.clone(),
        };
        let origin = RunOrigin {
            command: command.clone(),
            name: Some(run_name),
            sweep: Some(id.clone()),
            trainer: trainer.clone(),
            code: None,
        };
        match ws.create_run_with(&p.spec, origin) {
            Ok(r) => runs.push(r),
            Err(e) => {
                for r in &runs {
                    let _ = std::fs::remove_dir_all(&r.dir);
                }
                return Err(e);
            }
        }
    }
    let record = SweepRecord {
        id,
        name,
        spec: std::fs::canonicalize(&plan.spec_path).unwrap_or_else(|_| plan.spec_path.clone()),
        overrides: plan.overrides.clone(),
        grid: plan.grid.clone(),
        max_parallel,
        created: now(),
        command,
        runs: runs
            .iter()
            .zip(&plan.runs)
            .map(|(r, p)| SweepMember {
                run: r.record.id.clone(),
                label: p.combination.label.clone(),
                overrides: p.combination.overrides.clone(),
            })
            .collect(),
        trainer: trainer.clone(),
        search: None,
    };
    if let Err(e) = record.save(&ws.root) {
        for r in &runs {
            let _ = std::fs::remove_dir_all(&r.dir);
        }
        return Err(e);
    }
    Ok((record, runs))
}

// ---------------------------------------------------------------------------------------------
// Slots.

/// `<ws>/locks/sweep-<id>-slot-<k>.lock`.
pub fn slot_path(ws_root: &Path, sweep: &str, k: usize) -> PathBuf {
    lockfile::lock_path(ws_root, &format!("sweep-{sweep}-slot-{k}.lock"))
}

/// One held slot of a sweep; dropping it (or the death of the process) frees it.
#[derive(Debug)]
pub struct SweepSlot {
    index: usize,
    _lock: LockFile,
}

impl SweepSlot {
    /// Which slot (0-based).
    pub fn index(&self) -> usize {
        self.index
    }
}

/// Takes a free slot among `0..slots` of `sweep` for `run_id`, or `Ok(None)` when all are held.
pub fn try_slot(
    ws_root: &Path,
    sweep: &str,
    slots: usize,
    run_id: &str,
) -> Result<Option<SweepSlot>> {
    check_id(sweep)?;
    let holder = Holder::this_process(run_id);
    for k in 0..slots {
        if let Some(lock) = lockfile::try_lock(&slot_path(ws_root, sweep, k), Some(&holder))? {
            return Ok(Some(SweepSlot {
                index: k,
                _lock: lock,
            }));
        }
    }
    Ok(None)
}

/// The holders of the held slots among `0..slots` of `sweep`, by slot.
pub fn slot_holders(ws_root: &Path, sweep: &str, slots: usize) -> Result<Vec<(usize, Holder)>> {
    check_id(sweep)?;
    let mut out = Vec::new();
    for k in 0..slots {
        if let Some(holder) = lockfile::holder(&slot_path(ws_root, sweep, k))? {
            out.push((k, holder));
        }
    }
    Ok(out)
}

/// How [`wait_for_slot`] ended.
#[derive(Debug)]
pub enum SlotWait {
    /// The run is not in a sweep, or its sweep has no limit (or no manifest): nothing to hold.
    NoLimit,
    /// The run holds this slot until it is dropped.
    Held(SweepSlot),
    /// `cancelled` said so before a slot was free.
    Cancelled,
}

/// Why a run waits for a slot: `waiting for a sweep slot: sweep X runs 2 at a time (held by
/// runs a, b)`.
pub fn waiting_message(sweep: &str, slots: usize, holders: &[(usize, Holder)]) -> String {
    let runs: BTreeSet<&str> = holders.iter().map(|(_, h)| h.run.as_str()).collect();
    let runs: Vec<&str> = runs.into_iter().collect();
    let by = match runs.as_slice() {
        [] => String::new(),
        [one] => format!(" (held by run {one})"),
        many => format!(" (held by runs {})", many.join(", ")),
    };
    format!("waiting for a sweep slot: sweep {sweep} runs {slots} at a time{by}")
}

/// For the supervisor of the run `record` in workspace `ws_root`: when the run belongs to a
/// sweep with `max_parallel`, waits until one of the sweep's slots is free and takes it, polling
/// every `poll` (and `cancelled` at least every 50 ms). `on_wait` hears why the run waits, once
/// per change of the holders. Errors: an unreadable manifest or lock folder.
pub fn wait_for_slot(
    ws_root: &Path,
    record: &RunRecord,
    poll: Duration,
    mut on_wait: impl FnMut(&str),
    mut cancelled: impl FnMut() -> bool,
) -> Result<SlotWait> {
    let Some(sweep) = record.sweep.as_deref() else {
        return Ok(SlotWait::NoLimit);
    };
    let slots = match SweepRecord::load(ws_root, sweep) {
        Ok(m) => match m.max_parallel {
            Some(n) => n.max(1),
            None => return Ok(SlotWait::NoLimit),
        },
        Err(Error::NotFound(_)) => return Ok(SlotWait::NoLimit),
        Err(e) => return Err(e),
    };
    let mut reported: Option<String> = None;
    loop {
        if cancelled() {
            return Ok(SlotWait::Cancelled);
        }
        if let Some(slot) = try_slot(ws_root, sweep, slots, &record.id)? {
            return Ok(SlotWait::Held(slot));
        }
        let msg = waiting_message(sweep, slots, &slot_holders(ws_root, sweep, slots)?);
        if reported.as_ref() != Some(&msg) {
            on_wait(&msg);
            reported = Some(msg);
        }
        let wake = std::time::Instant::now() + poll;
        while let Some(left) = wake
            .checked_duration_since(std::time::Instant::now())
            .filter(|d| !d.is_zero())
        {
            if cancelled() {
                return Ok(SlotWait::Cancelled);
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
    }
}

pub mod asha;
pub mod file;
mod grid;
pub mod space;
pub mod trials;

pub use grid::{Combination, GridAxis, MAX_RUNS, combinations};

#[cfg(test)]
mod tests;
