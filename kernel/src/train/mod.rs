//! `%%ddp train SPEC`: a cell's Rust becomes a trainer, then a run.
//!
//! In order: the spec is checked (nothing is created for a bad one); the cell is written as a
//! crate in a staging folder under the workspace (`.build/cells/<id>/`); cargo builds it
//! (release, offline, dependencies shared through `.build/cache/`), its progress streamed into
//! the cell, its errors an `error` reply in the cell's line numbers; the run is created with the
//! staged crate moved into it as `code/` and `code/target/release/ddp-cell` as its trainer. A
//! failed build leaves no run and no staging folder.
//!
//! Layout: `project` (the crate's files, pure), `cargo` (the build).

pub mod cargo;
pub mod project;

use std::path::{Path, PathBuf};

use ddp_workspaces::Workspace;
use ddp_workspaces::actions::{self, NewRun};

use crate::error::Result;
use crate::interrupt::Interrupt;
use crate::output::Out;
use cargo::{BuildObserver, BuildRequest};
use project::{CellInput, Source};

/// The environment variable that moves the shared build cache (default `<workspace>/.build/cache`).
pub const CACHE_ENV: &str = "DDP_BUILD_CACHE";

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
    /// Cargo's shared build directory (compiled dependencies).
    pub cache: PathBuf,
}

impl BuildDirs {
    pub fn of(ws_root: &Path) -> BuildDirs {
        let build = ws_root.join(".build");
        BuildDirs {
            cells: build.join("cells"),
            cache: std::env::var_os(CACHE_ENV)
                .map(PathBuf::from)
                .unwrap_or_else(|| build.join("cache")),
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
    let stage = dirs.cells.join(uuid::Uuid::new_v4().simple().to_string());
    // Validate the spec first: a bad one creates nothing (`code` stands for the trainer to come).
    req.code = Some(stage.clone());
    actions::check_new_run(&req)?;
    let source = Source::locate()?;
    let candle = source.dependency_version("candle-core")?;
    let patches = source.patches()?;
    let krate = project::cell_crate(
        &CellInput {
            magic_line: cell.magic_line,
            body: cell.body,
            body_line: cell.body_line,
            trainer_dir: &source.trainer_dir(),
            candle_version: &candle,
            cargo_lock: source.lock(),
            patches: &patches,
        },
        entry,
    );
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
            },
            &mut observer,
        )?;
        out.stream(
            false,
            &format!("built in {:.1} s; starting the run\n", built.seconds),
        );
        req.trainer = Some(built.binary);
        Ok(actions::start_run(root, &req)?)
    })();
    if started.is_err() && stage.exists() {
        let _ = std::fs::remove_dir_all(&stage);
    }
    started
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
