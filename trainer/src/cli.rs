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

use crate::batch_parts;
use crate::env::{DistEnv, NodeWorld, Placement};
use crate::error::{EXIT_CONFIG, EXIT_FAILURE, EXIT_STOPPED};
use crate::launcher::{Ended, LaunchOptions, launch_ended};
use crate::spec::Spec;
use crate::train::{self, RunOptions, STOP_REQUESTED};

#[derive(Parser, Debug)]
#[command(
    name = "ddp-trainer",
    version,
    about = "Train a candle model data-parallel (one process per replica)"
)]
pub struct Args {
    /// Experiment spec (TOML), e.g. examples/mnist.toml.
    spec: PathBuf,
    /// Run folder: metrics/, checkpoints/, tb/, logs/, model.safetensors.
    #[arg(long)]
    out: PathBuf,
    /// Override a spec key, e.g. --set train.lr=0.01 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// Continue from the newest complete checkpoint in OUT/checkpoints.
    #[arg(long)]
    resume: bool,
    /// Launch the replicas locally (free port, per-rank logs in OUT/logs, all stopped if one fails).
    #[arg(long)]
    standalone: bool,
    /// Number of local replicas with --standalone (default: ddp.replicas of the spec).
    #[arg(long, requires = "standalone")]
    nproc: Option<usize>,
}

/// `ddp-trainer`'s main: parses the process arguments.
pub fn main() -> ExitCode {
    run_args(Args::parse())
}

/// Runs a replica (or the standalone launcher) from arguments given as strings; the first is the
/// program name, as for [`clap::Parser::parse_from`].
pub fn main_from<I: IntoIterator<Item = T>, T: Into<OsString> + Clone>(args: I) -> ExitCode {
    match Args::try_parse_from(args) {
        Ok(a) => run_args(a),
        Err(e) => {
            let _ = e.print();
            ExitCode::from(EXIT_CONFIG as u8)
        }
    }
}

/// The replica (or, with `--standalone`, the local launcher, which starts replicas of the
/// current executable with the same arguments).
pub fn run_args(args: Args) -> ExitCode {
    ExitCode::from(run_status(args))
}

/// [`main`]'s exit status as a number (for [`crate::main_with`], which exits the process).
pub fn main_status() -> u8 {
    run_status(Args::parse())
}

fn run_status(args: Args) -> u8 {
    if !args.standalone {
        // First, so that a stop request during start-up is kept for the first step.
        install_stop_handler();
    }
    let spec = match Spec::load(&args.spec, &args.overrides) {
        Ok(s) => s,
        Err(e) => return fail(&format!("ddp-trainer: {e}"), e.exit_code()),
    };
    if args.standalone {
        let nproc = args.nproc.unwrap_or(spec.ddp.replicas);
        return launch_replicas(&args, &spec, nproc, None);
    }
    let env = match Placement::from_env() {
        Ok(Placement::Replica(e)) => e,
        Ok(Placement::Node(node)) => {
            println!(
                "{} | {} | out {}",
                spec.name,
                node.describe(),
                args.out.display()
            );
            return launch_replicas(&args, &spec, node.nproc_per_node, Some(&node));
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
    let result = train::run(RunOptions {
        spec,
        out: args.out.clone(),
        resume: args.resume,
        env,
        token,
    });
    match result {
        Ok(s) if s.stopped => EXIT_STOPPED as u8,
        Ok(_) => 0,
        Err(e) => fail(&format!("ddp-trainer: rank {rank}: {e}"), e.exit_code()),
    }
}

/// The local launcher: `nproc` replicas of this executable with the same arguments, on one node
/// (`--standalone`: free port on 127.0.0.1) or as `node` of a Kubeflow job (its rendezvous).
fn launch_replicas(args: &Args, spec: &Spec, nproc: usize, node: Option<&NodeWorld>) -> u8 {
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
    let mut child_args: Vec<OsString> = vec![
        args.spec.clone().into(),
        "--out".into(),
        args.out.clone().into(),
    ];
    for o in &args.overrides {
        child_args.push("--set".into());
        child_args.push(o.into());
    }
    if args.resume {
        child_args.push("--resume".into());
    }
    let mut opts = LaunchOptions::new(nproc, program, &args.out);
    opts.args = child_args;
    opts.threads_per_replica = spec.ddp.threads;
    if let Some(node) = node {
        opts.nnodes = node.nnodes;
        opts.node_rank = node.node_rank;
        opts.master_addr = node.master_addr.clone();
        opts.master_port = Some(node.master_port);
    }
    match launch_ended(&opts) {
        Ok(Ended::Completed) => 0,
        Ok(Ended::Stopped { signal }) => {
            let on = signal.map_or("a signal to the replicas".into(), |s| {
                format!("{} to the launcher", crate::launcher::signal_name(s))
            });
            eprintln!(
                "ddp-trainer: stopped on {on}: every replica finished the same step and its checkpoint is written; --resume continues"
            );
            EXIT_STOPPED as u8
        }
        Err(e) => fail(&format!("ddp-trainer: {e}"), e.exit_code()),
    }
}

/// CPU threads per replica: RAYON_NUM_THREADS if the launcher set it, else `ddp.threads`, else
/// DDP_THREADS, else cores / local world size. candle's CPU kernels read RAYON_NUM_THREADS.
/// How many times candle's element-wise worker threads spin before parking, unless
/// `CANDLE_BARRIER_POOL_SPIN_LIMIT` says otherwise. candle's default (25,000 pauses, about half a
/// millisecond after every element-wise op) kept a core busy between ops, taken from the
/// convolution threads: with 2 threads per replica the CNN went from 2,133 to 2,460 samples/s
/// with this change alone (docs/performance.md, session 3).
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
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let threads = spec
        .ddp
        .threads
        .or_else(|| {
            std::env::var("DDP_THREADS")
                .ok()
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or((cores / env.local_world_size.max(1)).max(1));
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
}

fn fail(msg: &str, code: i32) -> u8 {
    eprintln!("{msg}");
    code.clamp(1, 255) as u8
}
