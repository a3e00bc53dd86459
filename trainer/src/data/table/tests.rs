//! Reading whole tables: files and folders, classes, normalisation, Parquet's types and nulls,
//! and the same table as CSV and as Parquet.

use std::path::Path;
use std::sync::Arc;

use ::parquet::basic::Compression;
use ::parquet::data_type::{
    BoolType, ByteArray, ByteArrayType, DoubleType, FloatType, Int32Type, Int64Type,
};
use ::parquet::file::properties::WriterProperties;
use ::parquet::file::writer::SerializedFileWriter;
use ::parquet::schema::parser::parse_message_type;

use super::*;
use crate::data::{Batch, SharedDataset};

/// A column of a Parquet file written by [`write_parquet`].
pub enum Col {
    F64(Vec<Option<f64>>),
    F32(Vec<Option<f32>>),
    I64(Vec<Option<i64>>),
    I32(Vec<Option<i32>>),
    Bool(Vec<Option<bool>>),
    Str(Vec<Option<&'static str>>),
}

/// Writes `cols` (in the order of the `schema` message) as a Parquet file, snappy-compressed,
/// `group` rows per row group. A column is written nullable when its schema line says
/// `optional`.
pub fn write_parquet(path: &Path, schema: &str, cols: &[Col], group: usize) {
    let ty = Arc::new(parse_message_type(schema).unwrap());
    let optional: Vec<bool> = ty.get_fields().iter().map(|f| f.is_optional()).collect();
    let props = Arc::new(
        WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .build(),
    );
    let file = std::fs::File::create(path).unwrap();
    let mut w = SerializedFileWriter::new(file, ty, props).unwrap();
    let rows = match &cols[0] {
        Col::F64(v) => v.len(),
        Col::F32(v) => v.len(),
        Col::I64(v) => v.len(),
        Col::I32(v) => v.len(),
        Col::Bool(v) => v.len(),
        Col::Str(v) => v.len(),
    };
    let mut start = 0;
    while start < rows {
        let end = (start + group).min(rows);
        let mut rg = w.next_row_group().unwrap();
        let mut c = 0;
        while let Some(mut col) = rg.next_column().unwrap() {
            fn split<T: Clone>(v: &[Option<T>], opt: bool) -> (Vec<T>, Option<Vec<i16>>) {
                let vals = v.iter().flatten().cloned().collect();
                let defs = opt.then(|| v.iter().map(|x| x.is_some() as i16).collect());
                (vals, defs)
            }
            let opt = optional[c];
            match &cols[c] {
                Col::F64(v) => {
                    let (vals, defs) = split(&v[start..end], opt);
                    col.typed::<DoubleType>()
                        .write_batch(&vals, defs.as_deref(), None)
                        .unwrap();
                }
                Col::F32(v) => {
                    let (vals, defs) = split(&v[start..end], opt);
                    col.typed::<FloatType>()
                        .write_batch(&vals, defs.as_deref(), None)
                        .unwrap();
                }
                Col::I64(v) => {
                    let (vals, defs) = split(&v[start..end], opt);
                    col.typed::<Int64Type>()
                        .write_batch(&vals, defs.as_deref(), None)
                        .unwrap();
                }
                Col::I32(v) => {
                    let (vals, defs) = split(&v[start..end], opt);
                    col.typed::<Int32Type>()
                        .write_batch(&vals, defs.as_deref(), None)
                        .unwrap();
                }
                Col::Bool(v) => {
                    let (vals, defs) = split(&v[start..end], opt);
                    col.typed::<BoolType>()
                        .write_batch(&vals, defs.as_deref(), None)
                        .unwrap();
                }
                Col::Str(v) => {
                    let (vals, defs) = split(&v[start..end], opt);
                    let vals: Vec<ByteArray> = vals.iter().map(|s| ByteArray::from(*s)).collect();
                    col.typed::<ByteArrayType>()
                        .write_batch(&vals, defs.as_deref(), None)
                        .unwrap();
                }
            }
            col.close().unwrap();
            c += 1;
        }
        rg.close().unwrap();
        start = end;
    }
    w.close().unwrap();
}

/// The spec of a table at `path` with `more` lines appended to `[data]`.
fn spec(format: &str, path: &Path, more: &str) -> Spec {
    let text = format!(
        "name = \"t\"\n[model]\nname = \"mlp\"\n[data]\nname = \"{format}\"\npath = \"{}\"\n{more}",
        path.display()
    );
    Spec::parse_at(&text, Path::new("/nowhere/spec.toml"), &[]).unwrap()
}

fn open_spec(s: &Spec) -> Result<Parts> {
    open(s, &OpenContext { workers: 3 })
}

/// Every sample of `ds`: inputs, classes, values.
fn all(ds: &SharedDataset) -> (Vec<f32>, Vec<u32>, Vec<f32>) {
    let mut b = Batch::new();
    let idx: Vec<usize> = (0..ds.len()).collect();
    crate::data::fill_checked(&**ds, &idx, &mut b).unwrap();
    (b.x, b.classes, b.values)
}

#[test]
fn a_folder_gives_train_and_test_with_sorted_classes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("train.csv"),
        "x,label,name,y\n1,dog,a,10\n2,cat,b,20\n3,dog,c,30\n4,ant,d,40\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("test.csv"), "y,x,label,name\n5,6,cat,e\n").unwrap();
    let parts = open_spec(&spec("csv", dir.path(), "target = \"label\"")).unwrap();
    assert_eq!(
        all(&parts.train),
        (
            vec![1.0, 10.0, 2.0, 20.0, 3.0, 30.0, 4.0, 40.0],
            vec![2, 1, 2, 0],
            vec![]
        )
    );
    assert_eq!(all(&parts.test), (vec![6.0, 5.0], vec![1], vec![]));
    assert_eq!(parts.train.shape(), [1, 1, 2]);
    assert_eq!(parts.train.target(), crate::data::TargetKind::Classes(3));
    let r = &parts.record;
    assert_eq!(r.format, "csv");
    assert_eq!(
        r.source,
        vec![dir.path().join("train.csv"), dir.path().join("test.csv")]
    );
    assert_eq!(
        r.classes.as_deref(),
        Some(&["ant".to_string(), "cat".into(), "dog".into()][..])
    );
    assert_eq!(
        r.features.as_deref(),
        Some(&["x".to_string(), "y".into()][..])
    );
    assert_eq!(r.target.as_deref(), Some("label"));
    assert_eq!(
        (r.train_samples, r.test_samples, r.test_held_out),
        (4, 1, false)
    );
    assert_eq!(r.normalize, None);
}

#[test]
fn one_file_holds_out_the_test_part_and_normalises_with_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.csv");
    let mut text = "v,a,b\n".to_string();
    for i in 0..10 {
        text += &format!("{},{},{}\n", i as f32 * 0.5, i * i, 7);
    }
    std::fs::write(&file, text).unwrap();
    let s = spec(
        "csv",
        &file,
        "target = \"v\"\ntask = \"regression\"\nnormalize = true\ntest_fraction = 0.3\n",
    );
    let parts = open_spec(&s).unwrap();
    assert_eq!((parts.train.len(), parts.test.len()), (7, 3));
    let r = &parts.record;
    assert_eq!(
        (r.train_samples, r.test_samples, r.test_held_out),
        (7, 3, true)
    );
    let (train_rows, _) = split_indices(10, 0.3, s.train.seed);
    let sq: Vec<f64> = train_rows.iter().map(|&i| (i * i) as f64).collect();
    let mean = sq.iter().sum::<f64>() / 7.0;
    let std = (sq.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 7.0).sqrt();
    let n = r.normalize.clone().unwrap();
    assert_eq!(n.mean, vec![mean as f32, 7.0]);
    assert_eq!(n.std, vec![std as f32, 1.0]);
    assert!(n.computed);
    let (x, classes, values) = all(&parts.train);
    assert!(classes.is_empty());
    for (k, &i) in train_rows.iter().enumerate() {
        assert_eq!(values[k], i as f32 * 0.5);
        assert_eq!(x[2 * k], ((i * i) as f32 - mean as f32) / std as f32);
        assert_eq!(x[2 * k + 1], 0.0);
    }
    assert_eq!(parts.train.target(), crate::data::TargetKind::Values(1));
}

#[test]
fn unseen_test_labels_are_named_with_their_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("train.csv"), "x,t\n1,3\n2,10\n3,3\n").unwrap();
    std::fs::write(dir.path().join("test.csv"), "x,t\n1,10\n\n2,4\n").unwrap();
    let e = open_spec(&spec("csv", dir.path(), "target = \"t\""))
        .err()
        .unwrap()
        .to_string();
    assert_eq!(
        e,
        format!(
            "{}: line 4 has the label \"4\", which the training part does not have (its 2 \
             classes: \"3\", \"10\"): every test label must be one of the training labels; add \
             training rows with it or drop the test rows",
            dir.path().join("test.csv").display()
        )
    );
}

#[test]
fn folder_and_file_errors() {
    let dir = tempfile::tempdir().unwrap();
    let e = |s: &Spec| open_spec(s).err().unwrap().to_string();
    assert!(e(&spec("csv", dir.path(), "target = \"t\"")).contains("has no train.csv"));
    let missing = dir.path().join("nope.csv");
    assert!(e(&spec("csv", &missing, "target = \"t\"")).contains("does not exist"));
    std::fs::write(dir.path().join("train.csv"), "a,t\n1,x\n").unwrap();
    std::fs::write(dir.path().join("test.csv"), "a,u\n1,x\n").unwrap();
    assert!(e(&spec("csv", dir.path(), "target = \"t\"")).contains("has other columns than"));
}

/// The same rows as CSV text and as a Parquet file (doubles, an int64 label), in a folder each.
fn same_table(dir: &Path, rows: usize) {
    let (mut a, mut b, mut c, mut label) = (vec![], vec![], vec![], vec![]);
    let mut csv = "a,b,label,c\n".to_string();
    for i in 0..rows {
        let x = (i as f64 * 0.7368).sin() * 1e3 / 7.0;
        let y = 1.0 / (i as f64 + 3.0);
        let z = (i * 37 % 101) as f64 - 50.5;
        let l = (i * 13 % 5) as i64 * 10 - 20;
        csv += &format!("{x},{y},{l},{z}\n");
        a.push(Some(x));
        b.push(Some(y));
        c.push(Some(z));
        label.push(Some(l));
    }
    let (cd, pd) = (dir.join("csv"), dir.join("parquet"));
    std::fs::create_dir_all(&cd).unwrap();
    std::fs::create_dir_all(&pd).unwrap();
    let split = rows * 3 / 4;
    let lines: Vec<&str> = csv.lines().collect();
    let part = |r: std::ops::Range<usize>| {
        let mut s = lines[0].to_string() + "\n";
        for l in &lines[1 + r.start..1 + r.end] {
            s += l;
            s += "\n";
        }
        s
    };
    std::fs::write(cd.join("train.csv"), part(0..split)).unwrap();
    std::fs::write(cd.join("test.csv"), part(split..rows)).unwrap();
    let schema = "message t { required double a; required double b; required int64 label; \
                  required double c; }";
    for (name, r) in [("train", 0..split), ("test", split..rows)] {
        let cols = [
            Col::F64(a[r.clone()].to_vec()),
            Col::F64(b[r.clone()].to_vec()),
            Col::I64(label[r.clone()].to_vec()),
            Col::F64(c[r.clone()].to_vec()),
        ];
        write_parquet(&pd.join(format!("{name}.parquet")), schema, &cols, 1000);
    }
}

#[test]
fn csv_and_parquet_of_one_table_are_identical() {
    let dir = tempfile::tempdir().unwrap();
    same_table(dir.path(), 5000);
    for more in ["", "normalize = true\n"] {
        let body = format!("target = \"label\"\n{more}");
        let c = open_spec(&spec("csv", &dir.path().join("csv"), &body)).unwrap();
        let p = open_spec(&spec("parquet", &dir.path().join("parquet"), &body)).unwrap();
        let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
        let (cx, cc, _) = all(&c.train);
        let (px, pc, _) = all(&p.train);
        assert_eq!(cx.len(), 3750 * 3);
        assert_eq!(bits(cx), bits(px));
        assert_eq!(cc, pc);
        let ((cx, cc, _), (px, pc, _)) = (all(&c.test), all(&p.test));
        assert_eq!((bits(cx), cc), (bits(px), pc));
        let mut cr = c.record.clone();
        cr.format = "parquet".into();
        cr.source = p.record.source.clone();
        assert_eq!(cr, p.record);
        assert_eq!(
            p.record.classes.as_deref(),
            Some(
                &[
                    "-20".to_string(),
                    "-10".into(),
                    "0".into(),
                    "10".into(),
                    "20".into()
                ][..]
            )
        );
    }
}

#[test]
fn parquet_types_convert_and_nulls_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.parquet");
    let schema = "message t { required int32 i; required int64 j; required float f; \
                  required double d; required boolean b; required binary s (UTF8); \
                  optional double o; required int32 day (DATE); }";
    let cols = [
        Col::I32(vec![Some(-3), Some(4), Some(5)]),
        Col::I64(vec![Some(1 << 40), Some(-1), Some(0)]),
        Col::F32(vec![Some(0.1), Some(2.5), Some(-1.0)]),
        Col::F64(vec![Some(0.1), Some(1e-3), Some(7.0)]),
        Col::Bool(vec![Some(true), Some(false), Some(true)]),
        Col::Str(vec![Some("b"), Some("a"), Some("b")]),
        Col::F64(vec![Some(1.0), None, Some(2.0)]),
        Col::I32(vec![Some(1), Some(2), Some(3)]),
    ];
    write_parquet(&file, schema, &cols, 2);
    let s = spec(
        "parquet",
        &file,
        "target = \"s\"\nfeatures = [\"i\", \"j\", \"f\", \"d\", \"b\"]\ntest_fraction = 0.5\n",
    );
    let parts = open_spec(&s).unwrap();
    let mut b = Batch::new();
    let whole: Vec<usize> = vec![0, 1];
    crate::data::fill_checked(&*parts.train, &whole[..parts.train.len()], &mut b).unwrap();
    let (train_rows, _) = split_indices(3, 0.5, s.train.seed);
    let rows = [
        [-3.0, (1u64 << 40) as f32, 0.1f32, 0.1f64 as f32, 1.0],
        [4.0, -1.0, 2.5, 1e-3f64 as f32, 0.0],
        [5.0, 0.0, -1.0, 7.0, 1.0],
    ];
    let labels = [1, 0, 1];
    for (k, &r) in train_rows.iter().enumerate() {
        assert_eq!(b.x[5 * k..5 * k + 5], rows[r]);
        assert_eq!(b.classes[k], labels[r]);
    }
    assert_eq!(
        parts.record.classes.as_deref(),
        Some(&["a".to_string(), "b".into()][..])
    );
    let e = |more: &str| {
        open_spec(&spec("parquet", &file, more))
            .err()
            .unwrap()
            .to_string()
    };
    let name = file.display();
    assert_eq!(
        e("target = \"s\"\nfeatures = [\"o\"]"),
        format!(
            "{name}: row 1, column \"o\" is null (a missing value): fill it in or drop the row; \
             or leave the column out of data.features"
        )
    );
    assert_eq!(
        e("target = \"s\"\nfeatures = [\"day\"]"),
        format!(
            "{name}: the feature column \"day\" has a type the table reader does not convert \
             (INT32 (DATE)): store it as integers or floats, or leave it out of data.features"
        )
    );
    assert!(e("target = \"s\"\nfeatures = [\"s2\"]").contains("has no column \"s2\""));
    let reg = e("target = \"s\"\ntask = \"regression\"\nfeatures = [\"i\"]");
    assert!(
        reg.contains("the target column \"s\" is not numeric (its type is BYTE_ARRAY (UTF8))"),
        "{reg}"
    );
    assert!(
        e("target = \"d\"\nfeatures = [\"i\"]")
            .contains("row 0: the target column \"d\" holds 0.1")
    );
    // By default: the numeric columns; the string, the nullable one and the date are not
    // features or fail (the nullable double is numeric, so its null is refused).
    assert!(e("target = \"s\"").contains("row 1, column \"o\" is null"));
}

#[test]
fn the_fuzz_readers_read_and_refuse() {
    let m = read_csv_bytes(b"label,x,name\n1,2.5,a\n0,-1,b\n").unwrap();
    assert_eq!(m.images.len(), 2);
    assert_eq!(m.targets, Targets::Classes(vec![1, 0]));
    for bad in [&b""[..], b"\xff", b"a\n", b"a,b\n1\n", b"\"a\nb"] {
        assert!(read_csv_bytes(bad).is_err());
    }
    let dir = tempfile::tempdir().unwrap();
    same_table(dir.path(), 40);
    let bytes = std::fs::read(dir.path().join("parquet/train.parquet")).unwrap();
    // The first column (a, doubles) is the label: not integers.
    let e = read_parquet_bytes(&bytes).unwrap_err().to_string();
    assert!(e.contains("row 1: the target column \"a\" holds"), "{e}");
    for cut in [0, 4, 100, bytes.len() / 2, bytes.len() - 9] {
        assert!(read_parquet_bytes(&bytes[..cut]).is_err());
    }
}

#[test]
fn parquet_row_groups_are_cut_into_bands_that_read_alike() {
    let dir = tempfile::tempdir().unwrap();
    let rows = 140_000;
    let x = |k: usize| -> Vec<Option<f64>> {
        (0..rows)
            .map(|i| Some(((i * (k + 3)) % 1009) as f64 / 7.0 - k as f64))
            .collect()
    };
    let labels: Vec<Option<i64>> = (0..rows).map(|i| Some((i % 7) as i64)).collect();
    let file = dir.path().join("t.parquet");
    let schema = "message t { required double a; required double b; required int64 y; \
                  required double c; }";
    let cols = [
        Col::F64(x(0)),
        Col::F64(x(1)),
        Col::I64(labels),
        Col::F64(x(2)),
    ];
    write_parquet(&file, schema, &cols, rows);
    let ts = parquet::tasks(&[rows], 3, 8);
    assert_eq!(ts.len(), 2 * 4);
    assert_eq!(ts[0].rows, 0..70_000);
    assert_eq!(ts[4].rows, 70_000..140_000);
    let read = |workers: usize| {
        let s = spec("parquet", &file, "target = \"y\"\ntest_fraction = 0.5\n");
        let p = open(&s, &OpenContext { workers }).unwrap();
        (all(&p.train), all(&p.test))
    };
    let one = read(1);
    assert_eq!(one, read(8));
    let (x, classes, _) = one.0;
    let (train_rows, _) = split_indices(rows, 0.5, 1);
    for (k, &r) in train_rows.iter().enumerate().step_by(997) {
        assert_eq!(classes[k], (r % 7) as u32);
        assert_eq!(x[3 * k + 1], (((r * 4) % 1009) as f64 / 7.0 - 1.0) as f32);
    }
}
