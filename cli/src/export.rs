//! `ddp export RUN --csv [-o FILE] [--all-ranks]`: metric records as CSV;
//! `ddp export RUN|SPEC --kubeflow|--trainjob ...`: a Kubernetes job's manifest.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use ddp_workspaces::commands::ExportArgs;
use ddp_workspaces::files::fsutil::write_atomic;
use ddp_workspaces::kubernetes;
use ddp_workspaces::metrics::read_metrics;
use ddp_workspaces::present::analysis::write_csv;
use ddp_workspaces::{Error, Workspace};

pub fn export_csv(
    root: &Path,
    address: &str,
    out: Option<&Path>,
    all_ranks: bool,
) -> Result<ExitCode> {
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
    let what = format!("{} records of run {}", records.len(), run.record.id);
    write_out(&csv, out, &what)?;
    Ok(ExitCode::SUCCESS)
}

/// The manifest of a PyTorchJob or TrainJob ([`kubernetes::export_job`]): every check passes
/// before anything is written.
pub fn export_job(root: &Path, args: &ExportArgs) -> Result<ExitCode> {
    let kind = args.job_kind().ok_or_else(|| {
        ddp_workspaces::Error::Invalid("a Kubernetes job needs --kubeflow or --trainjob".into())
    })?;
    let m = kubernetes::export_job(root, &args.target, kind, &args.kubernetes.job_options())?;
    let p = &m.plan;
    let what = format!(
        "{} {} for {}, {} node(s) × {} replica(s)",
        p.kind.kind(),
        p.name,
        p.source,
        p.nodes,
        p.procs_per_node
    );
    if let Some(file) = write_out(m.yaml.as_bytes(), args.output.as_deref(), &what)? {
        eprintln!("start it with: kubectl apply -f {}", file.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes `bytes` to `out` (atomically; a bare file name is in the current folder and reported
/// as `./FILE`) and says so on stderr, returning the file; or to stdout, returning `None`.
fn write_out(bytes: &[u8], out: Option<&Path>, what: &str) -> Result<Option<std::path::PathBuf>> {
    match out {
        Some(file) => {
            let file = match file.parent() {
                Some(p) if !p.as_os_str().is_empty() => file.to_path_buf(),
                _ => Path::new(".").join(file),
            };
            write_atomic(&file, bytes)?;
            eprintln!("wrote {what} to {}", file.display());
            Ok(Some(file))
        }
        None => {
            let mut stdout = std::io::stdout().lock();
            match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
                // `ddp export RUN --csv | head` is fine.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                r => r.context("writing to stdout")?,
            }
            Ok(None)
        }
    }
}
