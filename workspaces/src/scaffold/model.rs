//! `ddp new model DIR`: a crate of one's own that builds and passes its test at once — a
//! manifest naming `ddp-trainer` and its candle by path, a model written the candle way
//! (`src/main.rs`: the executable is a `ddp-trainer` whose `model.name = "custom"` is it), a spec
//! (`model.toml`, 2 replicas on the embedded MNIST sample), a test that trains it
//! (`tests/train.rs`), the checkout's `Cargo.lock` and a README with the commands.
//!
//! [`plan`] checks the folder and the name and returns the files without touching the disk;
//! [`write()`] creates them.

use std::path::{Path, PathBuf};

use super::{Checkout, MANIFEST_TAIL};
use crate::error::{Error, Result};

/// The crate `ddp new model` writes: its folder, package (and executable) name and files
/// (paths relative to `dir`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelCrate {
    pub dir: PathBuf,
    pub name: String,
    pub files: Vec<(PathBuf, String)>,
}

/// The crate for `dir`, named `name` (default: the folder's name), against `checkout`; refused
/// (exit 2) when `dir` holds anything or the name cannot be a crate's.
pub fn plan(dir: &Path, name: Option<&str>, checkout: &Checkout) -> Result<ModelCrate> {
    if dir.exists() {
        let empty = dir.is_dir()
            && std::fs::read_dir(dir)
                .map_err(|e| Error::io(dir, e))?
                .next()
                .is_none();
        if !empty {
            return Err(Error::Invalid(format!(
                "{}: already exists and is not an empty folder; name a new folder for the crate",
                dir.display()
            )));
        }
    }
    let name = match name {
        Some(n) => n.to_string(),
        None => dir
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "{}: no folder name to name the crate after; give --name NAME",
                    dir.display()
                ))
            })?,
    };
    check_name(&name)?;
    let mut files = vec![
        (PathBuf::from("Cargo.toml"), manifest(&name, checkout)?),
        (PathBuf::from("src/main.rs"), MAIN_RS.to_string()),
        (PathBuf::from("model.toml"), spec(&name, checkout)),
        (PathBuf::from("tests/train.rs"), test_rs(&name)),
        (PathBuf::from("README.md"), readme(&name)),
        (PathBuf::from(".gitignore"), "/target\n".to_string()),
    ];
    if let Some(lock) = checkout.lock() {
        files.push((PathBuf::from("Cargo.lock"), lock));
    }
    Ok(ModelCrate {
        dir: dir.to_path_buf(),
        name,
        files,
    })
}

/// Writes the crate's files; on a failure removes what it made.
pub fn write(krate: &ModelCrate) -> Result<()> {
    let existed = krate.dir.exists();
    let written = (|| -> Result<()> {
        for (rel, text) in &krate.files {
            let path = krate.dir.join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
            }
            std::fs::write(&path, text).map_err(|e| Error::Write { path, source: e })?;
        }
        Ok(())
    })();
    if written.is_err() {
        if existed {
            for (rel, _) in &krate.files {
                let _ = std::fs::remove_file(krate.dir.join(rel));
            }
            for sub in ["src", "tests"] {
                let _ = std::fs::remove_dir(krate.dir.join(sub));
            }
        } else {
            let _ = std::fs::remove_dir_all(&krate.dir);
        }
    }
    written
}

/// A package name cargo takes, that is not one of the crate's own dependencies.
fn check_name(name: &str) -> Result<()> {
    let valid = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid {
        return Err(Error::Invalid(format!(
            "`{name}` cannot name a crate (letters, digits, `-` and `_`, starting with a letter); give --name NAME"
        )));
    }
    let taken = super::DEPENDENCIES
        .iter()
        .chain(&["test", "build", "deps", "examples", "incremental"])
        .find(|n| n.replace('-', "_") == name.replace('-', "_"));
    if let Some(taken) = taken {
        return Err(Error::Invalid(format!(
            "`{name}` is taken (`{taken}` is a dependency of the crate or a folder cargo uses); give --name NAME"
        )));
    }
    Ok(())
}

fn manifest(name: &str, checkout: &Checkout) -> Result<String> {
    Ok(format!(
        "# Written by `ddp new model`: a model of one's own, trained by the ddp engine.\n\
         # `cargo build --release`, then `ddp run model.toml --trainer target/release/{name}`.\n\
         [package]\n\
         name = \"{name}\"\n\
         version = \"0.1.0\"\n\
         edition = \"2024\"\n\
         publish = false\n\
         \n\
         # The engine and the candle it is built on, from the ddp checkout (by git instead:\n\
         # `ddp-trainer = {{ git = \"URL\" }}`, and the same URL for candle-core and candle-nn).\n\
         [dependencies]\n\
         {deps}{MANIFEST_TAIL}",
        deps = checkout.dependency_lines()?,
    ))
}

fn spec(name: &str, checkout: &Checkout) -> String {
    let data = toml::Value::String(checkout.mnist_sample().display().to_string());
    format!(
        "# The model of src/main.rs on the embedded MNIST sample, 2 replicas. After\n\
         # `cargo build --release`:\n\
         #   ddp run model.toml --trainer target/release/{name}\n\
         # Every key is in docs/spec.md of the ddp checkout; your own data: docs/data.md.\n\
         name = \"{name}\"\n\
         \n\
         [model]\n\
         name = \"custom\"\n\
         \n\
         [data]\n\
         name = \"mnist\"\n\
         path = {data}\n\
         val_fraction = 0.1\n\
         \n\
         [train]\n\
         epochs = 3\n\
         batch_size = 32\n\
         optimizer = \"adam\"\n\
         lr = 0.001\n\
         lr_scaling = \"linear\"\n\
         seed = 1\n\
         \n\
         [ddp]\n\
         replicas = 2\n\
         \n\
         [checkpoint]\n\
         every_epochs = 1\n\
         keep_last = 2\n"
    )
}

const MAIN_RS: &str = r#"//! A model of one's own, written the candle way and handed to the ddp engine: this executable
//! *is* a `ddp-trainer` (the same command line, spec, environment and outputs) whose
//! `[model] name = "custom"` is `Net`. Change the layers at will; docs/custom-models.md of the
//! ddp checkout says what the engine expects (a data set, a loss and metrics of one's own too).

use candle_core::{Result, Tensor};
use candle_nn::{Conv2d, Conv2dConfig, Linear, Module, VarBuilder};

/// Conv(1→8, 5×5, stride 2) → GELU → Linear(8·12·12→64) → GELU → Linear(64→10).
pub struct Net {
    conv: Conv2d,
    fc1: Linear,
    fc2: Linear,
}

/// The model; parameter names are the `VarBuilder` paths (`conv.weight`, `fc1.bias`, ...), so
/// `model.safetensors` loads into a PyTorch module with attributes `conv`, `fc1`, `fc2`.
pub fn model(vb: VarBuilder) -> Result<Net> {
    let cfg = Conv2dConfig {
        stride: 2,
        ..Default::default()
    };
    Ok(Net {
        conv: candle_nn::conv2d(1, 8, 5, cfg, vb.pp("conv"))?,
        fc1: candle_nn::linear(8 * 12 * 12, 64, vb.pp("fc1"))?,
        fc2: candle_nn::linear(64, 10, vb.pp("fc2"))?,
    })
}

impl Module for Net {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.apply(&self.conv)?
            .gelu()?
            .flatten_from(1)?
            .apply(&self.fc1)?
            .gelu()?
            .apply(&self.fc2)
    }
}

fn main() {
    ddp_trainer::main_with(model)
}
"#;

fn test_rs(name: &str) -> String {
    TEST_RS.replace("{name}", name)
}

const TEST_RS: &str = r#"//! The model trains with DDP: 2 replicas, one epoch of model.toml, a test accuracy of at least
//! 90 %, and `model.safetensors` holds the `VarBuilder` names. `cargo test --release`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ddp_trainer::metrics::{MetricKind, metrics_path, read_metrics};

#[test]
fn two_replicas_learn_the_digits() {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("two-replicas");
    let _ = std::fs::remove_dir_all(&out);
    let spec = Path::new(env!("CARGO_MANIFEST_DIR")).join("model.toml");
    let mut child = Command::new(env!("CARGO_BIN_EXE_{name}"))
        .arg(&spec)
        .args([
            "--standalone",
            "--nproc",
            "2",
            "--set",
            "train.epochs=1",
            "--out",
        ])
        .arg(&out)
        .spawn()
        .expect("the trainer starts");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(600) {
            let _ = child.kill();
            panic!("training did not end within 600 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "training failed: {status}");

    let records = read_metrics(metrics_path(&out, 0)).unwrap();
    let test = records
        .iter()
        .find(|r| r.kind == MetricKind::Test)
        .expect("a test record in rank 0's metrics");
    let accuracy = test.accuracy.expect("the test record has an accuracy");
    assert!(accuracy >= 0.90, "test accuracy {accuracy} after one epoch");

    let weights =
        candle_core::safetensors::load(out.join("model.safetensors"), &candle_core::Device::Cpu)
            .unwrap();
    let mut names: Vec<&String> = weights.keys().collect();
    names.sort();
    assert_eq!(
        names,
        [
            "conv.bias",
            "conv.weight",
            "fc1.bias",
            "fc1.weight",
            "fc2.bias",
            "fc2.weight"
        ]
    );
}
"#;

fn readme(name: &str) -> String {
    format!(
        "# {name}\n\
         \n\
         A model of one's own (`src/main.rs`), trained by the ddp engine with data parallelism.\n\
         \n\
         ```sh\n\
         cargo test --release                      # 2 replicas, one epoch, test accuracy >= 90 %\n\
         cargo build --release\n\
         ddp run model.toml --trainer target/release/{name}\n\
         ```\n\
         \n\
         `target/release/{name}` is a `ddp-trainer`: `target/release/{name} model.toml --standalone\n\
         --nproc 2 --out out/` trains without a workspace, and torchrun, srun and mpirun start it as they\n\
         start `ddp-trainer`. docs/custom-models.md of the ddp checkout says the rest.\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkout() -> Checkout {
        Checkout::locate().unwrap()
    }

    #[test]
    fn the_crate_is_named_after_its_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let k = plan(&tmp.path().join("my-net"), None, &checkout()).unwrap();
        assert_eq!(k.name, "my-net");
        let file = |rel: &str| {
            &k.files
                .iter()
                .find(|(p, _)| p == Path::new(rel))
                .unwrap_or_else(|| panic!("no {rel}"))
                .1
        };
        let doc: toml::Table = file("Cargo.toml").parse().unwrap();
        assert_eq!(doc["package"]["name"].as_str(), Some("my-net"));
        for dep in super::super::DEPENDENCIES {
            assert!(
                Path::new(doc["dependencies"][dep]["path"].as_str().unwrap()).is_absolute(),
                "{dep}"
            );
        }
        assert!(doc.contains_key("workspace") && !doc.contains_key("patch"));
        assert!(file("tests/train.rs").contains("env!(\"CARGO_BIN_EXE_my-net\")"));
        // The spec is one the trainer takes, and its data is where it says.
        let spec: toml::Table = file("model.toml").parse().unwrap();
        assert!(Path::new(spec["data"]["path"].as_str().unwrap()).is_dir());
        assert_eq!(spec["model"]["name"].as_str(), Some("custom"));
        assert!(file("Cargo.lock").contains("name = \"candle-core\""));
        // Nothing was written.
        assert!(!tmp.path().join("my-net").exists());
    }

    #[test]
    fn a_folder_with_files_or_a_bad_name_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("x"), "").unwrap();
        let e = plan(tmp.path(), Some("net"), &checkout()).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("not an empty folder"), "{e}");
        let empty = tmp.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        assert!(plan(&empty, None, &checkout()).is_ok());
        for bad in ["1net", "my net", "candle_nn", "ddp-trainer", "test", ""] {
            let e = plan(&tmp.path().join("new"), Some(bad), &checkout()).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}");
            assert!(e.to_string().contains("--name NAME"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_rust_files_are_as_rustfmt_writes_them() {
        let tmp = tempfile::tempdir().unwrap();
        let k = plan(
            &tmp.path().join("a-net-with-a-long-name"),
            None,
            &checkout(),
        )
        .unwrap();
        write(&k).unwrap();
        // A file that is not as rustfmt writes it fails the check (rustfmt's exit code 1).
        let bad = tmp.path().join("bad.rs");
        std::fs::write(&bad, "fn  main(){}\n").unwrap();
        let check = |file: &Path| {
            std::process::Command::new("rustfmt")
                .args(["--edition", "2024", "--check"])
                .arg(file)
                .output()
                .expect("rustfmt (rustup component add rustfmt)")
        };
        assert!(!check(&bad).status.success());
        for (rel, _) in k
            .files
            .iter()
            .filter(|(p, _)| p.extension() == Some("rs".as_ref()))
        {
            let out = check(&k.dir.join(rel));
            assert!(
                out.status.success(),
                "{} is not as rustfmt writes it:\n{}",
                rel.display(),
                String::from_utf8_lossy(&out.stdout)
            );
        }
    }

    #[test]
    fn write_creates_every_file() {
        let tmp = tempfile::tempdir().unwrap();
        let k = plan(&tmp.path().join("net"), None, &checkout()).unwrap();
        write(&k).unwrap();
        for (rel, text) in &k.files {
            assert_eq!(&std::fs::read_to_string(k.dir.join(rel)).unwrap(), text);
        }
    }
}
