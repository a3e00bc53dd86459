use std::path::{Path, PathBuf};

use super::write::{self, Arr, Members};
use super::*;
use crate::data::parts::OpenContext;

fn spec(dir: &Path, path: &Path, extra: &str) -> Spec {
    let text = format!(
        "name = \"t\"\n[model]\nname = \"mlp\"\n[data]\nname = \"tensors\"\npath = \"{}\"\n{extra}",
        path.display()
    );
    Spec::parse_at(&text, &dir.join("spec.toml"), &[]).unwrap()
}

fn open_at(dir: &Path, path: &Path, extra: &str) -> Result<Parts> {
    open(&spec(dir, path, extra), &OpenContext { workers: 1 })
}

fn err(dir: &Path, path: &Path, extra: &str) -> String {
    match open_at(dir, path, extra) {
        Ok(_) => panic!("no error"),
        Err(e) => e.to_string(),
    }
}

/// 10 samples of 2×2 uint8 pixels (sample i holds i, i+1, i+2, i+3) with classes i % 3.
fn xy() -> (Arr, Arr) {
    let px: Vec<u8> = (0..10u8).flat_map(|i| [i, i + 1, i + 2, i + 3]).collect();
    let y: Vec<i64> = (0..10).map(|i| i % 3).collect();
    (Arr::u8(&[10, 2, 2], &px), Arr::i64(&[10], &y))
}

fn filled(ds: &dyn Dataset, idx: &[usize]) -> Batch {
    let mut b = Batch::new();
    fill_checked(ds, idx, &mut b).unwrap();
    b
}

#[test]
fn a_single_file_holds_out_its_test_part() {
    let d = tempfile::tempdir().unwrap();
    let (x, y) = xy();
    let p = d.path().join("digits.safetensors");
    std::fs::write(&p, write::safetensors(&[("y", &y), ("x", &x)])).unwrap();
    let parts = open_at(d.path(), &p, "").unwrap();
    assert_eq!((parts.train.len(), parts.test.len()), (8, 2));
    assert_eq!(parts.train.shape(), [1, 2, 2]);
    assert_eq!(parts.train.target(), TargetKind::Classes(3));
    assert_eq!(
        parts.record,
        DataRecord {
            format: "tensors".into(),
            source: vec![p.clone()],
            classes: Some(vec!["0".into(), "1".into(), "2".into()]),
            train_samples: 8,
            test_samples: 2,
            test_held_out: true,
            ..DataRecord::default()
        }
    );
    // The held-out part is random_split's (seeded by train.seed), disjoint from the training part.
    let (train, test) =
        crate::data::split::split_indices(10, 0.2, spec(d.path(), &p, "").train.seed);
    let b = filled(&*parts.test, &[0, 1]);
    let want: Vec<f32> = test
        .iter()
        .flat_map(|&i| (0..4).map(move |k| (i + k) as f32 / 255.0))
        .collect();
    assert_eq!(b.x, want);
    assert_eq!(
        b.classes,
        test.iter().map(|&i| (i % 3) as u32).collect::<Vec<_>>()
    );
    assert_eq!(train.len(), 8);
    let parts = open_at(d.path(), &p, "test_fraction = 0.5").unwrap();
    assert_eq!(
        (parts.record.train_samples, parts.record.test_samples),
        (5, 5)
    );
}

#[test]
fn a_folder_holds_train_and_test_parts_of_any_format() {
    let d = tempfile::tempdir().unwrap();
    let (x, y) = xy();
    let root = d.path().join("data");
    std::fs::create_dir_all(root.join("test")).unwrap();
    std::fs::write(
        root.join("train.npz"),
        write::savez(&[("images", &x), ("labels", &y)]),
    )
    .unwrap();
    let tx = Arr::u8(&[2, 2, 2], &[9, 9, 9, 9, 0, 0, 0, 0]);
    let ty = Arr::u8(&[2], &[2, 0]);
    std::fs::write(root.join("test/images.npy"), write::npy(&tx)).unwrap();
    std::fs::write(root.join("test/labels.npy"), write::npy(&ty)).unwrap();
    let keys = "x_key = \"images\"\ny_key = \"labels\"";
    let parts = open_at(d.path(), &root, keys).unwrap();
    assert_eq!((parts.train.len(), parts.test.len()), (10, 2));
    assert_eq!(parts.test.target(), TargetKind::Classes(3));
    assert_eq!(
        parts.record.source,
        vec![
            root.join("train.npz"),
            root.join("test/images.npy"),
            root.join("test/labels.npy")
        ]
    );
    assert!(!parts.record.test_held_out);
    let b = filled(&*parts.test, &[1, 0]);
    assert_eq!(
        b.x,
        vec![
            0.0,
            0.0,
            0.0,
            0.0,
            9.0 / 255.0,
            9.0 / 255.0,
            9.0 / 255.0,
            9.0 / 255.0
        ]
    );
    assert_eq!(b.classes, vec![0, 2]);
    assert_eq!(filled(&*parts.train, &[9]).classes, vec![0]);
    // A test part beside test_fraction is refused.
    let e = err(d.path(), &root, &format!("{keys}\ntest_fraction = 0.1"));
    assert!(
        e.ends_with(&format!(
            "data.test_fraction: the data has its own test part ({}): remove test_fraction",
            root.join("test").display()
        )),
        "{e}"
    );
    // So are equal keys, and the default keys when the arrays have other names.
    let e = err(d.path(), &root, "x_key = \"a\"\ny_key = \"a\"");
    assert!(
        e.contains("data.y_key: names the same array as data.x_key (\"a\")"),
        "{e}"
    );
    let e = err(d.path(), &root, "");
    assert_eq!(
        e,
        format!(
            "{}: no array \"x\" (data.x_key; the member x.npy): the archive holds \"images\", \
             \"labels\"; set data.x_key and data.y_key to the names the arrays were saved under \
             (np.savez(file, x=inputs, y=targets))",
            root.join("train.npz").display()
        )
    );
}

#[test]
fn npz_members_are_mapped_where_they_lie() {
    let d = tempfile::tempdir().unwrap();
    let (x, y) = xy();
    // Stored members with ZIP64 extra fields (np.savez), and members named without .npy.
    let p = d.path().join("a.npz");
    std::fs::write(
        &p,
        write::npz(
            &[("y", write::npy(&y)), ("x.npy", write::npy(&x))],
            Members::Stored,
        ),
    )
    .unwrap();
    let parts = open_at(d.path(), &p, "").unwrap();
    assert_eq!(parts.record.train_samples + parts.record.test_samples, 10);
    // Compressed members (np.savez_compressed) are refused.
    let p = d.path().join("c.npz");
    std::fs::write(
        &p,
        write::npz(
            &[("x.npy", write::npy(&x)), ("y.npy", write::npy(&y))],
            Members::Deflated,
        ),
    )
    .unwrap();
    assert_eq!(
        err(d.path(), &p, ""),
        format!(
            "{}: member \"x.npy\" is compressed (Deflated): a compressed member cannot be \
             memory-mapped; save the arrays with np.savez, not np.savez_compressed",
            p.display()
        )
    );
    // A cut archive has lost its directory.
    let bytes = write::savez(&[("x", &x), ("y", &y)]);
    let p = d.path().join("cut.npz");
    std::fs::write(&p, &bytes[..bytes.len() - 30]).unwrap();
    let e = err(d.path(), &p, "");
    assert!(
        e.starts_with(&format!(
            "{}: cannot read it as a zip archive (",
            p.display()
        )),
        "{e}"
    );
    assert!(
        e.ends_with("if it was cut short, save or copy it again"),
        "{e}"
    );
}

#[test]
fn a_folder_of_npy_files_is_one_part() {
    let d = tempfile::tempdir().unwrap();
    let (x, _) = xy();
    let y = Arr::f32(&[10, 2], &[0.5; 20]);
    std::fs::write(d.path().join("x.npy"), write::npy(&x)).unwrap();
    std::fs::write(d.path().join("y.npy"), write::npy(&y)).unwrap();
    let parts = open_at(d.path(), d.path(), "").unwrap();
    assert_eq!(parts.train.target(), TargetKind::Values(2));
    assert_eq!(parts.record.classes, None);
    let files: Vec<PathBuf> = ["x.npy", "y.npy"]
        .iter()
        .map(|f| d.path().join(f))
        .collect();
    assert_eq!(parts.record.source, files);
    assert_eq!(filled(&*parts.train, &[3]).values, vec![0.5, 0.5]);
}
