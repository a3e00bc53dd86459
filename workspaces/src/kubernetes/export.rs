//! `ddp export RUN|SPEC --kubeflow|--trainjob`: what is exported found (a spec file, else a run of
//! the workspace) and its spec read, then the plan and its manifest. Reads, writes nothing.

use std::path::{Component, Path, PathBuf};

use ddp_trainer::spec::Spec;

use super::plan::{JobKind, JobPlan, Target, plan};
use super::render::manifest;
use crate::commands::ExportArgs;
use crate::{Error, Result, Workspace};

/// A job's manifest and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub plan: JobPlan,
    /// The YAML to apply.
    pub yaml: String,
}

/// The manifest `args` ask for (`--kubeflow` or `--trainjob`), for the workspace at `root`.
///
/// `args.target` is a spec when it names a file (or ends in `.toml`: a missing spec file is an
/// error), else a run of the workspace. A run's job trains in the run's folder from its frozen
/// spec; a spec's job ships the spec in a ConfigMap and creates nothing here.
pub fn export_job(root: &Path, args: &ExportArgs) -> Result<Manifest> {
    let kind = JobKind::of(args.format()).ok_or_else(|| {
        Error::Invalid("a Kubernetes job needs --kubeflow or --trainjob".to_string())
    })?;
    let workspace = absolute(root)?;
    let target = args.target.as_str();
    let path = Path::new(target);
    let plan = if path.is_file() || target.ends_with(".toml") {
        if !path.is_file() {
            return Err(Error::NotFound(format!(
                "spec file {target} not found (give a spec file or a run id)"
            )));
        }
        let path = absolute(path)?;
        let spec = Spec::load(&path, &[])?;
        plan(
            kind,
            &args.kubernetes,
            Target::Spec {
                path: &path,
                spec: &spec,
            },
            &workspace,
        )?
    } else {
        let mut run = Workspace::open(&workspace)?.run(target)?;
        run.dir = absolute(&run.dir)?;
        let spec = Spec::load(&run.spec_path(), &[])?;
        plan(
            kind,
            &args.kubernetes,
            Target::Run {
                run: &run,
                spec: &spec,
            },
            &workspace,
        )?
    };
    let yaml = manifest(&plan);
    Ok(Manifest { plan, yaml })
}

/// `path` made absolute against the current folder, `..` taken off lexically (symbolic links
/// kept: the paths the user sees are the ones the pods get).
fn absolute(path: &Path) -> Result<PathBuf> {
    let full = std::path::absolute(path).map_err(|e| Error::io(path, e))?;
    let mut clean = PathBuf::new();
    for c in full.components() {
        match c {
            Component::ParentDir => {
                clean.pop();
            }
            Component::CurDir => {}
            other => clean.push(other),
        }
    }
    Ok(clean)
}
