//! Starting a replica: the torchrun environment, one process group per replica, and
//! `PR_SET_PDEATHSIG(SIGKILL)` so that no replica outlives the launcher; then reaping it.

use std::fs::OpenOptions;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::exit::{Exit, ReplicaFailure};
use super::options::LaunchOptions;
use super::output::{Echo, log_path, pump};
use crate::error::{Error, Result};

/// What every replica shares.
pub(super) struct World<'a> {
    pub(super) opts: &'a LaunchOptions,
    pub(super) port: u16,
    pub(super) threads: usize,
    pub(super) restart_count: String,
    /// The launcher (of node 0) serves the store: the replicas only connect to it.
    pub(super) store_elsewhere: bool,
}

/// One started replica.
pub(super) struct ReplicaProcess {
    pub(super) rank: usize,
    pub(super) pid: u32,
    child: Child,
    pub(super) log: PathBuf,
    /// Set once the replica has been reaped.
    pub(super) outcome: Option<Exit>,
    /// Asked to leave its elastic group (SIGUSR1).
    pub(super) leaving: bool,
    /// Failed in an elastic run that went on without it.
    pub(super) left_behind: bool,
}

/// Starts local replica `local` (global rank `node_rank × nproc + local`) with its environment,
/// its own process group and the parent-death signal; pushes its two output threads onto
/// `readers`. A `joining` replica joins an elastic group under way.
pub(super) fn spawn(
    world: &World,
    local: usize,
    joining: bool,
    readers: &mut Vec<JoinHandle<()>>,
) -> Result<ReplicaProcess> {
    let opts = world.opts;
    let rank = opts.node_rank * opts.nproc + local;
    let log = log_path(&opts.out_dir, rank);
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| Error::io(&log, e))?;
    let file = Arc::new(Mutex::new(file));

    let mut cmd = Command::new(&opts.program);
    cmd.args(&opts.args)
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", (opts.nnodes * opts.nproc).to_string())
        .env("LOCAL_RANK", local.to_string())
        .env("LOCAL_WORLD_SIZE", opts.nproc.to_string())
        .env("GROUP_RANK", opts.node_rank.to_string())
        .env("MASTER_ADDR", &opts.master_addr)
        .env("MASTER_PORT", world.port.to_string())
        .env("TORCHELASTIC_RESTART_COUNT", &world.restart_count)
        .env("RAYON_NUM_THREADS", world.threads.to_string())
        .env("DDP_THREADS", world.threads.to_string())
        // The replicas' startup line names `ddp` as their launcher rather than torchrun, whose
        // variables are set above.
        .env(crate::env::LAUNCHER_NAME_VARIABLE, crate::env::DDP_LAUNCHER)
        .env(
            crate::env::STORE_ELSEWHERE_VARIABLE,
            if world.store_elsewhere { "1" } else { "0" },
        )
        .env(crate::env::JOIN_VARIABLE, if joining { "1" } else { "0" })
        .envs(opts.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group: teardown reaches what the replica started, and a terminal's
        // Ctrl-C reaches only the launcher, which then stops the replicas in order.
        .process_group(0);
    let launcher = unsafe { libc::getpid() };
    // SAFETY: the closure only makes async-signal-safe calls (prctl, getppid).
    unsafe {
        cmd.pre_exec(move || {
            #[cfg(target_os = "linux")]
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // The launcher died before prctl: the signal will never come, so do not start.
            if libc::getppid() != launcher {
                return Err(io::Error::other("the launcher exited"));
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| Error::io(&opts.program, e))?;
    let pid = child.id();
    if let Some(hook) = &opts.on_spawn {
        (hook.0)(rank, pid);
    }
    if let Some(stdout) = child.stdout.take() {
        let echo = if local == 0 && opts.echo {
            Echo::Stdout
        } else {
            Echo::None
        };
        readers.push(pump(
            stdout,
            rank,
            "stdout",
            file.clone(),
            log.clone(),
            echo,
        )?);
    }
    if let Some(stderr) = child.stderr.take() {
        readers.push(pump(
            stderr,
            rank,
            "stderr",
            file,
            log.clone(),
            if opts.echo {
                Echo::StderrPrefixed
            } else {
                Echo::None
            },
        )?);
    }
    Ok(ReplicaProcess {
        rank,
        pid,
        child,
        log,
        outcome: None,
        leaving: false,
        left_behind: false,
    })
}

impl ReplicaProcess {
    /// The replica as a failure to report: how it ended (unknown while it runs).
    pub(super) fn failure(&self) -> ReplicaFailure {
        ReplicaFailure {
            rank: self.rank,
            pid: self.pid,
            exit: self.outcome.clone().unwrap_or(Exit::Lost(String::new())),
            log: self.log.clone(),
        }
    }

    /// Whether it has exited with 0.
    pub(super) fn succeeded(&self) -> bool {
        self.outcome.as_ref().is_some_and(Exit::success)
    }

    /// No longer one of the group: failed and left behind by an elastic run, or left it on
    /// request.
    pub(super) fn out_of_group(&self) -> bool {
        self.left_behind || self.outcome.as_ref().is_some_and(Exit::left)
    }

    pub(super) fn running(&self) -> bool {
        self.outcome.is_none()
    }

    /// Reaps the replica if it has ended. Before reaping, its process group is killed: whatever
    /// it left running goes with it, and its pid (the group id) cannot be reused meanwhile.
    pub(super) fn poll(&mut self) -> Option<&Exit> {
        if self.outcome.is_none() {
            // SAFETY: plain syscall on our own child; `info` is a zeroed out-parameter.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
            let rc = unsafe { libc::waitid(libc::P_PID, self.pid, &mut info, flags) };
            if rc == 0 {
                if unsafe { info.si_pid() } == 0 {
                    return None;
                }
                signal_group(self.pid, libc::SIGKILL);
            }
            self.outcome = match self.child.try_wait() {
                Ok(Some(status)) => Some(Exit::from_status(status)),
                Ok(None) => None,
                Err(e) => Some(Exit::Lost(e.to_string())),
            };
        }
        self.outcome.as_ref()
    }

    /// Blocks until the replica ends (after SIGKILL).
    pub(super) fn reap(&mut self) {
        if self.running() {
            self.outcome = Some(match self.child.wait() {
                Ok(status) => Exit::from_status(status),
                Err(e) => Exit::Lost(e.to_string()),
            });
        }
    }
}

/// Sends `signal` to the replica's process group, or to the replica alone if it left its group.
pub(super) fn signal_group(pid: u32, signal: i32) {
    let pid = pid as libc::pid_t;
    // SAFETY: plain syscalls; `pid` is our unreaped child, so neither id can have been reused.
    unsafe {
        if libc::kill(-pid, signal) != 0 {
            libc::kill(pid, signal);
        }
    }
}
