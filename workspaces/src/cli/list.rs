//! `ddp ls` and `ddp show`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use ddp_trainer::metrics::{MetricKind, MetricRecord};
use ddp_workspaces::{Run, RunStatus, Workspace};
use serde::Serialize;

use super::table;

/// What `ls --json` and `show --json` print per run: the record plus the figures.
#[derive(Serialize)]
struct RunJson<'a> {
    #[serde(flatten)]
    record: &'a ddp_workspaces::RunRecord,
    dir: &'a Path,
    tags: Vec<String>,
    summary: Summary,
}

impl<'a> RunJson<'a> {
    fn of(run: &'a Run) -> Self {
        RunJson {
            record: &run.record,
            dir: &run.dir,
            tags: run.tags(),
            summary: summarize(run, &run.metrics().unwrap_or_default()),
        }
    }
}

/// Figures from rank 0's metrics.
#[derive(Serialize, Default)]
pub struct Summary {
    pub epochs_done: usize,
    pub steps: u64,
    pub last_train_loss: Option<f64>,
    pub best_val_accuracy: Option<f64>,
    pub final_val_loss: Option<f64>,
    pub final_val_accuracy: Option<f64>,
    pub test_loss: Option<f64>,
    pub test_accuracy: Option<f64>,
    pub duration_s: Option<f64>,
}

pub fn summarize(run: &Run, metrics: &[MetricRecord]) -> Summary {
    let vals: Vec<&MetricRecord> = metrics
        .iter()
        .filter(|m| m.kind == MetricKind::Val)
        .collect();
    let test = metrics.iter().rev().find(|m| m.kind == MetricKind::Test);
    let last_train = metrics.iter().rev().find(|m| m.kind == MetricKind::Train);
    let r = &run.record;
    Summary {
        epochs_done: vals.iter().map(|v| v.epoch).max().unwrap_or(0),
        steps: metrics.iter().map(|m| m.step).max().unwrap_or(0),
        last_train_loss: last_train.map(|m| m.loss),
        best_val_accuracy: vals
            .iter()
            .filter_map(|v| v.accuracy)
            .fold(None, |b: Option<f64>, a| Some(b.map_or(a, |b| b.max(a)))),
        final_val_loss: vals.last().map(|v| v.loss),
        final_val_accuracy: vals.last().and_then(|v| v.accuracy),
        test_loss: test.map(|t| t.loss),
        test_accuracy: test.and_then(|t| t.accuracy),
        duration_s: r
            .started
            .map(|s| r.ended.unwrap_or_else(ddp_workspaces::run::now) - s),
    }
}

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
            println!("{}", serde_json::to_string(&RunJson::of(r))?);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            let s = summarize(r, &r.metrics().unwrap_or_default());
            let rec = &r.record;
            vec![
                rec.id.clone(),
                rec.experiment.clone(),
                rec.name.clone().unwrap_or_default(),
                rec.status.to_string(),
                rec.replicas.to_string(),
                rec.restarts.to_string(),
                table::timestamp(rec.created),
                s.duration_s
                    .map(table::duration)
                    .unwrap_or_else(|| "-".into()),
                table::percent(s.test_accuracy.or(s.final_val_accuracy)),
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
    let metrics = run.metrics().unwrap_or_default();
    let summary = summarize(&run, &metrics);
    if json {
        println!("{}", serde_json::to_string_pretty(&RunJson::of(&run))?);
        return Ok(ExitCode::SUCCESS);
    }
    let r = &run.record;
    let opt = |v: Option<f64>, f: fn(f64) -> String| v.map(f).unwrap_or_else(|| "-".into());
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
    println!("created     {}", table::timestamp(r.created));
    println!("duration    {}", opt(summary.duration_s, table::duration));
    println!(
        "epochs      {} done, {} steps",
        summary.epochs_done, summary.steps
    );
    println!(
        "train loss  {}",
        opt(summary.last_train_loss, |v| format!("{v:.4}"))
    );
    println!(
        "val         loss {}  accuracy {} (best {})",
        opt(summary.final_val_loss, |v| format!("{v:.4}")),
        table::percent(summary.final_val_accuracy),
        table::percent(summary.best_val_accuracy)
    );
    println!(
        "test        loss {}  accuracy {}",
        opt(summary.test_loss, |v| format!("{v:.4}")),
        table::percent(summary.test_accuracy)
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
