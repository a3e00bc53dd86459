//! `ddp ls` and `ddp show`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use ddp_workspaces::format::{self, opt_duration, percent, timestamp};
use ddp_workspaces::summary::RunOverview;
use ddp_workspaces::{Run, RunStatus, Summary, Workspace};

use super::table;

pub fn ls(
    root: &Path,
    experiment: Option<&str>,
    status: Option<RunStatus>,
    sweep: Option<&str>,
    json: bool,
) -> Result<ExitCode> {
    let ws = Workspace::open(root)?;
    let (runs, bad) = ws.runs()?;
    for b in &bad {
        eprintln!("ddp: skipping {}: {}", b.dir.display(), b.error);
    }
    let sweep = sweep
        .map(|s| ddp_workspaces::sweep::resolve(&ws.root, &runs, s))
        .transpose()?;
    let runs: Vec<&Run> = runs
        .iter()
        .filter(|r| sweep.is_none() || r.record.sweep == sweep)
        .filter(|r| experiment.is_none_or(|e| r.record.experiment == e))
        .filter(|r| status.is_none_or(|s| r.record.status == s))
        .collect();
    if json {
        for r in runs {
            println!("{}", serde_json::to_string(&RunOverview::of(r))?);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            let s = Summary::of(r);
            let rec = &r.record;
            vec![
                rec.id.clone(),
                rec.experiment.clone(),
                rec.name.clone().unwrap_or_default(),
                rec.status.to_string(),
                rec.replicas.to_string(),
                rec.restarts.to_string(),
                timestamp(rec.created),
                opt_duration(s.duration_s),
                percent(s.test_accuracy.or(s.final_val_accuracy)),
            ]
        })
        .collect();
    print!(
        "{}",
        table::render(
            &[
                "ID",
                "EXPERIMENT",
                "NAME",
                "STATUS",
                "REPLICAS",
                "RESTARTS",
                "CREATED",
                "DURATION",
                "ACCURACY"
            ],
            &rows
        )
    );
    Ok(ExitCode::SUCCESS)
}

pub fn show(root: &Path, address: &str, json: bool) -> Result<ExitCode> {
    let ws = Workspace::open(root)?;
    let run = ws.run(address)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&RunOverview::of(&run))?);
        return Ok(ExitCode::SUCCESS);
    }
    let summary = Summary::of(&run);
    let r = &run.record;
    println!("run         {}", r.id);
    println!(
        "experiment  {}{}",
        r.experiment,
        r.name
            .as_ref()
            .map(|n| format!(" ({n})"))
            .unwrap_or_default()
    );
    println!(
        "status      {}{}",
        r.status,
        r.error
            .as_ref()
            .map(|e| format!(": {e}"))
            .unwrap_or_default()
    );
    println!("folder      {}", run.dir.display());
    println!("host        {}", r.host);
    println!(
        "replicas    {} on {}",
        r.replicas,
        if r.devices.is_empty() {
            "-"
        } else {
            &r.devices
        }
    );
    println!("restarts    {}", r.restarts);
    println!("created     {}", timestamp(r.created));
    println!("duration    {}", opt_duration(summary.duration_s));
    println!(
        "epochs      {} done, {} steps",
        summary.epochs_done, summary.steps
    );
    println!("train loss  {}", format::loss(summary.last_train_loss));
    println!(
        "val         loss {}  accuracy {} (best {})",
        format::loss(summary.final_val_loss),
        percent(summary.final_val_accuracy),
        percent(summary.best_val_accuracy)
    );
    println!(
        "test        loss {}  accuracy {}",
        format::loss(summary.test_loss),
        percent(summary.test_accuracy)
    );
    println!("tags        {}", run.tags().join(", "));
    println!("spec hash   {}", r.spec_hash);
    println!("command     {}", r.command.join(" "));
    println!("\nspec ({}):", run.spec_path().display());
    print!(
        "{}",
        std::fs::read_to_string(run.spec_path()).unwrap_or_default()
    );
    let notes = run.notes();
    if !notes.trim().is_empty() {
        println!(
            "\nnotes ({}):\n{}",
            run.dir.join(ddp_workspaces::run::NOTES).display(),
            notes.trim_end()
        );
    }
    Ok(ExitCode::SUCCESS)
}
