//! What the `%ddp` magics do, over `ddp-workspaces` (the same actions as the `ddp` CLI, so a run
//! started here is a run like any other: supervised by its own process, outliving the kernel,
//! listed by `ddp ls` and shown by `ddp-tui`).

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ddp_workspaces::actions::{self, NewRun};
use ddp_workspaces::commands::{
    self, CompareArgs, LogsArgs, LsArgs, PlotArgs, SampleArgs, SharedCommand, ShowArgs,
};
use ddp_workspaces::engine::devices::telemetry::{TelemetrySampler, process_owners};
use ddp_workspaces::present::analysis::{self, comparison};
use ddp_workspaces::present::plot::Series;
use ddp_workspaces::{Run, Workspace};

use super::{CellCommand, Command, help, parse_cell, parse_line};
use crate::cards::LiveCard;
use crate::error::{Error, Result};
use crate::output::Out;
use crate::render::{self, Output};
use crate::shared::Shared;
use crate::train::{self, TrainCell};

/// How often a wait looks at the run and at interrupts.
const WAIT_POLL: Duration = Duration::from_millis(50);

/// Runs `%ddp ARGS`.
pub fn line(args: &str, shared: &Shared, out: &Out) -> Result<()> {
    let magic = parse_line(args)?;
    let root = shared.workspace();
    match magic.command {
        Command::Run { args: run, wait } => {
            let spec = spec_file(&run.spec, shared)?;
            let mut command = vec!["%ddp".to_string()];
            command.extend(super::words(args)?);
            let req = run.options.new_run(spec, command);
            start(&root, &req, wait.wait, shared, out)
        }
        Command::Sweep {
            action: None,
            args: sweep,
        } => {
            let mut command = vec!["%ddp".to_string()];
            command.extend(super::words(args)?);
            let mut req = sweep.new_sweep(command);
            req.spec = spec_file(&req.spec, shared)?;
            if let Some(f) = &req.file {
                req.file = Some(shared.notebook_path(f));
            }
            let id = match ddp_workspaces::actions::search::start(&root, &req)? {
                ddp_workspaces::actions::search::SweepStarted::Runs(started) => {
                    started.reap_in_background().0.id
                }
                ddp_workspaces::actions::search::SweepStarted::Search { sweep, mut driver } => {
                    std::thread::spawn(move || driver.wait());
                    sweep.id
                }
            };
            shared.cards.show_sweep(&root, &id, out)?;
            Ok(())
        }
        Command::Sweep {
            action: Some(action),
            ..
        } => sweep_action(&root, action, shared, out),
        Command::Watch(run) => card(&open(&root)?.run(&run.run)?, false, shared, out),
        Command::Wait(run) => card(&open(&root)?.run(&run.run)?, true, shared, out),
        Command::Shared(SharedCommand::Ls(LsArgs { filter, json })) => {
            let ws = open(&root)?;
            // The run index, brought up to date with the folders that changed.
            let (runs, bad) = ddp_workspaces::index::Index::list(&ws, &filter.selection())?;
            report_unreadable(&bad, out);
            let shown = if json {
                render::runs::ls_json(&runs)
            } else {
                render::runs::ls(&runs)
            };
            out.display(&shown, None);
            Ok(())
        }
        Command::Shared(SharedCommand::Show(ShowArgs { run, json })) => {
            let run = open(&root)?.run(&run.run)?;
            let shown = if json {
                render::runs::show_json(&run)
            } else {
                render::runs::show(&run)
            };
            out.display(&shown, None);
            Ok(())
        }
        Command::Logs(LogsArgs { run, rank, tail }) => {
            logs(&open(&root)?.run(&run.run)?, rank, tail, out)
        }
        Command::Shared(SharedCommand::Stop(run)) => stop(&open(&root)?.run(&run.run)?, out),
        Command::Shared(SharedCommand::Scale(args)) => {
            let said = actions::scale_run(&open(&root)?.run(&args.run)?, args.replicas)?;
            out.stream(false, &format!("{said}\n"));
            Ok(())
        }
        Command::Resume { run, wait } => {
            let started = actions::resume_run(&root, &run.run)?;
            let run = started.reap_in_background();
            out.stream(
                false,
                &format!(
                    "resuming run {} from its newest checkpoint\n",
                    run.record.id
                ),
            );
            card(&run, wait.wait, shared, out)
        }
        Command::Shared(SharedCommand::Compare(CompareArgs { runs, sweep, json })) => {
            let ws = open(&root)?;
            let (selected, bad) = analysis::select_runs(&ws, &runs, sweep.as_deref())?;
            report_unreadable(&bad, out);
            let sweep_id = match sweep {
                Some(_) => selected.last().and_then(|r| r.record.sweep.clone()),
                None => None,
            };
            let c = comparison(&selected, sweep_id)?;
            let shown = if json {
                render::runs::compare_json(&c)
            } else {
                render::runs::compare(&c)
            };
            out.display(&shown, None);
            Ok(())
        }
        Command::Plot(PlotArgs {
            sweep: Some(sweep),
            parallel: true,
            ..
        }) => {
            let record = ddp_workspaces::actions::search::find(&root, &sweep)?;
            let ws = open(&root)?;
            let all = ws.runs()?.0;
            let runs = ddp_workspaces::sweep::members(&ws.root, &all, &record.id);
            let p = ddp_workspaces::present::search::parallel(&record, &runs);
            out.display(&render::runs::parallel(&p)?, None);
            Ok(())
        }
        Command::Plot(PlotArgs { runs, sweep, x, .. }) => {
            let ws = open(&root)?;
            let (selected, bad) = analysis::select_runs(&ws, &runs, sweep.as_deref())?;
            report_unreadable(&bad, out);
            out.display(&render::runs::plot(&Series::of_runs(&selected)?, x)?, None);
            Ok(())
        }
        Command::Shared(SharedCommand::Sample(args)) => sample(&open(&root)?, &args, shared, out),
        Command::Devices => {
            let runs = match Workspace::open(&root) {
                Ok(ws) => ws.runs()?.0,
                Err(_) => Vec::new(),
            };
            let mut sampler = TelemetrySampler::new(Some(root.clone()));
            let owners = process_owners(&runs);
            // CPU use is measured between two samples.
            let _ = sampler.sample(&owners);
            std::thread::sleep(Duration::from_millis(250));
            out.display(&render::devices::devices(&sampler.sample(&owners)), None);
            Ok(())
        }
        Command::Workspace { dir } => {
            if let Some(dir) = dir {
                shared.set_workspace(shared.notebook_path(&dir));
            }
            let root = shared.workspace();
            let runs = Workspace::open(&root)
                .ok()
                .and_then(|ws| ws.runs().ok())
                .map(|(r, _)| r.len());
            let text = match runs {
                Some(n) => format!(
                    "workspace {} ({n} run{})",
                    root.display(),
                    if n == 1 { "" } else { "s" }
                ),
                None => format!(
                    "workspace {} (not created yet: the first run creates it)",
                    root.display()
                ),
            };
            out.display(&Output::plain(text), None);
            Ok(())
        }
        Command::Clear { wait } => {
            out.clear(wait);
            Ok(())
        }
        Command::Help { subcommand } => {
            let text = help(subcommand.as_deref()).ok_or_else(|| {
                Error::Usage(format!(
                    "no subcommand `{}`; the subcommands are: {}",
                    subcommand.unwrap_or_default(),
                    super::subcommands().join(", ")
                ))
            })?;
            let html = render::table::pre(&text);
            out.display(&Output::rich(text, html), None);
            Ok(())
        }
    }
}

/// Runs a `%%ddp ARGS` cell whose body is `body` (starting on the cell's line `body_line`).
pub fn cell(args: &str, body: &str, body_line: usize, shared: &Shared, out: &Out) -> Result<()> {
    let magic = parse_cell(args)?;
    let mut command = vec!["%%ddp".to_string()];
    command.extend(super::words(args)?);
    match magic.command {
        CellCommand::Run { options, wait } => {
            // Named in messages; relative data paths resolve against the notebook's folder.
            let mut req = options.new_run(shared.notebook_dir().join("<cell>.toml"), command);
            req.spec_text = Some(body.to_string());
            start(&shared.workspace(), &req, wait.wait, shared, out)
        }
        CellCommand::Train {
            spec,
            options,
            wait,
            features,
        } => {
            let root = shared.workspace();
            let cell = TrainCell {
                magic_line: &format!("%%ddp {args}"),
                body,
                body_line,
                run: options.new_run(spec_file(&spec, shared)?, command),
                features,
            };
            let run =
                train::build_and_start(cell, &root, &shared.interrupt, out)?.reap_in_background();
            card(&run, wait.wait, shared, out)
        }
    }
}

/// The spec file `typed` in a magic: relative to the notebook's folder; a missing one is an
/// error that says so and suggests the path that exists, if one does.
fn spec_file(typed: &Path, shared: &Shared) -> Result<PathBuf> {
    let path = shared.notebook_path(typed);
    if path.exists() {
        return Ok(path);
    }
    Err(Error::Workspace(ddp_workspaces::Error::Invalid(
        commands::missing_path(
            typed,
            shared.notebook_dir(),
            "the notebook's folder",
            Path::exists,
        ),
    )))
}

fn open(root: &Path) -> Result<Workspace> {
    Ok(Workspace::open(root)?)
}

fn start(root: &Path, req: &NewRun, wait: bool, shared: &Shared, out: &Out) -> Result<()> {
    let started = actions::start_run(root, req)?;
    let run = started.reap_in_background();
    card(&run, wait, shared, out)
}

/// Shows `run`'s live card; with `wait`, returns when the run reaches a final status (or the
/// request is interrupted: then only the waiting stops, which is what the interrupt asks for,
/// so it is a notice on stdout, not an error).
/// Shows the run's live card; with `wait`, until the run ends. A run that ended failed on a
/// replica's configuration or data error (exit code 2) ends the cell in an error saying it (the
/// replica's error line), as `ddp run` exits 2 with it.
fn card(run: &Run, wait: bool, shared: &Shared, out: &Out) -> Result<()> {
    let live = shared.cards.show(&shared.workspace(), run, out);
    if wait && wait_for(&live, shared, out) {
        let ended = Run::load_checked(&run.dir)?;
        let r = &ended.record;
        if ddp_workspaces::engine::policy::failed_on_bad_input(r) {
            return Err(ddp_workspaces::Error::Invalid(format!(
                "run {} failed: {}",
                r.id,
                r.error.as_deref().unwrap_or("see its logs")
            ))
            .into());
        }
    }
    Ok(())
}

/// `%ddp sweep show|stop|resume SWEEP`: `show` and `resume` with the live sweep card.
fn sweep_action(
    root: &Path,
    action: commands::SweepCommand,
    shared: &Shared,
    out: &Out,
) -> Result<()> {
    use ddp_workspaces::actions::search;
    match action {
        commands::SweepCommand::Show { sweep, json } => {
            let record = search::find(root, &sweep.sweep)?;
            if json {
                let value = serde_json::to_value(&record).unwrap_or_default();
                out.display(&Output::json(record.id.clone(), value), None);
                return Ok(());
            }
            shared.cards.show_sweep(root, &record.id, out)?;
        }
        commands::SweepCommand::Stop(sweep) => {
            let record = search::stop(root, &sweep.sweep)?;
            let states = record
                .search
                .as_ref()
                .map(ddp_workspaces::present::search::states_text)
                .unwrap_or_default();
            out.stream(false, &format!("sweep {} stopped: {states}\n", record.id));
        }
        commands::SweepCommand::Promote { sweep, trial } => {
            let (run, to) = search::promote(root, &sweep.sweep, &trial)?;
            out.stream(
                false,
                &format!("trial {trial} (run {run}) promoted: it trains on to {to}\n"),
            );
        }
        commands::SweepCommand::Resume(sweep) => {
            let (record, mut driver) = search::resume(root, &sweep.sweep)?;
            std::thread::spawn(move || driver.wait());
            shared.cards.show_sweep(root, &record.id, out)?;
        }
    }
    Ok(())
}

/// Waits until the run of `live` ends (true) or the user interrupts the wait (false).
fn wait_for(live: &LiveCard, shared: &Shared, out: &Out) -> bool {
    loop {
        if live.is_done() {
            return true;
        }
        if shared.interrupt.requested() {
            out.stream(
                false,
                &format!(
                    "stopped waiting for run {id}; the run goes on (its card keeps updating; `%ddp stop {id}` stops it)\n",
                    id = live.run_id
                ),
            );
            return false;
        }
        std::thread::sleep(WAIT_POLL);
    }
}

/// `%ddp sample`: the prompt and each token's text on the cell's stdout as they come, then a
/// newline. An interrupt stops the drawing; stopping is what it asks for, so it is a notice on
/// stdout, not an error.
fn sample(ws: &Workspace, args: &SampleArgs, shared: &Shared, out: &Out) -> Result<()> {
    let warn = |w: &str| out.stream(true, &format!("{w}\n"));
    let request = args.options.request();
    let done =
        ddp_workspaces::present::sample::sample(ws, &args.run.run, &request, warn, |text| {
            if shared.interrupt.requested() {
                return ControlFlow::Break(());
            }
            out.stream(false, text);
            ControlFlow::Continue(())
        })?;
    let end = if done.stopped {
        format!(
            "\ninterrupted: stopped after {} of {} tokens\n",
            done.tokens, args.options.tokens
        )
    } else {
        "\n".to_string()
    };
    out.stream(false, &end);
    Ok(())
}

fn stop(run: &Run, out: &Out) -> Result<()> {
    actions::stop_and_wait(run, |line| out.stream(false, &format!("{line}\n")))?;
    Ok(())
}

fn logs(run: &Run, rank: Option<usize>, tail: Option<usize>, out: &Out) -> Result<()> {
    let mut text = String::new();
    for line in ddp_workspaces::runs::logs::log_lines(run, rank, tail)? {
        text.push_str(&line);
        text.push('\n');
    }
    out.stream(false, &text);
    Ok(())
}

fn report_unreadable(bad: &[ddp_workspaces::runs::workspace::Unreadable], out: &Out) {
    for b in bad {
        out.stream(
            true,
            &format!("skipping {}: {}\n", b.dir.display(), b.error),
        );
    }
}
