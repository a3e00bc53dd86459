//! Tensor files (`data.name = "tensors"`) end to end through the real `ddp-trainer` binary:
//! every layout trains; a tensor copy of the MNIST sample trains exactly like its IDX files;
//! 2 replicas × B equal 1 replica × 2B; and every bad file stops the run before training with
//! exit code 2, a message naming the file, the array and the index, and nothing half-written.
//!
//! The files are written here (`ddp_trainer::data::tensors::write`), as NumPy and safetensors
//! write them.

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use ddp_trainer::data::tensors::write::{self, Arr, Members};
use ddp_trainer::data::{DataRecord, Split, load_mnist};

/// A spec in `dir` (`spec.toml`) training `model` on the tensor files at `data`; `body` is
/// appended to `[data]`.
fn tensor_spec(dir: &Path, model: &str, data: &Path, body: &str) -> PathBuf {
    let text = format!(
        "name = \"t\"\n[model]\nname = \"{model}\"\n[data]\nname = \"tensors\"\npath = \"{}\"\n{body}",
        data.display()
    );
    let p = dir.join("spec.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// A quick run: two steps, no checkpoints.
const QUICK: &str =
    "val_fraction = 0.0\n[train]\nmax_steps = 2\nbatch_size = 8\n[checkpoint]\nevery_epochs = 0\n";

/// `n` MNIST-shaped float32 samples (sample i's pixels are (i + k) % 7 / 7) and classes i % 10.
fn digits(n: usize) -> (Arr, Arr) {
    let px: Vec<f32> = (0..n * 784)
        .map(|k| ((k / 784 + k) % 7) as f32 / 7.0)
        .collect();
    let y: Vec<i64> = (0..n as i64).map(|i| i % 10).collect();
    (Arr::f32(&[n, 28, 28], &px), Arr::i64(&[n], &y))
}

fn put(path: &Path, bytes: Vec<u8>) -> PathBuf {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
    path.to_path_buf()
}

fn record(out: &Path) -> DataRecord {
    serde_json::from_slice(&std::fs::read(out.join("data.json")).unwrap()).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Layouts that train
// ---------------------------------------------------------------------------------------------

/// Trains 2 replicas on `path` (with the `[data]` keys `keys`) and checks the run folder's record
/// of the files read and the samples per part.
fn trains(name: &str, path: &Path, keys: &str, files: &[PathBuf], counts: (usize, usize)) {
    let run = tempfile::tempdir().unwrap();
    let spec = tensor_spec(run.path(), "mlp", path, &format!("{keys}{QUICK}"));
    let out = run.path().join("out");
    train_standalone(&spec, 2, &out, &[]);
    let r = record(&out);
    assert_eq!(r.format, "tensors", "{name}");
    assert_eq!(r.source, files, "{name}");
    assert_eq!((r.train_samples, r.test_samples), counts, "{name}");
    assert_eq!(r.classes.map(|c| c.len()), Some(10), "{name}");
    assert!(test_record(&out).accuracy.is_some(), "{name}");
}

#[test]
fn every_layout_trains() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (x, y) = digits(40);
    let (tx, ty) = digits(10);
    let p = put(
        &d.join("a.safetensors"),
        write::safetensors(&[("x", &x), ("y", &y)]),
    );
    trains("safetensors", &p, "", std::slice::from_ref(&p), (32, 8));
    let p = put(&d.join("b.npz"), write::savez(&[("x", &x), ("y", &y)]));
    trains(
        "npz",
        &p,
        "test_fraction = 0.5\n",
        std::slice::from_ref(&p),
        (20, 20),
    );
    let f = d.join("npy");
    let files = [
        put(&f.join("inputs.npy"), write::npy(&x)),
        put(&f.join("labels.npy"), write::npy(&y)),
    ];
    let keys = "x_key = \"inputs\"\ny_key = \"labels\"\n";
    trains("npy", &f, keys, &files, (32, 8));
    let f = d.join("split");
    let files = [
        put(&f.join("train.npz"), write::savez(&[("x", &x), ("y", &y)])),
        put(
            &f.join("test.safetensors"),
            write::safetensors(&[("x", &tx), ("y", &ty)]),
        ),
    ];
    trains("train.npz + test.safetensors", &f, "", &files, (40, 10));
    let f = d.join("split-npy");
    let mut files = Vec::new();
    for (part, (a, b)) in [("train", (&x, &y)), ("test", (&tx, &ty))] {
        files.push(put(&f.join(part).join("x.npy"), write::npy(a)));
        files.push(put(&f.join(part).join("y.npy"), write::npy(b)));
    }
    trains("train/ + test/", &f, "", &files, (40, 10));
}

/// Float targets are values: `linear` regresses y = Σx / 10 on 10 bfloat16 features (multiples
/// of 1/64, exact in bfloat16) with float64 targets.
#[test]
fn float_targets_train_a_regression() {
    let dir = tempfile::tempdir().unwrap();
    let n = 256;
    let xs: Vec<f32> = (0..n * 10)
        .map(|k| ((k * 7919) % 128) as f32 / 64.0 - 1.0)
        .collect();
    let ys: Vec<f64> = xs
        .chunks(10)
        .map(|r| r.iter().map(|&v| f64::from(v)).sum::<f64>() / 10.0)
        .collect();
    let bits: Vec<u16> = xs.iter().map(|v| (v.to_bits() >> 16) as u16).collect();
    let p = put(
        &dir.path().join("r.safetensors"),
        write::safetensors(&[
            ("x", &Arr::bf16_bits(&[n, 10], &bits)),
            ("y", &Arr::f64(&[n], &ys)),
        ]),
    );
    let spec = tensor_spec(
        dir.path(),
        "linear",
        &p,
        "task = \"regression\"\nval_fraction = 0.0\n[train]\nepochs = 30\nbatch_size = 16\noptimizer = \"sgd\"\nlr = 0.3\n[checkpoint]\nevery_epochs = 0\n",
    );
    let out = dir.path().join("out");
    train_standalone(&spec, 2, &out, &[]);
    assert_eq!(record(&out).classes, None);
    let test = test_record(&out);
    assert_eq!(test.accuracy, None);
    assert!(test.loss < 1e-4, "test MSE {}", test.loss);
}

// ---------------------------------------------------------------------------------------------
// Equivalence
// ---------------------------------------------------------------------------------------------

/// The MNIST sample's digits saved as float32 tensor files, normalised as the IDX reader does
/// (`load_mnist`), train to bit-identical weights and test figures: the tensor reader adds and
/// loses nothing.
#[test]
fn a_tensor_copy_of_mnist_trains_exactly_like_its_idx_files() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("mnist-tensors");
    for (split, n, file) in [(Split::Train, 512, "train"), (Split::Test, 64, "test")] {
        let ds = load_mnist(&mnist_dir(), split).unwrap();
        let x = Arr::f32(&[n, 1, 28, 28], &ds.images[..n * 784]);
        let ddp_trainer::data::Targets::Classes(c) = &ds.targets else {
            panic!("MNIST has classes")
        };
        let y = Arr::u8(&[n], &c[..n].iter().map(|&c| c as u8).collect::<Vec<_>>());
        put(
            &copy.join(format!("{file}.npz")),
            write::savez(&[("x", &x), ("y", &y)]),
        );
    }
    let body = "val_fraction = 0.1\n[train]\nepochs = 1\nmax_steps = 8\nbatch_size = 16\nseed = 3\n[checkpoint]\nevery_epochs = 0\n";
    let idx_dir = dir.path().join("idx");
    let tensors_dir = dir.path().join("tensors");
    std::fs::create_dir_all(&idx_dir).unwrap();
    std::fs::create_dir_all(&tensors_dir).unwrap();
    let idx_spec = write_spec(
        &idx_dir,
        "mnist-cnn",
        &format!("limit_train = 512\nlimit_test = 64\n{body}"),
    );
    let tensor_spec = tensor_spec(&tensors_dir, "mnist-cnn", &copy, body);
    train_standalone(&idx_spec, 2, &idx_dir.join("out"), &[]);
    train_standalone(&tensor_spec, 2, &tensors_dir.join("out"), &[]);
    let a = load_model(&idx_dir.join("out/model.safetensors"));
    let b = load_model(&tensors_dir.join("out/model.safetensors"));
    let (diff, at) = worst_tensor(&a, &b);
    assert_eq!(diff, 0.0, "IDX and tensor files differ by {diff} in {at}");
    let (ta, tb) = (
        test_record(&idx_dir.join("out")),
        test_record(&tensors_dir.join("out")),
    );
    assert_eq!((ta.loss, ta.accuracy), (tb.loss, tb.accuracy));
}

/// DDP on tensor files: 2 replicas × 8 end with the weights of 1 replica × 16 (the shipped
/// uint8 digits, SGD with momentum).
#[test]
fn two_replicas_equal_one_with_twice_the_batch() {
    let dir = tempfile::tempdir().unwrap();
    let data = examples_dir().join("data/tensors");
    let body = "val_fraction = 0.0\n[train]\nepochs = 1\nmax_steps = 6\noptimizer = \"sgd\"\nlr = 0.01\nmomentum = 0.9\nseed = 7\n[checkpoint]\nevery_epochs = 0\n";
    let spec = tensor_spec(dir.path(), "mnist-cnn", &data, body);
    let (two, one, zero) = (
        dir.path().join("two"),
        dir.path().join("one"),
        dir.path().join("zero"),
    );
    train_standalone(&spec, 2, &two, &["train.batch_size=8"]);
    train_standalone(&spec, 1, &one, &["train.batch_size=16"]);
    train_standalone(&spec, 1, &zero, &["train.batch_size=16", "train.lr=1e-12"]);
    let a = load_model(&two.join("model.safetensors"));
    let b = load_model(&one.join("model.safetensors"));
    let moved = max_abs_diff(&b, &load_model(&zero.join("model.safetensors")));
    assert!(moved > 1e-3, "training did not move the weights ({moved})");
    let (diff, at) = worst_tensor(&a, &b);
    assert!(diff < 1e-5, "2×8 and 1×16 differ by {diff} (in {at})");
}

// ---------------------------------------------------------------------------------------------
// Bad files
// ---------------------------------------------------------------------------------------------

/// What a bad-file case made: the `data.path` to read, extra `[data]` keys, the file the error
/// names, and what the error says of it (the first line after `FILE: `; the others anywhere).
struct Made {
    path: PathBuf,
    keys: &'static str,
    file: PathBuf,
    says: Vec<&'static str>,
}

/// The file `p` as `data.path`, the error naming it.
fn file(p: PathBuf, says: &[&'static str]) -> Made {
    Made {
        path: p.clone(),
        keys: "",
        file: p,
        says: says.to_vec(),
    }
}

/// The folder `n/` holding `x` as `x.npy` and 16 good labels as `y.npy`, the error naming
/// `x.npy`.
fn npy_pair(d: &Path, x: Vec<u8>, says: &[&'static str]) -> Made {
    put(&d.join("n/y.npy"), write::npy(&digits(16).1));
    Made {
        path: d.join("n"),
        file: put(&d.join("n/x.npy"), x),
        ..file(PathBuf::new(), says)
    }
}

/// A safetensors file of `x` and `y`.
fn st(x: &Arr, y: &Arr) -> Vec<u8> {
    write::safetensors(&[("x", x), ("y", y)])
}

/// An `.npy` of 16 samples of 28×28 of `descr` (`size` bytes each) with `fortran_order`.
fn raw_npy(descr: &str, size: usize, fortran: &str) -> Vec<u8> {
    let dict =
        format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': (16, 28, 28), }}");
    write::npy_with(2, &dict, &vec![0; 16 * 784 * size])
}

/// A bad-file case: writes its files under the folder it is given.
type Case = fn(&Path) -> Made;

const CASES: &[(&str, Case)] = &[
    ("missing key", |d| {
        let (x, y) = digits(16);
        let b = write::safetensors(&[("images", &x), ("labels", &y)]);
        file(
            put(&d.join("d.safetensors"), b),
            &[
                "no tensor \"x\" (data.x_key): the file holds \"images\", \"labels\"; set data.x_key \
             and data.y_key to the names of the inputs and the targets",
            ],
        )
    }),
    ("missing npz member", |d| {
        let (x, y) = digits(16);
        let b = write::savez(&[("x", &x), ("target", &y)]);
        file(
            put(&d.join("d.npz"), b),
            &["no array \"y\" (data.y_key; the member y.npy): the archive holds \"x\", \"target\""],
        )
    }),
    ("x and y of different lengths", |d| {
        let b = st(&digits(16).0, &digits(15).1);
        file(
            put(&d.join("d.safetensors"), b),
            &[
                "tensor \"x\" has 16 samples but tensor \"y\" has 15: the leading dimension of both is \
             the sample; save one target per input",
            ],
        )
    }),
    ("unsupported safetensors dtype", |d| {
        let y = digits(16).1;
        let b = write::safetensors_with(&[
            ("x", "BOOL", &[16, 28, 28], &[1; 16 * 784]),
            ("y", "I64", &[16], &y.data),
        ]);
        file(
            put(&d.join("d.safetensors"), b),
            &[
                "tensor \"x\" has dtype BOOL, which is not read: save it as one of float32, float64, \
             float16, bfloat16, uint8, int8, uint16, int16, uint32, int32, uint64, int64",
            ],
        )
    }),
    ("unsupported npy dtype", |d| {
        npy_pair(
            d,
            raw_npy("<c8", 8, "False"),
            &["dtype \"<c8\" is not read: save the array as one of float32"],
        )
    }),
    ("big-endian npy", |d| {
        npy_pair(
            d,
            raw_npy(">f4", 4, "False"),
            &[
                "a big-endian array (\">f4\") is not read: save it little-endian with np.save(file, \
             a.astype(a.dtype.newbyteorder('<')))",
            ],
        )
    }),
    ("Fortran-order npy", |d| {
        npy_pair(
            d,
            raw_npy("<f4", 4, "True"),
            &[
                "a Fortran-order array (fortran_order: True, shape (16, 28, 28)) is not read: save it \
             in C order with np.save(file, np.ascontiguousarray(a))",
            ],
        )
    }),
    ("truncated safetensors", |d| {
        let (x, y) = digits(16);
        let mut b = st(&x, &y);
        b.truncate(b.len() - 100);
        file(
            put(&d.join("d.safetensors"), b),
            &[
                "truncated: tensor \"x\" ends at byte 50304 of the data but only 50204 bytes of data \
             follow the header; the file was cut short: write or copy it again",
            ],
        )
    }),
    ("truncated npy", |d| {
        let mut b = write::npy(&digits(16).0);
        b.truncate(b.len() - 10);
        npy_pair(
            d,
            b,
            &[
                "truncated: the header declares shape (16, 28, 28) of <f4 (50176 bytes) but only \
             50166 bytes follow it; the file was cut short: save or copy it again",
            ],
        )
    }),
    ("truncated npz", |d| {
        let (x, y) = digits(16);
        let mut b = write::savez(&[("x", &x), ("y", &y)]);
        b.truncate(b.len() / 2);
        file(
            put(&d.join("d.npz"), b),
            &[
                "cannot read it as a zip archive (",
                "an .npz file is one (np.savez writes it); if it was cut short, save or copy it again",
            ],
        )
    }),
    ("compressed npz", |d| {
        let (x, y) = digits(16);
        let members = [("x.npy", write::npy(&x)), ("y.npy", write::npy(&y))];
        file(
            put(&d.join("d.npz"), write::npz(&members, Members::Deflated)),
            &[
                "member \"x.npy\" is compressed (Deflated): a compressed member cannot be \
             memory-mapped; save the arrays with np.savez, not np.savez_compressed",
            ],
        )
    }),
    ("NaN in the inputs", |d| {
        let (mut x, y) = digits(16);
        let at = (5 * 784 + 17) * 4;
        x.data[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
        file(
            put(&d.join("d.safetensors"), st(&x, &y)),
            &[
                "tensor \"x\" holds NaN at sample 5 (value 17 of the sample): inputs must be finite; \
             fix or drop that sample",
            ],
        )
    }),
    ("negative label", |d| {
        let mut labels = vec![1i64; 16];
        labels[3] = -1;
        let b = write::savez(&[("x", &digits(16).0), ("y", &Arr::i64(&[16], &labels))]);
        file(
            put(&d.join("d.npz"), b),
            &[
                "member \"y.npy\" holds -1 at index 3: class labels must be 0 or more (the classes \
             are 0..n−1)",
            ],
        )
    }),
    ("test label unseen in training", |d| {
        let (x, y) = digits(16);
        put(&d.join("s/train.safetensors"), st(&x, &y));
        let mut labels = vec![2i64; 8];
        labels[6] = 12;
        let b = st(&digits(8).0, &Arr::i64(&[8], &labels));
        Made {
            path: d.join("s"),
            ..file(
                put(&d.join("s/test.safetensors"), b),
                &[
                    "tensor \"y\" holds 12 at index 6: the training part's labels are 0..=9 (10 \
                 classes): a test label must be one of them",
                ],
            )
        }
    }),
    ("zero samples", |d| {
        let b = st(&Arr::f32(&[0, 28, 28], &[]), &Arr::i64(&[0], &[]));
        file(
            put(&d.join("d.safetensors"), b),
            &["tensor \"x\" has 0 samples (shape (0, 28, 28)): there is nothing to train on"],
        )
    }),
    ("an npy file as the path", |d| {
        file(
            put(&d.join("x.npy"), write::npy(&digits(4).0)),
            &["an .npy file holds one array: set data.path to the folder holding x.npy and y.npy"],
        )
    }),
    ("a missing path", |d| {
        file(
            d.join("nowhere.safetensors"),
            &["No such file or directory"],
        )
    }),
    ("test_fraction beside a test part", |d| {
        let (x, y) = digits(16);
        put(
            &d.join("s/train.npz"),
            write::savez(&[("x", &x), ("y", &y)]),
        );
        put(&d.join("s/test.npz"), write::savez(&[("x", &x), ("y", &y)]));
        Made {
            path: d.join("s"),
            keys: "test_fraction = 0.25\n",
            file: d.join("spec.toml"),
            says: vec!["data.test_fraction: the data has its own test part ("],
        }
    }),
];

/// Runs the trainer on one case (2 replicas) and checks what it must do.
fn check_case(name: &str, case: Case) {
    let dir = tempfile::tempdir().unwrap();
    let made = case(dir.path());
    let spec = tensor_spec(
        dir.path(),
        "mlp",
        &made.path,
        &format!("{}{QUICK}", made.keys),
    );
    let out = dir.path().join("out");
    let mut c = trainer();
    c.arg(&spec)
        .args(["--standalone", "--nproc", "2", "--out"])
        .arg(&out);
    let o: Output = run_with_timeout(c, Duration::from_secs(60));
    assert_eq!(o.status.code(), Some(2), "[{name}] exit code\n{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    let first = format!("{}: {}", made.file.display(), made.says[0]);
    for s in std::iter::once(first.as_str()).chain(made.says[1..].iter().copied()) {
        assert!(stderr.contains(s), "[{name}] expected {s:?}\n{}", text(&o));
    }
    let left: Vec<&str> = ["model.safetensors", "checkpoints"]
        .into_iter()
        .filter(|f| out.join(f).exists())
        .collect();
    assert!(
        left.is_empty(),
        "[{name}] left {left:?} in {}",
        out.display()
    );
}

#[test]
fn bad_files_stop_before_training_with_exit_code_2() {
    let failed: Vec<&str> = CASES
        .iter()
        .filter(|(name, case)| std::panic::catch_unwind(|| check_case(name, *case)).is_err())
        .map(|(name, _)| *name)
        .collect();
    assert!(failed.is_empty(), "failed cases: {failed:?}");
}
