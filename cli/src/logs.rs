//! `ddp logs RUN [--rank R] [-f] [--tail N]`.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use ddp_workspaces::tail::{LineTailer, TailFrom};
use ddp_workspaces::{Run, Workspace};

pub fn logs(
    root: &Path,
    address: &str,
    rank: Option<usize>,
    follow: bool,
    tail: Option<usize>,
) -> Result<ExitCode> {
    let ws = Workspace::open(root)?;
    let run = ws.run(address)?;
    let ranks: Vec<usize> = match rank {
        Some(r) => vec![r],
        None => (0..run.record.replicas.max(1)).collect(),
    };
    let prefix = |r: usize| {
        if ranks.len() > 1 {
            format!("[rank {r}] ")
        } else {
            String::new()
        }
    };
    let mut tailers: Vec<(usize, LineTailer)> = Vec::new();
    for &r in &ranks {
        let mut t = LineTailer::new(run.log_path(r), TailFrom::Start);
        let lines = t.poll()?;
        let skip = tail.map_or(0, |n| lines.len().saturating_sub(n));
        for l in &lines[skip..] {
            println!("{}{l}", prefix(r));
        }
        tailers.push((r, t));
    }
    if !follow {
        return Ok(ExitCode::SUCCESS);
    }
    // Follow: interleave new lines of every rank as they come, until the run ends (then drain).
    loop {
        let done = Run::load_checked(&run.dir)?.record.status.is_terminal();
        for (r, t) in tailers.iter_mut() {
            for l in t.poll()? {
                println!("{}{l}", prefix(*r));
            }
        }
        if done {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
