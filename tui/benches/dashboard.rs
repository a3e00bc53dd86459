//! The dashboard's performance figures (docs/performance.md):
//! `cargo bench -p ddp-tui --bench dashboard`. Measured on generated workspaces in a temporary
//! folder, through the same producers, `update` and rendering as the terminal (rendered into a
//! 200×60 in-memory buffer):
//! - first frame with 1,000 runs: from starting the run-list watch to the first frame that
//!   lists them;
//! - opening the Logs pane of a run with 8 replicas whose logs hold 1,000,000 lines each, and the
//!   process's RSS afterwards;
//! - following 10,000 new lines per second (spread over the 8 logs): lines applied per second
//!   and the delay from a line's write to its frame;
//! - frame render times (p50, p99) of the runs list, the charts and the logs at 200×60;
//! - idle CPU of the real binary (`ddp-tui`, built by cargo for the bench) in tmux on the
//!   1,000-run workspace, over 10 s.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use ddp_workspaces::metrics::{MetricKind, MetricRecord};
use ddp_workspaces::{Run, RunRecord, RunStatus};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use tokio::sync::mpsc;

use ddp_tui::app::{App, Effect, Msg, View};
use ddp_tui::runtime::{Executor, FRAME, now};
use ddp_tui::theme::Theme;
use ddp_tui::views::run::{LOG_BACKLOG, Pane};

const W: u16 = 200;
const H: u16 = 60;

/// The dashboard's own runtime: two worker threads, as `ddp-tui` starts.
fn main() -> ExitCode {
    let result = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")
        .and_then(|runtime| runtime.block_on(bench()));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dashboard bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn bench() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--workspace") {
        let root = args.get(i + 1).context("--workspace needs a folder")?;
        return large_workspace(Path::new(root)).await;
    }
    let tmp = tempfile::Builder::new()
        .prefix("ddp-tui-bench")
        .tempdir()
        .context("creating a temporary folder")?;
    println!(
        "ddp-tui benchmark ({W}x{H}, temporary workspaces in {})",
        tmp.path().display()
    );
    let many = tmp.path().join("many");
    let t = Instant::now();
    make_many_runs(&many, 1000)?;
    println!("generated 1,000 runs in {:.1}s", t.elapsed().as_secs_f64());
    first_frame(&many).await?;
    frames_of_list(&many).await?;
    let big = tmp.path().join("big");
    let t = Instant::now();
    let run = make_big_logs(&big, 8, 1_000_000)?;
    println!(
        "generated 8 logs of 1,000,000 lines in {:.1}s",
        t.elapsed().as_secs_f64()
    );
    open_logs_and_follow(&big, &run).await?;
    idle_cpu(&many)?;
    Ok(())
}

fn record(id: &str, exp: &str, status: RunStatus, created: f64) -> RunRecord {
    RunRecord {
        id: id.into(),
        experiment: exp.into(),
        name: None,
        sweep: None,
        status,
        spec_hash: "0123456789abcdef".into(),
        command: vec!["ddp".into(), "run".into()],
        host: "bench".into(),
        replicas: 2,
        devices: "cpu (1 thread per replica)".into(),
        supervisor: None,
        replica_pids: Default::default(),
        created,
        started: Some(created + 1.0),
        ended: Some(created + 60.0),
        exit_codes: Default::default(),
        restarts: 0,
        trainer: None,
        error: None,
        data: None,
        slurm: None,
        spark: None,
        pause_at: None,
    }
}

fn metric(kind: MetricKind, epoch: usize, step: u64, loss: f64, acc: Option<f64>) -> MetricRecord {
    MetricRecord {
        time: 1.7e9 + step as f64,
        rank: 0,
        kind,
        epoch,
        step,
        loss,
        accuracy: acc,
        perplexity: None,
        bits_per_char: None,
        bits_per_byte: None,
        lr: 0.001,
        samples_per_sec: 1000.0,
        samples: Some(320),
        tokens_per_sec: None,
        tokens: None,
        world_size: 2,
        metrics: Default::default(),
        breakdown: None,
        precision: None,
        sync: None,
    }
}

/// `n` completed runs over 10 experiments, each with a spec and 3 epochs of metrics (~120 lines).
fn make_many_runs(root: &Path, n: usize) -> Result<()> {
    std::fs::create_dir_all(root.join("experiments"))?;
    std::fs::write(root.join(ddp_workspaces::runs::workspace::MARKER), "{}\n")?;
    for i in 0..n {
        let exp = format!("exp-{}", i % 10);
        let id = format!("20261101-{:06}-{:06x}", i, i);
        let dir = root.join("experiments").join(&exp).join("runs").join(&id);
        std::fs::create_dir_all(dir.join("metrics"))?;
        std::fs::create_dir_all(dir.join("logs"))?;
        let run = Run {
            dir: dir.clone(),
            record: record(&id, &exp, RunStatus::Completed, 1.7e9 + i as f64),
        };
        run.save()?;
        std::fs::write(dir.join("spec.toml"), "name = \"x\"\n[train]\nepochs = 3\n")?;
        std::fs::write(dir.join("tags"), "bench\n")?;
        let mut m = String::new();
        for step in 1..=120u64 {
            let rec = metric(
                MetricKind::Train,
                1 + (step as usize - 1) / 40,
                step,
                2.0 / step as f64,
                None,
            );
            m.push_str(&serde_json::to_string(&rec)?);
            m.push('\n');
            if step % 40 == 0 {
                let e = step as usize / 40;
                let v = metric(MetricKind::Val, e, step, 0.1, Some(0.9 + e as f64 / 100.0));
                m.push_str(&serde_json::to_string(&v)?);
                m.push('\n');
            }
        }
        std::fs::write(dir.join("metrics/rank-0.jsonl"), m)?;
    }
    Ok(())
}

/// One running run with `replicas` logs of `lines` lines each.
fn make_big_logs(root: &Path, replicas: usize, lines: usize) -> Result<Run> {
    let id = "20261101-000000-b16b16";
    let dir = root.join("experiments/big/runs").join(id);
    std::fs::create_dir_all(dir.join("logs"))?;
    std::fs::create_dir_all(dir.join("metrics"))?;
    std::fs::write(root.join(ddp_workspaces::runs::workspace::MARKER), "{}\n")?;
    let mut rec = record(id, "big", RunStatus::Completed, 1.7e9);
    rec.replicas = replicas;
    let run = Run {
        dir: dir.clone(),
        record: rec,
    };
    run.save()?;
    std::fs::write(
        dir.join("spec.toml"),
        "name = \"big\"\n[train]\nepochs = 3\n",
    )?;
    for r in 0..replicas {
        let f = std::fs::File::create(dir.join(format!("logs/rank-{r}.log")))?;
        let mut w = std::io::BufWriter::new(f);
        for i in 0..lines {
            writeln!(
                w,
                "epoch 1/3 step {i}/1000000 loss 0.{i:06} lr 0.001 12345 samples/s"
            )?;
        }
    }
    Ok(run)
}

fn terminal() -> Result<Terminal<TestBackend>> {
    Ok(Terminal::new(TestBackend::new(W, H))?)
}

fn percentiles(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let p = |q: f64| v[((v.len() - 1) as f64 * q) as usize];
    (p(0.5), p(0.99), v[v.len() - 1])
}

async fn first_frame(root: &Path) -> Result<()> {
    let start = Instant::now();
    let (tx, mut rx) = mpsc::channel(16_384);
    let _exec = Executor::start(root.to_path_buf(), tx);
    let mut app = App::new(root.to_path_buf(), Theme { color: true }, now(), (W, H));
    let mut term = terminal()?;
    term.draw(|f| f.render_widget(&app, f.area()))?;
    let empty = start.elapsed();
    while !app.runs.loaded {
        let Some(m) = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await? else {
            bail!("the run-list watch ended");
        };
        app.update(m);
    }
    term.draw(|f| f.render_widget(&app, f.area()))?;
    let listed = start.elapsed();
    let shown = format!("{:?}", term.backend().buffer()).contains("exp-9");
    println!(
        "first frame, 1,000 runs: {:.0} ms to the frame listing them (target < 300 ms); {:.1} ms to the very first frame; runs shown: {shown}",
        listed.as_secs_f64() * 1e3,
        empty.as_secs_f64() * 1e3
    );
    Ok(())
}

async fn frames_of_list(root: &Path) -> Result<()> {
    let (tx, mut rx) = mpsc::channel(16_384);
    let _exec = Executor::start(root.to_path_buf(), tx);
    let mut app = App::new(root.to_path_buf(), Theme { color: true }, now(), (W, H));
    // Everything read (the metric digests follow the snapshot): then only drawing is timed.
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(500), rx.recv()).await {
        app.update(m);
    }
    let mut term = terminal()?;
    let times = time_frames(&mut term, &app, 500)?;
    let (p50, p99, max) = percentiles(times);
    println!(
        "frame, runs list of 1,000 runs: p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms (target p99 < 5 ms)"
    );
    Ok(())
}

fn time_frames(term: &mut Terminal<TestBackend>, app: &App, n: usize) -> Result<Vec<f64>> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        term.draw(|f| f.render_widget(app, f.area()))?;
        v.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(v)
}

fn rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

async fn open_logs_and_follow(root: &Path, run: &Run) -> Result<()> {
    let (tx, mut rx) = mpsc::channel(16_384);
    let mut exec = Executor::start(root.to_path_buf(), tx);
    let mut app = App::new(root.to_path_buf(), Theme { color: true }, now(), (W, H));
    while !app.runs.loaded {
        if let Some(m) = rx.recv().await {
            app.update(m);
        }
    }
    let mut term = terminal()?;
    // Open the run on its Logs pane, as Enter then 2 do.
    let start = Instant::now();
    for e in app.update(Msg::Key(crossterm::event::KeyEvent::from(
        crossterm::event::KeyCode::Enter,
    ))) {
        exec.execute(e);
    }
    app.update(Msg::Key(crossterm::event::KeyEvent::from(
        crossterm::event::KeyCode::Char('2'),
    )));
    let want = 8 * LOG_BACKLOG;
    while app.run.as_ref().map_or(0, |v| v.logs.merged.len()) < want {
        let Some(m) = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await? else {
            bail!("the run watch ended");
        };
        app.update(m);
    }
    term.draw(|f| f.render_widget(&app, f.area()))?;
    let opened = start.elapsed();
    println!(
        "open Logs, 8 replicas x 1,000,000 lines: {:.0} ms to a frame with the last {LOG_BACKLOG} lines of each (target < 300 ms); RSS {:.0} MB (target < 150 MB)",
        opened.as_secs_f64() * 1e3,
        rss_mb()
    );
    assert_eq!(app.view, View::Run);
    assert_eq!(app.run.as_ref().map(|v| v.pane), Some(Pane::Logs));
    let frames = time_frames(&mut term, &app, 300)?;
    let (p50, p99, max) = percentiles(frames);
    println!(
        "frame, logs pane (merged, following): p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms"
    );

    // Follow 10,000 lines/s over the 8 logs for 5 s, drawing as the terminal loop does.
    let rate = 10_000u64;
    let seconds = 5u64;
    let dir = run.dir.clone();
    let t0 = Instant::now();
    let writer = std::thread::spawn(move || -> std::io::Result<()> {
        let mut files = (0..8)
            .map(|r| {
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(dir.join(format!("logs/rank-{r}.log")))
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        let total = rate * seconds;
        let mut seq = 0u64;
        while seq < total {
            let due = ((t0.elapsed().as_micros() as u64) * rate / 1_000_000).min(total);
            while seq < due {
                let nanos = t0.elapsed().as_nanos();
                writeln!(files[(seq % 8) as usize], "live {seq} t={nanos}")?;
                seq += 1;
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        Ok(())
    });
    let total = (rate * seconds) as usize;
    let mut seen = 0usize;
    let mut lags = Vec::new();
    let mut last_draw = Instant::now();
    let mut pending: Vec<u128> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(seconds + 20);
    while seen < total && Instant::now() < deadline {
        if let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(5), rx.recv()).await {
            if let Msg::Run {
                event: ddp_workspaces::RunEvent::Log { line, .. },
                ..
            } = &m
                && let Some(t) = line
                    .strip_prefix("live ")
                    .and_then(|l| l.split("t=").nth(1))
                && let Ok(n) = t.parse::<u128>()
            {
                pending.push(n);
                seen += 1;
            }
            for e in app.update(m) {
                if !matches!(e, Effect::EditNotes(_)) {
                    exec.execute(e);
                }
            }
        }
        if last_draw.elapsed() >= FRAME {
            term.draw(|f| f.render_widget(&app, f.area()))?;
            last_draw = Instant::now();
            let now_ns = t0.elapsed().as_nanos();
            lags.extend(pending.drain(..).map(|n| (now_ns - n) as f64 / 1e6));
        }
    }
    let _ = writer.join();
    let elapsed = t0.elapsed().as_secs_f64();
    let (p50, p99, max) = if lags.is_empty() {
        (f64::NAN, f64::NAN, f64::NAN)
    } else {
        percentiles(lags)
    };
    println!(
        "follow 10,000 lines/s for {seconds} s: {seen} of {total} lines shown in {elapsed:.1} s; write-to-frame delay p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.1} ms; RSS {:.0} MB",
        rss_mb()
    );
    Ok(())
}

/// CPU time of the real binary, idle in a terminal on `root`, over 10 s.
fn idle_cpu(root: &Path) -> Result<()> {
    let exe = Path::new(env!("CARGO_BIN_EXE_ddp-tui"));
    let name = format!("ddp-tui-bench-{}", std::process::id());
    let ok = std::process::Command::new("tmux")
        .args(["new-session", "-d", "-s", &name, "-x", "200", "-y", "60"])
        .arg(format!("{} --workspace {}", exe.display(), root.display()))
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        println!("idle CPU: not measured (tmux is needed)");
        return Ok(());
    }
    std::thread::sleep(Duration::from_secs(3));
    let pid = std::process::Command::new("tmux")
        .args(["list-panes", "-t", &name, "-F", "#{pane_pid}"])
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse::<u32>()
                .ok()
        });
    let result = match pid {
        Some(pid) => {
            let ticks = |pid: u32| -> Option<u64> {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                let rest = &stat[stat.rfind(')')? + 2..];
                let f: Vec<&str> = rest.split(' ').collect();
                Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
            };
            let hz = 100.0; // USER_HZ on Linux
            let a = ticks(pid);
            std::thread::sleep(Duration::from_secs(10));
            let b = ticks(pid);
            match (a, b) {
                (Some(a), Some(b)) => {
                    println!(
                        "idle CPU, 1,000 runs shown: {:.2} % of a core over 10 s (target < 1 %)",
                        (b - a) as f64 / hz / 10.0 * 100.0
                    );
                    Ok(())
                }
                _ => {
                    println!("idle CPU: the dashboard process went away");
                    Ok(())
                }
            }
        }
        None => {
            println!("idle CPU: no pane pid");
            Ok(())
        }
    };
    let _ = std::process::Command::new("tmux")
        .args(["kill-session", "-t", &name])
        .status();
    result
}

/// `--workspace WS`: on an existing (large) workspace: the first frame, a filter typed key by
/// key (each key's update and frame), a `--where` expression's answer, a run created beside
/// (as another front end would) until it is listed, and the RSS.
async fn large_workspace(root: &Path) -> Result<()> {
    use crossterm::event::{KeyCode, KeyEvent};
    let start = Instant::now();
    let (tx, mut rx) = mpsc::channel(16_384);
    let mut exec = Executor::start(root.to_path_buf(), tx);
    let mut app = App::new(root.to_path_buf(), Theme { color: true }, now(), (W, H));
    let mut term = terminal()?;
    term.draw(|f| f.render_widget(&app, f.area()))?;
    while !app.runs.loaded {
        let Some(m) = tokio::time::timeout(Duration::from_secs(60), rx.recv()).await? else {
            bail!("the run-list watch ended");
        };
        app.update(m);
    }
    term.draw(|f| f.render_widget(&app, f.area()))?;
    let listed = start.elapsed();
    let runs = app.runs.entries.len();
    println!(
        "first frame: {:.0} ms listing {runs} runs (target <= 300 ms)",
        listed.as_secs_f64() * 1e3
    );
    // What follows the snapshot (runs changed since the index, metric digests not in it).
    let t = Instant::now();
    let mut followed = 0;
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await {
        followed += 1;
        for e in app.update(m) {
            exec.execute(e);
        }
    }
    println!(
        "events after the snapshot: {followed} ({:.1} s until 300 ms without one)",
        t.elapsed().as_secs_f64()
    );

    // One key: its update and the frame after it.
    async fn key(
        app: &mut App,
        exec: &mut Executor,
        term: &mut Terminal<TestBackend>,
        code: KeyCode,
    ) -> Result<f64> {
        let t = Instant::now();
        for e in app.update(Msg::Key(KeyEvent::from(code))) {
            exec.execute(e);
        }
        term.draw(|f| f.render_widget(&*app, f.area()))?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    }
    for text in ["exp-1", "spec.train.lr < 0.01 and status = \"completed\""] {
        key(&mut app, &mut exec, &mut term, KeyCode::Char('/')).await?;
        let mut times = Vec::new();
        for c in text.chars() {
            times.push(key(&mut app, &mut exec, &mut term, KeyCode::Char(c)).await?);
        }
        // The spec values from the index, where the expression asks for them.
        let t = Instant::now();
        let mut answered = None;
        while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await {
            let values = matches!(m, Msg::SpecValues(_));
            app.update(m);
            if values {
                term.draw(|f| f.render_widget(&app, f.area()))?;
                answered = Some(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        let shown = app.runs.rows().len();
        let (p50, p99, max) = percentiles(times);
        println!(
            "filter `{text}` typed: per key p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.1} ms (target <= 50 ms); {shown} runs shown{}",
            answered.map_or(String::new(), |ms| format!(
                "; spec values from the index {ms:.0} ms after the last key"
            ))
        );
        key(&mut app, &mut exec, &mut term, KeyCode::Esc).await?;
    }

    // A run created beside the dashboard (another front end), until it is listed.
    let newest = app
        .runs
        .entries
        .iter()
        .max_by(|a, b| a.run.record.id.cmp(&b.run.record.id));
    let newest = newest.context("no runs")?.run.clone();
    let mut made = newest.clone();
    made.record.id = format!("29991231-235959-{:06x}", std::process::id() & 0xffffff);
    made.dir = newest.dir.with_file_name(&made.record.id);
    std::fs::create_dir_all(&made.dir)?;
    std::fs::copy(newest.spec_path(), made.spec_path())?;
    let t = Instant::now();
    made.save()?;
    let mut seen = None;
    while t.elapsed() < Duration::from_secs(10) {
        if let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(50), rx.recv()).await {
            app.update(m);
        }
        if app.runs.entry(&made.dir).is_some() {
            seen = Some(t.elapsed());
            break;
        }
    }
    std::fs::remove_dir_all(&made.dir)?;
    match seen {
        Some(d) => println!(
            "a run created elsewhere listed after {:.0} ms (target <= 1 s)",
            d.as_secs_f64() * 1e3
        ),
        None => println!("a run created elsewhere: not listed within 10 s"),
    }
    println!("RSS {:.0} MB (target <= 150 MB)", rss_mb());
    Ok(())
}
