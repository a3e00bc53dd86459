//! CSV and Parquet tables (`data.name = "csv"` / `"parquet"`): one row per sample, the
//! `data.target` column its label (classification) or value (regression), the
//! `data.features` columns (default: every other numeric column, in file order) its inputs as
//! a `[1, 1, features]` sample held in memory ([`InMemory`]).
//!
//! `data.path` is a file (then `data.test_fraction`, default 0.2, is held out, seeded) or a
//! folder with `train.csv` and `test.csv` (`train.parquet` and `test.parquet`; without the test
//! file the test part is held out too). Classes are the sorted distinct labels of the training
//! part (of the whole file when the test part is held out of it): integers numerically, text
//! lexicographically. `data.normalize = true` standardises the features with the training
//! part's mean and population standard deviation. `docs/data.md` ("Tables: CSV and Parquet")
//! has the details and every error.
//!
//! Layout:
//! - this file: [`open`], the byte-slice readers of the fuzz targets ([`read_csv_bytes`],
//!   [`read_parquet_bytes`]), and what turns read parts into data sets and their record.
//! - `columns`: the columns of a file, the plan of features and target, a read part.
//! - `labels`: labels interned while reading, the classes and class indices.
//! - `normalize`: the training part's column statistics and standardisation.
//! - `csv`: a CSV file's header and column kinds, the sequential reader (`csv` crate).
//! - `csv_lines`: the parallel reader of CSV files without quotes, by line ranges.
//! - `cells`: a CSV row's cells to numbers and labels; the messages of bad rows.
//! - `decimal`: fast parsing of plain decimals, bit-identical to the standard parser.
//! - `parquet`: a Parquet file's schema, and the tasks that read its column chunks in parallel.
//! - `parquet_chunks`: one column chunk read by its typed low-level reader; values converted.
//! - `source`: bytes read at offsets (a file, or memory).

mod cells;
mod columns;
mod csv;
mod csv_lines;
mod decimal;
mod labels;
mod normalize;
mod parquet;
mod parquet_chunks;
mod source;

#[cfg(test)]
mod tests;

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use self::columns::{Column, Part, Plan, Target, Want, plan, same_columns};
use self::labels::{Classes, Labels};
use self::parquet::Opener;
use self::source::{FileSource, Source};
use super::memory::{InMemory, Targets};
use super::parts::{DEFAULT_TEST_FRACTION, DataRecord, Normalization, OpenContext, Parts};
use super::split::split_indices;
use crate::spec::{DataName, Normalize, Spec, SyntheticTask};
use crate::{Error, Result};

/// Opens the table of `spec` (`data.name = "csv"` or `"parquet"`).
pub fn open(spec: &Spec, ctx: &OpenContext) -> Result<Parts> {
    let d = &spec.data;
    let parquet = d.name == DataName::Parquet;
    let ext = if parquet { "parquet" } else { "csv" };
    let Some(path) = d.path.clone() else {
        return Err(Error::data(
            &spec.source,
            format!(
                "data.path: is required for data.name = {ext:?}: a .{ext} file, or a folder with train.{ext} and test.{ext}"
            ),
        ));
    };
    let (train, test) = if path.is_dir() {
        let train = path.join(format!("train.{ext}"));
        if !train.is_file() {
            return Err(Error::data(
                &path,
                format!(
                    "has no train.{ext}: a table folder holds train.{ext} (and optionally \
                     test.{ext}); or point data.path at the .{ext} file"
                ),
            ));
        }
        let test = path.join(format!("test.{ext}"));
        (train, test.is_file().then_some(test))
    } else if path.is_file() {
        (path, None)
    } else {
        return Err(Error::data(
            &path,
            format!(
                "does not exist: data.path is a .{ext} file or a folder with train.{ext} and \
                 test.{ext}"
            ),
        ));
    };
    let want = Want {
        target: d.target.clone().unwrap_or_default(),
        features: d.features.clone(),
        task: d.task,
    };
    let how = How {
        normalize: d.normalize == Some(Normalize::Flag(true)),
        hold_out: test.is_none().then(|| {
            (
                d.test_fraction.unwrap_or(DEFAULT_TEST_FRACTION),
                spec.train.seed,
            )
        }),
        threads: ctx.workers.max(rayon::current_num_threads()).max(1),
        max_values: None,
    };
    let loaded = if parquet {
        let open_train = || File::open(&train);
        let open_test = test.as_ref().map(|t| move || File::open(t));
        let test_input = test
            .as_deref()
            .zip(open_test.as_ref())
            .map(|(t, o)| Input::Parquet(t, o as Opener));
        load(Input::Parquet(&train, &open_train), test_input, &want, &how)?
    } else {
        let src = |p: &Path| {
            File::open(p)
                .and_then(FileSource::new)
                .map_err(|e| Error::io(p, e))
        };
        let train_src = src(&train)?;
        let test_src = test.as_deref().map(src).transpose()?;
        let test_input = match (&test, &test_src) {
            (Some(t), Some(s)) => Some(Input::Csv(t, s as &dyn Source)),
            _ => None,
        };
        load(Input::Csv(&train, &train_src), test_input, &want, &how)?
    };
    let mut record = loaded.record;
    record.format = ext.into();
    let train = Arc::new(loaded.train);
    Ok(match loaded.test {
        Some(test) => Parts {
            train,
            test: Arc::new(test),
            record,
        },
        None => {
            let (fraction, seed) = how.hold_out.unwrap_or((DEFAULT_TEST_FRACTION, 0));
            Parts::held_out(train, fraction, seed, record)
        }
    })
}

/// Reads `bytes` as a CSV table whose first column is the label (classification) and every
/// other numeric column a feature, as [`open`] reads a file: what the `csv_table` fuzz target
/// runs. Never panics; malformed input is an error.
pub fn read_csv_bytes(bytes: &[u8]) -> Result<InMemory> {
    let path = Path::new("fuzz.csv");
    let header = csv::header(path, &bytes)?;
    let want = first_column_target(&header.columns);
    let how = How {
        normalize: true,
        hold_out: None,
        threads: 2,
        max_values: Some(1 << 24),
    };
    Ok(load(Input::Csv(path, &bytes), None, &want, &how)?.train)
}

/// Reads `bytes` as a Parquet table whose first column is the label, as [`read_csv_bytes`]
/// does a CSV table: what the `parquet_table` fuzz target runs. The bytes are read from an
/// anonymous in-memory file. Returns an error on damaged input: the `parquet` crate's own
/// panics on some damage are caught by the reader (see `parquet::guarded`).
pub fn read_parquet_bytes(bytes: &[u8]) -> Result<InMemory> {
    let path = Path::new("fuzz.parquet");
    let file = source::memory_file(bytes).map_err(|e| Error::io(path, e))?;
    let open = || source::reopen(&file);
    let how = How {
        normalize: true,
        hold_out: None,
        threads: 2,
        max_values: Some(1 << 22),
    };
    let schema = parquet::schema(path, &open)?;
    let want = first_column_target(&schema.columns);
    Ok(load(Input::Parquet(path, &open), None, &want, &how)?.train)
}

/// The fuzz targets' spec: the first column is the label, every other numeric one a feature.
fn first_column_target(columns: &[Column]) -> Want {
    Want {
        target: columns.first().map(|c| c.name.clone()).unwrap_or_default(),
        features: None,
        task: SyntheticTask::Classification,
    }
}

/// A file to read and how.
#[derive(Clone, Copy)]
enum Input<'a> {
    Csv(&'a Path, &'a dyn Source),
    Parquet(&'a Path, Opener<'a>),
}

/// What reading is asked beyond the columns.
struct How {
    normalize: bool,
    /// The test fraction and seed, when the test part is held out of the one file.
    hold_out: Option<(f64, u64)>,
    threads: usize,
    /// The most feature values a part may have (the fuzz targets' bound).
    max_values: Option<usize>,
}

/// A file's columns, ready to read.
enum Opened<'a> {
    Csv(&'a Path, &'a dyn Source, csv::Header),
    Parquet(&'a Path, Opener<'a>, parquet::Schema),
}

impl<'a> Opened<'a> {
    fn new(input: Input<'a>) -> Result<Opened<'a>> {
        Ok(match input {
            Input::Csv(p, src) => Opened::Csv(p, src, csv::header(p, src)?),
            Input::Parquet(p, open) => Opened::Parquet(p, open, parquet::schema(p, open)?),
        })
    }

    fn path(&self) -> &'a Path {
        match self {
            Opened::Csv(p, ..) | Opened::Parquet(p, ..) => p,
        }
    }

    fn columns(&self) -> &[Column] {
        match self {
            Opened::Csv(_, _, h) => &h.columns,
            Opened::Parquet(_, _, s) => &s.columns,
        }
    }

    fn read(&self, plan: &Plan, how: &How) -> Result<Part> {
        match self {
            Opened::Csv(p, src, h) => csv::read(p, *src, h, plan, how.threads),
            Opened::Parquet(p, open, s) => {
                parquet::read(p, *open, s, plan, how.threads, how.max_values)
            }
        }
    }

    /// Where data row `row` is, for a message: `line 7` (CSV) or `row 5` (Parquet, from 0).
    fn locate(&self, row: usize) -> Result<String> {
        Ok(match self {
            Opened::Csv(p, src, _) => format!("line {}", csv::line_of_row(p, *src, row)?),
            Opened::Parquet(..) => format!("row {row}"),
        })
    }
}

/// The data sets read and their record (its format left for the caller).
struct Loaded {
    /// The training part, or the whole file when the test part is held out of it.
    train: InMemory,
    test: Option<InMemory>,
    record: DataRecord,
}

/// Reads the training file (and the test file) as `want` and `how` say.
fn load(train: Input, test: Option<Input>, want: &Want, how: &How) -> Result<Loaded> {
    let train = Opened::new(train)?;
    let train_plan = plan(train.path(), train.columns(), want)?;
    let train_part = train.read(&train_plan, how)?;
    let test = match test {
        None => None,
        Some(input) => {
            let test = Opened::new(input)?;
            same_columns(train.path(), train.columns(), test.path(), test.columns())?;
            let by_name = Want {
                features: Some(train_plan.feature_names.clone()),
                ..want.clone()
            };
            let mut test_plan = plan(test.path(), test.columns(), &by_name)?;
            test_plan.defaulted = train_plan.defaulted;
            let part = test.read(&test_plan, how)?;
            Some((test, part))
        }
    };
    let nf = train_plan.features.len();
    let held_out = how
        .hold_out
        .map(|(fraction, seed)| split_indices(train_part.rows, fraction, seed));
    let normalization = how.normalize.then(|| {
        let rows = held_out.as_ref().map(|(t, _)| &t[..]);
        let (mean, std) = normalize::column_stats(&train_part.features, nf, rows);
        Normalization {
            mean,
            std,
            computed: true,
        }
    });
    let classes = match &train_part.target {
        Target::Labels(l) => Some(Classes::of(&[l])),
        Target::Values(_) => None,
    };
    let data_set = |opened: &Opened, mut part: Part| -> Result<InMemory> {
        if let Some(n) = &normalization {
            normalize::standardize(&mut part.features, &n.mean, &n.std);
        }
        let targets = match (&part.target, &classes) {
            (Target::Values(v), _) => Targets::Values(v.clone()),
            (Target::Labels(l), Some(c)) => Targets::Classes(class_indices(opened, c, l)?),
            (Target::Labels(_), None) => unreachable!("a classification has classes"),
        };
        Ok(InMemory {
            name: part.file.display().to_string(),
            shape: [1, 1, nf],
            images: part.features,
            targets,
            classes: classes.as_ref().map_or(0, Classes::count),
        })
    };
    let train_rows = train_part.rows;
    let mut source = vec![train.path().to_path_buf()];
    let (test_set, test_rows) = match test {
        Some((opened, part)) => {
            source.push(opened.path().to_path_buf());
            let rows = part.rows;
            (Some(data_set(&opened, part)?), rows)
        }
        None => (None, held_out.as_ref().map_or(0, |(_, t)| t.len())),
    };
    let train_samples = held_out.as_ref().map_or(train_rows, |(t, _)| t.len());
    let train_set = data_set(&train, train_part)?;
    Ok(Loaded {
        train: train_set,
        test: test_set,
        record: DataRecord {
            format: String::new(),
            source,
            classes: classes.as_ref().map(Classes::names),
            features: Some(train_plan.feature_names.clone()),
            target: Some(train_plan.target_name.clone()),
            normalize: normalization,
            train_samples,
            test_samples: test_rows,
            test_held_out: how.hold_out.is_some(),
            skipped: Vec::new(),
        },
    })
}

/// The class index of every row of `labels`, or the error of the first unseen label.
fn class_indices(opened: &Opened, classes: &Classes, labels: &Labels) -> Result<Vec<u32>> {
    classes
        .indices(labels)
        .map_err(|u| match opened.locate(u.row) {
            Err(e) => e,
            Ok(at) => Error::data(
                opened.path(),
                format!(
                    "{at} has the label {:?}, which the training part does not have (its {} \
                 classes: {}): every test label must be one of the training labels; add \
                 training rows with it or drop the test rows",
                    u.label,
                    classes.count(),
                    classes.some_names(10)
                ),
            ),
        })
}
