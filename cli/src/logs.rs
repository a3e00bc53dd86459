//! `ddp logs RUN [--rank R] [-f] [--tail N]`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use ddp_workspaces::Workspace;
use ddp_workspaces::follow::events::blocking::Next;
use ddp_workspaces::follow::events::{RunEvent, RunWatchOptions, WatchFrom};
use ddp_workspaces::runs::logs::{log_lines, ranks, shown_line};

pub fn logs(
    root: &Path,
    address: &str,
    rank: Option<usize>,
    follow: bool,
    tail: Option<usize>,
) -> Result<ExitCode> {
    let ws = Workspace::open(root)?;
    let run = ws.run(address)?;
    if !follow {
        for line in log_lines(&run, rank, tail)? {
            println!("{line}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    // Follow with the workspace's watcher (as the dashboard and the notebook do): the lines
    // already there (the last N of each rank with --tail), then every new one, until the run
    // has ended and its last lines are in.
    let shown = ranks(&run, rank);
    let several = shown.len() > 1;
    let options = RunWatchOptions {
        log_backlog: tail,
        ..RunWatchOptions::default()
    };
    let mut watch = ws.watch_blocking(&run, WatchFrom::Start, options)?;
    let settle = watch.settle_time();
    let mut ended = false;
    loop {
        let limit = if ended {
            settle
        } else {
            std::time::Duration::from_secs(3600)
        };
        match watch.next_within(limit) {
            Next::Event(RunEvent::Log {
                rank: Some(r),
                line,
            }) if shown.contains(&r) => println!("{}", shown_line(r, several, &line)),
            Next::Event(RunEvent::Status(record)) => ended = record.status.is_terminal(),
            Next::Event(_) => {}
            Next::Quiet if ended => return Ok(ExitCode::SUCCESS),
            Next::Quiet => {}
            Next::Ended => return Ok(ExitCode::SUCCESS),
        }
    }
}
