//! `ddp-trainer --standalone --nproc N`: a local launcher that starts N replicas of a program with
//! torchrun's variables, keeps their output, and stops them all as soon as one fails (an elastic
//! run goes on without it while enough remain, and its store is served here). The same
//! launcher starts one node's replicas of a world of several nodes (a Kubeflow pod:
//! [`LaunchOptions::nnodes`], [`LaunchOptions::node_rank`]).
//!
//! Layout:
//! - this file: [`launch`] and [`launch_ended`], the entry points, how a launch ended
//!   ([`Ended`], [`StopCause`]), and supervision
//!   (`tend`, `stop`): polling, the failure report, a stop on request, and teardown (SIGTERM
//!   to each replica's process group, SIGKILL after the grace).
//! - `options`: [`LaunchOptions`] and their defaults.
//! - `ports`: [`free_port`], the rendezvous port, picked below the kernel's ephemeral range.
//! - `spawn`: starting a replica with the torchrun environment, one process group per replica,
//!   and `PR_SET_PDEATHSIG(SIGKILL)` so that no replica outlives the launcher; reaping it.
//! - `output` (`pump`, `drain`): one reader thread per stream writing whole lines to
//!   `logs/rank-R.log` ([`log_path`], appended) and echoing local replica 0's stdout and every
//!   rank's stderr (prefixed `[rank R] `).
//! - `exit`: how a replica ended ([`Exit`]), the failure reported ([`ReplicaFailure`]) and which
//!   of several it is (pure policy).
//! - `elastic`: an elastic launch's scaling (which replicas start or leave, pure) and the
//!   file `ddp scale` writes.
//! - `threads`: CPU threads per replica, for every launch path (`per_replica`).
//! - `signals` (`SignalHandlers`): SIGINT/SIGTERM/SIGUSR2 on the launcher ask the supervisor to
//!   stop.

mod elastic;
mod exit;
mod options;
mod output;
mod ports;
mod signals;
mod spawn;
pub mod threads;

use std::sync::atomic::{AtomicI32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

pub use exit::{Exit, ReplicaFailure, signal_name};

pub use options::{DEFAULT_GRACE, LaunchOptions, SCALE_FILE, SpawnHook};
pub use output::log_path;
pub use ports::free_port;

use crate::dist::store::StoreServer;
use crate::error::{Error, Result};
use elastic::{Action, ScaleFile, Slot};
use exit::culprit;
use output::drain;
use signals::{INTERRUPTED, SignalHandlers};
use spawn::{ReplicaProcess, World, signal_group, spawn};

/// How often the supervisor looks at the replicas.
const POLL: Duration = Duration::from_millis(50);
/// How long the other replicas may take to end on their own after the first failures were all
/// replicas that lost their peers, so that the peer that left is the one reported.
const SETTLE: Duration = Duration::from_secs(2);

/// How a launch ended: what a supervisor matches on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// Every replica exited with 0.
    Completed,
    /// Every replica exited with 0 at the run's pause point (`--pause-at`): rank 0 wrote
    /// [`PAUSED_FILE`](crate::train::PAUSED_FILE) after `epoch` epochs and `step` steps.
    Paused { epoch: u64, step: u64 },
    /// Every replica stopped on request after the same step, its position checkpointed, and
    /// exited with [`EXIT_STOPPED`](crate::error::EXIT_STOPPED).
    Stopped(StopCause),
    /// SIGINT, SIGTERM or SIGUSR2 to the launcher, and not every replica stopped at a step it
    /// checkpointed (one was killed after the grace, or had not started training): `ranks` were
    /// stopped.
    Interrupted { signal: i32, ranks: Vec<usize> },
    /// A replica failed (the likeliest root cause of the failures seen together: [`culprit`]);
    /// the others were stopped, or an elastic group could not go on without it.
    Failed(ReplicaFailure),
}

/// Where the request of a stop ([`Ended::Stopped`]) came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopCause {
    /// `signal` to the launcher, passed on to the replicas (`ranks`) as SIGTERM.
    Signal { signal: i32, ranks: Vec<usize> },
    /// A request that reached the replicas themselves, first seen at this one.
    Replica(ReplicaFailure),
}

impl Ended {
    /// `Ok(())` for a launch that completed (or paused), else the launcher's error for how it
    /// ended: [`Error::Replica`] for a failed replica or a stop that reached the replicas,
    /// [`Error::Launch`] (`interrupted by SIGTERM; stopped ranks 0, 1`) for a signal to it.
    pub fn into_result(self) -> Result<()> {
        match self {
            Ended::Completed | Ended::Paused { .. } => Ok(()),
            Ended::Stopped(StopCause::Replica(first)) => Err(first.error()),
            Ended::Stopped(StopCause::Signal { signal, ranks })
            | Ended::Interrupted { signal, ranks } => Err(Error::Launch(format!(
                "interrupted by {}; stopped ranks {}",
                signal_name(signal),
                rank_list(&ranks)
            ))),
            Ended::Failed(failure) => Err(failure.error()),
        }
    }
}

/// Starts `opts.nproc` replicas (global ranks from `node_rank × nproc`) and waits for them.
/// `Ok(())` when every replica exits with 0, else the error of [`Ended::into_result`].
///
/// When a replica exits non-zero or is killed, the others get SIGTERM, SIGKILL after
/// `opts.grace`. SIGINT, SIGTERM or SIGUSR2 on the launcher stops the replicas the same way.
/// [`launch_ended`] tells stops, pauses and failures apart as an [`Ended`].
pub fn launch(opts: &LaunchOptions) -> Result<()> {
    launch_ended(opts)?.into_result()
}

/// [`launch`], with how it ended as an [`Ended`]; an error only when the launch itself failed
/// (bad options, a replica that could not be started, the elastic store not served).
pub fn launch_ended(opts: &LaunchOptions) -> Result<Ended> {
    let _handlers = SignalHandlers::install()?;
    let ended = run(opts, &INTERRUPTED)?;
    Ok(match ended {
        Ended::Completed => match crate::train::paused_at(&opts.out_dir) {
            Some((epoch, step)) => Ended::Paused { epoch, step },
            None => Ended::Completed,
        },
        other => other,
    })
}

/// [`launch`] with the interrupt flag as a parameter (a signal number, 0 while not interrupted).
fn run(opts: &LaunchOptions, interrupted: &AtomicI32) -> Result<Ended> {
    if opts.nproc == 0 {
        return Err(Error::Launch("--nproc must be at least 1".to_string()));
    }
    if opts.nnodes == 0 || opts.node_rank >= opts.nnodes {
        return Err(Error::Launch(format!(
            "node rank {} of {} nodes: a world needs a node, and node ranks run from 0 to nodes - 1",
            opts.node_rank, opts.nnodes
        )));
    }
    let port = match opts.master_port {
        Some(0) => {
            return Err(Error::Launch(
                "master port 0 is not a port; leave it unset to pick a free one".to_string(),
            ));
        }
        Some(port) => port,
        None => free_port()?,
    };
    let threads = threads::per_replica(
        opts.threads_per_replica,
        opts.nproc,
        threads::available_cores(),
    );
    let logs = opts.out_dir.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| Error::io(&logs, e))?;
    // A pause of an earlier launch is over ([`Ended::Paused`] reads this launch's).
    let _ = std::fs::remove_file(opts.out_dir.join(crate::train::PAUSED_FILE));
    let restart_count = std::env::var("TORCHELASTIC_RESTART_COUNT")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "0".to_string());
    // An elastic run's store lives here, beside the replicas rather than in rank 0.
    let _store = match opts.elastic_min {
        Some(_) if opts.node_rank == 0 => Some(serve_store(opts, port)?),
        _ => None,
    };
    let world = World {
        opts,
        port,
        threads,
        restart_count,
        store_elsewhere: opts.elastic_min.is_some(),
    };

    let mut replicas = Vec::with_capacity(opts.nproc);
    let mut readers = Vec::with_capacity(2 * opts.nproc);
    for local in 0..opts.nproc {
        match spawn(&world, local, false, &mut readers) {
            Ok(replica) => replicas.push(replica),
            Err(e) => {
                stop(&mut replicas, opts.grace);
                drain(readers);
                return Err(e);
            }
        }
    }
    let result = {
        // A replica started again, or added, joins the group under way.
        let mut respawn = |local: usize| spawn(&world, local, true, &mut readers);
        tend(&mut replicas, opts, interrupted, &mut respawn)
    };
    drain(readers);
    result
}

/// The store of an elastic run, served by the launcher for the whole world at
/// `MASTER_ADDR:port` (with the replicas' `DDP_TOKEN`).
fn serve_store(opts: &LaunchOptions, port: u16) -> Result<StoreServer> {
    let token = opts
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == "DDP_TOKEN")
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var("DDP_TOKEN").ok());
    StoreServer::bind(&opts.master_addr, port, opts.nnodes * opts.nproc, token)
        .map_err(|e| Error::Launch(format!("cannot serve the elastic run's store: {e}")))
}

/// `0, 2`.
fn rank_list(ranks: &[usize]) -> String {
    ranks
        .iter()
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn running_ranks(replicas: &[ReplicaProcess]) -> Vec<usize> {
    replicas
        .iter()
        .filter(|r| r.running())
        .map(|r| r.rank)
        .collect()
}

/// Whether every replica still in the group has ended with an outcome for which `f` holds (an
/// elastic group's replicas that failed and were left behind, or left on request, are not).
fn all_ended(replicas: &[ReplicaProcess], f: impl Fn(&Exit) -> bool) -> bool {
    replicas
        .iter()
        .filter(|r| !r.out_of_group())
        .all(|r| r.outcome.as_ref().is_some_and(&f))
}

/// Waits for the replicas; on the first failure or an interrupt, stops the rest. A replica that
/// stopped on request is no failure while the others stop after the same step too.
fn tend(
    replicas: &mut [ReplicaProcess],
    opts: &LaunchOptions,
    interrupted: &AtomicI32,
    respawn: &mut dyn FnMut(usize) -> Result<ReplicaProcess>,
) -> Result<Ended> {
    let grace = opts.grace;
    let mut restarts = 0u32;
    // Failed replicas of an elastic group to start again, each when its backoff is over.
    let mut pending: Vec<(usize, Instant)> = Vec::new();
    let mut scale_file = match opts.elastic_min {
        Some(_) => opts.scale_file.clone().map(ScaleFile::new),
        None => None,
    };
    loop {
        let signal = interrupted.load(Ordering::SeqCst);
        if signal != 0 {
            let running = running_ranks(replicas);
            eprintln!(
                "ddp-trainer: interrupted by {}; stopping ranks {}",
                signal_name(signal),
                rank_list(&running)
            );
            stop(replicas, grace);
            if all_ended(replicas, Exit::success) {
                return Ok(Ended::Completed);
            }
            if all_ended(replicas, Exit::stopped) {
                return Ok(Ended::Stopped(StopCause::Signal {
                    signal,
                    ranks: running,
                }));
            }
            return Ok(Ended::Interrupted {
                signal,
                ranks: running,
            });
        }
        let mut failed: Vec<usize> = Vec::new();
        for (i, replica) in replicas.iter_mut().enumerate() {
            if replica.running() && replica.poll().is_some_and(|o| !o.success() && !o.left()) {
                failed.push(i);
            }
        }
        let stopped = |r: &ReplicaProcess| r.outcome.as_ref().is_some_and(Exit::stopped);
        if !failed.is_empty() && failed.iter().all(|&i| stopped(&replicas[i])) {
            // A stop request reached the replicas themselves: the others stop after the same
            // step (SIGTERM only repeats the request to them).
            let first = replicas[failed[0]].failure();
            let running = running_ranks(replicas);
            if !running.is_empty() {
                eprintln!(
                    "ddp-trainer: rank {} stopped on request; waiting for ranks {} to stop",
                    first.rank,
                    rank_list(&running)
                );
            }
            stop(replicas, grace);
            if all_ended(replicas, Exit::stopped) {
                return Ok(Ended::Stopped(StopCause::Replica(first)));
            }
            // Not every replica stopped: the others' outcomes are the failures to report.
            failed = (0..replicas.len())
                .filter(|&i| replicas[i].outcome.as_ref().is_some_and(|o| !o.success()))
                .filter(|&i| !stopped(&replicas[i]) && !replicas[i].out_of_group())
                .collect();
        }
        if let (Some(min), Some(file)) = (opts.elastic_min, scale_file.as_mut())
            && !replicas.iter().any(ReplicaProcess::succeeded)
            && let Some(wanted) = file.changed()
        {
            scale_to(replicas, wanted, min, respawn, grace)?;
        }
        let mut goes_on = false;
        if let Some(min) = opts.elastic_min
            && !failed.is_empty()
            && elastic_goes_on(replicas, min)
        {
            goes_on = true;
            for &i in &failed {
                let r = &replicas[i];
                let outcome = r.outcome.as_ref().map_or(String::new(), Exit::describe);
                eprintln!(
                    "ddp-trainer: rank {} (pid {}) {outcome}; ranks {} go on without it \
                     (ddp.elastic, at least {min}) — see {}",
                    r.rank,
                    r.pid,
                    rank_list(&running_ranks(replicas)),
                    r.log.display()
                );
                replicas[i].left_behind = true;
                // Started again to join the group under way, within restart.max_restarts, while
                // the group has not completed.
                if restarts < opts.elastic_restarts
                    && !replicas.iter().any(ReplicaProcess::succeeded)
                {
                    restarts += 1;
                    eprintln!(
                        "ddp-trainer: restarting rank {} in {:.1} s to join the group (restart \
                         {restarts} of {}, restart.backoff_s)",
                        replicas[i].rank,
                        opts.elastic_backoff.as_secs_f64(),
                        opts.elastic_restarts
                    );
                    pending.push((i, Instant::now() + opts.elastic_backoff));
                }
            }
        }
        if !pending.is_empty() {
            if replicas.iter().any(ReplicaProcess::succeeded) {
                // The group completed meanwhile: nothing left to join.
                pending.clear();
            }
            let now = Instant::now();
            for (i, _) in pending.iter().filter(|(_, at)| *at <= now) {
                replicas[*i] = start_again(replicas, *i, respawn, grace)?;
            }
            pending.retain(|(_, at)| *at > now);
        }
        if goes_on {
            thread::sleep(POLL);
            continue;
        }
        let lost_peers = |i: &usize| {
            replicas[*i]
                .outcome
                .as_ref()
                .is_some_and(Exit::lost_its_peers)
        };
        if !failed.is_empty() && failed.iter().all(lost_peers) {
            settle(replicas, &mut failed);
        }
        // Every replica in `failed` has its outcome (its poll returned one).
        let outcomes: Vec<(usize, &Exit)> = failed
            .iter()
            .filter_map(|&i| Some((replicas[i].rank, replicas[i].outcome.as_ref()?)))
            .collect();
        if let Some(i) = culprit(&outcomes).map(|k| failed[k]) {
            let failure = replicas[i].failure();
            let running = running_ranks(replicas);
            let others = if running.is_empty() {
                "no other rank is running".to_string()
            } else {
                format!("stopping ranks {}", rank_list(&running))
            };
            eprintln!(
                "ddp-trainer: rank {} (pid {}) {}; {others} — see {}",
                failure.rank,
                failure.pid,
                failure.exit.describe(),
                failure.log.display()
            );
            stop(replicas, grace);
            return Ok(Ended::Failed(failure));
        }
        if replicas.iter().all(|r| !r.running()) {
            return Ok(Ended::Completed);
        }
        if opts.elastic_min.is_some() && replicas.iter().any(|r| r.succeeded()) {
            // The group completed without the replicas still running: those were left out (a
            // stopped process, a host that stopped answering). They get `grace` to end.
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline && replicas.iter().any(|r| r.running()) {
                thread::sleep(POLL);
                for r in replicas.iter_mut() {
                    let _ = r.poll();
                }
            }
            let left = running_ranks(replicas);
            if !left.is_empty() {
                eprintln!(
                    "ddp-trainer: the run completed without ranks {}, which were left out of \
                     the group; stopping them",
                    rank_list(&left)
                );
                stop(replicas, Duration::ZERO);
            }
            return Ok(Ended::Completed);
        }
        thread::sleep(POLL);
    }
}

/// Starts local replica `i` again to join the group; when that fails, stops the others.
fn start_again(
    replicas: &mut [ReplicaProcess],
    i: usize,
    respawn: &mut dyn FnMut(usize) -> Result<ReplicaProcess>,
    grace: Duration,
) -> Result<ReplicaProcess> {
    respawn(i).inspect_err(|_| stop(replicas, grace))
}

/// Brings an elastic launch to `wanted` running replicas ([`elastic::scale`]): asks the highest
/// to leave at the next step boundary (SIGUSR1), or starts missing ones to join.
fn scale_to(
    replicas: &mut [ReplicaProcess],
    wanted: usize,
    min: usize,
    respawn: &mut dyn FnMut(usize) -> Result<ReplicaProcess>,
    grace: Duration,
) -> Result<()> {
    let slots: Vec<Slot> = replicas
        .iter()
        .map(|r| match (r.running(), r.leaving) {
            (true, false) => Slot::Running,
            (true, true) => Slot::Leaving,
            (false, _) => Slot::Ended,
        })
        .collect();
    for action in elastic::scale(&slots, wanted, min) {
        match action {
            Action::Leave(i) => {
                eprintln!(
                    "ddp-trainer: scaling to {wanted} replicas: rank {} leaves at the next step",
                    replicas[i].rank
                );
                replicas[i].leaving = true;
                signal_group(replicas[i].pid, libc::SIGUSR1);
            }
            Action::Start(i) => {
                eprintln!(
                    "ddp-trainer: scaling to {wanted} replicas: starting rank {} to join",
                    replicas[i].rank
                );
                replicas[i] = start_again(replicas, i, respawn, grace)?;
            }
        }
    }
    Ok(())
}

/// Whether an elastic run goes on: at least `min` replicas are running or exited with 0.
fn elastic_goes_on(replicas: &[ReplicaProcess], min: usize) -> bool {
    let alive = replicas
        .iter()
        .filter(|r| r.running() || r.outcome.as_ref().is_some_and(Exit::success))
        .count();
    alive >= min
}

/// Polls the running replicas for up to [`SETTLE`], adding those that fail on their own to
/// `failed`, until one fails for a reason other than a lost peer or none is left running.
fn settle(replicas: &mut [ReplicaProcess], failed: &mut Vec<usize>) {
    let deadline = Instant::now() + SETTLE;
    while Instant::now() < deadline && replicas.iter().any(|r| r.running()) {
        thread::sleep(POLL);
        for (i, replica) in replicas.iter_mut().enumerate() {
            if replica.running() && replica.poll().is_some_and(|o| !o.success()) {
                failed.push(i);
                if !replica.outcome.as_ref().is_some_and(Exit::lost_its_peers) {
                    return;
                }
            }
        }
    }
}

/// SIGTERM to every running replica's group, SIGKILL to those still running after `grace`, and
/// reaps them all.
fn stop(replicas: &mut [ReplicaProcess], grace: Duration) {
    for replica in replicas.iter().filter(|r| r.running()) {
        signal_group(replica.pid, libc::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    loop {
        for replica in replicas.iter_mut() {
            replica.poll();
        }
        let now = Instant::now();
        if replicas.iter().all(|r| !r.running()) || now >= deadline {
            break;
        }
        thread::sleep(POLL.min(deadline - now));
    }
    for replica in replicas.iter_mut().filter(|r| r.running()) {
        eprintln!(
            "ddp-trainer: rank {} (pid {}) still running {grace:?} after SIGTERM; sending SIGKILL",
            replica.rank, replica.pid
        );
        signal_group(replica.pid, libc::SIGKILL);
        replica.reap();
    }
}

#[cfg(test)]
mod tests;
