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
use parquet::column::reader::{ColumnReader, ColumnReaderImpl};
use parquet::data_type::{
    BoolType, ByteArray, ByteArrayType, DataType, DoubleType, FloatType, Int32Type, Int64Type,
};
use parquet::file::reader::{FileReader, RowGroupReader};
use parquet::file::serialized_reader::SerializedFileReader;
use parquet::schema::types::ColumnDescriptor;

use super::cells::{Fault, explain};
use super::columns::{Column, ColumnKind, Part, Plan, Target, zeroed};
use super::csv::too_big;
use super::labels::{Interner, Labels, Piece};
use crate::spec::SyntheticTask;
use crate::{Error, Result};

/// Opens the file anew (every thread reads through its own file description).
pub type Opener<'a> = &'a (dyn Fn() -> io::Result<File> + Sync);

/// How a column's values become numbers or labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Conv {
    Bool,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
    Text,
    None,
}

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

/// The columns of the Parquet file `path`.
pub fn schema(path: &Path, open: Opener) -> Result<Schema> {
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
        Physical::INT32 if signed.is_some() => {
            let conv = if signed == Some(true) {
                Conv::I32
            } else {
                Conv::U32
            };
            (ColumnKind::Number, conv)
        }
        Physical::INT64 if signed.is_some() => {
            let conv = if signed == Some(true) {
                Conv::I64
            } else {
                Conv::U64
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

/// One column's values as they come out of a column reader.
enum Value<'a> {
    Null,
    Num(f64),
    Int(i64),
    Text(&'a [u8]),
}

/// Why a task stopped: a row's fault, or a message of its own, at a row of its row group.
enum Stop {
    Fault(usize, Fault),
    Msg(usize, String),
    Parquet(String),
}

impl Stop {
    fn at(self, r: usize) -> Stop {
        match self {
            Stop::Msg(_, m) => Stop::Msg(r, m),
            Stop::Fault(_, f) => Stop::Fault(r, f),
            other => other,
        }
    }
}

/// What a task reads: some rows of a row group, of a run of features or of the target.
struct Task {
    group: usize,
    rows: Range<usize>,
    /// Features `k0..k1` (plan order), or None for the target.
    features: Option<Range<usize>>,
}

/// Features per task: up to 16 (a 64-byte run of each output row), fewer when that leaves
/// threads idle.
const MAX_RUN: usize = 16;
/// The fewest rows a band of a row group is cut to.
const MIN_BAND: usize = 1 << 16;

/// The tasks of reading `groups` (rows per row group) for `nf` features on `threads` threads:
/// runs of at most [`MAX_RUN`] features of even length, as many as keep the threads busy, and
/// row groups cut into bands when there are still more threads than tasks.
fn tasks(groups: &[usize], nf: usize, threads: usize) -> Vec<Task> {
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
    let nf = plan.features.len();
    let rows: usize = schema.groups.iter().sum();
    let values = rows.checked_mul(nf).unwrap_or(usize::MAX);
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
        handles.into_iter().map(|h| h.join().unwrap()).collect()
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

/// Rows decoded at a time per column.
const BATCH: usize = 2048;

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

/// A value as a finite `f32` (through `f64`, as a CSV cell is parsed).
fn number(v: Value, column: usize) -> std::result::Result<f32, Fault> {
    let x = match v {
        Value::Null => return Err(Fault::Null { column }),
        Value::Num(x) => x,
        Value::Int(i) => i as f64,
        // The plan lets no text column be a number.
        Value::Text(t) => {
            return Err(Fault::NotNumber {
                column,
                value: t.to_vec(),
            });
        }
    };
    let f = x as f32;
    if !f.is_finite() {
        return Err(Fault::NotFinite {
            column,
            value: x.to_string().into_bytes(),
        });
    }
    Ok(f)
}

/// A value as a label id.
fn label(
    interner: &mut Interner,
    v: Value,
    column: usize,
    name: &str,
) -> std::result::Result<u32, Stop> {
    match v {
        Value::Null => Err(Stop::Fault(0, Fault::Null { column })),
        Value::Int(i) => Ok(interner.int(i)),
        Value::Text(t) => interner
            .text(t)
            .ok_or(Stop::Fault(0, Fault::NotUtf8 { column })),
        Value::Num(x) if x.fract() == 0.0 && x.abs() < 9.0e15 => Ok(interner.int(x as i64)),
        Value::Num(x) => Err(Stop::Msg(
            0,
            format!(
                "the target column {name:?} holds {x}: class labels are integers or strings; \
                 for values use data.task = \"regression\""
            ),
        )),
    }
}

/// A column chunk being read: its typed reader and buffers.
struct Cursor {
    reader: Typed,
    conv: Conv,
    max_def: i16,
    defs: Vec<i16>,
}

/// A typed column reader and its value buffer.
enum Typed {
    Bool(ColumnReaderImpl<BoolType>, Vec<bool>),
    I32(ColumnReaderImpl<Int32Type>, Vec<i32>),
    I64(ColumnReaderImpl<Int64Type>, Vec<i64>),
    F32(ColumnReaderImpl<FloatType>, Vec<f32>),
    F64(ColumnReaderImpl<DoubleType>, Vec<f64>),
    Bytes(ColumnReaderImpl<ByteArrayType>, Vec<ByteArray>),
}

impl Cursor {
    fn open(rg: &dyn RowGroupReader, col: usize, conv: Conv) -> std::result::Result<Cursor, Stop> {
        let damaged = |e: ::parquet::errors::ParquetError| Stop::Parquet(e.to_string());
        let reader = match (rg.get_column_reader(col).map_err(damaged)?, conv) {
            (ColumnReader::BoolColumnReader(r), Conv::Bool) => Typed::Bool(r, Vec::new()),
            (ColumnReader::Int32ColumnReader(r), Conv::I32 | Conv::U32) => {
                Typed::I32(r, Vec::new())
            }
            (ColumnReader::Int64ColumnReader(r), Conv::I64 | Conv::U64) => {
                Typed::I64(r, Vec::new())
            }
            (ColumnReader::FloatColumnReader(r), Conv::F32) => Typed::F32(r, Vec::new()),
            (ColumnReader::DoubleColumnReader(r), Conv::F64) => Typed::F64(r, Vec::new()),
            (ColumnReader::ByteArrayColumnReader(r), Conv::Text) => Typed::Bytes(r, Vec::new()),
            _ => return Err(Stop::Parquet("its reader does not match its type".into())),
        };
        let max_def = rg.metadata().column(col).column_descr().max_def_level();
        Ok(Cursor {
            reader,
            conv,
            max_def,
            defs: Vec::new(),
        })
    }

    /// Skips the first `rows` rows.
    fn skip(&mut self, rows: usize) -> std::result::Result<(), Stop> {
        if rows == 0 {
            return Ok(());
        }
        let skipped = match &mut self.reader {
            Typed::Bool(r, _) => r.skip_records(rows),
            Typed::I32(r, _) => r.skip_records(rows),
            Typed::I64(r, _) => r.skip_records(rows),
            Typed::F32(r, _) => r.skip_records(rows),
            Typed::F64(r, _) => r.skip_records(rows),
            Typed::Bytes(r, _) => r.skip_records(rows),
        }
        .map_err(|e| Stop::Parquet(e.to_string()))?;
        if skipped != rows {
            return Err(Stop::Parquet(format!(
                "it has {skipped} values where the row group has more than {rows} rows"
            )));
        }
        Ok(())
    }

    /// Reads the next `dst.len()` rows of a column without nulls straight into `dst` as `f32`
    /// (rows from `first_row` of the row group, for messages); false, reading nothing, for a
    /// nullable or text column.
    fn fill(
        &mut self,
        dst: &mut [f32],
        column: usize,
        first_row: usize,
    ) -> std::result::Result<bool, Stop> {
        if self.max_def > 0 {
            return Ok(false);
        }
        let at = (column, first_row);
        match (&mut self.reader, self.conv) {
            (Typed::F64(r, v), _) => fill(r, v, dst, at, |&x| x),
            (Typed::F32(r, v), _) => fill(r, v, dst, at, |&x| x as f64),
            (Typed::I32(r, v), Conv::U32) => fill(r, v, dst, at, |&x| x as u32 as f64),
            (Typed::I32(r, v), _) => fill(r, v, dst, at, |&x| x as f64),
            (Typed::I64(r, v), Conv::U64) => fill(r, v, dst, at, |&x| x as u64 as f64),
            (Typed::I64(r, v), _) => fill(r, v, dst, at, |&x| x as f64),
            (Typed::Bool(r, v), _) => fill(r, v, dst, at, |&b| b as u8 as f64),
            (Typed::Bytes(..), _) => return Ok(false),
        }?;
        Ok(true)
    }

    /// Reads the next `n` rows, handing each (its index from 0) to `each`.
    fn read(
        &mut self,
        n: usize,
        each: &mut dyn FnMut(usize, Value) -> std::result::Result<(), Stop>,
    ) -> std::result::Result<(), Stop> {
        let (conv, max_def, defs) = (self.conv, self.max_def, &mut self.defs);
        match &mut self.reader {
            Typed::Bool(r, v) => typed(r, v, defs, max_def, n, &mut |i, x| {
                each(i, x.map_or(Value::Null, |&b| Value::Int(b as i64)))
            }),
            Typed::I32(r, v) => typed(r, v, defs, max_def, n, &mut |i, x| {
                each(
                    i,
                    match x {
                        None => Value::Null,
                        Some(&x) if conv == Conv::U32 => Value::Int(x as u32 as i64),
                        Some(&x) => Value::Int(x as i64),
                    },
                )
            }),
            Typed::I64(r, v) => typed(r, v, defs, max_def, n, &mut |i, x| {
                each(
                    i,
                    match x {
                        None => Value::Null,
                        Some(&x) if conv == Conv::U64 && x < 0 => Value::Num(x as u64 as f64),
                        Some(&x) => Value::Int(x),
                    },
                )
            }),
            Typed::F32(r, v) => typed(r, v, defs, max_def, n, &mut |i, x| {
                each(i, x.map_or(Value::Null, |&x| Value::Num(x as f64)))
            }),
            Typed::F64(r, v) => typed(r, v, defs, max_def, n, &mut |i, x| {
                each(i, x.map_or(Value::Null, |&x| Value::Num(x)))
            }),
            Typed::Bytes(r, v) => typed(r, v, defs, max_def, n, &mut |i, x| match x {
                None => each(i, Value::Null),
                // A value the decoder left unset is damage, not a panic.
                Some(b) if *b == ByteArray::new() => {
                    Err(Stop::Parquet(format!("value {i} has no bytes")))
                }
                Some(b) => each(i, Value::Text(b.data())),
            }),
        }
    }
}

/// Reads `dst.len()` records of a required column into `dst`, converted by `conv` then to
/// `f32`; a value that is not a finite `f32` stops it (`at`: the column, and the row of the
/// row group `dst[0]` is).
fn fill<T: DataType>(
    reader: &mut ColumnReaderImpl<T>,
    values: &mut Vec<T::T>,
    dst: &mut [f32],
    (column, first_row): (usize, usize),
    conv: impl Fn(&T::T) -> f64,
) -> std::result::Result<(), Stop> {
    let mut done = 0;
    while done < dst.len() {
        values.clear();
        let (records, got, _) = reader
            .read_records(dst.len() - done, None, None, values)
            .map_err(|e| Stop::Parquet(e.to_string()))?;
        if records == 0 || got != records || values.len() < got {
            return Err(Stop::Parquet(
                "it has fewer values than the row group has rows".into(),
            ));
        }
        let out = &mut dst[done..done + got];
        for (d, v) in out.iter_mut().zip(&values[..got]) {
            *d = conv(v) as f32;
        }
        if let Some(i) = out.iter().position(|x| !x.is_finite()) {
            let x = conv(&values[i]);
            return Err(Stop::Fault(
                first_row + done + i,
                Fault::NotFinite {
                    column,
                    value: x.to_string().into_bytes(),
                },
            ));
        }
        done += got;
    }
    Ok(())
}

/// Reads `rows` records of a required or optional column: `each(row, None)` for a null.
fn typed<T: DataType>(
    reader: &mut ColumnReaderImpl<T>,
    values: &mut Vec<T::T>,
    defs: &mut Vec<i16>,
    max_def: i16,
    rows: usize,
    each: &mut dyn FnMut(usize, Option<&T::T>) -> std::result::Result<(), Stop>,
) -> std::result::Result<(), Stop> {
    let nullable = max_def > 0;
    let mut done = 0;
    while done < rows {
        values.clear();
        defs.clear();
        let want = BATCH.min(rows - done);
        let (records, got, levels) = reader
            .read_records(want, nullable.then_some(&mut *defs), None, values)
            .map_err(|e| Stop::Parquet(e.to_string()))?;
        if records == 0 {
            return Err(Stop::Parquet(
                "it has fewer values than the row group has rows".into(),
            ));
        }
        if nullable {
            if levels != records || defs.len() < levels || got > values.len() {
                return Err(Stop::Parquet("its levels do not match its values".into()));
            }
            let mut vi = 0;
            for (i, &d) in defs[..levels].iter().enumerate() {
                if d == max_def {
                    let Some(v) = values.get(vi) else {
                        return Err(Stop::Parquet("it has fewer values than levels".into()));
                    };
                    vi += 1;
                    each(done + i, Some(v))?;
                } else {
                    each(done + i, None)?;
                }
            }
        } else {
            if got != records || values.len() < got {
                return Err(Stop::Parquet("it has fewer values than rows".into()));
            }
            for (i, v) in values[..got].iter().enumerate() {
                each(done + i, Some(v))?;
            }
        }
        done += records;
    }
    Ok(())
}
