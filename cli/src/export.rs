//! `ddp export RUN --csv [-o FILE] [--all-ranks]`: metric records as CSV.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use ddp_workspaces::analysis::write_csv;
use ddp_workspaces::fsutil::write_atomic;
use ddp_workspaces::metrics::read_metrics;
use ddp_workspaces::{Error, Workspace};

pub fn export(root: &Path, address: &str, out: Option<&Path>, all_ranks: bool) -> Result<ExitCode> {
    let ws = Workspace::open(root)?;
    let run = ws.run(address)?;
    let ranks = if all_ranks {
        run.record.replicas.max(1)
    } else {
        1
    };
    let mut records = Vec::new();
    for rank in 0..ranks {
        let path = run.metrics_path(rank);
        if !path.exists() {
            if rank == 0 {
                return Err(Error::NotFound(format!(
                    "run {} has no metrics yet ({} is missing; status {})",
                    run.record.id,
                    path.display(),
                    run.record.status
                ))
                .into());
            }
            eprintln!("ddp: run {}: no {}", run.record.id, path.display());
            continue;
        }
        records.extend(read_metrics(&path)?);
    }
    let mut csv = Vec::new();
    write_csv(&records, &mut csv).expect("writing to memory");
    match out {
        Some(file) => {
            // A bare file name is in the current folder, and reported as `./FILE`.
            let file = match file.parent() {
                Some(p) if !p.as_os_str().is_empty() => file.to_path_buf(),
                _ => Path::new(".").join(file),
            };
            write_atomic(&file, &csv)?;
            eprintln!(
                "wrote {} records of run {} to {}",
                records.len(),
                run.record.id,
                file.display()
            );
        }
        None => {
            let mut stdout = std::io::stdout().lock();
            match stdout.write_all(&csv).and_then(|()| stdout.flush()) {
                // `ddp export RUN --csv | head` is fine.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                r => r.context("writing to stdout")?,
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
