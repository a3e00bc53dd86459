//! The `%%ddp train` cells' build cache, shared by every workspace: `ddp-kernel install --warm`
//! fills it, and the first cell of another workspace then compiles only its own crate; a build
//! waiting for another one's lock on the cache says so; failures say what to do.
//!
//! The warm-up uses the test suite's cell cache (`ddp_e2e::cell_build_cache`, beside the
//! binaries: the one kernel/tests/jupyter.rs and tests/tests/front_ends.rs build their cells in),
//! so candle is compiled once per test run, by whichever test comes first; the other tests build
//! crates without dependencies in caches of their own (seconds).

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ddp_e2e::{cell_build_cache, run_limited_with};
use ddp_kernel::train::cargo::{self, BuildObserver, BuildRequest, LOCK_WAIT};
use ddp_kernel::train::{self, project};

fn kernel_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ddp-kernel"))
}

/// A cell that is not the warm-up's: the same dependencies, another model.
const CELL: &str = r#"use candle_core::{Result, Tensor};
use candle_nn::{Linear, Module, VarBuilder};

pub struct Wide(Linear);

pub fn model(vb: VarBuilder) -> Result<Wide> {
    Ok(Wide(candle_nn::linear(28 * 28, 10, vb.pp("fc"))?))
}

impl Module for Wide {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.flatten_from(1)?.apply(&self.0)
    }
}
"#;

/// Keeps cargo's lines, and sends each to the test as it comes.
struct Lines {
    seen: Vec<String>,
    tx: Option<mpsc::Sender<String>>,
}

impl Lines {
    fn new() -> Lines {
        Lines {
            seen: Vec::new(),
            tx: None,
        }
    }
}

impl BuildObserver for Lines {
    fn progress(&mut self, line: &str) {
        self.seen.push(line.to_string());
        if let Some(tx) = &self.tx {
            let _ = tx.send(line.to_string());
        }
    }
    fn warning(&mut self, rendered: &str) {
        self.seen.push(rendered.to_string());
    }
    fn interrupted(&self) -> bool {
        false
    }
}

/// `ddp-kernel install --warm --prefix <tmp>` with `env`, within `limit`: (success, stdout,
/// stderr).
fn install_warm(prefix: &Path, env: &[(&str, &Path)], limit: Duration) -> (bool, String, String) {
    let mut cmd = Command::new(kernel_bin());
    cmd.args(["install", "--warm", "--prefix"]).arg(prefix);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = run_limited_with(cmd, limit, Vec::new);
    let status = o
        .status
        .unwrap_or_else(|| panic!("install --warm took more than {limit:?}:\n{}", o.stderr));
    (status.success(), o.stdout, o.stderr)
}

#[test]
fn a_warm_cache_serves_the_first_cell_of_another_workspace() {
    let _serial = ddp_e2e::serial();
    let cache = cell_build_cache(&kernel_bin());
    let tmp = tempfile::tempdir().unwrap();
    let prefix = tmp.path().join("prefix");

    // Cold, this is the test run's one build of candle (2 cores: 10 to 20 minutes).
    let started = Instant::now();
    let (ok, out, err) = install_warm(
        &prefix,
        &[("DDP_BUILD_CACHE", &cache)],
        Duration::from_secs(2400),
    );
    assert!(ok, "install --warm failed:\n{out}\n{err}");
    eprintln!(
        "ddp-kernel install --warm: {:.1} s\n{out}",
        started.elapsed().as_secs_f64()
    );
    assert!(
        prefix
            .join("share/jupyter/kernels/ddp/kernel.json")
            .is_file(),
        "{out}"
    );
    assert!(out.contains("the cell build cache is warm"), "{out}");
    assert!(out.contains(&cache.display().to_string()), "{out}");
    assert!(
        err.contains("warming the cell build cache: ") && err.contains(" crates built"),
        "no progress lines:\n{err}"
    );

    // Cells of two other workspaces, staged and built as `%%ddp train` does. The second is staged
    // first and built last, as when a kernel waits for another one's build: it must still be
    // compiled (every cell is a unit of its own to cargo), not taken for the first.
    // The cells' files in the cache: (device, inode) of each `ddp_cell-*` (other tests' cells
    // may come and go in the same cache meanwhile).
    let cells_in_cache = || -> Vec<(u64, u64)> {
        std::fs::read_dir(cache.join("release/deps"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("ddp_cell-"))
            .filter_map(|e| e.metadata().ok())
            .map(|m| (m.dev(), m.ino()))
            .collect()
    };
    let mut binaries = Vec::new();
    let waiting = stage(
        &tmp.path().join("third-workspace"),
        &CELL.replace("10", "2"),
    );
    let first = stage(&tmp.path().join("another-workspace"), CELL);
    for (what, crate_dir) in [("first", &first), ("waiting", &waiting)] {
        let mut lines = Lines::new();
        let built = cargo::build(
            &BuildRequest {
                crate_dir,
                build_dir: &cache,
                features: &[],
                limit: cargo::BUILD_LIMIT,
                counts: false,
            },
            &mut lines,
        )
        .unwrap_or_else(|e| {
            panic!(
                "the {what} cell's build failed: {e}\n{}",
                lines.seen.join("\n")
            )
        });
        eprintln!(
            "the {what} cell of another workspace after --warm: built in {:.1} s ({})",
            built.seconds,
            built.summary()
        );
        assert_eq!(
            built.compiled,
            [project::PACKAGE],
            "{what}: only the cell's crate is compiled:\n{}",
            lines.seen.join("\n")
        );
        assert!(built.reused > 100, "{}", built.summary());
        assert!(
            built.binary.starts_with(crate_dir),
            "{}",
            built.binary.display()
        );
        let m = std::fs::metadata(&built.binary).unwrap();
        binaries.push((m.dev(), m.ino()));
    }
    // Each cell's executable (about 100 MB) leaves the cache once taken out: no file in the
    // cache is one of them.
    let left: Vec<_> = cells_in_cache()
        .into_iter()
        .filter(|f| binaries.contains(f))
        .collect();
    assert!(
        left.is_empty(),
        "the cells' executables stayed in the cache: {left:?}"
    );
}

/// `body` as a cell staged in `ws` (`.build/cells/<id>/`), as `%%ddp train` stages it.
fn stage(ws: &Path, body: &str) -> PathBuf {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let dir = train::BuildDirs::of(ws).cells.join(&id);
    let entry = project::entry_point(body).unwrap();
    let krate = train::crate_of("%%ddp train mnist.toml", body, 2, &id, entry).unwrap();
    project::write(&dir, &krate).unwrap();
    dir
}

/// A crate without dependencies, named as cells are, in `dir`.
fn tiny_crate(dir: &Path, dependencies: &str) {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"{}\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
             [dependencies]\n{dependencies}\n[workspace]\n",
            project::PACKAGE
        ),
    )
    .unwrap();
    std::fs::write(dir.join("src/main.rs"), "fn main() {}\n").unwrap();
}

#[test]
fn a_build_waiting_for_the_cache_says_so_then_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let krate = tmp.path().join("cell");
    let cache = tmp.path().join("cache");
    tiny_crate(&krate, "");
    // Another build holds the cache: cargo's lock on the build directory (flock).
    std::fs::create_dir_all(cache.join("release")).unwrap();
    let lock = File::create(cache.join("release/.cargo-lock")).unwrap();
    lock.lock().unwrap();

    let (tx, rx) = mpsc::channel();
    let build = {
        let (krate, cache) = (krate.clone(), cache.clone());
        std::thread::spawn(move || {
            let mut lines = Lines {
                seen: Vec::new(),
                tx: Some(tx),
            };
            let built = cargo::build(
                &BuildRequest {
                    crate_dir: &krate,
                    build_dir: &cache,
                    features: &[],
                    limit: Duration::from_secs(300),
                    counts: false,
                },
                &mut lines,
            );
            (built, lines.seen)
        })
    };
    let mut seen = Vec::new();
    let note = cargo::lock_wait_note(&cache);
    while !seen.contains(&note) {
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(line) => seen.push(line),
            Err(e) => panic!(
                "no lock-wait note ({e}); lines so far:\n{}",
                seen.join("\n")
            ),
        }
    }
    assert!(
        seen.iter().any(|l| l.trim_start() == LOCK_WAIT),
        "cargo's own line reaches the cell too:\n{}",
        seen.join("\n")
    );
    assert!(
        note.contains(&cache.display().to_string()) && note.contains("--warm"),
        "{note}"
    );
    lock.unlock().unwrap();
    let (built, lines) = build.join().unwrap();
    let built = built.unwrap_or_else(|e| panic!("{e}\n{}", lines.join("\n")));
    assert_eq!(built.compiled, [project::PACKAGE]);
}

#[test]
fn an_offline_build_missing_crates_says_to_fetch_them() {
    let tmp = tempfile::tempdir().unwrap();
    let krate = tmp.path().join("cell");
    tiny_crate(&krate, "ddp-no-such-crate-in-any-cache = \"1\"\n");
    let err = cargo::build(
        &BuildRequest {
            crate_dir: &krate,
            build_dir: &tmp.path().join("cache"),
            features: &[],
            limit: Duration::from_secs(300),
            counts: false,
        },
        &mut Lines::new(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("cargo fetch --locked"), "{err}");
}

#[test]
fn install_warm_without_cargo_says_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let prefix = tmp.path().join("prefix");
    let cache = tmp.path().join("cache");
    let (ok, out, err) = install_warm(
        &prefix,
        &[
            ("DDP_BUILD_CACHE", &cache),
            ("CARGO", Path::new("/nonexistent/cargo")),
        ],
        Duration::from_secs(120),
    );
    assert!(!ok, "{out}\n{err}");
    // The kernelspec is installed all the same; the message names the fix.
    assert!(
        prefix
            .join("share/jupyter/kernels/ddp/kernel.json")
            .is_file(),
        "{out}"
    );
    assert!(err.contains("/nonexistent/cargo"), "{err}");
    assert!(err.contains("https://rustup.rs"), "{err}");
    assert!(err.contains("ddp-kernel install --warm"), "{err}");
}
