//! `ddp export RUN|SPEC --kubeflow|--trainjob`: what is exported found (a spec file, else a run of
//! the workspace) and its spec read, then the plan and its manifest. Reads, writes nothing.

use std::path::{Component, Path, PathBuf};

use ddp_trainer::spec::Spec;

use super::plan::{JobKind, JobOptions, JobPlan, Target, plan};
use super::render::manifest;
use crate::{Error, Result, Workspace};

/// A job's manifest and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub plan: JobPlan,
    /// The YAML to apply.
    pub yaml: String,
}

/// The manifest of a `kind` job with `opts` that trains `target`, for the workspace at `root`.
///
/// `target` is a spec when it names a file (or ends in `.toml`: a missing spec file is an
/// error), else a run of the workspace. A run's job trains in the run's folder from its frozen
/// spec; a spec's job ships the spec in a ConfigMap and creates nothing here.
pub fn export_job(root: &Path, target: &str, kind: JobKind, opts: &JobOptions) -> Result<Manifest> {
    let workspace = absolute(root)?;
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
            opts,
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
            opts,
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
