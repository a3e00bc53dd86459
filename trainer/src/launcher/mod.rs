//! `ddp-trainer --standalone --nproc N`: a local launcher that starts N replicas of a program with
//! torchrun's variables, keeps their output, and stops them all as soon as one fails.
//!
//! Layout:
//! - [`LaunchOptions`], [`launch`]: the entry point.
//! - spawning (`spawn`): the torchrun environment, one process group per replica, and
//!   `PR_SET_PDEATHSIG(SIGKILL)` so that no replica outlives the launcher.
//! - output (`pump`, `drain`): one reader thread per stream writing whole lines to
//!   `logs/rank-R.log` (appended) and echoing rank 0's stdout and every rank's stderr (prefixed
//!   `[rank R] `).
//! - supervision (`supervise`, `stop`): polling, the failure report, and teardown (SIGTERM to each
//!   replica's process group, SIGKILL after the grace).
//! - signals (`SignalHandlers`): SIGINT/SIGTERM on the launcher ask the supervisor to stop.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::error::{EXIT_CONFIG, Error, Result};

/// Default time between SIGTERM and SIGKILL when the replicas are stopped.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);
/// How often the supervisor looks at the replicas.
const POLL: Duration = Duration::from_millis(50);
/// Longer output lines are cut into pieces of this size.
const MAX_LINE: u64 = 64 * 1024;
/// How long to wait for the output threads once every replica is gone (a process that left the
/// replica's process group may still hold its pipes).
const DRAIN: Duration = Duration::from_secs(2);

/// What [`launch`] starts.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// Number of replicas, ranks `0..nproc`.
    pub nproc: usize,
    /// The replica program (normally `ddp-trainer` itself) and its arguments.
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// Logs go to `out_dir/logs/rank-R.log`.
    pub out_dir: PathBuf,
    /// `MASTER_ADDR` for the replicas.
    pub master_addr: String,
    /// `MASTER_PORT`; `None` picks a free port.
    pub master_port: Option<u16>,
    /// `RAYON_NUM_THREADS` / `DDP_THREADS`; `None` gives `max(1, cores / nproc)`.
    pub threads_per_replica: Option<usize>,
    /// Extra variables for every replica, set last (they override the launcher's).
    pub env: Vec<(String, String)>,
    /// Time between SIGTERM and SIGKILL when the replicas are stopped.
    pub grace: Duration,
    /// Echo rank 0's stdout and every rank's stderr to the launcher's own streams (off when the
    /// launcher's output already goes to a log, as for the `ddp` supervisor).
    pub echo: bool,
    /// Called with (rank, pid) for every replica started.
    pub on_spawn: Option<SpawnHook>,
}

/// A callback told about every replica the launcher starts.
#[derive(Clone)]
pub struct SpawnHook(pub Arc<dyn Fn(usize, u32) + Send + Sync>);

impl std::fmt::Debug for SpawnHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SpawnHook(..)")
    }
}

impl LaunchOptions {
    /// `nproc` replicas of `program` with the defaults: 127.0.0.1, a free port, cores / nproc
    /// threads each, no extra variables, [`DEFAULT_GRACE`].
    pub fn new(nproc: usize, program: impl Into<PathBuf>, out_dir: impl Into<PathBuf>) -> Self {
        LaunchOptions {
            nproc,
            program: program.into(),
            args: Vec::new(),
            out_dir: out_dir.into(),
            master_addr: "127.0.0.1".to_string(),
            master_port: None,
            threads_per_replica: None,
            env: Vec::new(),
            grace: DEFAULT_GRACE,
            echo: true,
            on_spawn: None,
        }
    }
}

/// Starts `opts.nproc` replicas and waits for them. `Ok(())` when every replica exits with 0.
///
/// When a replica exits non-zero or is killed, the others get SIGTERM, SIGKILL after
/// `opts.grace`, and the result is [`Error::Replica`] naming the first failure. SIGINT or SIGTERM
/// on the launcher stops the replicas the same way and returns [`Error::Launch`].
pub fn launch(opts: &LaunchOptions) -> Result<()> {
    let _handlers = SignalHandlers::install()?;
    run(opts, &INTERRUPTED)
}

/// [`launch`] with the interrupt flag as a parameter (a signal number, 0 while not interrupted).
fn run(opts: &LaunchOptions, interrupted: &AtomicI32) -> Result<()> {
    if opts.nproc == 0 {
        return Err(Error::Launch("--nproc must be at least 1".to_string()));
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
    let threads = opts
        .threads_per_replica
        .unwrap_or_else(|| default_threads(opts.nproc))
        .max(1);
    let logs = opts.out_dir.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| Error::io(&logs, e))?;
    let restart_count = std::env::var("TORCHELASTIC_RESTART_COUNT")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "0".to_string());
    let world = World {
        opts,
        port,
        threads,
        restart_count,
    };

    let mut replicas = Vec::with_capacity(opts.nproc);
    let mut readers = Vec::with_capacity(2 * opts.nproc);
    for rank in 0..opts.nproc {
        match spawn(&world, rank, &mut readers) {
            Ok(replica) => replicas.push(replica),
            Err(e) => {
                stop(&mut replicas, opts.grace);
                drain(readers);
                return Err(e);
            }
        }
    }
    let result = supervise(&mut replicas, opts.grace, interrupted);
    drain(readers);
    result
}

/// What every replica shares.
struct World<'a> {
    opts: &'a LaunchOptions,
    port: u16,
    threads: usize,
    restart_count: String,
}

/// The lowest port a rendezvous port is picked from (below the kernel's ephemeral range).
const LOWEST_PICKED_PORT: u16 = 10_000;

/// A free port on 127.0.0.1 for a local world's rendezvous, outside the kernel's ephemeral
/// range (`/proc/sys/net/ipv4/ip_local_port_range`). A port from `bind(:0)` is only free for a
/// moment: until rank 0 binds it, any other process's listener on port 0 or outgoing
/// connection may be given the same port (seen in CI, with tests running side by side). A
/// port below the ephemeral range is never handed out that way; a bind checks it is free now.
/// Falls back to `bind(:0)` where the range leaves no room below it.
pub fn free_port() -> Result<u16> {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768);
    let mut seed = [0u8; 8];
    let _ = getrandom::fill(&mut seed);
    for port in picked_ports(low, u64::from_le_bytes(seed)).take(64) {
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| Error::Launch(format!("cannot pick a free port on 127.0.0.1: {e}")))
}

/// Ports to try, from `seed`, in `LOWEST_PICKED_PORT..ephemeral_low` (none if that is empty).
fn picked_ports(ephemeral_low: u16, seed: u64) -> impl Iterator<Item = u16> {
    let span = ephemeral_low.saturating_sub(LOWEST_PICKED_PORT) as u64;
    let mut x = seed | 1;
    (0..).map_while(move |_| {
        // xorshift64: a different sequence per launcher, so two launchers rarely collide.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (span > 0).then(|| LOWEST_PICKED_PORT + (x % span) as u16)
    })
}

/// `max(1, cores / nproc)`.
pub fn default_threads(nproc: usize) -> usize {
    let cores = thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    (cores / nproc.max(1)).max(1)
}

/// One started replica.
struct Replica {
    rank: usize,
    pid: u32,
    child: Child,
    log: PathBuf,
    /// Set once the replica has been reaped.
    outcome: Option<Outcome>,
}

/// Starts rank `rank` with its environment, its own process group and the parent-death signal;
/// pushes its two output threads onto `readers`.
fn spawn(world: &World, rank: usize, readers: &mut Vec<JoinHandle<()>>) -> Result<Replica> {
    let opts = world.opts;
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
        .env("WORLD_SIZE", opts.nproc.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .env("LOCAL_WORLD_SIZE", opts.nproc.to_string())
        .env("GROUP_RANK", "0")
        .env("MASTER_ADDR", &opts.master_addr)
        .env("MASTER_PORT", world.port.to_string())
        .env("TORCHELASTIC_RESTART_COUNT", &world.restart_count)
        .env("RAYON_NUM_THREADS", world.threads.to_string())
        .env("DDP_THREADS", world.threads.to_string())
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
        let echo = if rank == 0 && opts.echo {
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
    Ok(Replica {
        rank,
        pid,
        child,
        log,
        outcome: None,
    })
}

/// Where a stream's lines go besides the log.
#[derive(Clone, Copy)]
enum Echo {
    None,
    Stdout,
    StderrPrefixed,
}

/// Copies `stream` line by line to the rank's log (whole lines under the log's lock, so that
/// stdout and stderr never mix within a line) and to the echo.
fn pump(
    stream: impl Read + Send + 'static,
    rank: usize,
    name: &str,
    file: Arc<Mutex<File>>,
    log: PathBuf,
    echo: Echo,
) -> Result<JoinHandle<()>> {
    let body = move || {
        let mut reader = BufReader::new(stream);
        let mut line = Vec::new();
        let mut log_failed = false;
        loop {
            line.clear();
            match (&mut reader).take(MAX_LINE).read_until(b'\n', &mut line) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
            if line.last() != Some(&b'\n') {
                line.push(b'\n');
            }
            let written = file
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .write_all(&line);
            if let Err(e) = written
                && !log_failed
            {
                log_failed = true;
                eprintln!("ddp-trainer: cannot write {}: {e}", log.display());
            }
            // Echo failures (a closed terminal or pipe) must not stop the copy to the log.
            match echo {
                Echo::None => {}
                Echo::Stdout => {
                    let mut out = io::stdout().lock();
                    let _ = out.write_all(&line).and_then(|()| out.flush());
                }
                Echo::StderrPrefixed => {
                    let mut prefixed = format!("[rank {rank}] ").into_bytes();
                    prefixed.extend_from_slice(&line);
                    let _ = io::stderr().lock().write_all(&prefixed);
                }
            }
        }
    };
    thread::Builder::new()
        .name(format!("rank-{rank}-{name}"))
        .spawn(body)
        .map_err(|e| {
            Error::Launch(format!(
                "cannot start the {name} reader of rank {rank}: {e}"
            ))
        })
}

/// Joins the output threads; one still blocked after [`DRAIN`] (its pipe is held by a process
/// that escaped the replica's process group) is left behind with a warning.
fn drain(readers: Vec<JoinHandle<()>>) {
    let deadline = Instant::now() + DRAIN;
    while readers.iter().any(|r| !r.is_finished()) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    for reader in readers {
        if reader.is_finished() {
            let _ = reader.join();
        } else {
            let name = reader.thread().name().unwrap_or("reader").to_string();
            eprintln!(
                "ddp-trainer: {name} is still open after its replica exited \
                 (a process it started holds it); not waiting for it"
            );
        }
    }
}

/// How a replica ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Exited(i32),
    Signaled {
        signal: i32,
        core_dumped: bool,
    },
    /// `wait` failed: the status is unknown.
    Lost(String),
}

impl Outcome {
    fn from_status(status: ExitStatus) -> Outcome {
        match (status.code(), status.signal()) {
            (Some(code), _) => Outcome::Exited(code),
            (None, Some(signal)) => Outcome::Signaled {
                signal,
                core_dumped: status.core_dumped(),
            },
            (None, None) => Outcome::Lost(format!("unrecognised status {status}")),
        }
    }

    fn success(&self) -> bool {
        *self == Outcome::Exited(0)
    }

    fn code(&self) -> Option<i32> {
        match self {
            Outcome::Exited(code) => Some(*code),
            _ => None,
        }
    }

    /// `exited with code 2`, `was killed by signal 9 (SIGKILL)`.
    fn describe(&self) -> String {
        match self {
            Outcome::Exited(code) => format!("exited with code {code}"),
            Outcome::Signaled {
                signal,
                core_dumped,
            } => format!(
                "was killed by signal {signal} ({}){}",
                signal_name(*signal),
                if *core_dumped { " and dumped core" } else { "" }
            ),
            Outcome::Lost(msg) => format!("could not be waited for ({msg})"),
        }
    }

    /// Among failures seen in the same poll, the likeliest root cause comes first: a replica
    /// killed by a signal (its peers then fail because it died), then a configuration error.
    fn blame_order(&self) -> u8 {
        match self {
            Outcome::Signaled { .. } => 0,
            Outcome::Exited(EXIT_CONFIG) => 1,
            _ => 2,
        }
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => "unnamed signal",
    }
}

impl Replica {
    fn running(&self) -> bool {
        self.outcome.is_none()
    }

    /// Reaps the replica if it has ended. Before reaping, its process group is killed: whatever
    /// it left running goes with it, and its pid (the group id) cannot be reused meanwhile.
    fn poll(&mut self) -> Option<&Outcome> {
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
                Ok(Some(status)) => Some(Outcome::from_status(status)),
                Ok(None) => None,
                Err(e) => Some(Outcome::Lost(e.to_string())),
            };
        }
        self.outcome.as_ref()
    }

    /// Blocks until the replica ends (after SIGKILL).
    fn reap(&mut self) {
        if self.running() {
            self.outcome = Some(match self.child.wait() {
                Ok(status) => Outcome::from_status(status),
                Err(e) => Outcome::Lost(e.to_string()),
            });
        }
    }
}

/// Sends `signal` to the replica's process group, or to the replica alone if it left its group.
fn signal_group(pid: u32, signal: i32) {
    let pid = pid as libc::pid_t;
    // SAFETY: plain syscalls; `pid` is our unreaped child, so neither id can have been reused.
    unsafe {
        if libc::kill(-pid, signal) != 0 {
            libc::kill(pid, signal);
        }
    }
}

/// `0, 2`.
fn rank_list(ranks: &[usize]) -> String {
    ranks
        .iter()
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn running_ranks(replicas: &[Replica]) -> Vec<usize> {
    replicas
        .iter()
        .filter(|r| r.running())
        .map(|r| r.rank)
        .collect()
}

/// Waits for the replicas; on the first failure or an interrupt, stops the rest.
fn supervise(replicas: &mut [Replica], grace: Duration, interrupted: &AtomicI32) -> Result<()> {
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
            return Err(Error::Launch(format!(
                "interrupted by {}; stopped ranks {}",
                signal_name(signal),
                rank_list(&running)
            )));
        }
        let mut failed: Vec<usize> = Vec::new();
        for (i, replica) in replicas.iter_mut().enumerate() {
            if replica.running() && replica.poll().is_some_and(|o| !o.success()) {
                failed.push(i);
            }
        }
        let culprit = failed.into_iter().min_by_key(|&i| {
            let outcome = replicas[i].outcome.as_ref().map_or(2, Outcome::blame_order);
            (outcome, replicas[i].rank)
        });
        if let Some(i) = culprit {
            let replica = &replicas[i];
            let outcome = replica
                .outcome
                .clone()
                .unwrap_or(Outcome::Lost(String::new()));
            let error = Error::Replica {
                rank: replica.rank,
                pid: replica.pid,
                status: outcome.describe(),
                code: outcome.code(),
                signal: match outcome {
                    Outcome::Signaled { signal, .. } => Some(signal),
                    _ => None,
                },
                log: replica.log.clone(),
            };
            let running = running_ranks(replicas);
            let others = if running.is_empty() {
                "no other rank is running".to_string()
            } else {
                format!("stopping ranks {}", rank_list(&running))
            };
            eprintln!(
                "ddp-trainer: rank {} (pid {}) {}; {others} — see {}",
                replicas[i].rank,
                replicas[i].pid,
                outcome.describe(),
                replicas[i].log.display()
            );
            stop(replicas, grace);
            return Err(error);
        }
        if replicas.iter().all(|r| !r.running()) {
            return Ok(());
        }
        thread::sleep(POLL);
    }
}

/// SIGTERM to every running replica's group, SIGKILL to those still running after `grace`, and
/// reaps them all.
fn stop(replicas: &mut [Replica], grace: Duration) {
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

/// The signal that interrupted the launcher, 0 while none did.
static INTERRUPTED: AtomicI32 = AtomicI32::new(0);

/// The installed handlers: put in place by the first of concurrent [`launch`]es, restored by the
/// last.
static HANDLERS: Mutex<Option<Installed>> = Mutex::new(None);

struct Installed {
    /// Launches running now.
    count: usize,
    /// The dispositions the handlers replaced.
    replaced: Vec<(i32, libc::sigaction)>,
}

extern "C" fn on_signal(signal: libc::c_int) {
    INTERRUPTED.store(signal, Ordering::SeqCst);
}

/// SIGINT/SIGTERM handlers for the duration of a launch. A signal the launcher was started with
/// ignored (`nohup`, a background job) stays ignored.
struct SignalHandlers;

impl SignalHandlers {
    fn install() -> Result<SignalHandlers> {
        let mut state = HANDLERS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(installed) = state.as_mut() {
            installed.count += 1;
            return Ok(SignalHandlers);
        }
        INTERRUPTED.store(0, Ordering::SeqCst);
        let mut replaced = Vec::new();
        for signal in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: sigaction with valid pointers; the handler only stores to an atomic.
            unsafe {
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(signal, std::ptr::null(), &mut old) == 0
                    && old.sa_sigaction == libc::SIG_IGN
                {
                    continue;
                }
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
                action.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                if libc::sigaction(signal, &action, &mut old) != 0 {
                    let e = io::Error::last_os_error();
                    restore(&replaced);
                    return Err(Error::Launch(format!(
                        "cannot handle {}: {e}",
                        signal_name(signal)
                    )));
                }
                replaced.push((signal, old));
            }
        }
        *state = Some(Installed { count: 1, replaced });
        Ok(SignalHandlers)
    }
}

impl Drop for SignalHandlers {
    fn drop(&mut self) {
        let mut state = HANDLERS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(installed) = state.as_mut() {
            installed.count -= 1;
            if installed.count == 0 {
                restore(&installed.replaced);
                *state = None;
            }
        }
    }
}

fn restore(replaced: &[(i32, libc::sigaction)]) {
    for (signal, old) in replaced {
        // SAFETY: `old` came from sigaction itself.
        unsafe { libc::sigaction(*signal, old, std::ptr::null_mut()) };
    }
}

/// `out_dir/logs/rank-R.log`.
pub fn log_path(out_dir: &Path, rank: usize) -> PathBuf {
    out_dir.join("logs").join(format!("rank-{rank}.log"))
}

#[cfg(test)]
mod tests;
