//! Crates of one's own that depend on `ddp-trainer`, outside the checkout: where the ddp sources
//! are ([`Checkout`]), the dependency lines that name `ddp-trainer` and its candle by absolute
//! path ([`Checkout::dependency_lines`]), and the crate `ddp new model DIR` writes ([`model`]).
//!
//! `ddp-trainer` depends on the checkout's own candle-core and candle-nn by path
//! (vendor/candle-core/PATCH.md), so a crate that names the same three paths builds the same
//! candle with no `[patch]` of its own; with the checkout's `Cargo.lock` beside it, offline.
//! The kernel's `%%ddp train` cells are such crates too.
//!
//! Layout: `mod.rs`, the checkout and the dependency lines; `model.rs`, the files of a new model
//! crate (a manifest, a model, a spec and a test), validated before anything is written.

pub mod model;

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The environment variable naming the ddp checkout crates of one's own build against.
pub const SOURCE_ENV: &str = "DDP_SOURCE_DIR";

/// The crates a crate of one's own depends on, as the checkout's `[workspace.dependencies]`
/// names them: the engine and the candle it is built on.
pub const DEPENDENCIES: [&str; 3] = ["ddp-trainer", "candle-core", "candle-nn"];

/// A ddp checkout: `trainer/` (the `ddp-trainer` crate), `vendor/` (its candle), the
/// workspace's `Cargo.toml` (where each dependency is) and `Cargo.lock` (the versions every
/// dependency was built and tested with, so that an offline build finds them in cargo's cache).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkout {
    pub root: PathBuf,
}

impl Checkout {
    /// `$DDP_SOURCE_DIR`, else the checkout this executable was built from; checked to hold
    /// `trainer/Cargo.toml`.
    pub fn locate() -> Result<Checkout> {
        let (root, from) = match std::env::var_os(SOURCE_ENV) {
            Some(dir) => (PathBuf::from(dir), format!("${SOURCE_ENV}")),
            None => (
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_default(),
                "the checkout this executable was built from".to_string(),
            ),
        };
        let manifest = root.join("trainer").join("Cargo.toml");
        if !manifest.is_file() {
            return Err(Error::Invalid(format!(
                "{}: not found ({from}); crates of one's own build against the ddp-trainer sources: set {SOURCE_ENV} to a ddp checkout",
                manifest.display()
            )));
        }
        let root = std::fs::canonicalize(&root).map_err(|e| Error::io(&root, e))?;
        Ok(Checkout { root })
    }

    pub fn trainer_dir(&self) -> PathBuf {
        self.root.join("trainer")
    }

    /// The embedded MNIST sample (IDX files) the examples train on.
    pub fn mnist_sample(&self) -> PathBuf {
        self.root.join("examples").join("data").join("mnist-sample")
    }

    /// The checkout's `Cargo.lock`, if it has one.
    pub fn lock(&self) -> Option<String> {
        std::fs::read_to_string(self.root.join("Cargo.lock")).ok()
    }

    /// Each of [`DEPENDENCIES`] with the absolute path of its sources, from the checkout's
    /// `[workspace.dependencies]` (`ddp-trainer = { path = "trainer" }`, ...).
    pub fn dependencies(&self) -> Result<Vec<(&'static str, PathBuf)>> {
        let path = self.root.join("Cargo.toml");
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        dependencies_in(&text, &self.root).map_err(|msg| Error::Corrupt { path, msg })
    }

    /// `[dependencies]` lines naming [`DEPENDENCIES`] by absolute path, one a line.
    pub fn dependency_lines(&self) -> Result<String> {
        Ok(self
            .dependencies()?
            .iter()
            .map(|(name, path)| {
                let path = toml::Value::String(path.display().to_string());
                format!("{name} = {{ path = {path} }}\n")
            })
            .collect())
    }
}

/// The path of each of [`DEPENDENCIES`] in a workspace manifest, relative ones joined to `root`;
/// or which one has none.
fn dependencies_in(manifest: &str, root: &Path) -> Result<Vec<(&'static str, PathBuf)>, String> {
    let doc: toml::Table = manifest.parse().map_err(|e| format!("{e}"))?;
    let deps = doc
        .get("workspace")
        .and_then(|w| w.get("dependencies"))
        .and_then(|d| d.as_table());
    DEPENDENCIES
        .iter()
        .map(|&name| {
            let path = deps
                .and_then(|d| d.get(name))
                .and_then(|d| d.get("path"))
                .and_then(|p| p.as_str())
                .ok_or_else(|| {
                    format!("[workspace.dependencies] has no `{name} = {{ path = ... }}`")
                })?;
            Ok((name, root.join(path)))
        })
        .collect()
}

/// The end of a manifest written here: release builds keep line tables (backtraces name
/// file:line), and the crate is a workspace of its own wherever it lies.
pub const MANIFEST_TAIL: &str = "\n[profile.release]\n\
     debug = \"line-tables-only\"\n\
     \n\
     # Its own workspace, wherever it lies.\n\
     [workspace]\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependencies_come_from_the_workspace_with_absolute_paths() {
        let m = "[workspace.dependencies]\nddp-trainer = { path = \"trainer\" }\n\
                 candle-core = { version = \"0.11.1\", path = \"vendor/candle-core\" }\n\
                 candle-nn = { version = \"0.11.1\", path = \"vendor/candle-nn\" }\nserde = \"1\"\n";
        let deps = dependencies_in(m, Path::new("/src/ddp")).unwrap();
        assert_eq!(
            deps,
            vec![
                ("ddp-trainer", PathBuf::from("/src/ddp/trainer")),
                ("candle-core", PathBuf::from("/src/ddp/vendor/candle-core")),
                ("candle-nn", PathBuf::from("/src/ddp/vendor/candle-nn")),
            ]
        );
        let e = dependencies_in(
            "[workspace.dependencies]\nddp-trainer = { path = \"trainer\" }\ncandle-core = \"0.11.1\"\n",
            Path::new("/src/ddp"),
        )
        .unwrap_err();
        assert!(e.contains("`candle-core = { path = ... }`"), "{e}");
    }

    #[test]
    fn the_checkout_names_its_own_candle() {
        // This checkout: every crate of one's own gets the vendored candle, by path.
        let checkout = Checkout::locate().unwrap();
        let lines = checkout.dependency_lines().unwrap();
        let doc: toml::Table = lines.parse().unwrap();
        for name in DEPENDENCIES {
            let path = PathBuf::from(doc[name]["path"].as_str().unwrap());
            assert!(path.is_absolute(), "{lines}");
            assert!(path.join("Cargo.toml").is_file(), "{lines}");
        }
        assert!(lines.contains("vendor/candle-core"), "{lines}");
        assert!(checkout.mnist_sample().is_dir());
    }
}
