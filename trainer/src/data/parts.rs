//! What opening a user's data files gives: the training part, the test part where the files
//! have one, and the record of the data that the run folder keeps (`data.json`: classes,
//! columns, normalisation, skipped files).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::dataset::{SharedDataset, Subset};
use super::split::split_indices;

/// A user's data as opened by its format.
pub struct Parts {
    /// The samples to train (and validate) on.
    pub train: SharedDataset,
    /// The test samples: the files' own test part, or the share held out by `data.test_fraction`.
    pub test: SharedDataset,
    /// What the run folder records about the data.
    pub record: DataRecord,
}

impl Parts {
    /// `whole` split into a training and a held-out test part (`random_split([1 − f, f])`
    /// seeded with `seed`, as the validation split is): for files without a test part.
    pub fn held_out(
        whole: SharedDataset,
        test_fraction: f64,
        seed: u64,
        record: DataRecord,
    ) -> Parts {
        let (train, test) = split_indices(whole.len(), test_fraction, seed);
        Parts {
            train: std::sync::Arc::new(Subset::new(whole.clone(), train)),
            test: std::sync::Arc::new(Subset::new(whole, test)),
            record,
        }
    }
}

/// The part of `data.test_fraction` held out when a format's files have no test part.
pub const DEFAULT_TEST_FRACTION: f64 = 0.2;

/// The record of a run's data, written by rank 0 as `data.json` in the run folder.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DataRecord {
    /// `image-folder`, `csv`, `parquet`, `tensors`, `custom`.
    pub format: String,
    /// The files read: a folder, or the train and test files.
    pub source: Vec<PathBuf>,
    /// Class names in index order (index = position): folder names, or a table's sorted labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<Vec<String>>,
    /// A table's input columns, in the order the model sees them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features: Option<Vec<String>>,
    /// A table's label column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The normalisation applied to the inputs: `(x − mean) / std`, per channel or per column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normalize: Option<Normalization>,
    /// Samples per part as read (before the validation split and limits).
    pub train_samples: usize,
    pub test_samples: usize,
    /// True when the test part was held out of the training files (`data.test_fraction`).
    pub test_held_out: bool,
    /// Files left out with `data.skip_bad = true`, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
}

/// Mean and standard deviation per channel (images) or per feature column (tables).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Normalization {
    pub mean: Vec<f32>,
    pub std: Vec<f32>,
    /// Computed over the training part (`normalize = "auto"` / `true`) rather than given.
    pub computed: bool,
}

/// A file left out of the data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Skipped {
    pub path: PathBuf,
    pub why: String,
}

/// What a format's opener may use beyond the spec.
#[derive(Debug, Clone, Copy)]
pub struct OpenContext {
    /// Threads that may decode or read at once (`data.workers`, or what the machine can spare).
    pub workers: usize,
}

impl DataRecord {
    /// The file name of the record in a run folder.
    pub const FILE: &'static str = "data.json";

    /// Writes the record as `out/data.json` (atomically; the folder is made if missing).
    pub fn write(&self, out: &std::path::Path) -> crate::Result<()> {
        std::fs::create_dir_all(out).map_err(|e| crate::Error::io(out, e))?;
        let text = serde_json::to_string_pretty(self).expect("a DataRecord always serialises");
        let path = out.join(Self::FILE);
        crate::fsutil::write_atomic(&path, text.as_bytes()).map_err(|e| crate::Error::io(&path, e))
    }
}

/// What the folder `dir` holds, for a message: "it holds a, b/, c and 5 more" (the first 8
/// names, sorted, folders marked with `/`) or "it is empty".
pub fn listing(dir: &Path) -> String {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| {
            let mut n = e.file_name().to_string_lossy().into_owned();
            if e.path().is_dir() {
                n.push('/');
            }
            n
        })
        .collect();
    if names.is_empty() {
        return "it is empty".into();
    }
    names.sort();
    let more = names.len().saturating_sub(8);
    names.truncate(8);
    let mut s = format!("it holds {}", names.join(", "));
    if more > 0 {
        s.push_str(&format!(" and {more} more"));
    }
    s
}
