//! `%%ddp train SPEC`: a cell's Rust becomes a trainer, then a run.
//!
//! In order: the spec is checked (nothing is created for a bad one); the cell is written as a
//! crate in a staging folder under the workspace (`.build/cells/<id>/`); cargo builds it
//! (release, offline, dependencies shared through the user's build cache, [`shared_cache`]), its
//! progress streamed into the cell, its errors an `error` reply in the cell's line numbers; the
//! run is created with the staged crate moved into it as `code/` and
//! `code/target/release/ddp-cell` as its trainer. A failed build leaves no run and no staging
//! folder.
//!
//! Layout: `project` (the crate's files, pure), `cargo` (the build), `warm` (`ddp-kernel install
//! --warm`: a built-in cell built into the cache ahead of the first real one).

pub mod cargo;
pub mod project;
pub mod warm;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use ddp_workspaces::Workspace;
use ddp_workspaces::actions::{self, NewRun};

use crate::error::Result;
use crate::interrupt::Interrupt;
use crate::output::Out;
use cargo::{BuildObserver, BuildRequest};
use ddp_workspaces::scaffold::Checkout;
use project::CellInput;

/// The environment variable that moves the cells' build cache (see [`shared_cache`]).
pub const CACHE_ENV: &str = "DDP_BUILD_CACHE";

/// The cells' build cache, shared by every workspace of the user (compiled dependencies do not
/// depend on the workspace): `$DDP_BUILD_CACHE`, else `$XDG_CACHE_HOME/ddp/cells`, else
/// `$HOME/.cache/ddp/cells`; `None` when none of them is set.
pub fn shared_cache() -> Option<PathBuf> {
    let cwd = std::env::current_dir().unwrap_or_default();
    cache_dir_in(|name| std::env::var_os(name), &cwd)
}

/// [`shared_cache`] with the environment `var`: empty variables count as unset, a relative
/// `$DDP_BUILD_CACHE` is taken from `cwd` (cargo runs in the staging folder, so it gets an
/// absolute path), and a relative `$XDG_CACHE_HOME` is ignored, as the XDG spec asks.
pub fn cache_dir_in(var: impl Fn(&str) -> Option<OsString>, cwd: &Path) -> Option<PathBuf> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = set(CACHE_ENV) {
        return Some(cwd.join(dir));
    }
    if let Some(xdg) = set("XDG_CACHE_HOME").filter(|p| p.is_absolute()) {
        return Some(xdg.join("ddp").join("cells"));
    }
    set("HOME").map(|home| home.join(".cache").join("ddp").join("cells"))
}

/// A `%%ddp train` request, as parsed from the magic line.
#[derive(Debug, Clone)]
pub struct TrainCell<'a> {
    pub magic_line: &'a str,
    pub body: &'a str,
    pub body_line: usize,
    /// The run request; `model.name=custom` is added to its overrides here.
    pub run: NewRun,
    pub features: Vec<String>,
}

/// The folders a workspace builds cells in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildDirs {
    /// Where cells are staged before they become runs.
    pub cells: PathBuf,
    /// Cargo's build directory (compiled dependencies): [`shared_cache`], else (no `HOME`)
    /// `<workspace>/.build/cache`.
    pub cache: PathBuf,
}

impl BuildDirs {
    pub fn of(ws_root: &Path) -> BuildDirs {
        let build = ws_root.join(".build");
        BuildDirs {
            cells: build.join("cells"),
            cache: shared_cache().unwrap_or_else(|| build.join("cache")),
        }
    }
}

/// Builds the cell and starts its run (the caller shows its card); an interrupt stops the build.
pub fn build_and_start(
    cell: TrainCell,
    root: &Path,
    interrupt: &Interrupt,
    out: &Out,
) -> Result<actions::Started> {
    let entry = project::entry_point(cell.body)?;
    let mut req = cell.run;
    req.overrides
        .extend(project::CellParts::of(cell.body).overrides());
    let dirs = BuildDirs::of(root);
    let id = uuid::Uuid::new_v4().simple().to_string();
    let stage = dirs.cells.join(&id);
    // Validate the spec first: a bad one creates nothing (`code` stands for the trainer to come).
    req.code = Some(stage.clone());
    actions::check_new_run(&req)?;
    let krate = crate_of(cell.magic_line, cell.body, cell.body_line, &id, entry)?;
    Workspace::open_or_create(root)?;
    let started: Result<actions::Started> = (|| {
        project::write(&stage, &krate)?;
        out.stream(
            false,
            &format!(
                "building the cell's trainer: cargo build --release (cache {})\n",
                dirs.cache.display()
            ),
        );
        let mut observer = CellObserver { interrupt, out };
        let built = cargo::build(
            &BuildRequest {
                crate_dir: &stage,
                build_dir: &dirs.cache,
                features: &cell.features,
                limit: cargo::BUILD_LIMIT,
                counts: false,
            },
            &mut observer,
        )?;
        out.stream(
            false,
            &format!(
                "built in {:.1} s ({}); starting the run\n",
                built.seconds,
                built.summary()
            ),
        );
        req.trainer = Some(built.binary);
        Ok(actions::start_run(root, &req)?)
    })();
    if started.is_err() && stage.exists() {
        let _ = std::fs::remove_dir_all(&stage);
    }
    started
}

/// The crate of a cell (its magic line, its body starting on the cell's line `body_line`; `id`
/// names its build, [`project::cell_version`]), built against the ddp checkout
/// ([`Checkout::locate`]).
pub fn crate_of(
    magic_line: &str,
    body: &str,
    body_line: usize,
    id: &str,
    entry: project::EntryPoint,
) -> Result<project::CellCrate> {
    let checkout = Checkout::locate()?;
    let dependencies = checkout.dependency_lines()?;
    Ok(project::cell_crate(
        &CellInput {
            magic_line,
            body,
            body_line,
            dependencies: &dependencies,
            cargo_lock: checkout.lock(),
            id,
        },
        entry,
    ))
}

/// Streams the build into the cell.
struct CellObserver<'a> {
    interrupt: &'a Interrupt,
    out: &'a Out,
}

impl BuildObserver for CellObserver<'_> {
    fn progress(&mut self, line: &str) {
        self.out.stream(false, &format!("{line}\n"));
    }

    fn warning(&mut self, rendered: &str) {
        self.out.stream(true, rendered);
    }

    fn interrupted(&self) -> bool {
        self.interrupt.requested()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache_with(vars: &[(&str, &str)]) -> Option<PathBuf> {
        let vars: Vec<(String, OsString)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        cache_dir_in(
            |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()),
            Path::new("/notebooks"),
        )
    }

    #[test]
    fn the_cache_is_the_users_unless_moved() {
        let home = [("HOME", "/home/u")];
        assert_eq!(
            cache_with(&home),
            Some(PathBuf::from("/home/u/.cache/ddp/cells"))
        );
        let xdg = [("HOME", "/home/u"), ("XDG_CACHE_HOME", "/var/cache/u")];
        assert_eq!(
            cache_with(&xdg),
            Some(PathBuf::from("/var/cache/u/ddp/cells"))
        );
        let all = [
            ("HOME", "/home/u"),
            ("XDG_CACHE_HOME", "/var/cache/u"),
            (CACHE_ENV, "/fast/cells"),
        ];
        assert_eq!(cache_with(&all), Some(PathBuf::from("/fast/cells")));
        // Relative: from the kernel's folder, so that cargo (run in the staging folder) finds it.
        assert_eq!(
            cache_with(&[(CACHE_ENV, "cache")]),
            Some(PathBuf::from("/notebooks/cache"))
        );
        // Empty counts as unset; a relative XDG_CACHE_HOME is ignored (XDG spec).
        let ignored = [
            ("HOME", "/home/u"),
            ("XDG_CACHE_HOME", "rel"),
            (CACHE_ENV, ""),
        ];
        assert_eq!(
            cache_with(&ignored),
            Some(PathBuf::from("/home/u/.cache/ddp/cells"))
        );
        assert_eq!(cache_with(&[("HOME", "")]), None);
        assert_eq!(cache_with(&[]), None);
    }

    #[test]
    fn staging_stays_in_the_workspace() {
        let dirs = BuildDirs::of(Path::new("/ws"));
        assert_eq!(dirs.cells, Path::new("/ws/.build/cells"));
        assert_eq!(
            Some(dirs.cache),
            shared_cache().or(Some(PathBuf::from("/ws/.build/cache")))
        );
    }
}
