//! Test fixtures shared by every crate's tests (`trainer/tests`, `cli/tests`, `tests/`, and the
//! unit tests): the repository's sample data, specs written from a few keys ([`TestSpec`]), and
//! waits with a deadline ([`wait_for`], [`output_within`]). Run folders are built by
//! `ddp_workspaces::test_util`, which re-exports this module.
//!
//! ```
//! use ddp_trainer::test_util::fixtures::TestSpec;
//!
//! let spec = TestSpec::mnist("mlp")
//!     .set("data.limit_train", 256)
//!     .set("train.optimizer", "adam")
//!     .set("ddp.replicas", 2);
//! assert!(spec.text().contains("[train]\noptimizer = \"adam\"\n"));
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The repository's root folder.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the repository root")
}

/// `examples/`.
pub fn examples_dir() -> PathBuf {
    repo().join("examples")
}

/// The embedded MNIST sample (`examples/data/mnist-sample`, IDX files).
pub fn mnist_dir() -> PathBuf {
    examples_dir().join("data/mnist-sample")
}

/// The embedded Shakespeare text (`examples/data/shakespeare/input.txt`).
pub fn shakespeare() -> PathBuf {
    examples_dir().join("data/shakespeare/input.txt")
}

/// The workspace's executables `names` (`ddp`, `ddp-tui`, `ddp-kernel`, `ddp-trainer`, ...) in
/// `<target>/<profile>/`, beside the calling test's executable (`<target>/<profile>/deps/`).
///
/// They are made by the build `cargo test --workspace` does before it runs any test, with the
/// features of the whole workspace; this runs that same build (`cargo test --workspace
/// --no-run`), which finds everything built and returns at once, unless only some packages'
/// tests were built (`cargo test -p ...`): then it builds the rest, so no test runs an
/// executable older than the code. A narrower build (`cargo build -p ddp-cli`) would resolve
/// other features and rebuild most dependencies a second time.
///
/// With `DDP_TEST_PREBUILT=1` (scripts/test.sh sets it once its build is done) no build runs:
/// while tests run side by side, a build that replaced an executable would pull it from under a
/// running test.
pub fn workspace_binaries<const N: usize>(names: [&str; N]) -> [PathBuf; N] {
    let exe = std::env::current_exe().expect("the test executable");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("a test executable is in <target>/<profile>/deps/")
        .to_path_buf();
    let found = |name: &str| {
        let p = dir.join(name);
        assert!(p.is_file(), "no {} after cargo test --no-run", p.display());
        p
    };
    if std::env::var_os("DDP_TEST_PREBUILT").is_some_and(|v| v == "1") {
        return names.map(found);
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(&cargo);
    build
        .args(["test", "--workspace", "--no-run", "--quiet"])
        .current_dir(repo());
    let o = output_within(build, Duration::from_secs(3600));
    assert!(
        o.status.success(),
        "`cargo test --workspace --no-run` (building {}) failed:\n{}",
        names.join(", "),
        text(&o)
    );
    names.map(found)
}

/// A value of a spec key, written as TOML.
pub trait SpecValue {
    fn toml(&self) -> String;
}

impl SpecValue for &str {
    fn toml(&self) -> String {
        toml::Value::from(*self).to_string()
    }
}

impl SpecValue for String {
    fn toml(&self) -> String {
        self.as_str().toml()
    }
}

impl SpecValue for &Path {
    fn toml(&self) -> String {
        self.display().to_string().as_str().toml()
    }
}

impl SpecValue for PathBuf {
    fn toml(&self) -> String {
        self.as_path().toml()
    }
}

impl SpecValue for bool {
    fn toml(&self) -> String {
        self.to_string()
    }
}

impl SpecValue for f64 {
    fn toml(&self) -> String {
        toml::Value::from(*self).to_string()
    }
}

macro_rules! integer_values {
    ($($t:ty),*) => {$(
        impl SpecValue for $t {
            fn toml(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
integer_values!(i32, i64, u32, u64, usize);

/// A TOML value written as it is (an inline table, an array): `Raw("{ kind = \"step\" }")`.
pub struct Raw<'a>(pub &'a str);

impl SpecValue for Raw<'_> {
    fn toml(&self) -> String {
        self.0.to_string()
    }
}

/// The sections of a spec, in the order they are written.
const SECTIONS: [&str; 7] = [
    "model",
    "data",
    "train",
    "ddp",
    "checkpoint",
    "restart",
    "slurm",
];

/// A spec for a test, built from its keys (`section.key`) and written as TOML: one definition
/// of the small specs the tests train, so that a key renamed is renamed once.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TestSpec {
    name: String,
    /// (section, [(key, TOML value)]) in the order first set.
    sections: Vec<(String, Vec<(String, String)>)>,
    /// TOML written after the sections, as it is.
    tail: String,
}

impl TestSpec {
    /// A spec named `name` with no keys.
    pub fn named(name: &str) -> TestSpec {
        TestSpec {
            name: name.to_string(),
            sections: Vec::new(),
            tail: String::new(),
        }
    }

    /// `model` on the embedded MNIST sample (no validation split unless set).
    pub fn mnist(model: &str) -> TestSpec {
        TestSpec::named("t")
            .set("model.name", model)
            .set("data.name", "mnist")
            .set("data.path", mnist_dir())
    }

    /// The reference CNN on the MNIST sample, small and quick: 1,024 training images (a tenth
    /// for validation), 256 test images, batch 32, Adam at 0.001, one replica, a step record per
    /// step, 30 s collective timeout, no restarts.
    pub fn small_mnist_cnn() -> TestSpec {
        TestSpec::mnist("mnist-cnn")
            .set("data.val_fraction", 0.1)
            .set("data.limit_train", 1024)
            .set("data.limit_test", 256)
            .set("train.epochs", 1)
            .set("train.batch_size", 32)
            .set("train.optimizer", "adam")
            .set("train.lr", 0.001)
            .set("train.log_every", 1)
            .set("ddp.replicas", 1)
            .set("ddp.timeout_s", 30)
            .set("restart.max_restarts", 0)
    }

    /// A GPT of one layer, 2 heads, 32 channels and a context of 16 on the Shakespeare text:
    /// 6 steps of batch 4 with AdamW at 0.003, validated at step 3 and 6, one replica.
    pub fn tiny_gpt() -> TestSpec {
        TestSpec::named("tiny-gpt")
            .set("model.name", "gpt")
            .set("model.layers", 1)
            .set("model.heads", 2)
            .set("model.embd", 32)
            .set("model.block", 16)
            .set("data.name", "text")
            .set("data.path", shakespeare())
            .set("data.val_fraction", 0.01)
            .set("train.steps", 6)
            .set("train.eval_every", 3)
            .set("train.batch_size", 4)
            .set("train.optimizer", "adamw")
            .set("train.lr", 0.003)
            .set("ddp.replicas", 1)
            .set("ddp.timeout_s", 30)
            .set("restart.max_restarts", 0)
    }

    /// The same spec under another name.
    pub fn name(mut self, name: &str) -> TestSpec {
        self.name = name.to_string();
        self
    }

    /// Sets `section.key` (a key set twice keeps its first place and its last value).
    pub fn set(mut self, key: &str, value: impl SpecValue) -> TestSpec {
        let (section, key) = key
            .split_once('.')
            .unwrap_or_else(|| panic!("TestSpec::set({key:?}): want SECTION.KEY"));
        let value = value.toml();
        let keys = match self.sections.iter().position(|(s, _)| s == section) {
            Some(i) => &mut self.sections[i].1,
            None => {
                self.sections.push((section.to_string(), Vec::new()));
                &mut self.sections.last_mut().expect("just pushed").1
            }
        };
        match keys.iter_mut().find(|(k, _)| k == key) {
            Some(kv) => kv.1 = value,
            None => keys.push((key.to_string(), value)),
        }
        self
    }

    /// Leaves `section.key` out.
    pub fn unset(mut self, key: &str) -> TestSpec {
        if let Some((section, key)) = key.split_once('.') {
            for (s, keys) in &mut self.sections {
                if s == section {
                    keys.retain(|(k, _)| k != key);
                }
            }
        }
        self
    }

    /// TOML written as it is after the sections: it continues the last section written (for a
    /// spec with only `model` and `data` keys, `[data]`), and may open sections of its own.
    pub fn tail(mut self, toml: &str) -> TestSpec {
        self.tail.push_str(toml);
        self
    }

    /// The spec as TOML: `name`, then the sections in the usual order, then the tail.
    pub fn text(&self) -> String {
        let mut out = format!("name = {}\n", self.name.as_str().toml());
        let rank = |s: &str| {
            SECTIONS
                .iter()
                .position(|x| *x == s)
                .unwrap_or(SECTIONS.len())
        };
        let mut sections: Vec<&(String, Vec<(String, String)>)> = self.sections.iter().collect();
        sections.sort_by_key(|(s, _)| rank(s));
        for (section, keys) in sections {
            let _ = writeln!(out, "[{section}]");
            for (k, v) in keys {
                let _ = writeln!(out, "{k} = {v}");
            }
        }
        out.push_str(&self.tail);
        out
    }

    /// Writes the spec to `dir/spec.toml` and returns that path.
    pub fn write(&self, dir: &Path) -> PathBuf {
        self.write_as(&dir.join("spec.toml"))
    }

    /// Writes the spec to `path` and returns it.
    pub fn write_as(&self, path: &Path) -> PathBuf {
        std::fs::write(path, self.text())
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        path.to_path_buf()
    }
}

/// Waits until `done` says so, looking every 20 ms; panics naming `what` after `limit`.
pub fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `cmd` to its end with its output captured; kills it and panics with what it printed if
/// it takes longer than `limit`.
pub fn output_within(mut cmd: Command, limit: Duration) -> Output {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {program}: {e}"));
    let start = Instant::now();
    while child.try_wait().expect("wait for the child").is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let o = child.wait_with_output().expect("the child's output");
            panic!("{program} did not finish in {limit:?}\n{}", text(&o));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("the child's output")
}

/// A process's status and output, for an assertion's message.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_from_its_keys_parses_as_the_trainer_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = TestSpec::small_mnist_cnn()
            .set("train.epochs", 3)
            .set("ddp.replicas", 2)
            .set(
                "train.scheduler",
                Raw("{ kind = \"step\", step_size = 1, gamma = 0.7 }"),
            )
            .unset("restart.max_restarts")
            .name("mnist-small")
            .write(dir.path());
        let spec = crate::spec::Spec::load(&path, &[]).unwrap();
        assert_eq!(spec.name, "mnist-small");
        assert_eq!((spec.train.epochs, spec.ddp.replicas), (3, 2));
        assert_eq!(spec.data.limit_train, Some(1024));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with("name = \"mnist-small\"\n[model]\nname = \"mnist-cnn\"\n[data]\n")
        );
        assert!(!text.contains("[restart]\n\n") && !text.contains("max_restarts"));
        let gpt = crate::spec::Spec::parse_at(&TestSpec::tiny_gpt().text(), &path, &[]).unwrap();
        assert_eq!(gpt.train.steps, Some(6));
    }
}
