//! Runs on Spark (`ddp run SPEC --on spark`), as Spark's TorchDistributor runs PyTorch: the run
//! folder is created as for a local run and its supervisor, instead of launching the replicas
//! itself, writes a small driver program into the folder (`spark/driver.py`, with what it runs
//! in `spark/job.json`) and runs `spark-submit` on it. The driver starts one barrier stage of
//! `spark.tasks` tasks; each runs its replica with torchrun's variables (task 0's host and a
//! port agreed through the barrier as the rendezvous), its output appended to
//! `logs/rank-R.log`. The replicas write into the run folder, so every front end follows the
//! run as it follows a local one; the supervisor follows the application (`spark/state.json`:
//! its id and web UI, in `run.json`), stops it by stopping `spark-submit`, and reads how it
//! ended (`spark/failure.json`: the failing rank).
//!
//! Layout:
//! - [`SparkApp`], the application as `run.json` records it, is the run record's.
//! - this file: [`Installation`] (finding `spark-submit`, its Python and Java), [`Job`] (what
//!   the driver runs) and [`launch_once`] (one `spark-submit`, followed to its end).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub use crate::run::SparkApp;

use crate::policy::{Exit, Outcome};
use crate::{Error, Result};

/// The driver program written into a run's `spark/` folder.
pub const DRIVER: &str = include_str!("driver.py");
/// Where the driver and its files go in a run folder.
pub const SPARK_DIR: &str = "spark";
/// How long `spark-submit` has to end after being asked to stop.
const STOP_GRACE: Duration = Duration::from_secs(15);

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
}

/// The driver's `spark/state.json`.
#[derive(Debug, Clone, Default, Deserialize)]
struct State {
    app_id: Option<String>,
    ui: Option<String>,
    #[serde(default)]
    attempt: u32,
}

/// The driver's `spark/failure.json`: the replica whose exit failed the stage.
#[derive(Debug, Clone, Deserialize)]
struct Failure {
    rank: usize,
    code: i32,
}

/// The master a run goes to: the spec's, else `$SPARK_MASTER`, else `local[N]`.
pub fn master_of(spec: &ddp_trainer::spec::Spec) -> String {
    spec.spark
        .master
        .clone()
        .or_else(|| std::env::var("SPARK_MASTER").ok().filter(|m| !m.is_empty()))
        .unwrap_or_else(|| format!("local[{}]", spec.spark.task_count(spec.ddp.replicas)))
}

/// One `spark-submit` of the run in `dir`, followed to its end: `on_state` hears the
/// application's id, web UI and stage attempt as the driver writes them; `stop` is polled, and
/// when it says so `spark-submit` is stopped (the application with it).
pub fn launch_once(
    dir: &Path,
    spec: &ddp_trainer::spec::Spec,
    job: &Job,
    stop: &dyn Fn() -> bool,
    on_state: &mut dyn FnMut(Option<String>, Option<String>, u32),
) -> Outcome {
    let install = match Installation::find() {
        Ok(i) => i,
        Err(e) => return Outcome::LaunchFailed(e.to_string()),
    };
    let folder = dir.join(SPARK_DIR);
    let driver = folder.join("driver.py");
    let job_file = folder.join("job.json");
    let written = std::fs::create_dir_all(&folder)
        .and_then(|_| std::fs::create_dir_all(&job.logs))
        .and_then(|_| std::fs::write(&driver, DRIVER))
        .and_then(|_| {
            let text = serde_json::to_string_pretty(job).expect("a job serialises");
            std::fs::write(&job_file, text)
        });
    if let Err(e) = written {
        return Outcome::LaunchFailed(format!("{}: {e}", folder.display()));
    }
    let _ = std::fs::remove_file(&job.state);
    let _ = std::fs::remove_file(&job.failure);
    let log = match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(job.logs.join("spark-driver.log"))
    {
        Ok(f) => f,
        Err(e) => return Outcome::LaunchFailed(format!("{}: {e}", job.logs.display())),
    };
    let mut cmd = Command::new(&install.spark_submit);
    cmd.arg("--master").arg(master_of(spec));
    cmd.args(["--name", &job.name]);
    // Spark does not run a failed stage again by itself: the supervisor's restart policy
    // decides (a configuration error is not retried), with a new application that resumes.
    let mut conf: Vec<(String, String)> = [
        ("spark.ui.showConsoleProgress", "false"),
        ("spark.stage.maxConsecutiveAttempts", "1"),
        ("spark.task.maxFailures", "1"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    conf.extend(spec.spark.conf.iter().map(|(k, v)| (k.clone(), v.clone())));
    for (k, v) in conf {
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
        Err(e) => {
            return Outcome::LaunchFailed(format!("{}: {e}", install.spark_submit.display()));
        }
    };
    let mut seen = (None, None, 0);
    let mut asked_at: Option<Instant> = None;
    let status = loop {
        if let Ok(text) = std::fs::read_to_string(&job.state)
            && let Ok(s) = serde_json::from_str::<State>(&text)
            && (s.app_id.clone(), s.ui.clone(), s.attempt) != seen
        {
            seen = (s.app_id.clone(), s.ui.clone(), s.attempt);
            on_state(s.app_id, s.ui, s.attempt);
        }
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => return Outcome::LaunchFailed(format!("waiting for spark-submit: {e}")),
        }
        if stop() {
            let pg = -(child.id() as i32);
            match asked_at {
                None => {
                    // SAFETY: signalling the process group spark-submit leads.
                    unsafe { libc::kill(pg, libc::SIGTERM) };
                    asked_at = Some(Instant::now());
                }
                Some(t) if t.elapsed() > STOP_GRACE => unsafe {
                    libc::kill(pg, libc::SIGKILL);
                },
                Some(_) => {}
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    if asked_at.is_some() {
        return Outcome::Stopped;
    }
    if status.success() {
        return Outcome::Completed;
    }
    match std::fs::read_to_string(&job.failure)
        .ok()
        .and_then(|t| serde_json::from_str::<Failure>(&t).ok())
    {
        Some(f) => Outcome::ReplicaFailed {
            rank: f.rank,
            exit: Exit::Code(f.code),
            error: None,
        },
        None => Outcome::LaunchFailed(format!(
            "spark-submit exited with {} before any replica failed (see {})",
            status
                .code()
                .map_or_else(|| "a signal".to_string(), |c| format!("code {c}")),
            job.logs.join("spark-driver.log").display()
        )),
    }
}
