//! What the CSV and Parquet readers share: the columns a file has ([`Column`]), which of them
//! the model reads ([`Plan`]: the features in order and the target, from `data.features` and
//! `data.target`), and what reading a file gives ([`Part`]).

use std::path::{Path, PathBuf};

use super::labels::Labels;
use crate::spec::{SyntheticTask, edit_distance};
use crate::{Error, Result};

/// What a column holds, as far as choosing features goes.
#[derive(Clone, Debug, PartialEq)]
pub enum ColumnKind {
    /// Numbers: a feature unless the target or left out of `data.features`.
    Number,
    /// Text (labels, names): never a feature. The detail says how it was told, e.g.
    /// `line 2 holds "red"` or `its type is BYTE_ARRAY (STRING)`.
    Text(String),
    /// A type the reader does not convert (Parquet dates, decimals, lists...), named.
    Unsupported(String),
}

/// A column of a file: its name in the header (CSV) or schema (Parquet), and its kind.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    pub name: String,
    pub kind: ColumnKind,
}

/// What the spec asks of a table: `data.target`, `data.features`, `data.task`.
#[derive(Clone, Debug)]
pub struct Want {
    pub target: String,
    pub features: Option<Vec<String>>,
    pub task: SyntheticTask,
}

/// Which columns of a file the model reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The file's column of the target.
    pub target: usize,
    /// The file's column of each feature, in the order the model sees them.
    pub features: Vec<usize>,
    /// The features' names, in that order.
    pub feature_names: Vec<String>,
    pub target_name: String,
    pub task: SyntheticTask,
    /// True when the features are the default (every numeric column but the target), not a list.
    pub defaulted: bool,
}

/// What a file's column is to the reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Not read.
    Skip,
    /// Feature number `k` (its place in the sample).
    Feature(usize),
    Target,
}

impl Plan {
    /// The role of each of the file's `columns` columns.
    pub fn roles(&self, columns: usize) -> Vec<Role> {
        let mut roles = vec![Role::Skip; columns];
        for (k, &c) in self.features.iter().enumerate() {
            roles[c] = Role::Feature(k);
        }
        roles[self.target] = Role::Target;
        roles
    }
}

/// What reading one file gives.
#[derive(Debug, PartialEq)]
pub struct Part {
    pub file: PathBuf,
    pub rows: usize,
    /// `rows × features` values, row-major, as read (not normalised).
    pub features: Vec<f32>,
    pub target: Target,
}

/// A part's target column as read.
#[derive(Debug, PartialEq)]
pub enum Target {
    /// Regression: one value per row.
    Values(Vec<f32>),
    /// Classification: the rows' labels, before they become class indices.
    Labels(Labels),
}

/// `n` zeros, or None when the memory cannot be had. The pages come zeroed from the system
/// (`calloc`), so they are touched first by the threads that write the values, not by a
/// sequential fill.
pub fn zeroed<T: bytemuck::Zeroable>(n: usize) -> Option<Vec<T>> {
    let layout = std::alloc::Layout::array::<T>(n).ok()?;
    if layout.size() == 0 {
        return Some(Vec::new());
    }
    // SAFETY: the layout has a non-zero size; all-zero bytes are a valid `T` (`Zeroable`); the
    // memory comes from the global allocator with the layout of `n` `T`s, as `Vec` requires.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout) as *mut T;
        if p.is_null() {
            return None;
        }
        huge_pages(p as *mut u8, layout.size());
        Some(Vec::from_raw_parts(p, n, n))
    }
}

/// Asks for transparent huge pages on a large buffer (Linux): 512 times fewer page faults when
/// the threads first write it. Advice only; nothing changes where it is not taken.
fn huge_pages(p: *mut u8, len: usize) {
    const PAGE: usize = 4096;
    if len < 1 << 22 {
        return;
    }
    let start = (p as usize).next_multiple_of(PAGE);
    let end = (p as usize + len) & !(PAGE - 1);
    if end > start {
        // SAFETY: advice on whole pages inside an allocation of this process.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

/// Columns whose names mark a writer's row index, never a default feature: pandas' index
/// written by `to_csv` (an empty name) or by `to_parquet` (`__index_level_0__`).
fn is_index_column(name: &str) -> bool {
    name.is_empty() || name.starts_with("__index_level_")
}

/// The columns of `file` that `want` names, checked: the target exists once and fits the task,
/// every listed feature exists once and is numeric, and there is at least one feature.
pub fn plan(file: &Path, columns: &[Column], want: &Want) -> Result<Plan> {
    let err = |msg: String| Err(Error::data(file, msg));
    let target = find(file, columns, &want.target, "data.target")?;
    match (&columns[target].kind, want.task) {
        (ColumnKind::Unsupported(ty), _) => {
            return err(format!(
                "the target column {:?} has a type the table reader does not convert ({ty}): \
                 store the labels as integers or strings (or the values as numbers)",
                want.target
            ));
        }
        (ColumnKind::Text(how), SyntheticTask::Regression) => {
            return err(format!(
                "the target column {:?} is not numeric ({how}): data.task = \"regression\" needs \
                 numbers; for labels use data.task = \"classification\"",
                want.target
            ));
        }
        _ => {}
    }
    let (features, defaulted) = match &want.features {
        Some(list) => {
            let mut picked = Vec::with_capacity(list.len());
            for (i, name) in list.iter().enumerate() {
                if list[..i].contains(name) {
                    return err(format!(
                        "data.features lists {name:?} twice: list each column once"
                    ));
                }
                let c = find(file, columns, name, "data.features")?;
                match &columns[c].kind {
                    ColumnKind::Number => picked.push(c),
                    ColumnKind::Text(how) => {
                        return err(format!(
                            "the feature column {name:?} is not numeric ({how}): list only \
                             numeric columns in data.features"
                        ));
                    }
                    ColumnKind::Unsupported(ty) => {
                        return err(format!(
                            "the feature column {name:?} has a type the table reader does not \
                             convert ({ty}): store it as integers or floats, or leave it out of \
                             data.features"
                        ));
                    }
                }
            }
            (picked, false)
        }
        None => {
            let picked: Vec<usize> = (0..columns.len())
                .filter(|&c| {
                    c != target
                        && columns[c].kind == ColumnKind::Number
                        && !is_index_column(&columns[c].name)
                })
                .collect();
            if picked.is_empty() {
                return err(format!(
                    "has no numeric column besides the target {:?} (columns: {}): a model needs \
                     numeric features; list them in data.features",
                    want.target,
                    list_names(columns)
                ));
            }
            for &c in &picked {
                find(file, columns, &columns[c].name, "a default feature")?;
            }
            (picked, true)
        }
    };
    Ok(Plan {
        target,
        feature_names: features.iter().map(|&c| columns[c].name.clone()).collect(),
        features,
        target_name: want.target.clone(),
        task: want.task,
        defaulted,
    })
}

/// The one column called `name` (`key` says which spec key named it).
fn find(file: &Path, columns: &[Column], name: &str, key: &str) -> Result<usize> {
    let at: Vec<usize> = (0..columns.len())
        .filter(|&c| columns[c].name == name)
        .collect();
    match at[..] {
        [c] => Ok(c),
        [] => Err(Error::data(
            file,
            format!(
                "has no column {name:?} ({key}){}; its columns: {}",
                suggest(columns, name),
                list_names(columns)
            ),
        )),
        _ => Err(Error::data(
            file,
            format!(
                "has {} columns called {name:?} (columns {}): rename them so that each name is \
                 used once",
                at.len(),
                at.iter()
                    .map(|c| (c + 1).to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// `; did you mean "label"?` for the column name closest to `name`, when one is close.
pub fn suggest(columns: &[Column], name: &str) -> String {
    let lower = name.to_lowercase();
    let best = columns
        .iter()
        .map(|c| {
            let d = if c.name.to_lowercase() == lower {
                0
            } else {
                edit_distance(&c.name, name)
            };
            (d, &c.name)
        })
        .min_by_key(|&(d, _)| d);
    match best {
        Some((d, best)) if d <= (name.chars().count() / 2).max(2) => {
            format!("; did you mean {best:?}?")
        }
        _ => String::new(),
    }
}

/// The columns' names for a message: quoted, comma-separated, the first 20 and a count.
pub fn list_names(columns: &[Column]) -> String {
    const SHOWN: usize = 20;
    let mut s = columns
        .iter()
        .take(SHOWN)
        .map(|c| format!("{:?}", c.name))
        .collect::<Vec<_>>()
        .join(", ");
    if columns.len() > SHOWN {
        s += &format!(" and {} more", columns.len() - SHOWN);
    }
    s
}

/// Checks that the test file has the training file's columns (by name, in any order).
pub fn same_columns(
    train: &Path,
    train_cols: &[Column],
    test: &Path,
    test_cols: &[Column],
) -> Result<()> {
    let names = |cols: &[Column]| cols.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
    let (a, b) = (names(train_cols), names(test_cols));
    let only = |x: &[String], y: &[String]| -> Vec<String> {
        x.iter()
            .filter(|n| !y.contains(n))
            .map(|n| format!("{n:?}"))
            .collect()
    };
    let (only_test, only_train) = (only(&b, &a), only(&a, &b));
    if only_test.is_empty() && only_train.is_empty() {
        return Ok(());
    }
    let file = |p: &Path| {
        p.file_name().map_or_else(
            || p.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
    };
    let mut parts = Vec::new();
    if !only_test.is_empty() {
        parts.push(format!("only in {}: {}", file(test), only_test.join(", ")));
    }
    if !only_train.is_empty() {
        parts.push(format!(
            "only in {}: {}",
            file(train),
            only_train.join(", ")
        ));
    }
    Err(Error::data(
        test,
        format!(
            "has other columns than {} ({}): give the training and test files the same columns",
            train.display(),
            parts.join("; ")
        ),
    ))
}

/// A cell's text for a message: at most 40 characters, lossy UTF-8, quoted.
pub fn shown(value: &[u8]) -> String {
    let text = String::from_utf8_lossy(value);
    let mut cut: String = text.chars().take(40).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    format!("{cut:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols(spec: &[(&str, bool)]) -> Vec<Column> {
        spec.iter()
            .map(|&(n, num)| Column {
                name: n.into(),
                kind: if num {
                    ColumnKind::Number
                } else {
                    ColumnKind::Text("line 2 holds \"x\"".into())
                },
            })
            .collect()
    }

    fn want(target: &str, features: Option<&[&str]>) -> Want {
        Want {
            target: target.into(),
            features: features.map(|f| f.iter().map(|s| s.to_string()).collect()),
            task: SyntheticTask::Classification,
        }
    }

    #[test]
    fn default_features_are_the_numeric_columns_in_file_order() {
        let c = cols(&[
            ("", true),
            ("b", true),
            ("name", false),
            ("label", true),
            ("a", true),
            ("__index_level_0__", true),
        ]);
        let p = plan(Path::new("t.csv"), &c, &want("label", None)).unwrap();
        assert_eq!(p.features, vec![1, 4]);
        assert_eq!(p.feature_names, vec!["b", "a"]);
        assert_eq!((p.target, p.defaulted), (3, true));
        assert_eq!(
            p.roles(6),
            vec![
                Role::Skip,
                Role::Feature(0),
                Role::Skip,
                Role::Target,
                Role::Feature(1),
                Role::Skip
            ]
        );
    }

    #[test]
    fn listed_features_keep_their_order() {
        let c = cols(&[("x", true), ("y", true), ("z", true), ("t", false)]);
        let p = plan(Path::new("t.csv"), &c, &want("t", Some(&["z", "x"]))).unwrap();
        assert_eq!((p.features, p.defaulted), (vec![2, 0], false));
    }

    #[test]
    fn bad_plans_say_what_to_do() {
        let c = cols(&[
            ("sepal", true),
            ("label", false),
            ("name", false),
            ("dup", true),
            ("dup", true),
        ]);
        let e = |w: Want| plan(Path::new("t.csv"), &c, &w).unwrap_err().to_string();
        assert_eq!(
            e(want("lable", None)),
            "t.csv: has no column \"lable\" (data.target); did you mean \"label\"?; its columns: \
             \"sepal\", \"label\", \"name\", \"dup\", \"dup\""
        );
        assert!(e(want("Label", None)).contains("did you mean \"label\"?"));
        assert!(!e(want("zzzzzzzz", None)).contains("did you mean"));
        assert_eq!(
            e(want("label", Some(&["name"]))),
            "t.csv: the feature column \"name\" is not numeric (line 2 holds \"x\"): list only \
             numeric columns in data.features"
        );
        assert!(e(want("label", Some(&["sepal", "sepal"]))).contains("lists \"sepal\" twice"));
        assert!(e(want("label", None)).contains("has 2 columns called \"dup\" (columns 4, 5)"));
        let mut w = want("label", Some(&["sepal"]));
        w.task = SyntheticTask::Regression;
        assert!(e(w).contains("the target column \"label\" is not numeric (line 2 holds \"x\")"));
        let only_text = cols(&[("label", true), ("name", false)]);
        let e = plan(Path::new("t.csv"), &only_text, &want("label", None)).unwrap_err();
        assert!(
            e.to_string()
                .contains("has no numeric column besides the target")
        );
    }

    #[test]
    fn train_and_test_columns_must_match() {
        let a = cols(&[("x", true), ("y", true), ("t", true)]);
        let b = cols(&[("y", true), ("t", true), ("x", true)]);
        same_columns(Path::new("d/train.csv"), &a, Path::new("d/test.csv"), &b).unwrap();
        let c = cols(&[("x", true), ("t", true), ("w", true)]);
        let e = same_columns(Path::new("d/train.csv"), &a, Path::new("d/test.csv"), &c)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "d/test.csv: has other columns than d/train.csv (only in test.csv: \"w\"; only in \
             train.csv: \"y\"): give the training and test files the same columns"
        );
    }

    #[test]
    fn shown_cuts_long_values() {
        assert_eq!(shown(b"abc"), "\"abc\"");
        assert_eq!(shown(&[b'x'; 50]), format!("\"{}…\"", "x".repeat(40)));
    }
}
