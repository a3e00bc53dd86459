//! The `ddp-trainer` command line: one data-parallel replica, placed by the launcher's environment
//! (torchrun, Slurm, Open MPI, or none = world of 1); with `--standalone --nproc N` a local
//! launcher that starts N replicas of itself, and in a Kubeflow pod (`PET_*` variables) the
//! launcher of that node's replicas. In the library so that other binaries (the `ddp`
//! supervisor) can run replicas of themselves with exactly the same contract.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

use clap::Parser;

use crate::env::{DistEnv, NodeWorld, Role};
use crate::error::{EXIT_CONFIG, EXIT_FAILURE, EXIT_STOPPED};
use crate::launcher::{Ended, LaunchOptions, StopCause, launch_ended};
use crate::spec::Spec;
use crate::step::batch_parts;
use crate::train::{self, LEAVE_REQUESTED, PauseAt, STOP_REQUESTED, TrainOptions};

/// The command line of one replica (or, with `--standalone`, of the local launcher): the one
/// contract every launcher starts a replica with — the supervisor of a local run, the local
/// launcher itself, a Slurm job's `srun` line and a Kubernetes pod's command. Parsed here by
/// [`ReplicaArgs::parse_from`] and written by [`ReplicaArgs::to_args`], which round-trip.
#[derive(Parser, Debug, Clone, PartialEq, Eq)]
#[command(
    name = "ddp-trainer",
    version,
    about = "Train a candle model data-parallel (one process per replica)"
)]
pub struct ReplicaArgs {
    /// Experiment spec (TOML), e.g. examples/mnist.toml.
    pub spec: PathBuf,
    /// Run folder: metrics/, checkpoints/, tb/, logs/, model.safetensors.
    #[arg(long)]
    pub out: PathBuf,
    /// Override a spec key, e.g. --set train.lr=0.01 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// Continue from the newest complete checkpoint in OUT/checkpoints (none yet: from the start).
    #[arg(long)]
    pub resume: bool,
    /// Launch the replicas locally (free port, per-rank logs in OUT/logs, all stopped if one fails).
    #[arg(long)]
    pub standalone: bool,
    /// Number of local replicas with --standalone (default: ddp.replicas of the spec).
    #[arg(long, requires = "standalone")]
    pub nproc: Option<usize>,
    /// Serve an elastic run's store for WORLD replicas at MASTER_ADDR:MASTER_PORT (with
    /// DDP_TOKEN) until SIGTERM, instead of training: where no replica's loss takes it down
    /// (a Slurm job's batch step, beside srun).
    #[arg(long, value_name = "WORLD", conflicts_with = "standalone")]
    pub serve_store: Option<usize>,
    /// Pause after epoch N or global step N (`epoch:N`, `step:N`): validated and checkpointed
    /// there, not tested; rank 0 writes OUT/paused.json and `--resume` goes on.
    #[arg(long, value_name = "epoch:N|step:N")]
    pub pause_at: Option<PauseAt>,
}

impl ReplicaArgs {
    /// One replica training `spec` into `out`, from the start.
    pub fn new(spec: impl Into<PathBuf>, out: impl Into<PathBuf>) -> Self {
        ReplicaArgs {
            spec: spec.into(),
            out: out.into(),
            overrides: Vec::new(),
            resume: false,
            standalone: false,
            nproc: None,
            serve_store: None,
            pause_at: None,
        }
    }

    /// The same, continuing from the newest checkpoint when `resume`.
    pub fn resuming(mut self, resume: bool) -> Self {
        self.resume = resume;
        self
    }

    /// The arguments after the program name (what [`ReplicaArgs::parse_from`] reads back).
    pub fn to_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![self.spec.clone().into(), "--out".into()];
        args.push(self.out.clone().into());
        for o in &self.overrides {
            args.push("--set".into());
            args.push(o.into());
        }
        if self.resume {
            args.push("--resume".into());
        }
        if self.standalone {
            args.push("--standalone".into());
        }
        if let Some(n) = self.nproc {
            args.push("--nproc".into());
            args.push(n.to_string().into());
        }
        if let Some(w) = self.serve_store {
            args.push("--serve-store".into());
            args.push(w.to_string().into());
        }
        if let Some(p) = self.pause_at {
            args.push("--pause-at".into());
            args.push(p.to_string().into());
        }
        args
    }

    /// [`ReplicaArgs::to_args`] as strings (for a script or a manifest; paths are made UTF-8
    /// lossily, which is why the launchers of this crate pass [`ReplicaArgs::to_args`]).
    pub fn to_strings(&self) -> Vec<String> {
        self.to_args()
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    /// The arguments of one of the replicas this launcher starts: the same run, not standalone.
    pub fn for_replica(&self) -> Self {
        ReplicaArgs {
            standalone: false,
            nproc: None,
            ..self.clone()
        }
    }

    /// Parses a replica's command line: the arguments after the program name.
    pub fn parse_from<I, T>(args: I) -> std::result::Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        Self::try_parse_from(
            std::iter::once(OsString::from("ddp-trainer")).chain(args.into_iter().map(Into::into)),
        )
    }
}

/// `ddp-trainer`'s main: parses the process arguments.
pub fn main() -> ExitCode {
    run_args(ReplicaArgs::parse())
}

/// The replica (or, with `--standalone`, the local launcher, which starts replicas of the
/// current executable with the same arguments).
pub fn run_args(args: ReplicaArgs) -> ExitCode {
    ExitCode::from(run_status(args, &[]))
}

/// [`run_args`] in an executable that runs a replica as a sub-command (`ddp __replica ...`):
/// the replicas a launcher starts (`--standalone`, a Kubeflow or Spark node) get `command`
/// before their arguments.
pub fn run_args_as(args: ReplicaArgs, command: &[&str]) -> ExitCode {
    let command: Vec<OsString> = command.iter().map(OsString::from).collect();
    ExitCode::from(run_status(args, &command))
}

/// [`main`]'s exit status as a number (for [`crate::main_with`], which exits the process).
pub fn main_status() -> u8 {
    run_status(ReplicaArgs::parse(), &[])
}

fn run_status(args: ReplicaArgs, command: &[OsString]) -> u8 {
    if !args.standalone {
        // First, so that a stop request during start-up is kept for the first step.
        install_stop_handler();
    }
    if let Some(world) = args.serve_store {
        return serve_store(world);
    }
    let spec = match Spec::load(&args.spec, &args.overrides) {
        Ok(s) => s,
        Err(e) => return fail(&format!("ddp-trainer: {e}"), e.exit_code()),
    };
    if args.standalone {
        let nproc = args.nproc.unwrap_or(spec.ddp.replicas);
        return launch_replicas(&args, command, &spec, nproc, None);
    }
    let env = match Role::from_env() {
        Ok(Role::Replica(e)) => e,
        Ok(Role::Node(node)) => {
            if let (Some(min), None) = (node.min_nodes, spec.ddp.elastic) {
                return fail(
                    &format!(
                        "ddp-trainer: environment variable PET_NNODES: is {min}:{} (an elastic job, \
                         the job's elasticPolicy) but the spec trains a fixed world: set \
                         ddp.elastic.min_replicas in {} (the replicas that must remain), or remove \
                         the job's elasticPolicy",
                        node.nnodes,
                        args.spec.display()
                    ),
                    EXIT_CONFIG,
                );
            }
            println!(
                "{} | {} | out {}",
                spec.name,
                node.describe(),
                args.out.display()
            );
            return launch_replicas(&args, command, &spec, node.nproc_per_node, Some(&node));
        }
        Err(e) => return fail(&format!("ddp-trainer: {e}"), e.exit_code()),
    };
    set_threads(&spec, &env);
    let rank = env.rank;
    // Every replica says who it is first, so each per-rank log starts with its place.
    println!(
        "{} | {} | out {}",
        spec.name,
        env.describe(),
        args.out.display()
    );
    let token = std::env::var("DDP_TOKEN").ok().filter(|t| !t.is_empty());
    let result = train::run(TrainOptions {
        spec,
        out: args.out.clone(),
        resume: args.resume,
        env,
        token,
        pause_at: args.pause_at,
    });
    match result {
        Ok(s) if s.stopped => EXIT_STOPPED as u8,
        Ok(_) => 0,
        Err(e) => fail(&format!("ddp-trainer: rank {rank}: {e}"), e.exit_code()),
    }
}

/// `--serve-store WORLD`: the store of an elastic run at MASTER_ADDR:MASTER_PORT until SIGTERM.
fn serve_store(world: usize) -> u8 {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let (Some(addr), Some(port)) = (var("MASTER_ADDR"), var("MASTER_PORT")) else {
        return fail(
            "ddp-trainer: --serve-store needs MASTER_ADDR and MASTER_PORT (where the replicas \
             look for the store)",
            EXIT_CONFIG,
        );
    };
    let Ok(port) = port.trim().parse::<u16>() else {
        return fail(
            &format!("ddp-trainer: MASTER_PORT={port:?} is not a port"),
            EXIT_CONFIG,
        );
    };
    let server = match crate::dist::store::StoreServer::bind(&addr, port, world, var("DDP_TOKEN")) {
        Ok(s) => s,
        Err(e) => return fail(&format!("ddp-trainer: {e}"), e.exit_code()),
    };
    println!("serving the elastic run's store at {addr}:{port} for {world} replicas");
    while !STOP_REQUESTED.load(Ordering::SeqCst) {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    drop(server);
    0
}

/// The local launcher: `nproc` replicas of this executable with the same arguments (after
/// `command`, its sub-command, if any), on one node (`--standalone`: free port on 127.0.0.1) or
/// as `node` of a Kubeflow job or a Spark task (its rendezvous).
fn launch_replicas(
    args: &ReplicaArgs,
    command: &[OsString],
    spec: &Spec,
    nproc: usize,
    node: Option<&NodeWorld>,
) -> u8 {
    if nproc == 0 {
        return fail("ddp-trainer: --nproc must be at least 1", EXIT_CONFIG);
    }
    let program = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            return fail(
                &format!("ddp-trainer: cannot find my own executable: {e}"),
                EXIT_FAILURE,
            );
        }
    };
    let mut opts = LaunchOptions::for_spec(spec, nproc, program, &args.out);
    opts.args = command.to_vec();
    opts.args.extend(args.for_replica().to_args());
    if let Some(node) = node {
        opts.nnodes = node.nnodes;
        opts.node_rank = node.node_rank;
        opts.master_addr = node.master_addr.clone();
        opts.master_port = Some(node.master_port);
    }
    match launch_ended(&opts) {
        Ok(Ended::Completed | Ended::Paused { .. }) => 0,
        Ok(Ended::Stopped(request)) => {
            let on = match request {
                StopCause::Signal { signal, .. } => {
                    format!("{} to the launcher", crate::launcher::signal_name(signal))
                }
                StopCause::Replica(_) => "a signal to the replicas".to_string(),
            };
            eprintln!(
                "ddp-trainer: stopped on {on}: every replica finished the same step and its checkpoint is written; --resume continues"
            );
            EXIT_STOPPED as u8
        }
        Ok(ended) => match ended.into_result() {
            Ok(()) => 0,
            Err(e) => fail(&format!("ddp-trainer: {e}"), e.exit_code()),
        },
        Err(e) => fail(&format!("ddp-trainer: {e}"), e.exit_code()),
    }
}

/// CPU threads per replica: RAYON_NUM_THREADS if the launcher set it, else `ddp.threads`, else
/// DDP_THREADS, else cores / local world size. candle's CPU kernels read RAYON_NUM_THREADS.
/// How many times candle's element-wise worker threads spin before parking, unless
/// `CANDLE_BARRIER_POOL_SPIN_LIMIT` says otherwise. candle's default (25,000 pauses, about half a
/// millisecond after every element-wise op) keeps a core busy between ops, taken from the
/// convolution threads.
const CANDLE_SPIN_LIMIT: &str = "200";

fn set_threads(spec: &Spec, env: &DistEnv) {
    if std::env::var_os("CANDLE_BARRIER_POOL_SPIN_LIMIT").is_none() {
        // SAFETY: called at start-up, before any thread of ours or candle's exists.
        unsafe { std::env::set_var("CANDLE_BARRIER_POOL_SPIN_LIMIT", CANDLE_SPIN_LIMIT) };
    }
    let threads = match std::env::var("RAYON_NUM_THREADS") {
        Ok(v) => v.trim().parse().unwrap_or(1),
        Err(_) => default_threads(spec, env),
    };
    // The device is not open yet: counted as the CPU (on a GPU, candle's CPU pool hardly works).
    let parts = batch_parts::for_replica(threads, spec.model.name, true);
    if parts > 1 && std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        // Each thread trains its own part of the batch: candle's element-wise ops run on that
        // thread, not on a second pool whose one lock the parts would queue at.
        // SAFETY: called at start-up, before any thread of ours or candle's exists.
        unsafe { std::env::set_var("CANDLE_NUM_THREADS", "1") };
    }
}

/// Threads of one replica unless `RAYON_NUM_THREADS` says: `ddp.threads`, `DDP_THREADS`, or the
/// cores shared by the replicas of this host; sets `RAYON_NUM_THREADS` to it.
fn default_threads(spec: &Spec, env: &DistEnv) -> usize {
    let explicit = spec.ddp.threads.or_else(|| {
        std::env::var("DDP_THREADS")
            .ok()
            .and_then(|v| v.parse().ok())
    });
    let threads = crate::launcher::threads::per_replica(
        explicit,
        env.local_world_size,
        crate::launcher::threads::available_cores(),
    );
    // SAFETY: called at start-up, before any thread of ours or candle's exists.
    unsafe { std::env::set_var("RAYON_NUM_THREADS", threads.to_string()) };
    threads
}

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP_REQUESTED.store(true, Ordering::SeqCst);
}

/// SIGTERM, SIGINT and SIGUSR2 (Slurm's warning before a time limit or a preemption) ask every
/// replica to stop after the current step (agreed through the gradient all-reduce), so all ranks
/// stop at the same step, which rank 0 checkpoints.
fn install_stop_handler() {
    let handler = on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGTERM, handler);
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGUSR2, handler);
    }
    let leave = on_leave_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: as above.
    unsafe {
        libc::signal(libc::SIGUSR1, leave);
    }
}

/// SIGUSR1 asks this replica to leave its elastic group at the next step boundary (the
/// launcher's `ddp scale` down); outside an elastic run it is ignored.
extern "C" fn on_leave_signal(_: libc::c_int) {
    LEAVE_REQUESTED.store(true, Ordering::SeqCst);
}

fn fail(msg: &str, code: i32) -> u8 {
    eprintln!("{msg}");
    code.clamp(1, 255) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_args_round_trip() {
        let mut every = ReplicaArgs::new("/ws/runs/a b/spec.toml", "/ws/runs/a b").resuming(true);
        every.overrides = vec!["train.lr=0.01".into(), "model.name=mlp".into()];
        every.standalone = true;
        every.nproc = Some(3);
        every.pause_at = Some(PauseAt::Epoch(3));
        for args in [
            ReplicaArgs::new("spec.toml", "out"),
            ReplicaArgs::new("spec.toml", "out").resuming(true),
            every.clone(),
            every.for_replica(),
        ] {
            assert_eq!(ReplicaArgs::parse_from(args.to_args()).unwrap(), args);
        }
        let child = every.for_replica();
        assert!(!child.standalone && child.nproc.is_none() && child.resume);
        assert_eq!(child.overrides, every.overrides);
    }

    #[test]
    fn a_replica_command_line_reads_as_the_launchers_write_it() {
        let a = ReplicaArgs::parse_from(["s.toml", "--out", "o", "--resume"]).unwrap();
        assert_eq!(a, ReplicaArgs::new("s.toml", "o").resuming(true));
        assert_eq!(
            ReplicaArgs::new("s.toml", "o").resuming(true).to_strings(),
            ["s.toml", "--out", "o", "--resume"]
        );
        assert!(
            ReplicaArgs::parse_from(["s.toml"]).is_err(),
            "--out is required"
        );
        assert!(ReplicaArgs::parse_from(["s.toml", "--out", "o", "--nproc", "2"]).is_err());
    }
}
