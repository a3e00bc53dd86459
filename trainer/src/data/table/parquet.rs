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
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use parquet::basic::{ConvertedType, LogicalType, Type as Physical};
use parquet::column::reader::{ColumnReader, ColumnReaderImpl};
use parquet::data_type::{ByteArray, DataType};
use parquet::file::reader::{FileReader, RowGroupReader};
use parquet::file::serialized_reader::SerializedFileReader;
use parquet::schema::types::ColumnDescriptor;

use super::cells::{Fault, explain};
use super::columns::{Column, ColumnKind, Part, Plan, Target};
use super::csv::too_big;
use super::labels::{Interner, Labels, Piece};
use crate::spec::SyntheticTask;
use crate::{Error, Result};

/// Rows decoded at a time per column reader.
const BATCH: usize = 8192;

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
}

/// One column's values as they come out of a column reader.
enum Value<'a> {
    Null,
    Num(f64),
    /// An integer (Int or unsigned beyond i64 as text).
    Int(i64),
    Text(&'a [u8]),
}

/// Why a task stopped: a row's fault, or a message of its own.
enum Stop {
    Fault(usize, Fault),
    Msg(usize, String),
    Parquet(String),
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
    let mut features = Vec::new();
    let mut ids: Vec<u32> = Vec::new();
    let mut targets: Vec<f32> = Vec::new();
    let classes = plan.task == SyntheticTask::Classification;
    let fits = features.try_reserve_exact(values).is_ok()
        && if classes {
            ids.try_reserve_exact(rows).is_ok()
        } else {
            targets.try_reserve_exact(rows).is_ok()
        };
    if !fits {
        return Err(too_big(path, rows, nf));
    }
    features.resize(values, 0.0f32);
    ids.resize(if classes { rows } else { 0 }, 0);
    targets.resize(if classes { 0 } else { rows }, 0.0);
    let starts: Vec<usize> = schema
        .groups
        .iter()
        .scan(0, |s, &n| {
            let at = *s;
            *s += n;
            Some(at)
        })
        .collect();
    // Tasks: (row group, Some(feature k) or None for the target).
    let tasks: Vec<(usize, Option<usize>)> = (0..schema.groups.len())
        .flat_map(|g| (0..nf).map(move |k| (g, Some(k))).chain([(g, None)]))
        .collect();
    let next = AtomicUsize::new(0);
    let (out_f, out_i, out_t) = (
        Shared::new(&mut features),
        Shared::new(&mut ids),
        Shared::new(&mut targets),
    );
    let pieces: Mutex<Vec<Piece>> = Mutex::new(Vec::new());
    let stops: Mutex<Vec<(usize, usize, Stop)>> = Mutex::new(Vec::new());
    let workers = threads.clamp(1, tasks.len());
    let opened: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    let reader = open_reader(path, open)?;
                    loop {
                        let t = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&(g, feature)) = tasks.get(t) else {
                            return Ok(());
                        };
                        let rg = reader
                            .get_row_group(g)
                            .map_err(|e| Error::data(path, format!("row group {g}: {e}")))?;
                        let col = match feature {
                            Some(k) => plan.features[k],
                            None => plan.target,
                        };
                        let (row0, n) = (starts[g], schema.groups[g]);
                        let conv = schema.convs[col];
                        let result = match feature {
                            Some(k) => read_column(&*rg, col, conv, n, &mut |r, v| {
                                let x = number(v, col).map_err(|f| Stop::Fault(r, f))?;
                                // SAFETY: this task is the only one writing feature k of the
                                // rows of row group g.
                                unsafe { out_f.write((row0 + r) * nf + k, x) };
                                Ok(())
                            }),
                            None if classes => {
                                let mut interner = Interner::default();
                                let r = read_column(&*rg, col, conv, n, &mut |r, v| {
                                    let id = label(&mut interner, v, col, &plan.target_name)
                                        .map_err(|s| s.at(r))?;
                                    // SAFETY: this task is the only one writing the labels of
                                    // the rows of row group g.
                                    unsafe { out_i.write(row0 + r, id) };
                                    Ok(())
                                });
                                pieces.lock().unwrap().push(interner.piece(row0..row0 + n));
                                r
                            }
                            None => read_column(&*rg, col, conv, n, &mut |r, v| {
                                let x = number(v, col).map_err(|f| Stop::Fault(r, f))?;
                                // SAFETY: as for the labels.
                                unsafe { out_t.write(row0 + r, x) };
                                Ok(())
                            }),
                        };
                        if let Err(stop) = result {
                            let row = match &stop {
                                Stop::Fault(r, _) | Stop::Msg(r, _) => row0 + r,
                                Stop::Parquet(_) => row0,
                            };
                            stops.lock().unwrap().push((row, col, stop));
                        }
                    }
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

impl Stop {
    fn at(self, r: usize) -> Stop {
        match self {
            Stop::Msg(_, m) => Stop::Msg(r, m),
            Stop::Fault(_, f) => Stop::Fault(r, f),
            other => other,
        }
    }
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

/// Reads the `rows` rows of column `col` of a row group, handing each row's value to `each`.
fn read_column(
    rg: &dyn RowGroupReader,
    col: usize,
    conv: Conv,
    rows: usize,
    each: &mut dyn FnMut(usize, Value) -> std::result::Result<(), Stop>,
) -> std::result::Result<(), Stop> {
    let reader = rg
        .get_column_reader(col)
        .map_err(|e| Stop::Parquet(e.to_string()))?;
    let max_def = rg.metadata().column(col).column_descr().max_def_level();
    let text_of_u64 = |v: u64| i64::try_from(v).map_or_else(|_| Value::Num(v as f64), Value::Int);
    match (reader, conv) {
        (ColumnReader::BoolColumnReader(r), Conv::Bool) => typed(r, max_def, rows, &mut |r, v| {
            each(r, v.map_or(Value::Null, |&b| Value::Int(b as i64)))
        }),
        (ColumnReader::Int32ColumnReader(r), Conv::I32) => typed(r, max_def, rows, &mut |r, v| {
            each(r, v.map_or(Value::Null, |&x| Value::Int(x as i64)))
        }),
        (ColumnReader::Int32ColumnReader(r), Conv::U32) => typed(r, max_def, rows, &mut |r, v| {
            each(r, v.map_or(Value::Null, |&x| Value::Int(x as u32 as i64)))
        }),
        (ColumnReader::Int64ColumnReader(r), Conv::I64) => typed(r, max_def, rows, &mut |r, v| {
            each(r, v.map_or(Value::Null, |&x| Value::Int(x)))
        }),
        (ColumnReader::Int64ColumnReader(r), Conv::U64) => typed(r, max_def, rows, &mut |r, v| {
            each(r, v.map_or(Value::Null, |&x| text_of_u64(x as u64)))
        }),
        (ColumnReader::FloatColumnReader(r), Conv::F32) => typed(r, max_def, rows, &mut |r, v| {
            each(r, v.map_or(Value::Null, |&x| Value::Num(x as f64)))
        }),
        (ColumnReader::DoubleColumnReader(r), Conv::F64) => typed(r, max_def, rows, &mut |r, v| {
            each(r, v.map_or(Value::Null, |&x| Value::Num(x)))
        }),
        (ColumnReader::ByteArrayColumnReader(r), Conv::Text) => {
            typed(r, max_def, rows, &mut |r, v| {
                each(
                    r,
                    match v {
                        None => Value::Null,
                        // A value the decoder left unset is damage, not a panic.
                        Some(b) if *b == ByteArray::new() => {
                            return Err(Stop::Parquet(format!("row {r} has no bytes")));
                        }
                        Some(b) => Value::Text(b.data()),
                    },
                )
            })
        }
        _ => Err(Stop::Parquet("its reader does not match its type".into())),
    }
}

/// Reads `rows` records of a required or optional column: `each(row, None)` for a null.
fn typed<T: DataType>(
    mut reader: ColumnReaderImpl<T>,
    max_def: i16,
    rows: usize,
    each: &mut dyn FnMut(usize, Option<&T::T>) -> std::result::Result<(), Stop>,
) -> std::result::Result<(), Stop> {
    let nullable = max_def > 0;
    let mut values: Vec<T::T> = Vec::with_capacity(BATCH);
    let mut defs: Vec<i16> = Vec::with_capacity(BATCH);
    let mut done = 0;
    while done < rows {
        values.clear();
        defs.clear();
        let want = BATCH.min(rows - done);
        let (records, got, levels) = reader
            .read_records(want, nullable.then_some(&mut defs), None, &mut values)
            .map_err(|e| Stop::Parquet(e.to_string()))?;
        if records == 0 {
            return Err(Stop::Parquet(format!(
                "it has {done} values where the row group has {rows} rows"
            )));
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
