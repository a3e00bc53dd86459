//! Every shipped example spec is valid, and each one runs (briefly) offline: on its own data when
//! it is shipped or synthetic, otherwise on the embedded MNIST sample or synthetic data of the
//! same shape.

mod common;
use common::*;
use ddp_trainer::spec::Spec;

#[test]
fn every_example_spec_parses() {
    let mut n = 0;
    for entry in std::fs::read_dir(examples_dir()).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "toml") {
            Spec::load(&p, &[]).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            n += 1;
        }
    }
    assert!(n >= 6, "expected one example per model, found {n}");
}

fn smoke(example: &str, nproc: usize, sets: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    train_standalone(&examples_dir().join(example), nproc, &out, sets);
    assert!(
        out.join("model.safetensors").is_file(),
        "{example}: no model written"
    );
    assert!(
        test_record(&out).loss.is_finite(),
        "{example}: test loss not finite"
    );
}

#[test]
fn mnist_example_runs() {
    smoke(
        "mnist.toml",
        2,
        &[
            "train.max_steps=3",
            "data.limit_train=512",
            "data.limit_test=64",
        ],
    );
}

#[test]
fn convnet_bn_example_runs_with_sync_batchnorm() {
    smoke(
        "convnet-bn.toml",
        2,
        &[
            "train.max_steps=3",
            "data.limit_train=512",
            "data.limit_test=64",
        ],
    );
}

#[test]
fn fashion_mlp_example_runs_on_mnist_format_data() {
    let data = format!("data.path=\"{}\"", mnist_dir().display());
    smoke(
        "fashion-mlp.toml",
        2,
        &[
            "data.name=mnist",
            &data,
            "train.max_steps=3",
            "data.limit_test=64",
        ],
    );
}

#[test]
fn linear_regression_example_learns() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    train_standalone(&examples_dir().join("linear-regression.toml"), 2, &out, &[]);
    let test = test_record(&out);
    assert_eq!(test.accuracy, None);
    // noise 0.1 → the best possible MSE is 0.01.
    assert!(test.loss < 0.05, "test MSE {}", test.loss);
}

/// The shipped tensor files (uint8 digits in train.safetensors / test.safetensors) train, and
/// the run folder records them.
#[test]
fn tensors_example_runs_on_its_shipped_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let sets = ["train.max_steps=3", "checkpoint.every_epochs=0"];
    train_standalone(&examples_dir().join("tensors.toml"), 2, &out, &sets);
    assert!(test_record(&out).loss.is_finite());
    let record: ddp_trainer::data::DataRecord =
        serde_json::from_slice(&std::fs::read(out.join("data.json")).unwrap()).unwrap();
    assert_eq!(record.format, "tensors");
    assert_eq!((record.train_samples, record.test_samples), (1600, 400));
    assert_eq!(record.classes.map(|c| c.len()), Some(10));
}

#[test]
fn resnet_examples_run_on_synthetic_cifar_shaped_data() {
    let tiny = [
        "data.name=synthetic",
        "data.train_size=8",
        "data.test_size=4",
        "train.batch_size=2",
        "train.max_steps=1",
    ];
    smoke("resnet18-cifar10.toml", 2, &tiny);
    smoke("resnet50-synthetic.toml", 2, &tiny);
}

#[test]
fn image_folder_example_trains_on_its_pngs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    train_standalone(
        &examples_dir().join("image-folder.toml"),
        2,
        &out,
        &["train.epochs=1"],
    );
    let text = std::fs::read_to_string(out.join("data.json")).unwrap();
    let record: ddp_trainer::data::DataRecord = serde_json::from_str(&text).unwrap();
    let digits: Vec<String> = (0..10).map(|d| d.to_string()).collect();
    assert_eq!(record.classes, Some(digits));
    assert_eq!((record.train_samples, record.test_samples), (1000, 200));
    assert!(!record.test_held_out && record.skipped.is_empty());
    assert!(record.normalize.unwrap().computed);
    assert!(out.join("model.safetensors").is_file());
    // One epoch of 900 digits learns them (chance is 10 %).
    let acc = test_record(&out).accuracy.unwrap();
    assert!(acc > 0.6, "test accuracy {acc}");
}

#[test]
fn tabular_example_reads_the_same_table_as_csv_and_parquet() {
    use ddp_trainer::data::{Batch, OpenContext, SharedDataset, fill_checked, table};
    let spec = examples_dir().join("tabular.toml");
    let open = |sets: &[&str]| {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let s = Spec::load(&spec, &sets).unwrap();
        table::open(&s, &OpenContext { workers: 2 }).unwrap()
    };
    let csv = open(&[]);
    let parquet = open(&["data.name=parquet", "data.path=data/tabular-parquet"]);
    let all = |ds: &SharedDataset| {
        let mut b = Batch::new();
        let idx: Vec<usize> = (0..ds.len()).collect();
        fill_checked(&**ds, &idx, &mut b).unwrap();
        let bits: Vec<u32> = b.x.iter().map(|x| x.to_bits()).collect();
        (bits, b.classes, ds.shape())
    };
    assert_eq!(all(&csv.train), all(&parquet.train));
    assert_eq!(all(&csv.test), all(&parquet.test));
    let (_, classes, shape) = all(&csv.train);
    assert_eq!((classes.len(), shape), (1500, [1, 1, 11]));
    let r = &csv.record;
    assert_eq!(
        r.classes.as_deref(),
        Some(&["canadian".to_string(), "kama".into(), "rosa".into()][..])
    );
    assert_eq!((r.train_samples, r.test_samples), (1500, 500));
    assert_eq!(r.features, parquet.record.features);
    assert_eq!(r.normalize, parquet.record.normalize);
}

#[test]
fn tabular_regression_example_learns_from_its_parquet_table() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    train_standalone(
        &examples_dir().join("tabular-regression.toml"),
        2,
        &out,
        &[],
    );
    let test = test_record(&out);
    assert_eq!(test.accuracy, None);
    // noise 0.1 → the best possible MSE is 0.01.
    assert!(test.loss < 0.05, "test MSE {}", test.loss);
    let record: ddp_trainer::data::DataRecord =
        serde_json::from_str(&std::fs::read_to_string(out.join("data.json")).unwrap()).unwrap();
    assert_eq!(record.format, "parquet");
    assert_eq!(record.target.as_deref(), Some("protein"));
    assert_eq!(record.features.as_ref().map(Vec::len), Some(10));
}

#[test]
fn tabular_example_runs() {
    smoke("tabular.toml", 2, &["train.max_steps=3"]);
}
