//! `ddp-kernel install --warm`: a small built-in cell (an MLP) built into the cells' build cache,
//! so that the first real `%%ddp train` cell, in any workspace, compiles only its own crate.
//!
//! The cell goes through the same [`super::crate_of`] and [`cargo::build`] as every cell (same
//! manifest, lock file, dependencies, profile and features), staged in a temporary folder that is
//! removed afterwards: the dependencies it compiles are the very units a cell reuses. Only
//! `ddp-cell` itself differs from cell to cell (its version names its build:
//! `project::cell_version`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::cargo::{self, BuildObserver, BuildRequest, Built};
use super::project;
use crate::error::{Error, Result};

/// The built-in cell: what a first cell looks like (candle_core, candle_nn, ddp_trainer).
pub const WARM_CELL: &str = r#"use candle_core::{Result, Tensor};
use candle_nn::{Linear, Module, VarBuilder};

pub struct Mlp {
    fc1: Linear,
    fc2: Linear,
}

pub fn model(vb: VarBuilder) -> Result<Mlp> {
    Ok(Mlp {
        fc1: candle_nn::linear(28 * 28, 64, vb.pp("fc1"))?,
        fc2: candle_nn::linear(64, 10, vb.pp("fc2"))?,
    })
}

impl Module for Mlp {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.flatten_from(1)?.apply(&self.fc1)?.relu()?.apply(&self.fc2)
    }
}
"#;

/// The magic line the built-in cell stands under (a comment in its `src/main.rs`).
const WARM_MAGIC: &str = "%%ddp train (the built-in cell of ddp-kernel install --warm)";

/// A cold cache compiles candle and ddp-trainer in release mode: 10 to 20 minutes on 2 cores.
pub const WARM_LIMIT: Duration = Duration::from_secs(90 * 60);

/// Builds [`WARM_CELL`] with `cache` as cargo's build directory.
pub fn warm(cache: &Path, observer: &mut dyn BuildObserver) -> Result<Built> {
    let entry = project::entry_point(WARM_CELL)?;
    let id = uuid::Uuid::new_v4().simple().to_string();
    let krate = super::crate_of(WARM_MAGIC, WARM_CELL, 2, &id, entry)?;
    let stage = Stage(std::env::temp_dir().join(format!("ddp-warm-{id}")));
    project::write(&stage.0, &krate)?;
    cargo::build(
        &BuildRequest {
            crate_dir: &stage.0,
            build_dir: cache,
            features: &[],
            limit: WARM_LIMIT,
            counts: true,
        },
        observer,
    )
}

/// The staging folder, removed when done (its binary is of no use).
struct Stage(PathBuf);

impl Drop for Stage {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// From now on, Ctrl-C (SIGINT) and SIGTERM stop the warm-up's build (cargo runs in its own
/// process group, which the terminal's Ctrl-C does not reach): [`Progress::interrupted`].
pub fn stop_on_signals() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe).
        unsafe {
            libc::signal(
                signal,
                on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
    }
}

/// The line that shows how far the warm-up is.
pub fn progress_line(done: usize, total: usize) -> String {
    format!("warming the cell build cache: {done}/{total} crates built")
}

/// The warm-up's progress on `out`: on a terminal one line updated in place; otherwise a line
/// per tenth of the build. Cargo's lock-wait lines are shown as they come; its other lines
/// (`Compiling ...`) are only counted.
pub struct Progress<W: Write> {
    out: W,
    tty: bool,
    /// What was shown last: units done (terminal) or tenths done (otherwise).
    shown: Option<usize>,
    /// `Compiling` lines, shown every 25 when cargo gives no counts.
    compiling: usize,
    counted: bool,
    /// Whether a line is being updated in place (and needs ending).
    open: bool,
}

impl<W: Write> Progress<W> {
    pub fn new(out: W, tty: bool) -> Progress<W> {
        Progress {
            out,
            tty,
            shown: None,
            compiling: 0,
            counted: false,
            open: false,
        }
    }

    fn show(&mut self, line: &str, in_place: bool) {
        let _ = if self.tty && (in_place || self.open) {
            write!(self.out, "\r\x1b[K{line}")
        } else {
            write!(self.out, "{line}")
        };
        if in_place && self.tty {
            self.open = true;
        } else {
            let _ = writeln!(self.out);
            self.open = false;
        }
        let _ = self.out.flush();
    }

    /// Ends the line updated in place, if any.
    pub fn finish(&mut self) {
        if self.open {
            let _ = writeln!(self.out);
            let _ = self.out.flush();
            self.open = false;
        }
    }

    /// The output, for tests.
    pub fn into_inner(self) -> W {
        self.out
    }
}

impl<W: Write> BuildObserver for Progress<W> {
    fn progress(&mut self, line: &str) {
        let line = line.trim_start();
        if line.starts_with("Compiling ") {
            self.compiling += 1;
            if !self.counted && self.compiling.is_multiple_of(25) {
                let n = self.compiling;
                self.show(
                    &format!("warming the cell build cache: {n} crates compiled"),
                    true,
                );
            }
        } else if line.starts_with(cargo::LOCK_WAIT) || line.starts_with("waiting for") {
            self.show(line, false);
        }
    }

    fn warning(&mut self, rendered: &str) {
        self.show(rendered.trim_end(), false);
    }

    fn interrupted(&self) -> bool {
        STOP.load(Ordering::SeqCst)
    }

    fn units(&mut self, done: usize, total: usize) {
        self.counted = true;
        let step = if self.tty {
            done
        } else {
            done * 10 / total.max(1)
        };
        if self.shown.is_some_and(|s| s >= step) {
            return;
        }
        self.shown = Some(step);
        self.show(&progress_line(done, total), true);
    }
}

/// The hint that follows an error of the warm-up.
pub fn error_hint(e: &Error) -> &'static str {
    let text = e.to_string();
    if text.contains("could not start") {
        "cargo could not be run: install Rust (https://rustup.rs) or set CARGO to cargo's path, \
         then run `ddp-kernel install --warm` again"
    } else if text.contains("interrupted") {
        "stopped; what was compiled is kept: `ddp-kernel install --warm` goes on from there"
    } else {
        "the kernelspec is installed, but the cache is not warm (the first cell will compile \
         everything): fix the above, then run `ddp-kernel install --warm` again"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_cell_is_a_model_cell() {
        assert_eq!(
            project::entry_point(WARM_CELL).unwrap(),
            project::EntryPoint::Parts(project::CellParts {
                model: true,
                ..Default::default()
            })
        );
    }

    #[test]
    fn off_a_terminal_a_line_per_tenth() {
        let mut p = Progress::new(Vec::new(), false);
        p.progress("   Compiling memchr v2.8.3");
        for done in 0..=310 {
            p.units(done, 310);
        }
        p.progress(cargo::LOCK_WAIT);
        p.finish();
        let out = String::from_utf8(p.into_inner()).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 12, "{out}");
        assert_eq!(lines[0], "warming the cell build cache: 0/310 crates built");
        assert_eq!(
            lines[1],
            "warming the cell build cache: 31/310 crates built"
        );
        assert_eq!(
            lines[10],
            "warming the cell build cache: 310/310 crates built"
        );
        assert_eq!(lines[11], cargo::LOCK_WAIT);
        assert!(!out.contains('\r'));
    }

    #[test]
    fn on_a_terminal_one_line_in_place() {
        let mut p = Progress::new(Vec::new(), true);
        p.units(1, 3);
        p.units(1, 3);
        p.units(2, 3);
        p.progress(cargo::LOCK_WAIT);
        p.units(3, 3);
        p.finish();
        let out = String::from_utf8(p.into_inner()).unwrap();
        assert_eq!(
            out,
            format!(
                "\r\x1b[K{}\r\x1b[K{}\r\x1b[K{}\n\r\x1b[K{}\n",
                progress_line(1, 3),
                progress_line(2, 3),
                cargo::LOCK_WAIT,
                progress_line(3, 3)
            )
        );
    }

    #[test]
    fn without_counts_compiling_lines_are_counted() {
        let mut p = Progress::new(Vec::new(), false);
        for _ in 0..50 {
            p.progress("   Compiling x v1.0.0");
        }
        let out = String::from_utf8(p.into_inner()).unwrap();
        assert_eq!(
            out,
            "warming the cell build cache: 25 crates compiled\n\
             warming the cell build cache: 50 crates compiled\n"
        );
    }
}
