//! Parquet files: the schema's columns and their kinds, then the column chunks the plan names,
//! read by the low-level column readers (`parquet::column::reader`), every (row group, column)
//! a task for one of the threads, each writing its values straight into the row-major features.
//!
//! Numbers are `INT32`/`INT64` (signed or unsigned integers), `FLOAT`, `DOUBLE` and
//! `BOOLEAN` (0 or 1), converted to `f64` then `f32` (as a CSV cell is); text is `BYTE_ARRAY`
//! (plain, `STRING`, `ENUM`, `JSON`). Dates, times, timestamps, decimals, `INT96`,
//! `FIXED_LEN_BYTE_ARRAY`, lists and nested groups are refused by name when the plan needs them.
//! Nulls are refused by row.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use parquet::basic::{ConvertedType, LogicalType, Type as Physical};
use parquet::file::reader::{FileReader, RowGroupReader};
use parquet::file::serialized_reader::SerializedFileReader;
use parquet::schema::types::ColumnDescriptor;

use super::cells::explain;
use super::columns::{Column, ColumnKind, Part, Plan, Target, zeroed};
use super::csv::too_big;
use super::labels::{Interner, Labels, Piece};
use super::parquet_chunks::{BATCH, Conv, Cursor, Stop, label, number};
use crate::spec::SyntheticTask;
use crate::{Error, Result};

/// Opens the file anew (every thread reads through its own file description).
pub type Opener<'a> = &'a (dyn Fn() -> io::Result<File> + Sync);

/// A Parquet file's columns (the schema's leaves) and how each converts.
pub struct Schema {
    pub columns: Vec<Column>,
    convs: Vec<Conv>,
    /// Rows per row group.
    groups: Vec<usize>,
}

fn open_reader(path: &Path, open: Opener) -> Result<SerializedFileReader<File>> {
    let file = open().map_err(|e| Error::io(path, e))?;
    SerializedFileReader::new(file).map_err(|e| {
        Error::data(
            path,
            format!("is not a readable Parquet file ({e}): is it a Parquet file, whole?"),
        )
    })
}

/// Runs `f`, turning a panic into the error of a damaged file. The `parquet` crate asserts on
/// some damaged input (a dictionary-encoded page without its dictionary, for one) instead of
/// returning an error; the panic's message still goes to stderr.
fn guarded<T>(path: &Path, f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| Err(damaged(path)))
}

fn damaged(path: &Path) -> Error {
    Error::data(
        path,
        "is damaged: the Parquet reader stopped on it (see the message above); write the file again",
    )
}

/// The columns of the Parquet file `path`.
pub fn schema(path: &Path, open: Opener) -> Result<Schema> {
    guarded(path, || schema_of(path, open))
}

fn schema_of(path: &Path, open: Opener) -> Result<Schema> {
    let reader = open_reader(path, open)?;
    let meta = reader.metadata();
    let descr = meta.file_metadata().schema_descr();
    let (mut columns, mut convs) = (Vec::new(), Vec::new());
    for d in descr.columns() {
        let (kind, conv) = kind_of(d);
        columns.push(Column {
            name: d.path().string(),
            kind,
        });
        convs.push(conv);
    }
    let mut groups = Vec::with_capacity(meta.num_row_groups());
    for (g, rg) in meta.row_groups().iter().enumerate() {
        if rg.num_columns() != columns.len() {
            return Err(Error::data(
                path,
                format!(
                    "row group {g} has {} columns but the schema has {}: the file is damaged",
                    rg.num_columns(),
                    columns.len()
                ),
            ));
        }
        groups.push(usize::try_from(rg.num_rows()).map_err(|_| {
            Error::data(
                path,
                format!(
                    "row group {g} says it has {} rows: the file is damaged",
                    rg.num_rows()
                ),
            )
        })?);
    }
    if columns.is_empty() {
        return Err(Error::data(path, "has no columns"));
    }
    if groups.iter().sum::<usize>() == 0 {
        return Err(Error::data(
            path,
            "has no rows: a table needs one row per sample",
        ));
    }
    Ok(Schema {
        columns,
        convs,
        groups,
    })
}

/// A column's kind and conversion from its physical and logical types.
fn kind_of(d: &ColumnDescriptor) -> (ColumnKind, Conv) {
    let physical = d.physical_type();
    let unsupported = |what: String| (ColumnKind::Unsupported(what), Conv::None);
    if d.path().parts().len() > 1 {
        return unsupported("a field of a nested group".into());
    }
    if d.max_rep_level() > 0 {
        return unsupported(format!("a repeated {physical} (a list)"));
    }
    let logical = d.logical_type_ref();
    let converted = d.converted_type();
    let named = |name: &str| format!("{physical} ({name})");
    let logical_name = || {
        logical.map_or_else(
            || converted.to_string(),
            |l| {
                let debug = format!("{l:?}");
                debug
                    .split(['(', ' ', '{'])
                    .next()
                    .unwrap_or("")
                    .to_uppercase()
            },
        )
    };
    let signed = match (logical, converted) {
        (Some(LogicalType::Integer(i)), _) => Some(i.is_signed),
        (None, ConvertedType::NONE | ConvertedType::INT_8 | ConvertedType::INT_16)
        | (None, ConvertedType::INT_32 | ConvertedType::INT_64) => Some(true),
        (None, ConvertedType::UINT_8 | ConvertedType::UINT_16)
        | (None, ConvertedType::UINT_32 | ConvertedType::UINT_64) => Some(false),
        _ => None,
    };
    let plain = logical.is_none() && converted == ConvertedType::NONE;
    match physical {
        Physical::BOOLEAN if plain => (ColumnKind::Number, Conv::Bool),
        Physical::FLOAT if plain => (ColumnKind::Number, Conv::F32),
        Physical::DOUBLE if plain => (ColumnKind::Number, Conv::F64),
        Physical::INT32 | Physical::INT64 if signed.is_some() => {
            let conv = match (physical, signed == Some(true)) {
                (Physical::INT32, true) => Conv::I32,
                (Physical::INT32, false) => Conv::U32,
                (_, true) => Conv::I64,
                (_, false) => Conv::U64,
            };
            (ColumnKind::Number, conv)
        }
        Physical::BYTE_ARRAY => match (logical, converted) {
            (None, ConvertedType::NONE) => (
                ColumnKind::Text(format!("its type is {physical}")),
                Conv::Text,
            ),
            (Some(LogicalType::String | LogicalType::Enum | LogicalType::Json), _)
            | (None, ConvertedType::UTF8 | ConvertedType::ENUM | ConvertedType::JSON) => (
                ColumnKind::Text(format!("its type is {}", named(&logical_name()))),
                Conv::Text,
            ),
            _ => unsupported(named(&logical_name())),
        },
        _ if plain => unsupported(physical.to_string()),
        _ => unsupported(named(&logical_name())),
    }
}

/// The output buffer the tasks write into, each at indices no other task writes.
struct Shared<T> {
    ptr: *mut T,
    len: usize,
}

// SAFETY: a `Shared` is only written through `write`, whose callers write disjoint indices
// (see `read`), and the buffer outlives the threads (they are scoped).
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    fn new(v: &mut [T]) -> Shared<T> {
        Shared {
            ptr: v.as_mut_ptr(),
            len: v.len(),
        }
    }

    /// Writes `v` at `i` (checked against the length).
    ///
    /// # Safety
    /// No other thread may read or write index `i` while the buffer is shared.
    #[inline]
    unsafe fn write(&self, i: usize, v: T) {
        assert!(i < self.len, "index {i} beyond {}", self.len);
        // SAFETY: in bounds (checked); exclusive per the caller's contract.
        unsafe { self.ptr.add(i).write(v) }
    }

    /// Writes `src` from index `i` on (checked against the length).
    ///
    /// # Safety
    /// No other thread may read or write those indices while the buffer is shared.
    #[inline]
    unsafe fn write_run(&self, i: usize, src: &[T])
    where
        T: Copy,
    {
        assert!(i + src.len() <= self.len, "index {i} beyond {}", self.len);
        // SAFETY: in bounds (checked); exclusive per the caller's contract; `src` is not in the
        // shared buffer (it is the task's own).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(i), src.len()) }
    }
}

/// What a task reads: some rows of a row group, of a run of features or of the target.
pub(super) struct Task {
    pub(super) group: usize,
    pub(super) rows: Range<usize>,
    /// Features `k0..k1` (plan order), or None for the target.
    pub(super) features: Option<Range<usize>>,
}

/// Features per task: up to 16 (a 64-byte run of each output row), fewer when that leaves
/// threads idle.
const MAX_RUN: usize = 16;
/// The fewest rows a band of a row group is cut to.
const MIN_BAND: usize = 1 << 16;

/// The tasks of reading `groups` (rows per row group) for `nf` features on `threads` threads:
/// runs of at most [`MAX_RUN`] features of even length, as many as keep the threads busy, and
/// row groups cut into bands when there are still more threads than tasks.
pub(super) fn tasks(groups: &[usize], nf: usize, threads: usize) -> Vec<Task> {
    let threads = threads.max(1);
    // Runs: at least nf / MAX_RUN, rounded up to a multiple of the threads (when there are that
    // many features), so the threads get even shares.
    let mut runs = nf.div_ceil(MAX_RUN).max(1);
    if groups.len() < threads {
        runs = runs.div_ceil(threads) * threads;
    }
    let runs = runs.min(nf.max(1));
    let mut out = Vec::new();
    for (g, &n) in groups.iter().enumerate() {
        let want = (2 * threads).div_ceil(groups.len() * runs);
        let bands = want.min(n / MIN_BAND).max(1);
        for b in 0..bands {
            let rows = n * b / bands..n * (b + 1) / bands;
            for r in 0..runs {
                out.push(Task {
                    group: g,
                    rows: rows.clone(),
                    features: Some(nf * r / runs..nf * (r + 1) / runs),
                });
            }
            out.push(Task {
                group: g,
                rows,
                features: None,
            });
        }
    }
    out
}

/// Reads the rows of the Parquet file `path` as `plan` says, on up to `threads` threads.
/// `max_values`: the most features it may allocate (None: what memory allows).
pub fn read(
    path: &Path,
    open: Opener,
    schema: &Schema,
    plan: &Plan,
    threads: usize,
    max_values: Option<usize>,
) -> Result<Part> {
    guarded(path, || {
        read_guarded(path, open, schema, plan, threads, max_values)
    })
}

fn read_guarded(
    path: &Path,
    open: Opener,
    schema: &Schema,
    plan: &Plan,
    threads: usize,
    max_values: Option<usize>,
) -> Result<Part> {
    let nf = plan.features.len();
    let rows: usize = schema.groups.iter().sum();
    let values = rows.saturating_mul(nf);
    if max_values.is_some_and(|m| values > m) {
        return Err(too_big(path, rows, nf));
    }
    let classes = plan.task == SyntheticTask::Classification;
    let (Some(mut features), Some(mut ids), Some(mut targets)) = (
        zeroed::<f32>(values),
        zeroed::<u32>(if classes { rows } else { 0 }),
        zeroed::<f32>(if classes { 0 } else { rows }),
    ) else {
        return Err(too_big(path, rows, nf));
    };
    let starts: Vec<usize> = schema
        .groups
        .iter()
        .scan(0, |s, &n| {
            *s += n;
            Some(*s - n)
        })
        .collect();
    let tasks = tasks(&schema.groups, nf, threads);
    let next = AtomicUsize::new(0);
    let out = Out {
        features: Shared::new(&mut features),
        ids: Shared::new(&mut ids),
        targets: Shared::new(&mut targets),
        nf,
    };
    let pieces: Mutex<Vec<Piece>> = Mutex::new(Vec::new());
    let stops: Mutex<Vec<(usize, usize, Stop)>> = Mutex::new(Vec::new());
    let workers = threads.clamp(1, tasks.len().max(1));
    let opened: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    let reader = open_reader(path, open)?;
                    while let Some(task) = tasks.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let rg = reader.get_row_group(task.group).map_err(|e| {
                            Error::data(path, format!("row group {}: {e}", task.group))
                        })?;
                        let row0 = starts[task.group];
                        let result = match &task.features {
                            Some(ks) => {
                                read_features(&*rg, schema, plan, task, ks.clone(), row0, &out)
                            }
                            None => {
                                let mut interner = Interner::default();
                                let r = read_target(
                                    &*rg,
                                    schema,
                                    plan,
                                    task,
                                    row0,
                                    &out,
                                    &mut interner,
                                );
                                let rows = row0 + task.rows.start..row0 + task.rows.end;
                                pieces.lock().unwrap().push(interner.piece(rows));
                                r
                            }
                        };
                        if let Err((col, stop)) = result {
                            let row = match &stop {
                                Stop::Fault(r, _) | Stop::Msg(r, _) => row0 + r,
                                Stop::Parquet(_) => row0 + task.rows.start,
                            };
                            stops.lock().unwrap().push((row, col, stop));
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        // A worker that panicked (in the parquet crate) read damage.
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(damaged(path))))
            .collect()
    });
    for r in opened {
        r?;
    }
    let mut stops = stops.into_inner().unwrap();
    stops.sort_by_key(|&(row, col, _)| (row, col));
    if let Some((row, col, stop)) = stops.into_iter().next() {
        let at = format!("row {row}");
        return Err(Error::data(
            path,
            match stop {
                Stop::Fault(_, f) => explain(&f, &schema.columns, plan, &at),
                Stop::Msg(_, m) => format!("{at}: {m}"),
                Stop::Parquet(e) => format!(
                    "column {:?}: the file is damaged ({e})",
                    schema.columns[col].name
                ),
            },
        ));
    }
    let target = if classes {
        let mut pieces = pieces.into_inner().unwrap();
        pieces.sort_by_key(|p| p.rows.start);
        Target::Labels(Labels { ids, pieces })
    } else {
        Target::Values(targets)
    };
    Ok(Part {
        file: path.to_path_buf(),
        rows,
        features,
        target,
    })
}

/// The outputs the tasks share.
struct Out {
    features: Shared<f32>,
    ids: Shared<u32>,
    targets: Shared<f32>,
    nf: usize,
}

/// The features `ks` of the task's rows: a batch of every column, then the batch's rows.
fn read_features(
    rg: &dyn RowGroupReader,
    schema: &Schema,
    plan: &Plan,
    task: &Task,
    ks: Range<usize>,
    row0: usize,
    out: &Out,
) -> std::result::Result<(), (usize, Stop)> {
    let mut cursors = Vec::with_capacity(ks.len());
    for k in ks.clone() {
        let col = plan.features[k];
        let mut c = Cursor::open(rg, col, schema.convs[col]).map_err(|s| (col, s))?;
        c.skip(task.rows.start).map_err(|s| (col, s))?;
        cursors.push((col, c));
    }
    let width = ks.len();
    // Column-major: BATCH values of each feature, then transposed into the rows.
    let mut batch = vec![0.0f32; BATCH * width];
    let mut row = [0.0f32; MAX_RUN];
    let mut done = task.rows.start;
    while done < task.rows.end {
        let n = BATCH.min(task.rows.end - done);
        for (c, (col, cursor)) in cursors.iter_mut().enumerate() {
            let col = *col;
            let dst = &mut batch[c * BATCH..c * BATCH + n];
            if !cursor.fill(dst, col, done).map_err(|s| (col, s))? {
                cursor
                    .read(n, &mut |i, v| {
                        dst[i] = number(v, col).map_err(|f| Stop::Fault(done + i, f))?;
                        Ok(())
                    })
                    .map_err(|s| (col, s))?;
            }
        }
        for i in 0..n {
            for (j, x) in row[..width].iter_mut().enumerate() {
                *x = batch[j * BATCH + i];
            }
            let at = (row0 + done + i) * out.nf + ks.start;
            // SAFETY: this task is the only one writing features `ks` of these rows.
            unsafe { out.features.write_run(at, &row[..width]) };
        }
        done += n;
    }
    Ok(())
}

/// The target of the task's rows: class labels interned, or values.
fn read_target(
    rg: &dyn RowGroupReader,
    schema: &Schema,
    plan: &Plan,
    task: &Task,
    row0: usize,
    out: &Out,
    interner: &mut Interner,
) -> std::result::Result<(), (usize, Stop)> {
    let col = plan.target;
    let classes = plan.task == SyntheticTask::Classification;
    let mut cursor = Cursor::open(rg, col, schema.convs[col]).map_err(|s| (col, s))?;
    cursor.skip(task.rows.start).map_err(|s| (col, s))?;
    let start = task.rows.start;
    cursor
        .read(task.rows.len(), &mut |i, v| {
            let at = row0 + start + i;
            if classes {
                let id = label(interner, v, col, &plan.target_name).map_err(|s| s.at(start + i))?;
                // SAFETY: this task is the only one writing the labels of these rows.
                unsafe { out.ids.write(at, id) };
            } else {
                let x = number(v, col).map_err(|f| Stop::Fault(start + i, f))?;
                // SAFETY: as for the labels.
                unsafe { out.targets.write(at, x) };
            }
            Ok(())
        })
        .map_err(|s| (col, s))
}
