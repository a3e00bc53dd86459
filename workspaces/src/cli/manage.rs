//! `ddp stop`, `ddp rm` and `ddp tag`.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use ddp_workspaces::{Run, Workspace};

pub fn stop(root: &Path, address: &str) -> Result<ExitCode> {
    let ws = Workspace::open(root)?;
    let run = ws.run(address)?;
    if run.record.status.is_terminal() {
        println!("run {} is already {}", run.record.id, run.record.status);
        return Ok(ExitCode::SUCCESS);
    }
    let Some(sup) = run.record.supervisor.clone() else {
        bail!(
            "run {} has no supervisor yet (status {}); try again in a moment",
            run.record.id,
            run.record.status
        );
    };
    // SAFETY: kill(2) with a pid we recorded and checked alive (load_checked).
    if unsafe { libc::kill(sup.pid as i32, libc::SIGTERM) } != 0 {
        bail!(
            "cannot signal the supervisor (pid {}): {}",
            sup.pid,
            std::io::Error::last_os_error()
        );
    }
    println!(
        "stopping run {} (replicas finish their step)...",
        run.record.id
    );
    let limit = Duration::from_secs(120);
    let start = Instant::now();
    loop {
        let now = Run::load_checked(&run.dir)?;
        if now.record.status.is_terminal() {
            println!("run {} {}", now.record.id, now.record.status);
            return Ok(ExitCode::SUCCESS);
        }
        if start.elapsed() > limit {
            bail!(
                "run {} did not stop within {limit:?} (supervisor pid {}); see {}",
                run.record.id,
                sup.pid,
                run.supervisor_log().display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub fn rm(root: &Path, address: &str) -> Result<ExitCode> {
    let ws = Workspace::open(root)?;
    let run = ws.run(address)?;
    if !run.record.status.is_terminal() {
        bail!(
            "run {} is {}: stop it first (`ddp stop {}`)",
            run.record.id,
            run.record.status,
            run.record.id
        );
    }
    std::fs::remove_dir_all(&run.dir).map_err(|e| ddp_workspaces::Error::io(&run.dir, e))?;
    println!("removed {}", run.dir.display());
    Ok(ExitCode::SUCCESS)
}

pub fn tag(root: &Path, address: &str, tags: &[String], remove: bool) -> Result<ExitCode> {
    let ws = Workspace::open(root)?;
    let run = ws.run(address)?;
    let mut current = run.tags();
    if let Some(bad) = tags
        .iter()
        .find(|t| t.trim().is_empty() || t.contains('\n'))
    {
        bail!("invalid tag {bad:?}: tags are single non-empty lines");
    }
    if remove {
        current.retain(|t| !tags.contains(t));
    } else {
        for t in tags {
            if !current.contains(t) {
                current.push(t.clone());
            }
        }
    }
    if !tags.is_empty() {
        run.set_tags(&current)?;
    }
    println!("{}", current.join("\n"));
    Ok(ExitCode::SUCCESS)
}
