//! `ddp sample`: text from a language-model run on stdout, written and flushed as each token is
//! drawn, then a newline.

use std::io::Write;
use std::ops::ControlFlow;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use ddp_workspaces::Workspace;
use ddp_workspaces::commands::SampleArgs;

pub fn sample(root: &Path, args: &SampleArgs) -> Result<ExitCode> {
    let ws = Workspace::open(root)?;
    let mut out = std::io::stdout().lock();
    let mut failed: Option<std::io::Error> = None;
    let warn = |w: &str| eprintln!("ddp: {w}");
    let request = args.options.request();
    ddp_workspaces::present::sample::sample(&ws, &args.run.run, &request, warn, |text| match out
        .write_all(text.as_bytes())
        .and_then(|()| out.flush())
    {
        Ok(()) => ControlFlow::Continue(()),
        Err(e) => {
            failed = Some(e);
            ControlFlow::Break(())
        }
    })?;
    match failed {
        // The reader has had enough (`ddp sample ... | head`): not an error.
        Some(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
        Some(e) => return Err(e.into()),
        None => {}
    }
    match writeln!(out).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(ExitCode::SUCCESS),
    }
}
