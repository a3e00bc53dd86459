//! The Slurm commands a workspace runs (`sbatch`, `scancel`, `squeue`, `sacct`, `scontrol`),
//! each with a time limit, their output parsed once here (see [`super::squeue`]).

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::squeue::{JobInfo, parse_scontrol_job, parse_squeue_json};
use crate::{Error, Result};

/// How long one Slurm command may take before it is killed and reported.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// What a finished command printed.
struct Output {
    ok: bool,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `program args` in `dir` (None: here) with [`COMMAND_TIMEOUT`]; a program that is not
/// installed is an error saying that this is not a Slurm machine.
fn run(program: &str, args: &[&str], dir: Option<&Path>) -> Result<Output> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(d) = dir {
        cmd.current_dir(d);
    }
    let line = format!("{program} {}", args.join(" "));
    let mut child = cmd.spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::Invalid(format!(
                "`{program}` is not installed here: a run goes to Slurm from a machine with Slurm's \
                 commands (a login node); see docs/slurm.md"
            ))
        } else {
            Error::io(program, e)
        }
    })?;
    // Read both pipes on threads so a chatty command cannot block on a full pipe.
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| Error::io(program, e))? {
            break status;
        }
        if start.elapsed() > COMMAND_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::Supervisor(format!(
                "`{line}` did not answer within {}s: is slurmctld up? (`scontrol ping`)",
                COMMAND_TIMEOUT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Ok(Output {
        ok: status.success(),
        code: status.code(),
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    })
}

/// `what` failed: its exit code and what it printed.
fn failed(what: &str, o: &Output) -> Error {
    let said = o.stderr.trim();
    let said = if said.is_empty() {
        o.stdout.trim()
    } else {
        said
    };
    Error::Supervisor(format!(
        "`{what}` failed (exit code {}): {}",
        o.code.map_or_else(|| "none".to_string(), |c| c.to_string()),
        if said.is_empty() {
            "it printed nothing"
        } else {
            said
        }
    ))
}

/// Submits `script` (from its folder) with `sbatch --parsable`; returns the job id.
pub fn sbatch(script: &Path) -> Result<String> {
    let dir = script.parent().unwrap_or(Path::new("."));
    let name = script
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("job.sbatch");
    let o = run("sbatch", &["--parsable", name], Some(dir))?;
    if !o.ok {
        return Err(failed(
            &format!("sbatch --parsable {}", script.display()),
            &o,
        ));
    }
    // `ID` or `ID;CLUSTER`.
    let id = o.stdout.trim().split(';').next().unwrap_or("").to_string();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::Supervisor(format!(
            "sbatch --parsable printed {:?}, not a job id",
            o.stdout.trim()
        )));
    }
    Ok(id)
}

/// Cancels the job (`scancel ID`: SIGTERM to its steps and batch script, SIGKILL after
/// Slurm's KillWait). A job Slurm no longer knows is not an error.
pub fn scancel(job_id: &str) -> Result<()> {
    let o = run("scancel", &[job_id], None)?;
    if !o.ok && !o.stderr.contains("Invalid job id") {
        return Err(failed(&format!("scancel {job_id}"), &o));
    }
    Ok(())
}

/// Every job of this user that the controller still holds, ended ones included, in one call
/// (`squeue --json --me --states=all`).
pub fn squeue() -> Result<Vec<JobInfo>> {
    let o = run("squeue", &["--json", "--me", "--states=all"], None)?;
    if !o.ok {
        return Err(failed("squeue --json --me --states=all", &o));
    }
    parse_squeue_json(&o.stdout)
}

/// What accounting remembers of a finished job: `Ok(None)` when it has no record of it,
/// `Err(Disabled)`-like [`SacctAnswer::Disabled`] when the cluster keeps no accounting.
pub enum SacctAnswer {
    Job(JobInfo),
    Unknown,
    Disabled,
}

/// `sacct -j ID -X -n -P -o JobID,State,ExitCode,Reason`: `ID|COMPLETED|0:0|None`.
pub fn sacct(job_id: &str) -> Result<SacctAnswer> {
    let o = run(
        "sacct",
        &[
            "-j",
            job_id,
            "-X",
            "-n",
            "-P",
            "-o",
            "JobID,State,ExitCode,Reason",
        ],
        None,
    )?;
    let said = format!("{}{}", o.stdout, o.stderr).to_lowercase();
    if said.contains("accounting storage is disabled") || said.contains("slurmdbd") {
        return Ok(SacctAnswer::Disabled);
    }
    if !o.ok {
        return Err(failed(&format!("sacct -j {job_id}"), &o));
    }
    Ok(parse_sacct(&o.stdout, job_id).map_or(SacctAnswer::Unknown, SacctAnswer::Job))
}

/// The line of `job_id` in `sacct -P` output (`ID|STATE|CODE:SIGNAL|REASON`; a state may read
/// `CANCELLED by 0`).
pub fn parse_sacct(text: &str, job_id: &str) -> Option<JobInfo> {
    text.lines().find_map(|line| {
        let f: Vec<&str> = line.split('|').collect();
        if f.first() != Some(&job_id) || f.len() < 3 {
            return None;
        }
        let (code, signal) = f[2].split_once(':')?;
        Some(JobInfo {
            id: job_id.to_string(),
            state: f[1].split_whitespace().next().unwrap_or("").to_string(),
            flags: Vec::new(),
            reason: f.get(3).filter(|r| !r.is_empty()).map(|r| r.to_string()),
            nodes: None,
            restarts: 0,
            exit_code: code.parse().ok(),
            signal: signal.parse().ok().filter(|&s: &i32| s > 0),
            ..JobInfo::default()
        })
    })
}

/// `scontrol show job ID`, while Slurm still knows the job (None after `MinJobAge`).
pub fn scontrol_show_job(job_id: &str) -> Result<Option<JobInfo>> {
    let o = run("scontrol", &["show", "job", job_id], None)?;
    if !o.ok {
        if o.stderr.contains("Invalid job id") {
            return Ok(None);
        }
        return Err(failed(&format!("scontrol show job {job_id}"), &o));
    }
    Ok(parse_scontrol_job(&o.stdout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sacct_lines() {
        let text = "41|COMPLETED|0:0|None\n42|CANCELLED by 0|0:15|None\n";
        let j = parse_sacct(text, "42").unwrap();
        assert_eq!(j.state, "CANCELLED");
        assert_eq!((j.exit_code, j.signal), (Some(0), Some(15)));
        assert_eq!(parse_sacct(text, "41").unwrap().signal, None);
        assert!(parse_sacct(text, "4").is_none());
    }

    #[test]
    fn a_missing_command_says_where_slurm_runs() {
        let e = run("surely-not-a-slurm-command", &[], None)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("is not installed here") && e.contains("docs/slurm.md"),
            "{e}"
        );
    }
}
