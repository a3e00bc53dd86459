//! Bad input, end to end: every case drives the real `ddp-trainer` binary and checks the exit code
//! (2 for configuration errors: spec, data, model, environment; 1 for runtime failures: peers,
//! rendezvous), that the message names the file / key / rank and says what to do, that nothing
//! hangs, and that nothing half-written is left in the run folder (no `model.safetensors`, no
//! checkpoint, no `.tmp` file).

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

/// Deadline for a process that should fail at once (spec or data errors).
const QUICK: Duration = Duration::from_secs(30);

/// A spec in `dir` (`spec.toml`) reading MNIST-format data from `data`; `body` is appended.
fn spec_with_data(dir: &Path, model: &str, data: &Path, body: &str) -> PathBuf {
    let text = format!(
        "name = \"t\"\n[model]\nname = \"{model}\"\n[data]\nname = \"mnist\"\npath = \"{}\"\n{body}",
        data.display()
    );
    let p = dir.join("spec.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// 1-based line of the first line of `file` that starts with `prefix`.
fn line_of(file: &Path, prefix: &str) -> usize {
    let text = std::fs::read_to_string(file).unwrap();
    text.lines()
        .position(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` in {text}"))
        + 1
}

/// Copies the shipped MNIST sample's files into `dst` (created), except those named in `skip`.
fn copy_mnist(dst: &Path, skip: &[&str]) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(mnist_dir()).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".gz") && !skip.contains(&name.as_str()) {
            std::fs::copy(e.path(), dst.join(&name)).unwrap();
        }
    }
}

/// A plain (not gzipped) IDX images file: `magic`, then n × h × w, then n·h·w pixel bytes.
fn idx_images(magic: u32, n: u32, h: u32, w: u32) -> Vec<u8> {
    let mut b = Vec::new();
    for v in [magic, n, h, w] {
        b.extend_from_slice(&v.to_be_bytes());
    }
    b.extend((0..(n * h * w) as usize).map(|i| (i % 251) as u8));
    b
}

/// A plain IDX labels file with `n` labels 0..=9.
fn idx_labels(n: u32) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&0x0000_0801u32.to_be_bytes());
    b.extend_from_slice(&n.to_be_bytes());
    b.extend((0..n).map(|i| (i % 10) as u8));
    b
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs one single-process replica (`ddp-trainer SPEC --out OUT [--set ...]`), returning its output
/// and how long it took.
fn run_single(spec: &Path, out: &Path, sets: &[&str]) -> (Output, Duration) {
    let mut c = trainer();
    c.arg(spec).arg("--out").arg(out);
    for s in sets {
        c.arg("--set").arg(s);
    }
    let t = Instant::now();
    let o = run_with_timeout(c, QUICK);
    (o, t.elapsed())
}

fn assert_exit(o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "expected exit code {code}, got {:?}\n{}",
        o.status,
        text(o)
    );
}

/// `needle` occurs in `haystack` (the process output), with the whole output on failure.
fn assert_says(o: &Output, haystack: &str, needle: &str) {
    assert!(
        haystack.contains(needle),
        "expected the message to contain {needle:?}\n{}",
        text(o)
    );
}

/// Nothing half-written in the run folder: no final model, no checkpoint, no temporary file.
/// (Metrics, TensorBoard events and logs are append-only records and may exist.)
fn assert_nothing_half_written(out: &Path) {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, found);
            }
            found.push(p);
        }
    }
    let mut files = Vec::new();
    walk(out, &mut files);
    let bad: Vec<&PathBuf> = files
        .iter()
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name == "model.safetensors"
                || name.contains(".tmp")
                || p.starts_with(out.join("checkpoints")) && p.is_file()
        })
        .collect();
    assert!(
        bad.is_empty(),
        "half-written output left in {}: {bad:?}",
        out.display()
    );
}

/// A configuration error: exit code 2, fast, and nothing written.
fn assert_config_error(o: &Output, took: Duration, out: &Path) {
    assert_exit(o, 2);
    assert!(
        took < Duration::from_secs(20),
        "a configuration error took {took:?}\n{}",
        text(o)
    );
    assert_nothing_half_written(out);
}

// ---------------------------------------------------------------------------------------------
// Data
// ---------------------------------------------------------------------------------------------

#[test]
fn missing_data_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("empty");
    std::fs::create_dir(&data).unwrap();
    let spec = spec_with_data(dir.path(), "mnist-cnn", &data, "");
    let out = dir.path().join("out");
    let (o, took) = run_single(&spec, &out, &[]);
    assert_config_error(&o, took, &out);
    let e = stderr(&o);
    // The first missing file, with its full path, and the list of what the directory must hold.
    assert_says(
        &o,
        &e,
        &data.join("train-images-idx3-ubyte").display().to_string(),
    );
    assert_says(&o, &e, "file not found (nor train-images-idx3-ubyte.gz)");
    for f in [
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ] {
        assert_says(&o, &e, &format!("{f}[.gz]"));
    }
}

#[test]
fn missing_data_directory_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("no-such-dir");
    let spec = spec_with_data(dir.path(), "mnist-cnn", &data, "");
    let out = dir.path().join("out");
    let (o, took) = run_single(&spec, &out, &[]);
    assert_config_error(&o, took, &out);
    assert_says(
        &o,
        &stderr(&o),
        &format!("the directory {} does not exist", data.display()),
    );
}

/// A copy of the MNIST sample in `dir/data` whose gzipped training images are cut in half.
fn mnist_with_truncated_images(dir: &std::path::Path) -> std::path::PathBuf {
    let data = dir.join("data");
    copy_mnist(&data, &[]);
    let images = data.join("train-images-idx3-ubyte.gz");
    let len = std::fs::metadata(&images).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&images)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    data
}

#[test]
fn truncated_gzip_data_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let data = mnist_with_truncated_images(dir.path());
    let images = data.join("train-images-idx3-ubyte.gz");
    let spec = spec_with_data(dir.path(), "mnist-cnn", &data, "");
    let out = dir.path().join("out");
    let (o, took) = run_single(&spec, &out, &[]);
    assert_config_error(&o, took, &out);
    let e = stderr(&o);
    assert_says(&o, &e, &format!("{}: ", images.display()));
    assert_says(&o, &e, "truncated");
}

#[test]
fn truncated_plain_data_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    copy_mnist(&data, &["train-images-idx3-ubyte.gz"]);
    let images = data.join("train-images-idx3-ubyte");
    let mut bytes = idx_images(0x0000_0803, 10, 28, 28);
    bytes.truncate(bytes.len() - 5);
    std::fs::write(&images, bytes).unwrap();
    let spec = spec_with_data(dir.path(), "mnist-cnn", &data, "");
    let out = dir.path().join("out");
    let (o, took) = run_single(&spec, &out, &[]);
    assert_config_error(&o, took, &out);
    let e = stderr(&o);
    assert_says(&o, &e, &format!("{}: truncated", images.display()));
    assert_says(
        &o,
        &e,
        "10 images of 28×28 (7840 bytes) but only 7835 bytes follow",
    );
}

#[test]
fn wrong_idx_magic_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    copy_mnist(&data, &["train-images-idx3-ubyte.gz"]);
    let images = data.join("train-images-idx3-ubyte");
    std::fs::write(&images, idx_images(0x0000_0804, 4, 28, 28)).unwrap();
    let spec = spec_with_data(dir.path(), "mnist-cnn", &data, "");
    let out = dir.path().join("out");
    let (o, took) = run_single(&spec, &out, &[]);
    assert_config_error(&o, took, &out);
    let e = stderr(&o);
    assert_says(&o, &e, &format!("{}: ", images.display()));
    assert_says(&o, &e, "magic 0x00000804");
    assert_says(&o, &e, "expected 0x00000803");
}

#[test]
fn labels_file_in_place_of_images_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    copy_mnist(&data, &["train-images-idx3-ubyte.gz"]);
    let images = data.join("train-images-idx3-ubyte");
    std::fs::write(&images, idx_labels(4)).unwrap();
    let spec = spec_with_data(dir.path(), "mnist-cnn", &data, "");
    let out = dir.path().join("out");
    let (o, took) = run_single(&spec, &out, &[]);
    assert_config_error(&o, took, &out);
    assert_says(
        &o,
        &stderr(&o),
        &format!(
            "{}: not an IDX images file: magic 0x00000801 (this is an IDX labels file)",
            images.display()
        ),
    );
}

#[test]
fn wrong_image_dimensions_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    copy_mnist(
        &data,
        &["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"],
    );
    let images = data.join("train-images-idx3-ubyte");
    std::fs::write(&images, idx_images(0x0000_0803, 4, 32, 32)).unwrap();
    std::fs::write(data.join("train-labels-idx1-ubyte"), idx_labels(4)).unwrap();
    let spec = spec_with_data(dir.path(), "mnist-cnn", &data, "");
    let out = dir.path().join("out");
    let (o, took) = run_single(&spec, &out, &[]);
    assert_config_error(&o, took, &out);
    let e = stderr(&o);
    assert_says(&o, &e, &format!("{}: ", images.display()));
    assert_says(&o, &e, "4×32×32");
    assert_says(&o, &e, "N×28×28");
}

#[test]
fn label_count_mismatch_names_both_files() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    copy_mnist(
        &data,
        &["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"],
    );
    let (images, labels) = (
        data.join("train-images-idx3-ubyte"),
        data.join("train-labels-idx1-ubyte"),
    );
    std::fs::write(&images, idx_images(0x0000_0803, 10, 28, 28)).unwrap();
    std::fs::write(&labels, idx_labels(9)).unwrap();
    let spec = spec_with_data(dir.path(), "mnist-cnn", &data, "");
    let out = dir.path().join("out");
    let (o, took) = run_single(&spec, &out, &[]);
    assert_config_error(&o, took, &out);
    let e = stderr(&o);
    assert_says(&o, &e, &format!("{}: holds 9 labels", labels.display()));
    assert_says(&o, &e, &format!("{} holds 10 images", images.display()));
    assert_says(&o, &e, "must have the same count");
}

#[test]
fn label_out_of_range_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    copy_mnist(
        &data,
        &["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"],
    );
    let labels = data.join("train-labels-idx1-ubyte");
    std::fs::write(
        data.join("train-images-idx3-ubyte"),
        idx_images(0x0000_0803, 3, 28, 28),
    )
    .unwrap();
    let mut l = idx_labels(3);
    l[8 + 1] = 10;
    std::fs::write(&labels, l).unwrap();
    let spec = spec_with_data(dir.path(), "mnist-cnn", &data, "");
    let out = dir.path().join("out");
    let (o, took) = run_single(&spec, &out, &[]);
    assert_config_error(&o, took, &out);
    assert_says(
        &o,
        &stderr(&o),
        &format!("{}: label 10 at index 1 is out of range", labels.display()),
    );
}

// ---------------------------------------------------------------------------------------------
// Spec
// ---------------------------------------------------------------------------------------------

#[test]
fn unknown_model_lists_the_choices_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(dir.path(), "mnist-cnnn", "");
    let out = dir.path().join("out");
    let (o, took) = run_single(&spec, &out, &[]);
    assert_config_error(&o, took, &out);
    let e = stderr(&o);
    let line = line_of(&spec, "name = \"mnist-cnnn\"");
    assert_says(&o, &e, &format!("{}:{line}: ", spec.display()));
    assert_says(&o, &e, "mnist-cnnn");
    for m in [
        "mnist-cnn",
        "mlp",
        "convnet-bn",
        "resnet18",
        "resnet50",
        "linear",
    ] {
        assert_says(&o, &e, &format!("`{m}`"));
    }
}

#[test]
fn unknown_model_from_set_lists_the_choices() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(dir.path(), "mnist-cnn", "");
    let out = dir.path().join("out");
    let (o, took) = run_single(&spec, &out, &["model.name=resnet101"]);
    assert_config_error(&o, took, &out);
    let e = stderr(&o);
    assert_says(
        &o,
        &e,
        &format!(
            "{}: --set model.name=resnet101: unknown variant `resnet101`",
            spec.display()
        ),
    );
    for m in [
        "mnist-cnn",
        "mlp",
        "convnet-bn",
        "resnet18",
        "resnet50",
        "linear",
    ] {
        assert_says(&o, &e, &format!("`{m}`"));
    }
}

#[test]
fn unknown_key_names_file_line_and_suggestion() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(
        dir.path(),
        "mnist-cnn",
        "[train]\nbatch_size = 8\nepoch = 3\n",
    );
    let out = dir.path().join("out");
    let (o, took) = run_single(&spec, &out, &[]);
    assert_config_error(&o, took, &out);
    let line = line_of(&spec, "epoch = 3");
    assert_says(
        &o,
        &stderr(&o),
        &format!(
            "{}:{line}: unknown key `train.epoch`; did you mean `train.epochs`?",
            spec.display()
        ),
    );
}

#[test]
fn wrong_type_names_file_line_and_expected_type() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(dir.path(), "mnist-cnn", "[train]\nbatch_size = \"big\"\n");
    let out = dir.path().join("out");
    let (o, took) = run_single(&spec, &out, &[]);
    assert_config_error(&o, took, &out);
    let e = stderr(&o);
    let line = line_of(&spec, "batch_size = ");
    assert_says(
        &o,
        &e,
        &format!(
            "{}:{line}: invalid type: string \"big\", expected",
            spec.display()
        ),
    );

    // Through --set, the override is named.
    let spec = write_spec(dir.path(), "mnist-cnn", "");
    let (o, took) = run_single(&spec, &out, &["train.lr=0.1", "train.batch_size=big"]);
    assert_config_error(&o, took, &out);
    assert_says(
        &o,
        &stderr(&o),
        &format!(
            "{}: --set train.batch_size=big: invalid type: string \"big\"",
            spec.display()
        ),
    );
}

#[test]
fn batch_size_zero_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(dir.path(), "mnist-cnn", "[train]\nbatch_size = 0\n");
    let out = dir.path().join("out");
    let (o, took) = run_single(&spec, &out, &[]);
    assert_config_error(&o, took, &out);
    assert_says(&o, &stderr(&o), &format!("{}", spec.display()));
    assert_says(&o, &stderr(&o), "train.batch_size: must be at least 1");

    // The same through --set.
    let spec = write_spec(dir.path(), "mnist-cnn", "");
    let (o, took) = run_single(&spec, &out, &["train.batch_size=0"]);
    assert_config_error(&o, took, &out);
    assert_says(&o, &stderr(&o), "train.batch_size: must be at least 1");
}

#[test]
fn nccl_backend_on_cpu_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(
        dir.path(),
        "mnist-cnn",
        "[ddp]\nbackend = \"nccl\"\ndevices = \"cpu\"\n",
    );
    let out = dir.path().join("out");
    let (o, took) = run_single(&spec, &out, &[]);
    assert_config_error(&o, took, &out);
    assert_says(
        &o,
        &stderr(&o),
        &format!(
            "{}: ddp.backend: \"nccl\" needs CUDA devices",
            spec.display()
        ),
    );
}

#[test]
fn set_of_a_missing_key_suggests_the_closest() {
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(dir.path(), "mnist-cnn", "");
    let out = dir.path().join("out");
    let (o, took) = run_single(&spec, &out, &["train.bach_size=8"]);
    assert_config_error(&o, took, &out);
    assert_says(
        &o,
        &stderr(&o),
        &format!(
            "{}: --set train.bach_size: no such key; did you mean `train.batch_size`?",
            spec.display()
        ),
    );
    let (o, took) = run_single(&spec, &out, &["train.batch_size"]);
    assert_config_error(&o, took, &out);
    assert_says(
        &o,
        &stderr(&o),
        "--set train.batch_size: expected key=value",
    );
}

/// Configuration errors are found before the process group forms: a replica of a world of 2 with
/// bad input exits with 2 at once instead of waiting `ddp.timeout_s` for its peer.
#[test]
fn config_errors_do_not_wait_for_peers() {
    let dir = tempfile::tempdir().unwrap();
    let data = mnist_with_truncated_images(dir.path());
    let images = data.join("train-images-idx3-ubyte.gz");
    let spec = spec_with_data(dir.path(), "mnist-cnn", &data, "[ddp]\ntimeout_s = 300\n");
    let out = dir.path().join("out");
    let port = free_port();
    for rank in [0, 1] {
        let t = Instant::now();
        let o = wait_output(spawn_rank(&spec, &out, rank, 2, port, &[], &[]), QUICK);
        assert_config_error(&o, t.elapsed(), &out);
        assert_says(
            &o,
            &stderr(&o),
            &format!("rank {rank}: {}: ", images.display()),
        );
    }
    let spec = write_spec(dir.path(), "mnist-cnn", "[ddp]\ntimeout_s = 300\n");
    let t = Instant::now();
    let o = wait_output(
        spawn_rank(&spec, &out, 1, 2, port, &[], &["train.batch_size=0"]),
        QUICK,
    );
    assert_config_error(&o, t.elapsed(), &out);
    assert_says(&o, &stderr(&o), "train.batch_size: must be at least 1");
}

#[test]
fn standalone_config_error_exits_2_and_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    copy_mnist(&data, &["train-images-idx3-ubyte.gz"]);
    let images = data.join("train-images-idx3-ubyte");
    std::fs::write(&images, idx_images(0x0000_0803, 4, 32, 32)).unwrap();
    let spec = spec_with_data(dir.path(), "mnist-cnn", &data, "");
    let out = dir.path().join("out");
    let mut c = trainer();
    c.arg(&spec)
        .args(["--standalone", "--nproc", "2", "--out"])
        .arg(&out);
    let t = Instant::now();
    let o = run_with_timeout(c, QUICK);
    assert_config_error(&o, t.elapsed(), &out);
    let e = stderr(&o);
    assert_says(
        &o,
        &e,
        &format!("{}: unexpected dimensions 4×32×32", images.display()),
    );
    assert_says(&o, &e, "exited with code 2");
}

// ---------------------------------------------------------------------------------------------
// Peers and rendezvous (exit code 1)
// ---------------------------------------------------------------------------------------------

/// A small, quick spec for rendezvous failures (training never starts in these tests).
fn small_spec(dir: &Path) -> PathBuf {
    write_spec(
        dir,
        "mnist-cnn",
        "limit_train = 256\nlimit_test = 64\n[train]\nmax_steps = 2\n[checkpoint]\nevery_epochs = 0\n",
    )
}

/// Waits for both, returning (output, seconds since `start`) for each.
fn wait_both(a: Child, b: Child, start: Instant, limit: Duration) -> [(Output, Duration); 2] {
    let oa = wait_output(a, limit);
    let ta = start.elapsed();
    let ob = wait_output(b, limit);
    let tb = start.elapsed();
    [(oa, ta), (ob, tb)]
}

#[test]
fn world_size_mismatch_names_both_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let spec = small_spec(dir.path());
    let out = dir.path().join("out");
    let port = free_port();
    let sets = ["ddp.timeout_s=5"];
    let start = Instant::now();
    let r0 = spawn_rank(&spec, &out, 0, 2, port, &[], &sets);
    let r1 = spawn_rank(&spec, &out, 1, 3, port, &[], &sets);
    let [(o0, t0), (o1, t1)] = wait_both(r0, r1, start, Duration::from_secs(30));
    assert_exit(&o0, 1);
    assert_exit(&o1, 1);
    assert!(
        t0 < Duration::from_secs(12) && t1 < Duration::from_secs(12),
        "took {t0:?} / {t1:?}"
    );
    // Rank 1 is refused at once with both sizes; rank 0 logs the refusal and names the missing rank.
    assert_says(
        &o1,
        &stderr(&o1),
        "rank 1 says WORLD_SIZE=3 but rank 0 has WORLD_SIZE=2",
    );
    let e0 = stderr(&o0);
    assert_says(&o0, &e0, "refused (claims rank 1)");
    assert_says(&o0, &e0, "WORLD_SIZE=3");
    assert_says(&o0, &e0, "WORLD_SIZE=2");
    assert_says(&o0, &e0, "rank 1 never joined within 5 s");
    assert_nothing_half_written(&out);
}

#[test]
fn master_port_in_use_fails_fast() {
    let dir = tempfile::tempdir().unwrap();
    let spec = small_spec(dir.path());
    let out = dir.path().join("out");
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let t = Instant::now();
    let o = wait_output(
        spawn_rank(&spec, &out, 0, 2, port, &[], &["ddp.timeout_s=30"]),
        QUICK,
    );
    let took = t.elapsed();
    drop(holder);
    assert_exit(&o, 1);
    assert!(
        took < Duration::from_secs(10),
        "took {took:?} (the timeout is 30 s)\n{}",
        text(&o)
    );
    let e = stderr(&o);
    assert_says(&o, &e, "rendezvous failed on rank 0");
    assert_says(&o, &e, &format!("127.0.0.1:{port} is already in use"));
    assert_says(&o, &e, "pick another MASTER_PORT");
    assert_nothing_half_written(&out);
}

#[test]
fn peer_that_never_comes_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let spec = small_spec(dir.path());
    let out = dir.path().join("out");
    let port = free_port();
    let t = Instant::now();
    let o = wait_output(
        spawn_rank(&spec, &out, 0, 2, port, &[], &["ddp.timeout_s=2"]),
        QUICK,
    );
    let took = t.elapsed();
    assert_exit(&o, 1);
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(8),
        "took {took:?} with timeout_s = 2\n{}",
        text(&o)
    );
    let e = stderr(&o);
    assert_says(&o, &e, "rank 1 never joined within 2 s");
    assert_says(&o, &e, &format!("127.0.0.1:{port}"));
    assert_nothing_half_written(&out);
}

#[test]
fn peer_killed_mid_training_is_named_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let body = "limit_train = 4096\nlimit_test = 64\n[train]\nepochs = 3\nlog_every = 1\n[ddp]\ntimeout_s = 300\n[checkpoint]\nevery_epochs = 1\n";
    let spec = write_spec(dir.path(), "mnist-cnn", body);
    let out = dir.path().join("out");
    let port = free_port();
    let mut r0 = ChildGuard::new(spawn_rank(&spec, &out, 0, 2, port, &[], &[]));
    let mut r1 = ChildGuard::new(spawn_rank(&spec, &out, 1, 2, port, &[], &[]));
    wait_for_train_record(&out, 0, &mut r0, Duration::from_secs(120));
    r1.child().kill().unwrap();
    let killed = Instant::now();
    let o = wait_output(r0.take(), Duration::from_secs(60));
    let took = killed.elapsed();
    let _ = r1.take().wait();
    // A lost peer is the canonical transient failure: the "please restart" exit code.
    assert_exit(&o, ddp_trainer::error::EXIT_RESTART);
    assert!(
        took < Duration::from_secs(10),
        "rank 0 took {took:?} to notice (timeout_s = 300)\n{}",
        text(&o)
    );
    let e = stderr(&o);
    assert_says(&o, &e, "failed on rank 0 (waiting for rank 1)");
    assert_says(&o, &e, "connection closed by rank 1");
    assert_nothing_half_written(&out);
}

/// Rank 0 with `t0`, rank 1 with `t1` (None: unset); both must fail within the 5 s timeout.
fn token_run(t0: Option<&str>, t1: Option<&str>) -> (Output, Output) {
    let dir = tempfile::tempdir().unwrap();
    let spec = small_spec(dir.path());
    let out = dir.path().join("out");
    let port = free_port();
    let sets = ["ddp.timeout_s=5"];
    let (e0, e1) = (token_env(t0), token_env(t1));
    let start = Instant::now();
    let r0 = spawn_rank(&spec, &out, 0, 2, port, &e0, &sets);
    let r1 = spawn_rank(&spec, &out, 1, 2, port, &e1, &sets);
    let [(o0, ta), (o1, tb)] = wait_both(r0, r1, start, Duration::from_secs(30));
    assert_exit(&o0, 1);
    assert_exit(&o1, 1);
    assert!(
        ta < Duration::from_secs(12) && tb < Duration::from_secs(12),
        "took {ta:?} / {tb:?} with timeout_s = 5"
    );
    assert_nothing_half_written(&out);
    (o0, o1)
}

fn token_env(token: Option<&str>) -> Vec<(&str, &str)> {
    token.map(|t| vec![("DDP_TOKEN", t)]).unwrap_or_default()
}

#[test]
fn wrong_ddp_token_is_refused() {
    let (o0, o1) = token_run(Some("a"), Some("b"));
    assert_says(
        &o1,
        &stderr(&o1),
        "rank 1 was refused by the store at 127.0.0.1:",
    );
    assert_says(&o1, &stderr(&o1), "wrong or missing DDP_TOKEN");
    assert_says(
        &o0,
        &stderr(&o0),
        "refused (claims rank 1): wrong or missing DDP_TOKEN",
    );
    assert_says(&o0, &stderr(&o0), "rank 1 never joined");
}

#[test]
fn missing_ddp_token_is_refused() {
    let (o0, o1) = token_run(Some("a"), None);
    assert_says(
        &o1,
        &stderr(&o1),
        "rank 1 was refused by the store at 127.0.0.1:",
    );
    assert_says(&o1, &stderr(&o1), "wrong or missing DDP_TOKEN");
    assert_says(
        &o0,
        &stderr(&o0),
        "refused (claims rank 1): wrong or missing DDP_TOKEN",
    );
}

/// Rank 0 has no token but rank 1 has one: the store (rank 0's) lets rank 1 in, and rank 1's ring
/// listener refuses rank 0.
#[test]
fn ddp_token_only_on_rank_1_refuses_rank_0_on_the_ring() {
    let (o0, o1) = token_run(None, Some("b"));
    assert_says(&o0, &stderr(&o0), "rank 0 was refused by rank 1");
    assert_says(&o0, &stderr(&o0), "wrong or missing DDP_TOKEN");
    assert_says(&o1, &stderr(&o1), "wrong or missing DDP_TOKEN");
}

#[test]
fn standalone_replica_killed_stops_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let body = "limit_train = 4096\nlimit_test = 64\n[train]\nepochs = 3\nlog_every = 1\n[ddp]\ntimeout_s = 300\n[checkpoint]\nevery_epochs = 1\n";
    let spec = write_spec(dir.path(), "mnist-cnn", body);
    let out = dir.path().join("out");
    let mut c = trainer();
    c.arg(&spec)
        .args(["--standalone", "--nproc", "2", "--out"])
        .arg(&out);
    let mut launcher = ChildGuard::new(
        c.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    wait_for_train_record(&out, 0, &mut launcher, Duration::from_secs(120));
    let replicas = child_pids(launcher.id());
    assert_eq!(
        replicas.len(),
        2,
        "expected 2 replicas under the launcher, found {replicas:?}"
    );
    let rank1 = *replicas
        .iter()
        .find(|&&p| proc_env(p, "RANK").as_deref() == Some("1"))
        .unwrap_or_else(|| panic!("no replica with RANK=1 among {replicas:?}"));
    // SAFETY: plain kill(2) on a pid we just found as our launcher's child.
    assert_eq!(unsafe { libc::kill(rank1 as i32, libc::SIGKILL) }, 0);
    let killed = Instant::now();
    let o = wait_output(launcher.take(), Duration::from_secs(60));
    let took = killed.elapsed();
    assert_exit(&o, 1);
    assert!(
        took < Duration::from_secs(10),
        "the launcher took {took:?} to stop\n{}",
        text(&o)
    );
    let e = stderr(&o);
    assert_says(
        &o,
        &e,
        &format!("rank 1 (pid {rank1}) was killed by signal 9 (SIGKILL)"),
    );
    assert_says(&o, &e, "logs/rank-1.log");
    let deadline = Instant::now() + Duration::from_secs(2);
    while replicas.iter().any(|&p| process_alive(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let alive: Vec<u32> = replicas
        .iter()
        .copied()
        .filter(|&p| process_alive(p))
        .collect();
    assert!(
        alive.is_empty(),
        "replicas still running after the launcher exited: {alive:?}"
    );
    assert_nothing_half_written(&out);
}
