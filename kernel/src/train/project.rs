//! The crate a `%%ddp train` cell becomes (pure: text in, files' text out). Its dependencies are
//! those of every crate of one's own (`ddp_workspaces::scaffold::Checkout`): ddp-trainer and its
//! candle from the ddp checkout, by absolute path.
//!
//! `src/main.rs` keeps the cell's line numbers: its first lines are comments standing for the
//! magic line (and any blank lines before it), so rustc's `src/main.rs:LINE` is the cell's
//! `LINE`. Unless the cell has its own `fn main`, a `fn main` handing the cell's `model`,
//! `dataset`, `loss` and `metrics` (those it defines) to `ddp_trainer::Trainer` follows the body.

use std::path::Path;

use ddp_workspaces::scaffold::MANIFEST_TAIL;

use crate::error::{Error, Result};

/// The crate's package and binary name.
pub const PACKAGE: &str = "ddp-cell";
/// The file rustc names in diagnostics about the cell.
pub const MAIN_RS: &str = "src/main.rs";

/// How the cell hands its parts to the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryPoint {
    /// The cell's `fn model`, `fn dataset`, `fn loss` and `fn metrics` (those it defines): the
    /// crate's `main` hands them to `ddp_trainer::Trainer`.
    Parts(CellParts),
    /// The cell has its own `fn main` (e.g. `ddp_trainer::main_with_t(model)` for a `ModuleT`).
    OwnMain,
}

/// Which of the trainer's parts a cell defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CellParts {
    /// `fn model(vb: VarBuilder) -> Result<impl Module>` (`model.name = "custom"`).
    pub model: bool,
    /// `fn dataset(split: Split) -> Result<impl Dataset>` (`data.name = "custom"`).
    pub dataset: bool,
    /// `fn loss(outputs: &Tensor, targets: &Tensor) -> Result<Tensor>`.
    pub loss: bool,
    /// `fn metrics(outputs: &Tensor, targets: &Tensor) -> Result<Vec<(String, f64)>>`.
    pub metrics: bool,
}

impl CellParts {
    /// The `Trainer` builder calls that register the parts, in a `fn main`.
    fn main_fn(self) -> String {
        let mut calls = String::from("    ddp_trainer::Trainer::new()\n");
        for (defined, part) in [
            (self.model, "model"),
            (self.dataset, "dataset"),
            (self.loss, "loss"),
            (self.metrics, "metrics"),
        ] {
            if defined {
                calls.push_str(&format!("        .{part}({part})\n"));
            }
        }
        format!("fn main() {{\n{calls}        .main()\n}}\n")
    }
}

impl CellParts {
    /// The parts `body` defines.
    pub fn of(body: &str) -> CellParts {
        CellParts {
            model: defines_fn(body, "model"),
            dataset: defines_fn(body, "dataset"),
            loss: defines_fn(body, "loss"),
            metrics: defines_fn(body, "metrics"),
        }
    }

    /// The spec overrides that make a run use the cell's model and data set: `model.name` and
    /// `data.name` = "custom" for those it defines (a cell with its own `main` and neither:
    /// its model).
    pub fn overrides(self) -> Vec<String> {
        let mut sets = Vec::new();
        if self.model || !self.dataset {
            sets.push("model.name=custom".to_string());
        }
        if self.dataset {
            sets.push("data.name=custom".to_string());
        }
        sets
    }
}

/// Which entry point the cell's body gives, or what it lacks.
pub fn entry_point(body: &str) -> Result<EntryPoint> {
    if defines_fn(body, "main") {
        return Ok(EntryPoint::OwnMain);
    }
    let parts = CellParts::of(body);
    if parts.model || parts.dataset {
        Ok(EntryPoint::Parts(parts))
    } else {
        Err(Error::Usage(
            "the cell defines no model and no data set: write `pub fn model(vb: VarBuilder) -> Result<impl Module>` \
             (candle_core::Result, candle_nn::{Module, VarBuilder}) or `pub fn dataset(split: Split) -> Result<impl Dataset>` \
             (ddp_trainer::data::{Dataset, Split}), optionally `pub fn loss` and `pub fn metrics`, or your own `fn main` \
             calling ddp_trainer::Trainer / main_with (see docs/custom-models.md and docs/data.md)"
                .to_string(),
        ))
    }
}

/// Whether a line of `body` starts (after indentation and `pub`) with `fn NAME(` or `fn NAME<`.
fn defines_fn(body: &str, name: &str) -> bool {
    body.lines().any(|l| {
        let l = l.trim_start();
        let l = l.strip_prefix("pub ").map(str::trim_start).unwrap_or(l);
        l.strip_prefix("fn ")
            .map(str::trim_start)
            .and_then(|r| r.strip_prefix(name))
            .is_some_and(|r| r.trim_start().starts_with(['(', '<']))
    })
}

/// The text of the crate's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellCrate {
    pub cargo_toml: String,
    pub main_rs: String,
    /// The checkout's `Cargo.lock`, to build with the same versions (and offline).
    pub cargo_lock: Option<String>,
}

/// What the crate is made of: the magic line, the body and where it starts in the cell, and its
/// dependencies.
#[derive(Debug, Clone)]
pub struct CellInput<'a> {
    pub magic_line: &'a str,
    pub body: &'a str,
    /// The cell's line number of the body's first line.
    pub body_line: usize,
    /// The `[dependencies]` lines (`Checkout::dependency_lines`: ddp-trainer, candle-core and
    /// candle-nn by absolute path).
    pub dependencies: &'a str,
    pub cargo_lock: Option<String>,
    /// The cell's build id (its staging folder's name): the crate's version is
    /// `0.1.0+cell.ID`, so that no two cells share a compiled unit in the shared build cache
    /// ([`cell_version`]).
    pub id: &'a str,
}

/// The version of the cell crate `id`. Every cell crate is the root package of its own cargo
/// workspace, so with one version they would all be the same unit to cargo (same hash, same
/// fingerprint in the shared build directory), told apart only by file times: a cell staged
/// while another one was being built would be taken as up to date and get the other's binary.
/// Build metadata (`+cell.ID`) makes each cell a unit of its own, and changes nothing else.
pub fn cell_version(id: &str) -> String {
    format!("0.1.0+cell.{id}")
}

/// The crate of a cell whose body has `entry` (see [`entry_point`]).
pub fn cell_crate(input: &CellInput, entry: EntryPoint) -> CellCrate {
    let mut main_rs = String::new();
    // Lines before the body stand for the magic line and the blank lines above it.
    for n in 1..input.body_line {
        if n + 1 == input.body_line {
            main_rs.push_str(&format!("// {}\n", input.magic_line.trim()));
        } else {
            main_rs.push_str("//\n");
        }
    }
    main_rs.push_str(input.body);
    if !input.body.ends_with('\n') {
        main_rs.push('\n');
    }
    if let EntryPoint::Parts(parts) = entry {
        main_rs.push_str(
            "\n// Added by ddp-kernel: this executable is a ddp-trainer with the cell's parts.\n",
        );
        main_rs.push_str(&parts.main_fn());
    }
    let version = toml::Value::String(cell_version(input.id));
    let cargo_toml = format!(
        "# A `%%ddp train` cell as a crate, written by ddp-kernel. Rebuild it with\n\
         #   cargo build --release --manifest-path code/Cargo.toml\n\
         # from the run's folder; the run's trainer is code/target/release/{PACKAGE}.\n\
         [package]\n\
         name = \"{PACKAGE}\"\n\
         version = {version}\n\
         edition = \"2024\"\n\
         publish = false\n\
         \n\
         [dependencies]\n\
         {deps}{MANIFEST_TAIL}",
        deps = input.dependencies,
    );
    CellCrate {
        cargo_toml,
        main_rs,
        cargo_lock: input.cargo_lock.clone(),
    }
}

/// Writes the crate into `dir` (`Cargo.toml`, `Cargo.lock`, `src/main.rs`).
pub fn write(dir: &Path, krate: &CellCrate) -> Result<()> {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).map_err(|e| Error::io(&src, e))?;
    let mut files = vec![
        (dir.join("Cargo.toml"), &krate.cargo_toml),
        (dir.join(MAIN_RS), &krate.main_rs),
    ];
    if let Some(lock) = &krate.cargo_lock {
        files.push((dir.join("Cargo.lock"), lock));
    }
    for (path, text) in files {
        std::fs::write(&path, text).map_err(|e| Error::io(&path, e))?;
    }
    Ok(())
}

/// rustc's rendered diagnostic about the crate, naming the cell instead of `src/main.rs` (line
/// numbers are already the cell's).
pub fn in_cell_terms(rendered: &str) -> String {
    rendered.replace(MAIN_RS, "cell")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input<'a>(body: &'a str, body_line: usize) -> CellInput<'a> {
        CellInput {
            magic_line: "%%ddp train mnist.toml --wait",
            body,
            body_line,
            dependencies: "ddp-trainer = { path = \"/src/ddp/trainer\" }\n\
                           candle-nn = { path = \"/src/ddp/vendor/candle-nn\" }\n",
            cargo_lock: None,
            id: "5fe7edbd",
        }
    }

    #[test]
    fn main_rs_lines_are_the_cells() {
        let body = "use candle_nn::VarBuilder;\npub fn model(vb: VarBuilder) {}\n";
        // The magic on line 3 (two blank lines above it): the body starts on line 4.
        let k = cell_crate(&input(body, 4), entry_point(body).unwrap());
        let lines: Vec<&str> = k.main_rs.lines().collect();
        assert_eq!(lines[2], "// %%ddp train mnist.toml --wait");
        assert_eq!(lines[3], "use candle_nn::VarBuilder;");
        assert_eq!(lines[4], "pub fn model(vb: VarBuilder) {}");
        assert!(
            k.main_rs.ends_with(
                "fn main() {\n    ddp_trainer::Trainer::new()\n        .model(model)\n        .main()\n}\n"
            ),
            "{}",
            k.main_rs
        );
    }

    #[test]
    fn a_cell_with_its_own_main_gets_no_other() {
        let body = "fn model() {}\nfn main() { ddp_trainer::main_with_t(model) }";
        assert_eq!(entry_point(body).unwrap(), EntryPoint::OwnMain);
        let k = cell_crate(&input(body, 2), EntryPoint::OwnMain);
        assert_eq!(k.main_rs.matches("fn main").count(), 1);
        assert!(k.main_rs.ends_with("main_with_t(model) }\n"));
    }

    #[test]
    fn a_model_or_a_data_set_is_required() {
        let model = EntryPoint::Parts(CellParts {
            model: true,
            ..CellParts::default()
        });
        assert_eq!(
            entry_point("pub fn model<'a>(vb: VarBuilder<'a>)").unwrap(),
            model
        );
        assert_eq!(entry_point("  fn model (vb: VarBuilder)").unwrap(), model);
        for body in [
            "fn models(vb: VarBuilder)",
            "// fn model(vb)",
            "let model = 1;",
            "pub fn loss(a: &Tensor, b: &Tensor)",
        ] {
            let e = entry_point(body).unwrap_err().to_string();
            assert!(e.contains("pub fn model(vb: VarBuilder)"), "{body}: {e}");
            assert!(e.contains("pub fn dataset(split: Split)"), "{body}: {e}");
        }
    }

    #[test]
    fn the_run_uses_the_parts_the_cell_defines() {
        let sets = |body: &str| CellParts::of(body).overrides();
        assert_eq!(sets("fn model(vb: VarBuilder)"), ["model.name=custom"]);
        assert_eq!(sets("fn dataset(split: Split)"), ["data.name=custom"]);
        assert_eq!(
            sets("fn model(vb: VarBuilder)\nfn dataset(s: Split)"),
            ["model.name=custom", "data.name=custom"]
        );
        assert_eq!(sets("fn main() {}"), ["model.name=custom"]);
    }

    #[test]
    fn a_data_set_loss_and_metrics_are_handed_to_the_trainer() {
        let body = "pub fn dataset(split: Split) -> Result<Points> {}\npub fn loss(o: &Tensor, y: &Tensor) {}\npub fn metrics(o: &Tensor, y: &Tensor) {}\n";
        let entry = entry_point(body).unwrap();
        assert_eq!(
            entry,
            EntryPoint::Parts(CellParts {
                model: false,
                dataset: true,
                loss: true,
                metrics: true
            })
        );
        let k = cell_crate(&input(body, 2), entry);
        assert!(
            k.main_rs.ends_with(
                "fn main() {\n    ddp_trainer::Trainer::new()\n        .dataset(dataset)\n        .loss(loss)\n        .metrics(metrics)\n        .main()\n}\n"
            ),
            "{}",
            k.main_rs
        );
    }

    #[test]
    fn the_manifest_names_the_trainer_sources_and_candle() {
        let k = cell_crate(
            &input("fn model() {}", 2),
            entry_point("fn model() {}").unwrap(),
        );
        let doc: toml::Table = k.cargo_toml.parse().unwrap();
        assert_eq!(doc["package"]["name"].as_str(), Some(PACKAGE));
        assert_eq!(
            doc["package"]["version"].as_str(),
            Some("0.1.0+cell.5fe7edbd")
        );
        // A valid version whose build metadata tells cells apart.
        assert_eq!(cell_version("a1"), "0.1.0+cell.a1");
        assert_eq!(
            doc["dependencies"]["ddp-trainer"]["path"].as_str(),
            Some("/src/ddp/trainer")
        );
        assert_eq!(
            doc["dependencies"]["candle-nn"]["path"].as_str(),
            Some("/src/ddp/vendor/candle-nn")
        );
        assert!(doc.contains_key("workspace"));
        assert!(!doc.contains_key("patch"));
    }

    #[test]
    fn diagnostics_name_the_cell() {
        let r = "error[E0425]: cannot find value `x`\n --> src/main.rs:5:9\n  |\n5 |     x\n";
        assert_eq!(
            in_cell_terms(r),
            "error[E0425]: cannot find value `x`\n --> cell:5:9\n  |\n5 |     x\n"
        );
    }
}
