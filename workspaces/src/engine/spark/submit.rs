//! `spark-submit` for a run: finding Spark's client, checking the master, the job the driver
//! runs, the state it reports, one submission followed to its end.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::engine::policy::{Attempt, Exit};
use crate::{Error, Result};

/// The driver program written into a run's `spark/` folder.
pub const DRIVER: &str = include_str!("driver.py");
/// Where the driver and its files go in a run folder.
pub const SPARK_DIR: &str = "spark";
/// How long the application has to end after `ddp stop` (its replicas checkpoint first; the
/// driver gives each 60 s) before `spark-submit` is stopped, and how long that has to end.
const STOP_GRACE: Duration = Duration::from_secs(75);
const KILL_GRACE: Duration = Duration::from_secs(10);

/// Where Spark's client is: `spark-submit` of a PySpark installation, the Python that has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installation {
    pub spark_submit: PathBuf,
    pub python: PathBuf,
}

impl Installation {
    /// Finds PySpark in `$DDP_SPARK_PYTHON` (else `python3`) and Java (`$JAVA_HOME/bin/java`,
    /// else `java`); a clear error naming what to install when either is missing.
    pub fn find() -> Result<Installation> {
        let python = std::env::var_os("DDP_SPARK_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("python3"));
        let out = Command::new(&python)
            .args([
                "-c",
                "import os, sys, pyspark; print(os.path.dirname(pyspark.__file__)); print(sys.executable)",
            ])
            .stderr(Stdio::null())
            .output();
        let lines = match out {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
            _ => {
                return Err(Error::Invalid(format!(
                    "no PySpark for {}: a run on Spark needs Spark's client, `pip install pyspark` \
                     (or point DDP_SPARK_PYTHON at a Python that has it)",
                    python.display()
                )));
            }
        };
        let mut lines = lines.lines();
        let (Some(home), Some(exe)) = (lines.next(), lines.next()) else {
            return Err(Error::Invalid(format!(
                "{} did not say where PySpark is",
                python.display()
            )));
        };
        let java = std::env::var_os("JAVA_HOME")
            .map(|h| PathBuf::from(h).join("bin/java"))
            .unwrap_or_else(|| PathBuf::from("java"));
        let java_ok = Command::new(&java)
            .arg("-version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !java_ok {
            return Err(Error::Invalid(format!(
                "no Java ({}): Spark needs a Java runtime 17 or newer; install one (Debian: \
                 openjdk-17-jre-headless) and set JAVA_HOME",
                java.display()
            )));
        }
        Ok(Installation {
            spark_submit: Path::new(home).join("bin/spark-submit"),
            python: PathBuf::from(exe),
        })
    }
}

/// What the driver runs (`spark/job.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// The application's name.
    pub name: String,
    pub tasks: usize,
    pub replicas_per_task: usize,
    /// One replica's command line (`--resume` is added on a resume or a stage run again).
    pub command: Vec<String>,
    pub resume: bool,
    /// More environment of the replicas (threads per replica, ...).
    pub env: std::collections::BTreeMap<String, String>,
    pub out: PathBuf,
    /// Where the replicas start (a spec's relative data paths are relative to it).
    pub cwd: PathBuf,
    pub logs: PathBuf,
    pub state: PathBuf,
    pub failure: PathBuf,
    /// Created by the supervisor to stop the run: each task stops its replica (a checkpoint).
    pub stop: PathBuf,
    /// Seconds to wait for a slot for every task at once (`spark.wait_s`).
    pub wait_s: u64,
    /// Attempts Spark makes of the barrier stage: the restarts left, and the first.
    pub stage_attempts: u32,
}

/// The application as the driver reports it (`spark/state.json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct AppState {
    pub app_id: Option<String>,
    pub ui: Option<String>,
    /// The barrier stage's attempt (0, then 1 after Spark ran it again, ...).
    #[serde(default)]
    pub attempt: u32,
    /// `waiting` (for executors: see `waiting`) or `running`.
    #[serde(default)]
    pub phase: Option<String>,
    /// Why the application waits.
    #[serde(default)]
    pub waiting: Option<String>,
}

impl AppState {
    /// Whether the application waits for its executors.
    pub fn is_waiting(&self) -> bool {
        self.phase.as_deref() == Some("waiting")
    }
}

/// The driver's `spark/failure.json`: the replica whose exit failed the stage, or why the
/// cluster could not run it.
#[derive(Debug, Clone, Deserialize)]
struct Failure {
    rank: Option<usize>,
    code: Option<i32>,
    refused: Option<String>,
}

/// How one `spark-submit` ended: the outcome, and whether the cluster refused the run (too few
/// task slots for the barrier stage: bad input, not retried).
#[derive(Debug, Clone, PartialEq)]
pub struct SubmitEnd {
    pub outcome: Attempt,
    pub refused: bool,
}

/// The master a run goes to: the spec's, else `$SPARK_MASTER`, else `local[N]`.
pub fn master_of(spec: &ddp_trainer::spec::Spec) -> String {
    spec.spark
        .master
        .clone()
        .or_else(|| std::env::var("SPARK_MASTER").ok().filter(|m| !m.is_empty()))
        .unwrap_or_else(|| format!("local[{}]", spec.spark.task_count(spec.ddp.replicas)))
}

/// What can be checked of `master` before a run is created: a `local[N]` master runs N tasks at
/// once (a barrier stage of more would wait forever), and a standalone master
/// (`spark://HOST:PORT`, several for a highly available one) answers on its port.
pub fn check_master(master: &str, tasks: usize) -> Result<()> {
    if let Some(slots) = local_slots(master)
        && slots < tasks
    {
        return Err(Error::Invalid(format!(
            "spark.master = {master:?} runs {slots} task(s) at once but the barrier stage has              {tasks} (all at once or none): use local[{tasks}] or fewer tasks (--tasks)"
        )));
    }
    let Some(hosts) = master.strip_prefix("spark://") else {
        return Ok(());
    };
    let mut why = String::new();
    for host in hosts.split(',') {
        let addr = if host.contains(':') {
            host.to_string()
        } else {
            format!("{host}:7077")
        };
        let found = std::net::ToSocketAddrs::to_socket_addrs(&addr.as_str());
        match found.map(|mut a| a.next()) {
            Ok(Some(sock)) => {
                match std::net::TcpStream::connect_timeout(&sock, Duration::from_secs(5)) {
                    Ok(_) => return Ok(()),
                    Err(e) => why = format!("{addr}: {e}"),
                }
            }
            Ok(None) => why = format!("{addr}: no address"),
            Err(e) => why = format!("{addr}: {e}"),
        }
    }
    Err(Error::Invalid(format!(
        "cannot reach the Spark master {master} ({why}, waited at most 5 s): is it running, and          is the URL right? (scripts/spark-cluster.sh up DIR starts one on this machine)"
    )))
}

/// Tasks a `local`, `local[N]`, `local[N,F]` or `local[*]` master runs at once; `None` for
/// a cluster's master.
fn local_slots(master: &str) -> Option<usize> {
    let cores = || std::thread::available_parallelism().map_or(1, |n| n.get());
    if master == "local" {
        return Some(1);
    }
    let inner = master.strip_prefix("local[")?.strip_suffix(']')?;
    let threads = inner.split(',').next()?.trim();
    if threads == "*" {
        Some(cores())
    } else {
        threads.parse().ok()
    }
}

/// One `spark-submit` of the run in `dir`, followed to its end: `on_state` hears the
/// application's state as the driver writes it; `stop` is polled, and when it says so the
/// driver is asked to stop the replicas (they checkpoint), then `spark-submit` is stopped.
pub fn submit_once(
    dir: &Path,
    spec: &ddp_trainer::spec::Spec,
    job: &Job,
    stop: &dyn Fn() -> bool,
    on_state: &mut dyn FnMut(&AppState),
) -> SubmitEnd {
    let failed = |msg: String| SubmitEnd {
        outcome: Attempt::LaunchFailed(msg),
        refused: false,
    };
    let install = match Installation::find() {
        Ok(i) => i,
        Err(e) => return failed(e.to_string()),
    };
    let folder = dir.join(SPARK_DIR);
    let driver = folder.join("driver.py");
    let job_file = folder.join("job.json");
    for f in [&job.state, &job.failure, &job.stop] {
        let _ = std::fs::remove_file(f);
    }
    let written = std::fs::create_dir_all(&folder)
        .and_then(|_| std::fs::create_dir_all(&job.logs))
        .and_then(|_| std::fs::write(&driver, DRIVER))
        .and_then(|_| {
            let text = serde_json::to_string_pretty(job).expect("a job serialises");
            std::fs::write(&job_file, text)
        });
    if let Err(e) = written {
        return failed(format!("{}: {e}", folder.display()));
    }
    let log = match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(job.logs.join("spark-driver.log"))
    {
        Ok(f) => f,
        Err(e) => return failed(format!("{}: {e}", job.logs.display())),
    };
    let mut cmd = Command::new(&install.spark_submit);
    cmd.arg("--master").arg(master_of(spec));
    cmd.args(["--name", &job.name]);
    for (k, v) in submit_conf(spec, job.stage_attempts) {
        cmd.arg("--conf").arg(format!("{k}={v}"));
    }
    cmd.arg(&driver).arg(&job_file);
    cmd.env("PYSPARK_PYTHON", &install.python)
        .env("PYSPARK_DRIVER_PYTHON", &install.python)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_or(Stdio::null(), Stdio::from))
        .stderr(Stdio::from(log));
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return failed(format!("{}: {e}", install.spark_submit.display())),
    };
    let mut seen = AppState::default();
    let mut asked_at: Option<Instant> = None;
    let mut signalled: Option<Instant> = None;
    let status = loop {
        if let Ok(text) = std::fs::read_to_string(&job.state)
            && let Ok(s) = serde_json::from_str::<AppState>(&text)
            && s != seen
        {
            on_state(&s);
            seen = s;
        }
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => return failed(format!("waiting for spark-submit: {e}")),
        }
        if stop() {
            let pg = -(child.id() as i32);
            match (asked_at, signalled) {
                (None, _) => {
                    // The tasks see it and stop their replicas, which checkpoint.
                    if let Err(e) = std::fs::write(&job.stop, b"") {
                        eprintln!("ddp: {}: {e}; stopping spark-submit", job.stop.display());
                        signalled = Some(Instant::now());
                        // SAFETY: signalling the process group spark-submit leads.
                        unsafe { libc::kill(pg, libc::SIGTERM) };
                    }
                    asked_at = Some(Instant::now());
                }
                (Some(t), None) if t.elapsed() > STOP_GRACE => {
                    signalled = Some(Instant::now());
                    // SAFETY: as above.
                    unsafe { libc::kill(pg, libc::SIGTERM) };
                }
                (_, Some(t)) if t.elapsed() > KILL_GRACE => unsafe {
                    libc::kill(pg, libc::SIGKILL);
                },
                _ => {}
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let ended = |outcome| SubmitEnd {
        outcome,
        refused: false,
    };
    if asked_at.is_some() {
        return ended(Attempt::Stopped);
    }
    if status.success() {
        return ended(Attempt::Completed);
    }
    let failure = std::fs::read_to_string(&job.failure)
        .ok()
        .and_then(|t| serde_json::from_str::<Failure>(&t).ok());
    match failure {
        Some(Failure {
            refused: Some(why), ..
        }) => SubmitEnd {
            outcome: Attempt::LaunchFailed(why),
            refused: true,
        },
        Some(Failure {
            rank: Some(rank),
            code: Some(code),
            ..
        }) => ended(Attempt::ReplicaFailed {
            rank,
            exit: Exit::Exited(code),
            error: None,
        }),
        _ => failed(format!(
            "spark-submit exited with {} before any replica failed (see {})",
            status
                .code()
                .map_or_else(|| "a signal".to_string(), |c| format!("code {c}")),
            job.logs.join("spark-driver.log").display()
        )),
    }
}

/// The configuration `spark-submit` gets: Spark runs a failed barrier stage again as the run's
/// restarts (`attempts` in all), and the spec's `[spark] conf` last.
fn submit_conf(spec: &ddp_trainer::spec::Spec, attempts: u32) -> Vec<(String, String)> {
    let mut conf: Vec<(String, String)> = vec![
        ("spark.ui.showConsoleProgress".into(), "false".into()),
        (
            "spark.stage.maxConsecutiveAttempts".into(),
            attempts.to_string(),
        ),
        ("spark.task.maxFailures".into(), attempts.to_string()),
    ];
    if let Some(gpus) = spec.spark.gpus_per_task {
        conf.push(("spark.task.resource.gpu.amount".into(), gpus.to_string()));
    }
    conf.extend(spec.spark.conf.iter().map(|(k, v)| (k.clone(), v.clone())));
    conf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_master_that_cannot_run_the_stage_is_refused_before_the_run() {
        assert_eq!(local_slots("local"), Some(1));
        assert_eq!(local_slots("local[3]"), Some(3));
        assert_eq!(local_slots("local[2,4]"), Some(2));
        assert!(local_slots("local[*]").is_some_and(|n| n >= 1));
        assert_eq!(local_slots("spark://h:7077"), None);
        assert_eq!(local_slots("yarn"), None);
        check_master("local[2]", 2).unwrap();
        let e = check_master("local[1]", 2).unwrap_err().to_string();
        assert!(e.contains("local[2]") && e.contains("runs 1 task"), "{e}");
        check_master("yarn", 64).unwrap();
        // A port nobody listens on (bound, then closed).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = check_master(&format!("spark://127.0.0.1:{port}"), 2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot reach the Spark master"), "{e}");
        let open = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!(
            "spark://127.0.0.1:{port},127.0.0.1:{}",
            open.local_addr().unwrap().port()
        );
        check_master(&url, 2).unwrap();
    }

    #[test]
    fn spark_runs_the_stage_again_for_the_restarts_left() {
        let spec = ddp_trainer::spec::Spec::parse(
            "name = \"s\"\n[model]\nname = \"mlp\"\n[data]\nname = \"synthetic\"\n\
             [spark]\nconf = { \"spark.executor.memory\" = \"2g\" }\n",
            Path::new("s.toml"),
            &[],
        )
        .unwrap();
        let conf = submit_conf(&spec, 3);
        let get = |k: &str| {
            conf.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("spark.stage.maxConsecutiveAttempts"), Some("3"));
        assert_eq!(get("spark.task.maxFailures"), Some("3"));
        assert_eq!(get("spark.executor.memory"), Some("2g"));
        assert_eq!(get("spark.task.resource.gpu.amount"), None);
        let spec = ddp_trainer::spec::Spec::parse(
            "name = \"s\"\n[model]\nname = \"mlp\"\n[data]\nname = \"synthetic\"\n\
             [ddp]\nreplicas = 4\n[spark]\ngpus_per_task = 2\n",
            Path::new("s.toml"),
            &[],
        )
        .unwrap();
        let conf = submit_conf(&spec, 1);
        assert!(conf.contains(&("spark.task.resource.gpu.amount".into(), "2".into())));
    }
}
