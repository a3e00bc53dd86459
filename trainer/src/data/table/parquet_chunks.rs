//! A Parquet column chunk being read: its typed low-level reader (`parquet::column::reader`),
//! how its values convert ([`Conv`]), and the values as numbers or label ids. The tasks of
//! `parquet` read every column through a [`Cursor`].

use parquet::column::reader::{ColumnReader, ColumnReaderImpl};
use parquet::data_type::{
    BoolType, ByteArray, ByteArrayType, DataType, DoubleType, FloatType, Int32Type, Int64Type,
};
use parquet::file::reader::RowGroupReader;

use super::cells::Fault;
use super::labels::Interner;

/// How a column's values become numbers or labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conv {
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

/// One column's values as they come out of a column reader.
pub enum Value<'a> {
    Null,
    Num(f64),
    Int(i64),
    Text(&'a [u8]),
}

/// What receives a column's rows one at a time: the row (from 0) and its value.
pub type Each<'a> = dyn for<'v> FnMut(usize, Value<'v>) -> Result<(), Stop> + 'a;

/// What receives a typed column's rows one at a time: the row (from 0), its value or None.
type EachRaw<'a, T> = dyn for<'v> FnMut(usize, Option<&'v T>) -> Result<(), Stop> + 'a;

/// Why a task stopped: a row's fault, or a message of its own, at a row of its row group.
pub enum Stop {
    Fault(usize, Fault),
    Msg(usize, String),
    Parquet(String),
}

impl Stop {
    pub fn at(self, r: usize) -> Stop {
        match self {
            Stop::Msg(_, m) => Stop::Msg(r, m),
            Stop::Fault(_, f) => Stop::Fault(r, f),
            other => other,
        }
    }
}

/// Rows decoded at a time per column.
pub const BATCH: usize = 2048;

/// A value as a finite `f32` (through `f64`, as a CSV cell is parsed).
pub fn number(v: Value, column: usize) -> Result<f32, Fault> {
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
pub fn label(interner: &mut Interner, v: Value, column: usize, name: &str) -> Result<u32, Stop> {
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
pub struct Cursor {
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
    pub fn open(rg: &dyn RowGroupReader, col: usize, conv: Conv) -> Result<Cursor, Stop> {
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
    pub fn skip(&mut self, rows: usize) -> Result<(), Stop> {
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

    /// Reads the next `dst.len()` rows of a numeric column straight into `dst` as `f32` (rows
    /// from `first_row` of the row group, for messages; a null is refused); false, reading
    /// nothing, for a text column.
    pub fn fill(&mut self, dst: &mut [f32], column: usize, first_row: usize) -> Result<bool, Stop> {
        let at = (column, first_row);
        let levels = (self.max_def, &mut self.defs);
        match (&mut self.reader, self.conv) {
            (Typed::F64(r, v), _) => fill(r, v, levels, dst, at, |&x| x),
            (Typed::F32(r, v), _) => fill(r, v, levels, dst, at, |&x| x as f64),
            (Typed::I32(r, v), Conv::U32) => fill(r, v, levels, dst, at, |&x| x as u32 as f64),
            (Typed::I32(r, v), _) => fill(r, v, levels, dst, at, |&x| x as f64),
            (Typed::I64(r, v), Conv::U64) => fill(r, v, levels, dst, at, |&x| x as u64 as f64),
            (Typed::I64(r, v), _) => fill(r, v, levels, dst, at, |&x| x as f64),
            (Typed::Bool(r, v), _) => fill(r, v, levels, dst, at, |&b| b as u8 as f64),
            (Typed::Bytes(..), _) => return Ok(false),
        }?;
        Ok(true)
    }

    /// Reads the next `n` rows, handing each (its index from 0) to `each`.
    pub fn read(&mut self, n: usize, each: &mut Each) -> Result<(), Stop> {
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

/// Reads `dst.len()` records of a column into `dst`, converted by `conv` then to
/// `f32`; a null or a value that is not a finite `f32` stops it (`at`: the column, and the row
/// of the row group `dst[0]` is).
fn fill<T: DataType>(
    reader: &mut ColumnReaderImpl<T>,
    values: &mut Vec<T::T>,
    (max_def, defs): (i16, &mut Vec<i16>),
    dst: &mut [f32],
    (column, first_row): (usize, usize),
    conv: impl Fn(&T::T) -> f64,
) -> Result<(), Stop> {
    let nullable = max_def > 0;
    let mut done = 0;
    while done < dst.len() {
        values.clear();
        defs.clear();
        let (records, got, levels) = reader
            .read_records(
                dst.len() - done,
                nullable.then_some(&mut *defs),
                None,
                values,
            )
            .map_err(|e| Stop::Parquet(e.to_string()))?;
        if records == 0 || values.len() < got || got > records {
            return Err(Stop::Parquet(
                "it has fewer values than the row group has rows".into(),
            ));
        }
        if got != records {
            // A nullable column with a null among these rows: the first one is named.
            if !nullable || levels != records || defs.len() < levels {
                return Err(Stop::Parquet("its levels do not match its values".into()));
            }
            let i = defs[..levels]
                .iter()
                .position(|&d| d != max_def)
                .unwrap_or(0);
            return Err(Stop::Fault(first_row + done + i, Fault::Null { column }));
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
    each: &mut EachRaw<T::T>,
) -> Result<(), Stop> {
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
