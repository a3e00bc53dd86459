//! Scheduled searches from the terminal: `ddp sweep ... --scheduler asha` once its driver is
//! started (a line as each trial starts, reaches a rung, pauses, is promoted, completes or
//! fails, then the leaderboard; Ctrl-C stops the search), and `ddp sweep show|stop|resume`.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use ddp_workspaces::actions::search;
use ddp_workspaces::commands::SweepCommand;
use ddp_workspaces::present;
use ddp_workspaces::present::analysis::comparison;
use ddp_workspaces::sweep::SweepRecord;
use ddp_workspaces::sweep::trials::{SearchState, SearchStatus, Trial, TrialState};
use ddp_workspaces::{Workspace, present::analysis};

use crate::compare;
use crate::follow::{catch_interrupt, interrupted};

/// After `search::start`: says what was started, then follows it unless `detach`.
pub fn started(
    root: &Path,
    sweep: SweepRecord,
    mut driver: Child,
    detach: bool,
    json: bool,
) -> Result<ExitCode> {
    let pid = driver.id();
    std::thread::spawn(move || driver.wait());
    let id = sweep.id.clone();
    if json && detach {
        println!("{}", serde_json::to_string_pretty(&sweep)?);
        return Ok(ExitCode::SUCCESS);
    }
    let say = |line: String| {
        if json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    if let Some(state) = &sweep.search {
        let name = sweep
            .name
            .as_ref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default();
        say(format!(
            "sweep {id}{name}: a search run by its driver, pid {pid}"
        ));
        let text = present::search::show_text(&sweep, state, None);
        say(text.lines().nth(1).unwrap_or_default().to_string());
    }
    if detach {
        say(format!(
            "detached: follow with `ddp sweep show {id}`, stop with `ddp sweep stop {id}`"
        ));
        return Ok(ExitCode::SUCCESS);
    }
    follow(root, &id, &say, json)
}

/// What was last said of each trial: its state, target and how many rung results.
type Said = HashMap<u32, (TrialState, u64, usize, bool)>;

/// Prints a line per change of a trial until the search ends, then the leaderboard.
fn follow(root: &Path, id: &str, say: &dyn Fn(String), json: bool) -> Result<ExitCode> {
    catch_interrupt();
    let mut said = Said::new();
    let mut stopping = false;
    let mut no_driver_since: Option<Instant> = None;
    loop {
        if interrupted() && !stopping {
            say("interrupted: stopping the search (trials in flight checkpoint)...".into());
            stopping = true;
            search::stop(root, id)?;
        }
        let record = SweepRecord::load(root, id)?;
        let Some(state) = &record.search else {
            bail!("sweep {id} lost its search state");
        };
        for t in &state.trials {
            if let Some(line) = change(&state_metric(state), t, said.get(&t.number)) {
                say(line);
            }
            said.insert(
                t.number,
                (t.state, t.target, t.results.len(), !t.run.is_empty()),
            );
        }
        if state.status != SearchStatus::Running {
            say(String::new());
            if json {
                println!("{}", serde_json::to_string_pretty(&record)?);
            } else {
                print!("{}", present::search::show_text(&record, state, None));
            }
            return Ok(match state.status {
                SearchStatus::Completed => ExitCode::SUCCESS,
                _ => ExitCode::from(143),
            });
        }
        // A driver that died leaves the search running with nobody to drive it.
        if search::driver_pid(root, id)?.is_none() {
            let since = *no_driver_since.get_or_insert_with(Instant::now);
            if since.elapsed() > Duration::from_secs(10) {
                bail!(
                    "sweep {id}'s driver is gone (see {}); `ddp sweep resume {id}` goes on",
                    search::driver_log(root, id).display()
                );
            }
        } else {
            no_driver_since = None;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn state_metric(state: &SearchState) -> String {
    state.search.metric_name().to_string()
}

/// The line saying how trial `t` changed since `before`, if it did.
fn change(
    metric: &str,
    t: &Trial,
    before: Option<&(TrialState, u64, usize, bool)>,
) -> Option<String> {
    let name = format!("t{:02}", t.number);
    let params = t.label.split_once(' ').map_or("", |(_, p)| p);
    let (state, target, results, has_run) = match before {
        Some(b) => *b,
        None if t.run.is_empty() => return None,
        None => (TrialState::Running, 0, 0, false),
    };
    if !has_run && !t.run.is_empty() && t.results.is_empty() {
        return Some(format!(
            "{name} started as run {} (to {}): {params}",
            t.run, t.target
        ));
    }
    if t.results.len() > results
        && let Some(r) = t.last()
    {
        let value = r
            .value
            .map_or("no value".to_string(), |v| format!("{metric} {v:.4}"));
        let what = match t.state {
            TrialState::Running if t.target > r.budget => format!("goes on to {}", t.target),
            TrialState::Running => "goes on".to_string(),
            s => s.as_str().to_string(),
        };
        return Some(format!("{name} at {}: {value}, {what}", r.budget));
    }
    if state == TrialState::Paused && t.state == TrialState::Running {
        return Some(format!("{name} promoted: resumed to {}", t.target));
    }
    if state != t.state || target != t.target {
        return Some(format!("{name} {}", t.state.as_str()));
    }
    None
}

/// `ddp sweep show|stop|resume SWEEP`.
pub fn manage(root: &Path, action: SweepCommand) -> Result<ExitCode> {
    match action {
        SweepCommand::Show { sweep, json } => {
            let record = search::find(root, &sweep.sweep)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&record)?);
                return Ok(ExitCode::SUCCESS);
            }
            match &record.search {
                Some(state) => {
                    let pid = search::driver_pid(root, &record.id)?;
                    print!("{}", present::search::show_text(&record, state, pid));
                }
                None => {
                    // A sweep without a scheduler: its runs, compared.
                    let ws = Workspace::open(root)?;
                    let (selected, _) = analysis::select_runs(&ws, &[], Some(&record.id))?;
                    compare::print(&comparison(&selected, Some(record.id.clone()))?, false)?;
                }
            }
        }
        SweepCommand::Stop(sweep) => {
            println!(
                "stopping sweep {} (trials in flight checkpoint)...",
                sweep.sweep
            );
            let record = search::stop(root, &sweep.sweep)?;
            if let Some(state) = &record.search {
                println!(
                    "sweep {} stopped: {}; `ddp sweep resume {}` goes on",
                    record.id,
                    present::search::states_text(state),
                    record.id
                );
            }
        }
        SweepCommand::Promote { sweep, trial } => {
            let (run, to) = search::promote(root, &sweep.sweep, &trial)?;
            println!("trial {trial} (run {run}) promoted: it trains on to {to}");
        }
        SweepCommand::Resume(sweep) => {
            let (record, mut driver) = search::resume(root, &sweep.sweep)?;
            let pid = driver.id();
            std::thread::spawn(move || driver.wait());
            println!(
                "sweep {} resumed: driver pid {pid}; follow with `ddp sweep show {}`",
                record.id, record.id
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
