//! `ddp sweep SPEC --grid KEY=V1,V2,... [--grid ...] [--set KEY=VALUE]... [--replicas N]
//! [--max-parallel N] [--detach] [--name NAME] [--json]`: one run per combination of the grid.
//!
//! Every combination is validated before anything is created; then the runs are created (queued,
//! grouped under a sweep id, see `ddp_workspaces::sweep`) and all their supervisors are started at
//! once: each waits for a sweep slot (with `--max-parallel`) and for its devices by itself, so
//! the sweep goes on after `--detach` returns. In the foreground the command prints a line as
//! each run ends, then the comparison table (`ddp compare --sweep ID`); Ctrl-C stops every run of
//! the sweep. Exit code: 0 when every run completed, 1 when any failed, 143 when runs were
//! stopped (and none failed).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use ddp_workspaces::actions;
use ddp_workspaces::actions::search::SweepStarted;
use ddp_workspaces::commands::SweepArgs;
use ddp_workspaces::present::analysis::comparison;
use ddp_workspaces::present::format::{duration, percent, perplexity};
use ddp_workspaces::sweep::SweepRecord;
use ddp_workspaces::{Run, RunStatus, Summary};
use serde::Serialize;

use crate::follow::{catch_interrupt, interrupted};
use crate::{compare, table};

/// What `sweep --detach --json` prints.
#[derive(Serialize)]
struct Started<'a> {
    #[serde(flatten)]
    sweep: &'a SweepRecord,
    manifest: PathBuf,
    dirs: Vec<&'a Path>,
}

pub fn sweep(root: &Path, a: &SweepArgs, detach: bool) -> Result<ExitCode> {
    // Every combination is checked first: a bad key or value creates nothing.
    let req = a.new_sweep(std::env::args().collect());
    let started = match ddp_workspaces::actions::search::start(root, &req)? {
        SweepStarted::Runs(started) => started,
        SweepStarted::Search { sweep, driver } => {
            return crate::search::started(root, sweep, driver, detach, a.json);
        }
    };
    for (id, e) in &started.not_started {
        eprintln!("ddp: run {id}: {e}");
    }
    // Reap the supervisors as they exit (they outlive us if we return first: that is fine).
    let (record, runs) = started.reap_in_background();
    let id = &record.id;
    let limit = match record.max_parallel {
        Some(n) => format!("at most {n} at a time"),
        None => "as devices allow".to_string(),
    };
    let say = |line: String| {
        // With --json, stdout carries only the JSON document.
        if a.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    if a.json && detach {
        let started = Started {
            sweep: &record,
            manifest: ddp_workspaces::sweep::manifest_path(root, id),
            dirs: runs.iter().map(|r| r.dir.as_path()).collect(),
        };
        println!("{}", serde_json::to_string_pretty(&started)?);
    } else {
        say(format!(
            "sweep {id}{}: {} runs of {}, {limit}",
            record
                .name
                .as_ref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default(),
            runs.len(),
            experiments(&runs)
        ));
        let rows: Vec<Vec<String>> = runs
            .iter()
            .zip(&record.runs)
            .map(|(r, m)| vec![r.record.id.clone(), m.label.clone()])
            .collect();
        say(table::render(&["RUN", "COMBINATION"], &rows)
            .trim_end()
            .to_string());
    }
    if detach {
        if !a.json {
            println!(
                "detached: list with `ddp ls --sweep {id}`, compare with `ddp compare --sweep {id}`"
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let finished = wait_all(&runs, &record, &say)?;
    say(String::new());
    compare::print(&comparison(&finished, Some(id.clone()))?, a.json)?;
    Ok(exit_code(finished.iter().map(|r| r.record.status)))
}

/// The runs' experiments (`name` may be on the grid), in order, each once.
fn experiments(runs: &[Run]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for r in runs {
        if !names.contains(&r.record.experiment.as_str()) {
            names.push(&r.record.experiment);
        }
    }
    names.join(", ")
}

/// Waits until every run is over, printing a line as each ends; Ctrl-C stops them all.
fn wait_all(runs: &[Run], record: &SweepRecord, say: &dyn Fn(String)) -> Result<Vec<Run>> {
    catch_interrupt();
    let total = runs.len();
    let mut done: Vec<Option<Run>> = vec![None; total];
    let mut signalled = vec![false; total];
    let mut announced = false;
    let mut count = 0;
    loop {
        let stopping = interrupted();
        if stopping && !announced {
            say("interrupted: stopping the sweep's runs (replicas finish their step)...".into());
            announced = true;
        }
        for (i, run) in runs.iter().enumerate() {
            if done[i].is_some() {
                continue;
            }
            let now = Run::load_checked(&run.dir)?;
            if stopping
                && !signalled[i]
                && !now.record.status.is_terminal()
                && now.record.supervisor.is_some()
            {
                // A failure means the supervisor is gone: the next read marks the run failed.
                let _ = actions::request_stop(&now);
                signalled[i] = true;
            }
            if now.record.status.is_terminal() {
                count += 1;
                let label = record
                    .member(&now.record.id)
                    .map(|m| m.label.as_str())
                    .unwrap_or("");
                say(finish_line(count, total, &now, label));
                done[i] = Some(now);
            }
        }
        if done.iter().all(Option::is_some) {
            return Ok(done.into_iter().flatten().collect());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `[2/4] 20261121-101500-abc123 lr=0.01,batch_size=64: completed in 12.3s, test accuracy 91.20%`
/// (a language model: `val perplexity 4.26`).
fn finish_line(count: usize, total: usize, run: &Run, label: &str) -> String {
    let r = &run.record;
    let s = Summary::of(run);
    let took = s
        .duration_s
        .map(|d| format!(" in {}", duration(d)))
        .unwrap_or_default();
    let detail = match r.status {
        RunStatus::Failed => format!(": {}", r.error.as_deref().unwrap_or("see its logs")),
        _ if s.language_model => match s.final_val_perplexity {
            Some(p) => format!(", val perplexity {}", perplexity(Some(p))),
            None => String::new(),
        },
        _ => match (s.test_accuracy, s.final_val_accuracy) {
            (Some(a), _) => format!(", test accuracy {}", percent(Some(a))),
            (None, Some(a)) => format!(", val accuracy {}", percent(Some(a))),
            (None, None) => String::new(),
        },
    };
    format!(
        "[{count}/{total}] {} {label}: {}{took}{detail}",
        r.id, r.status
    )
}

/// 0 when all completed, 1 when any failed, else 143 when any was stopped.
fn exit_code(statuses: impl Iterator<Item = RunStatus>) -> ExitCode {
    let all: Vec<RunStatus> = statuses.collect();
    if all.contains(&RunStatus::Failed) {
        ExitCode::from(1)
    } else if all.iter().any(|s| *s != RunStatus::Completed) {
        ExitCode::from(143)
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_language_models_finish_line_gives_its_perplexity() {
        let dir = tempfile::tempdir().unwrap();
        let mut run = ddp_workspaces::test_util::lm_run_in(dir.path());
        run.record.status = RunStatus::Completed;
        assert_eq!(
            finish_line(1, 2, &run, "lr=0.1"),
            "[1/2] 20261121-101500-abc123 lr=0.1: completed in 2m05s, val perplexity 4.26"
        );
    }

    #[test]
    fn exit_code_follows_the_worst_run() {
        use RunStatus::*;
        assert_eq!(
            exit_code([Completed, Completed].into_iter()),
            ExitCode::SUCCESS
        );
        assert_eq!(
            exit_code([Completed, Stopped].into_iter()),
            ExitCode::from(143)
        );
        assert_eq!(exit_code([Stopped, Failed].into_iter()), ExitCode::from(1));
    }
}
