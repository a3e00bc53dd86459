//! CSV and Parquet tables, end to end: every kind of bad table run through the real
//! `ddp-trainer` binary exits with code 2, names the file and the line, row or column and says
//! what to do, and leaves nothing half-written in the run folder; a good table trains and its
//! run folder records the data.

mod common;
use common::*;

// The bad-input tests' check of the run folder (their cases come along, unused here).
#[allow(dead_code)]
#[path = "bad_input/cases.rs"]
mod cases;
#[allow(dead_code)]
#[path = "bad_input/check.rs"]
mod check;
use check::assert_nothing_half_written;

use std::sync::Arc;
use std::time::Duration;

use parquet::data_type::{ByteArray, ByteArrayType, DoubleType, Int32Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;

/// A folder holding a table's files and the spec reading them.
struct Case {
    name: &'static str,
    /// Files written into the data folder: (name, content).
    files: Vec<(&'static str, Vec<u8>)>,
    /// `data.path`, relative to the data folder ("" for the folder itself).
    path: &'static str,
    /// Lines of `[data]` after `name`, `path`.
    data: &'static str,
    /// Substrings of stderr; `{data}` is the data folder.
    says: &'static [&'static str],
}

fn csv(name: &'static str, text: &str) -> (&'static str, Vec<u8>) {
    (name, text.as_bytes().to_vec())
}

impl Case {
    fn check(&self) {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        for (name, bytes) in &self.files {
            std::fs::write(data.join(name), bytes).unwrap();
        }
        let format = if self.files.iter().any(|(n, _)| n.ends_with(".parquet")) {
            "parquet"
        } else {
            "csv"
        };
        let spec = dir.path().join("spec.toml");
        std::fs::write(
            &spec,
            format!(
                "name = \"t\"\n[model]\nname = \"mlp\"\n[data]\nname = \"{format}\"\npath = \"{}\"\n{}\n[train]\nmax_steps = 1\n",
                if self.path.is_empty() {
                    data.clone()
                } else {
                    data.join(self.path)
                }
                .display(),
                self.data
            ),
        )
        .unwrap();
        let out = dir.path().join("out");
        let mut c = trainer();
        c.arg(&spec).arg("--out").arg(&out);
        let o = run_with_timeout(c, Duration::from_secs(60));
        assert_eq!(
            o.status.code(),
            Some(2),
            "[{}] expected exit code 2\n{}",
            self.name,
            text(&o)
        );
        let err = String::from_utf8_lossy(&o.stderr);
        for needle in self.says {
            let needle = needle.replace("{data}", &data.display().to_string());
            assert!(
                err.contains(&needle),
                "[{}] expected {needle:?} in the message\n{}",
                self.name,
                text(&o)
            );
        }
        assert_nothing_half_written(self.name, &out);
    }
}

/// A Parquet file of 3 rows: `x` (double), `maybe` (nullable double, null in row 1), `day`
/// (INT32 DATE) and `label` (string).
fn parquet_file() -> Vec<u8> {
    let schema = Arc::new(
        parse_message_type(
            "message t { required double x; optional double maybe; \
             required int32 day (DATE); required binary label (UTF8); }",
        )
        .unwrap(),
    );
    let mut bytes = Vec::new();
    let props = Arc::new(WriterProperties::builder().build());
    let mut w = SerializedFileWriter::new(&mut bytes, schema, props).unwrap();
    let mut rg = w.next_row_group().unwrap();
    let mut c = rg.next_column().unwrap().unwrap();
    c.typed::<DoubleType>()
        .write_batch(&[1.0, 2.0, 3.0], None, None)
        .unwrap();
    c.close().unwrap();
    let mut c = rg.next_column().unwrap().unwrap();
    c.typed::<DoubleType>()
        .write_batch(&[1.0, 3.0], Some(&[1, 0, 1]), None)
        .unwrap();
    c.close().unwrap();
    let mut c = rg.next_column().unwrap().unwrap();
    c.typed::<Int32Type>()
        .write_batch(&[19000, 19001, 19002], None, None)
        .unwrap();
    c.close().unwrap();
    let mut c = rg.next_column().unwrap().unwrap();
    let labels: Vec<ByteArray> = ["a", "b", "a"].iter().map(|&s| s.into()).collect();
    c.typed::<ByteArrayType>()
        .write_batch(&labels, None, None)
        .unwrap();
    c.close().unwrap();
    rg.close().unwrap();
    w.close().unwrap();
    bytes
}

#[test]
fn bad_tables_are_named_and_nothing_is_written() {
    let cases = [
        Case {
            name: "ragged row",
            files: vec![csv("t.csv", "a,b,label\n1,2,x\n3,4,y,5\n")],
            path: "t.csv",
            data: "target = \"label\"",
            says: &[
                "{data}/t.csv: line 3 has 4 fields but the header has 3 columns",
                "quote a value that holds a comma",
            ],
        },
        Case {
            name: "non-numeric feature",
            files: vec![csv("t.csv", "a,b,label\n1,2,x\n3,four,y\n")],
            path: "t.csv",
            data: "target = \"label\"",
            says: &["{data}/t.csv: line 3, column \"b\": \"four\" is not a number; fix the value"],
        },
        Case {
            name: "listed text feature",
            files: vec![csv("t.csv", "a,name,label\n1,bob,x\n")],
            path: "t.csv",
            data: "target = \"label\"\nfeatures = [\"a\", \"name\"]",
            says: &[
                "{data}/t.csv: the feature column \"name\" is not numeric (line 2 holds \"bob\")",
            ],
        },
        Case {
            name: "missing target",
            files: vec![csv("t.csv", "a,b,species\n1,2,x\n")],
            path: "t.csv",
            data: "target = \"specie\"",
            says: &[
                "{data}/t.csv: has no column \"specie\" (data.target); did you mean \"species\"?",
                "its columns: \"a\", \"b\", \"species\"",
            ],
        },
        Case {
            name: "NaN feature",
            files: vec![csv("t.csv", "a,b,label\n1,2,x\n3,NaN,y\n")],
            path: "t.csv",
            data: "target = \"label\"",
            says: &[
                "{data}/t.csv: line 3, column \"b\" holds \"NaN\": features must be finite numbers",
            ],
        },
        Case {
            name: "infinite feature",
            files: vec![csv("t.csv", "a,b,label\n1,2,x\n3,1e40,y\n")],
            path: "t.csv",
            data: "target = \"label\"",
            says: &["{data}/t.csv: line 3, column \"b\" holds \"1e40\""],
        },
        Case {
            name: "empty feature cell",
            files: vec![csv("t.csv", "a,b,label\n1,2,x\n\n3,,y\n")],
            path: "t.csv",
            data: "target = \"label\"",
            says: &[
                "{data}/t.csv: line 4, column \"b\" is empty (a missing value): fill it in or drop the row",
            ],
        },
        Case {
            name: "unseen test label",
            files: vec![
                csv("train.csv", "a,label\n1,cat\n2,dog\n"),
                csv("test.csv", "a,label\n1,dog\n2,bird\n"),
            ],
            path: "",
            data: "target = \"label\"",
            says: &[
                "{data}/test.csv: line 3 has the label \"bird\", which the training part does not have (its 2 classes: \"cat\", \"dog\")",
            ],
        },
        Case {
            name: "empty file",
            files: vec![csv("t.csv", "")],
            path: "t.csv",
            data: "target = \"label\"",
            says: &["{data}/t.csv: is empty: a CSV table needs a header row"],
        },
        Case {
            name: "header only",
            files: vec![csv("t.csv", "a,label\n")],
            path: "t.csv",
            data: "target = \"label\"",
            says: &["{data}/t.csv: has a header but no rows"],
        },
        Case {
            name: "train and test columns differ",
            files: vec![
                csv("train.csv", "a,b,label\n1,2,x\n"),
                csv("test.csv", "a,c,label\n1,2,x\n"),
            ],
            path: "",
            data: "target = \"label\"",
            says: &[
                "{data}/test.csv: has other columns than {data}/train.csv (only in test.csv: \"c\"; only in train.csv: \"b\")",
            ],
        },
        Case {
            name: "regression target not numeric",
            files: vec![csv("t.csv", "a,y\n1,2.5\n2,high\n")],
            path: "t.csv",
            data: "target = \"y\"\ntask = \"regression\"",
            says: &[
                "{data}/t.csv: line 3: the target column \"y\" holds \"high\", not a number: data.task = \"regression\" needs a number in every row",
            ],
        },
        Case {
            name: "no train file in the folder",
            files: vec![csv("data.csv", "a,label\n1,x\n")],
            path: "",
            data: "target = \"label\"",
            says: &["{data}: has no train.csv"],
        },
        Case {
            name: "unsupported parquet type",
            files: vec![("t.parquet", parquet_file())],
            path: "t.parquet",
            data: "target = \"label\"\nfeatures = [\"x\", \"day\"]",
            says: &[
                "{data}/t.parquet: the feature column \"day\" has a type the table reader does not convert (INT32 (DATE))",
            ],
        },
        Case {
            name: "parquet null",
            files: vec![("t.parquet", parquet_file())],
            path: "t.parquet",
            data: "target = \"label\"",
            says: &[
                "{data}/t.parquet: row 1, column \"maybe\" is null (a missing value): fill it in or drop the row",
            ],
        },
        Case {
            name: "not parquet",
            files: vec![("t.parquet", b"a,label\n1,x\n".to_vec())],
            path: "t.parquet",
            data: "target = \"label\"",
            says: &["{data}/t.parquet: is not a readable Parquet file"],
        },
    ];
    let failed: Vec<&str> = cases
        .iter()
        .filter(|c| std::panic::catch_unwind(|| c.check()).is_err())
        .map(|c| c.name)
        .collect();
    assert!(failed.is_empty(), "failed cases: {failed:?}");
}

#[test]
fn a_csv_regression_trains_and_records_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("t.csv");
    let mut text = (0..10).map(|i| format!("x{i},")).collect::<String>() + "y\n";
    for r in 0..400 {
        let xs: Vec<f64> = (0..10)
            .map(|i| ((r * 7 + i * 13) % 17) as f64 / 4.0)
            .collect();
        let y: f64 = xs
            .iter()
            .enumerate()
            .map(|(i, x)| x * (i as f64 - 4.5) / 10.0)
            .sum();
        for x in &xs {
            text += &format!("{x},");
        }
        text += &format!("{y}\n");
    }
    std::fs::write(&data, text).unwrap();
    let spec = dir.path().join("spec.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"t\"\n[model]\nname = \"linear\"\n[data]\nname = \"csv\"\npath = \"{}\"\ntarget = \"y\"\ntask = \"regression\"\nnormalize = true\ntest_fraction = 0.25\n[train]\nepochs = 2\nbatch_size = 16\nlr = 0.01\n",
            data.display()
        ),
    )
    .unwrap();
    let out = dir.path().join("out");
    train_standalone(&spec, 1, &out, &[]);
    assert!(out.join("model.safetensors").is_file());
    let record: ddp_trainer::data::DataRecord =
        serde_json::from_str(&std::fs::read_to_string(out.join("data.json")).unwrap()).unwrap();
    assert_eq!(record.format, "csv");
    assert_eq!(record.source, vec![data]);
    assert_eq!((record.train_samples, record.test_samples), (300, 100));
    assert!(record.test_held_out);
    assert_eq!(
        record.features,
        Some((0..10).map(|i| format!("x{i}")).collect())
    );
    let n = record.normalize.unwrap();
    assert!(n.computed && n.mean.len() == 10 && n.std.iter().all(|&s| s > 0.0));
}
