//! A real Slurm for tests: the two-node cluster that `scripts/slurm-cluster.sh up DIR` starts on
//! this machine (`scripts/test.sh` brings up two, and exports `DDP_TEST_SLURM=DIR1:DIR2`;
//! docs/slurm.md).
//!
//! ```no_run
//! use ddp_e2e::SlurmCluster;
//! use std::time::Duration;
//!
//! let Some(cluster) = SlurmCluster::or_skip() else { return };
//! let o = cluster.command("srun").args(["-N2", "hostname"]).output().unwrap();
//! assert!(o.status.success());
//! cluster.kill_node("ddp-n2");
//! cluster.wait_for("ddp-n2 to be down", Duration::from_secs(90), || {
//!     cluster.node_state("ddp-n2").starts_with("down")
//! });
//! cluster.start_node("ddp-n2");
//! ```
//!
//! - Without a cluster (`DDP_TEST_SLURM` unset, or its cluster not answering) a test skips,
//!   printing `skipped: <why>` to stderr; with `DDP_TEST_SLURM_REQUIRED=1` (CI) it fails instead.
//! - **One test per cluster at a time**: `DDP_TEST_SLURM` lists one cluster folder or several
//!   (`DIR1:DIR2`, as `PATH` does; `scripts/test.sh` brings up two, so that two tests run side
//!   by side). A [`SlurmCluster`] holds the test lock of the first free one (`flock` on
//!   `DIR/tests.lock`) until it is dropped, in one test binary's threads as across test
//!   processes, whatever else runs in parallel. Taking it resets that cluster: no job left,
//!   every node's `slurmd` running, every node idle. Dropping it cancels the test's jobs and
//!   restarts a node it killed.
//! - Every wait has a limit and fails naming what it waited for, with the cluster's `sinfo` and
//!   `squeue`.

use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{repo, run_limited_with};

/// The cluster's folder (`scripts/slurm-cluster.sh up DIR`).
pub const CLUSTER_VAR: &str = "DDP_TEST_SLURM";
/// `1`: a missing cluster fails the Slurm tests instead of skipping them (CI).
pub const REQUIRED_VAR: &str = "DDP_TEST_SLURM_REQUIRED";

/// How long a test waits for the tests before it to release a cluster.
const LOCK_WAIT: Duration = Duration::from_secs(30 * 60);
/// How long a client command (sinfo, squeue, scontrol, scancel, the cluster script) may take.
const CLIENT_LIMIT: Duration = Duration::from_secs(60);
/// How long the reset may take: jobs cancelled (KillWait is 10 s), nodes restarted and idle.
const RESET_WAIT: Duration = Duration::from_secs(120);

/// Why there is no cluster to test on.
#[derive(Debug, Clone)]
pub struct Skip(pub String);

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The test cluster, held by one test at a time (see the module docs).
pub struct SlurmCluster {
    dir: PathBuf,
    conf: PathBuf,
    nodes: Vec<String>,
    /// The test lock, released when dropped.
    _lock: File,
}

impl SlurmCluster {
    /// The cluster in `$DDP_TEST_SLURM`, taken for this test (waiting for the tests before it)
    /// and reset; `Err` says why there is none. Panics instead of returning `Err` when
    /// `DDP_TEST_SLURM_REQUIRED=1`, and when a cluster that answers cannot be reset.
    pub fn from_env() -> Result<SlurmCluster, Skip> {
        let required = std::env::var(REQUIRED_VAR).is_ok_and(|v| v.trim() == "1");
        match Self::find() {
            Ok(cluster) => {
                cluster.reset();
                Ok(cluster)
            }
            Err(why) if required => panic!("no Slurm test cluster ({REQUIRED_VAR}=1): {why}"),
            Err(why) => Err(why),
        }
    }

    /// [`SlurmCluster::from_env`], printing `skipped: <why>` to stderr when there is none:
    /// `let Some(cluster) = SlurmCluster::or_skip() else { return };`
    pub fn or_skip() -> Option<SlurmCluster> {
        Self::from_env()
            .map_err(|why| eprintln!("skipped: {why}"))
            .ok()
    }

    fn find() -> Result<SlurmCluster, Skip> {
        let dirs: Vec<PathBuf> = std::env::var_os(CLUSTER_VAR)
            .map(|v| {
                std::env::split_paths(&v)
                    .filter(|d| !d.as_os_str().is_empty())
                    .collect()
            })
            .unwrap_or_default();
        if dirs.is_empty() {
            return Err(Skip(format!(
                "{CLUSTER_VAR} is not set, so there is no Slurm test cluster (scripts/test.sh \
                 brings two up; by hand: scripts/slurm-cluster.sh up DIR, then \
                 {CLUSTER_VAR}=DIR cargo test ...; several clusters: DIR1:DIR2)"
            )));
        }
        let clusters = dirs
            .into_iter()
            .map(Self::answering)
            .collect::<Result<Vec<_>, Skip>>()?;
        let locks: Vec<PathBuf> = clusters
            .iter()
            .map(|(dir, ..)| dir.join("tests.lock"))
            .collect();
        let (i, lock) = take_lock(&locks);
        let (dir, conf, nodes) = clusters.into_iter().nth(i).expect("a cluster per lock");
        Ok(SlurmCluster {
            dir,
            conf,
            nodes,
            _lock: lock,
        })
    }

    /// The cluster in `dir`, if its controller answers: its folder, `slurm.conf` and nodes.
    fn answering(dir: PathBuf) -> Result<(PathBuf, PathBuf, Vec<String>), Skip> {
        let conf = dir.join("slurm.conf");
        let text = std::fs::read_to_string(&conf).map_err(|e| {
            Skip(format!(
                "{CLUSTER_VAR}: cannot read {}: {e} (scripts/slurm-cluster.sh up {} makes it)",
                conf.display(),
                dir.display()
            ))
        })?;
        let nodes = node_names(&text);
        if nodes.is_empty() {
            return Err(Skip(format!("{} names no node", conf.display())));
        }
        // a client that is not there (no Slurm installed) is a reason to skip, not a failure
        if let Err(e) = client_command(&dir, &conf, "sinfo")
            .arg("--version")
            .output()
        {
            return Err(Skip(format!("sinfo does not run: {e}")));
        }
        let o = run_limited_with(client_command(&dir, &conf, "sinfo"), CLIENT_LIMIT, Vec::new);
        if !o.status.is_some_and(|s| s.success()) {
            return Err(Skip(format!(
                "the slurmctld of the cluster in {} does not answer (sinfo: {}): {}{} \
                 (scripts/slurm-cluster.sh status {} tells more)",
                dir.display(),
                describe(o.status),
                o.stdout,
                o.stderr,
                dir.display()
            )));
        }
        Ok((dir, conf, nodes))
    }

    /// The cluster's folder (`DIR`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `DIR/slurm.conf`.
    pub fn conf(&self) -> &Path {
        &self.conf
    }

    /// The nodes, as slurm.conf lists them: `["ddp-n1", "ddp-n2"]`. Their names resolve to
    /// 127.0.0.1.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// `program` with this cluster's client environment (`SLURM_CONF`), without any Slurm or
    /// launcher variable of the test's own environment, in `DIR` (where `sbatch` writes its
    /// `slurm-JOBID.out` unless told otherwise; set `current_dir` to change it), stdin closed.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        client_command(&self.dir, &self.conf, program)
    }

    fn client(&self, program: &str, args: &[&str]) -> Command {
        let mut cmd = self.command(program);
        cmd.args(args);
        cmd
    }

    /// Runs a client command (`sinfo`, `squeue`, `scontrol`, `scancel`, `sbatch`...) with its
    /// arguments; panics, with its output, unless it succeeds within 60 s. Returns its stdout.
    pub fn run(&self, program: &str, args: &[&str]) -> String {
        let o = run_limited_with(self.client(program, args), CLIENT_LIMIT, Vec::new);
        assert!(
            o.status.is_some_and(|s| s.success()),
            "`{program} {}` failed ({}):\n{}{}",
            args.join(" "),
            describe(o.status),
            o.stdout,
            o.stderr
        );
        o.stdout
    }

    /// `squeue --json`: the jobs Slurm still lists (pending, running, completing; finished ones
    /// for 60 s with `--states=all`: use [`SlurmCluster::run`] for that).
    pub fn squeue_json(&self) -> serde_json::Value {
        let out = self.run("squeue", &["--json"]);
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("squeue --json printed no JSON ({e}):\n{out}"))
    }

    /// Every node with its state as `sinfo --Node --format=%T` says it, lower case: `idle`,
    /// `allocated`, `mixed`, `completing`, `down`, `drained`...; a `*` ends it while the node
    /// does not respond (`down*`, `idle*`).
    pub fn node_states(&self) -> Vec<(String, String)> {
        self.run("sinfo", &["--noheader", "--Node", "--format=%N %T"])
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(n, s)| (n.to_string(), s.trim().to_string()))
            .collect()
    }

    /// The state of `node` (see [`SlurmCluster::node_states`]).
    pub fn node_state(&self, node: &str) -> String {
        self.node_states()
            .into_iter()
            .find(|(n, _)| n == node)
            .map(|(_, s)| s)
            .unwrap_or_else(|| panic!("sinfo does not list the node {node}"))
    }

    /// A node failure: SIGKILL to `node`'s slurmd, step daemons and tasks, all at once (a job
    /// cannot finish on it any more); the controller marks the node `down*` ("Not responding")
    /// after `SlurmdTimeout` (15 s; about 20 to 35 s here), then ends or requeues its jobs
    /// (NODE_FAIL).
    pub fn kill_node(&self, node: &str) {
        self.script(&["kill-node", node]);
    }

    /// Starts `node`'s slurmd again (after [`SlurmCluster::kill_node`]); the node takes jobs again
    /// once it has registered (`ReturnToService=2`): wait for its `idle` state.
    pub fn start_node(&self, node: &str) {
        self.script(&["start-node", node]);
    }

    /// Whether `node`'s slurmd is running (its pid file names a live process).
    pub fn node_running(&self, node: &str) -> bool {
        let pid = std::fs::read_to_string(self.dir.join(format!("run/slurmd-{node}.pid")))
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok());
        pid.is_some_and(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                // the state follows the command name in parentheses; a zombie is gone
                stat.rsplit(')')
                    .next()
                    .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
            })
        })
    }

    /// Polls `done` every 200 ms until it is true; panics after `limit`, naming `what` it waited
    /// for, with the cluster's sinfo and squeue.
    pub fn wait_for(&self, what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
        let started = Instant::now();
        while !done() {
            if started.elapsed() > limit {
                panic!(
                    "waited {:.0} s for {what}, in vain\n{}",
                    limit.as_secs_f64(),
                    self.snapshot()
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// sinfo and squeue as text, for failure messages (never panics).
    pub fn snapshot(&self) -> String {
        let show = |program: &str, args: &[&str]| {
            let o = run_limited_with(self.client(program, args), CLIENT_LIMIT, Vec::new);
            format!(
                "--- {program} {} ---\n{}{}",
                args.join(" "),
                o.stdout,
                o.stderr
            )
        };
        show("sinfo", &["--Node", "--format=%N %T %E"])
            + &show("squeue", &["--states=all", "--format=%i %j %T %r %N"])
    }

    /// The ids of the jobs squeue lists (pending, running, completing...).
    fn job_ids(&self) -> Vec<String> {
        self.run("squeue", &["--noheader", "--format=%i"])
            .split_whitespace()
            .map(str::to_string)
            .collect()
    }

    fn script(&self, args: &[&str]) {
        let mut cmd = Command::new(repo().join("scripts/slurm-cluster.sh"));
        cmd.arg(args[0]).arg(&self.dir).args(&args[1..]);
        let o = run_limited_with(cmd, CLIENT_LIMIT, Vec::new);
        assert!(
            o.status.is_some_and(|s| s.success()),
            "scripts/slurm-cluster.sh {} {} failed ({}):\n{}{}",
            args[0],
            self.dir.display(),
            describe(o.status),
            o.stdout,
            o.stderr
        );
    }

    /// No job left, every node's slurmd running, every node idle.
    fn reset(&self) {
        let jobs = self.job_ids();
        if !jobs.is_empty() {
            let ids: Vec<&str> = jobs.iter().map(String::as_str).collect();
            self.run("scancel", &ids);
        }
        for node in &self.nodes {
            if !self.node_running(node) {
                self.start_node(node);
            }
        }
        self.wait_for(
            "no job and every node idle (the test cluster's reset)",
            RESET_WAIT,
            || {
                let states = self.node_states();
                for (node, state) in &states {
                    // a node left down or drained by an earlier test (responding again)
                    let stuck = ["down", "drain", "fail"]
                        .iter()
                        .any(|s| state.starts_with(s));
                    if stuck && !state.ends_with('*') {
                        let arg = format!("NodeName={node}");
                        self.run("scontrol", &["update", &arg, "State=RESUME"]);
                    }
                }
                self.job_ids().is_empty()
                    && self
                        .nodes
                        .iter()
                        .all(|n| states.iter().any(|(m, s)| m == n && s == "idle"))
            },
        );
    }
}

impl Drop for SlurmCluster {
    /// Cancels what the test left and restarts the nodes it killed, so nothing of it runs on
    /// (the next test's reset waits for the rest). Best effort: it asserts nothing.
    fn drop(&mut self) {
        let ids = run_limited_with(
            self.client("squeue", &["--noheader", "--format=%i"]),
            CLIENT_LIMIT,
            Vec::new,
        )
        .stdout;
        let ids: Vec<&str> = ids.split_whitespace().collect();
        if !ids.is_empty() {
            run_limited_with(self.client("scancel", &ids), CLIENT_LIMIT, Vec::new);
        }
        for node in &self.nodes {
            if !self.node_running(node) {
                let mut cmd = Command::new(repo().join("scripts/slurm-cluster.sh"));
                cmd.arg("start-node").arg(&self.dir).arg(node);
                run_limited_with(cmd, CLIENT_LIMIT, Vec::new);
            }
        }
    }
}

/// [`SlurmCluster::command`] for the cluster in `dir` with `conf`.
fn client_command(dir: &Path, conf: &Path, program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    for (var, _) in std::env::vars_os() {
        if var.to_string_lossy().starts_with("SLURM_") {
            cmd.env_remove(var);
        }
    }
    for var in ddp_trainer::env::LAUNCHER_VARIABLES {
        cmd.env_remove(var);
    }
    cmd.env("SLURM_CONF", conf)
        .current_dir(dir)
        .stdin(Stdio::null());
    cmd
}

/// The names of the `NodeName=` lines of a slurm.conf.
fn node_names(conf: &str) -> Vec<String> {
    conf.lines()
        .filter_map(|l| l.trim_start().strip_prefix("NodeName="))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Takes the test lock of one of the clusters (`paths`: their lock files), the first that is
/// free, waiting up to [`LOCK_WAIT`] for a test to release one; returns which and the lock.
fn take_lock(paths: &[PathBuf]) -> (usize, File) {
    let files: Vec<File> = paths
        .iter()
        .map(|path| {
            File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(path)
                .unwrap_or_else(|e| {
                    panic!(
                        "cannot open the test cluster's lock {}: {e}",
                        path.display()
                    )
                })
        })
        .collect();
    let started = Instant::now();
    loop {
        for (i, (file, path)) in files.iter().zip(paths).enumerate() {
            // SAFETY: flock(2) on a descriptor this function owns.
            let r = unsafe {
                libc::flock(
                    std::os::fd::AsRawFd::as_raw_fd(file),
                    libc::LOCK_EX | libc::LOCK_NB,
                )
            };
            if r == 0 {
                let file = files.into_iter().nth(i).expect("the locked file");
                return (i, file);
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::WouldBlock {
                panic!("cannot lock {}: {err}", path.display());
            }
        }
        if started.elapsed() > LOCK_WAIT {
            let held: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
            panic!(
                "waited {} min for a Slurm test cluster: other tests still hold {}",
                LOCK_WAIT.as_secs() / 60,
                held.join(", ")
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn describe(status: Option<std::process::ExitStatus>) -> String {
    status.map_or_else(
        || format!("killed after {} s", CLIENT_LIMIT.as_secs()),
        |s| s.to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_come_from_the_node_lines() {
        let conf = "# NodeName=x\nClusterName=c\nNodeName=ddp-n1 NodeAddr=127.0.0.1 Port=1\n\
                    NodeName=ddp-n2 Port=2\nPartitionName=p Nodes=ddp-n1,ddp-n2\n";
        assert_eq!(node_names(conf), ["ddp-n1", "ddp-n2"]);
    }
}
