//! CSV files: the header and the columns' kinds, then the rows, by the parallel line reader
//! (`csv_lines`) when the file has no quotes, else sequentially by the `csv` crate.
//!
//! The first record is the header (a UTF-8 byte-order mark is dropped); the separator is a
//! comma; quoted cells may hold commas, quotes (`""`) and line breaks; blank lines are skipped;
//! line ends are `\n` or `\r\n`. A column is numeric when its first row's cell is a number or
//! empty.

use std::path::Path;

use super::cells::{Fault, RowParser, Slot, explain, looks_numeric};
use super::columns::{Column, ColumnKind, Part, Plan, Target, shown};
use super::csv_lines::{Lines, read_lines};
use super::labels::{Interner, Labels};
use super::source::{Source, Stream, line_at};
use crate::spec::SyntheticTask;
use crate::{Error, Result};

/// A CSV file's columns and where its data starts.
pub struct Header {
    pub columns: Vec<Column>,
    /// The byte offset of the record after the header.
    pub data_start: usize,
}

fn reader(src: &dyn Source) -> ::csv::Reader<Stream<'_>> {
    ::csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(Stream::new(src))
}

fn csv_error(path: &Path, e: ::csv::Error) -> Error {
    match e.into_kind() {
        ::csv::ErrorKind::Io(e) => Error::io(path, e),
        other => Error::data(path, format!("is not readable as CSV: {other:?}")),
    }
}

/// Reads the header and the first row (the columns' kinds) of the CSV file `path`.
pub fn header(path: &Path, src: &dyn Source) -> Result<Header> {
    let mut rdr = reader(src);
    let mut head = ::csv::ByteRecord::new();
    if !rdr
        .read_byte_record(&mut head)
        .map_err(|e| csv_error(path, e))?
    {
        return Err(Error::data(
            path,
            "is empty: a CSV table needs a header row naming the columns, then one row per sample",
        ));
    }
    let data_start = rdr.position().byte() as usize;
    let mut names = Vec::with_capacity(head.len());
    for (j, cell) in head.iter().enumerate() {
        let cell = if j == 0 {
            cell.strip_prefix(b"\xef\xbb\xbf").unwrap_or(cell)
        } else {
            cell
        };
        let name = std::str::from_utf8(cell).map_err(|_| {
            Error::data(
                path,
                format!(
                    "line 1: the name of column {} ({}) is not UTF-8: save the file as UTF-8",
                    j + 1,
                    shown(cell)
                ),
            )
        })?;
        names.push(name.to_string());
    }
    let mut first = ::csv::ByteRecord::new();
    if !rdr
        .read_byte_record(&mut first)
        .map_err(|e| csv_error(path, e))?
    {
        return Err(Error::data(
            path,
            "has a header but no rows: a CSV table needs one row per sample after the header",
        ));
    }
    let line = match first.position() {
        Some(p) => record_line(src, p.byte() as usize),
        None => 2,
    };
    if first.len() != names.len() {
        return Err(Error::data(
            path,
            format!(
                "line {line} has {} fields but the header has {} columns: every row needs one \
                 value per column (quote a value that holds a comma)",
                first.len(),
                names.len()
            ),
        ));
    }
    let columns = names
        .into_iter()
        .zip(first.iter())
        .map(|(name, cell)| Column {
            name,
            kind: if looks_numeric(cell) {
                ColumnKind::Number
            } else {
                ColumnKind::Text(format!("line {line} holds {}", shown(cell)))
            },
        })
        .collect();
    Ok(Header {
        columns,
        data_start,
    })
}

/// Reads the rows of the CSV file `path` as `plan` says, on up to `threads` threads.
pub fn read(
    path: &Path,
    src: &dyn Source,
    header: &Header,
    plan: &Plan,
    threads: usize,
) -> Result<Part> {
    let parser = RowParser::new(plan.roles(header.columns.len()), plan.task);
    let nf = plan.features.len();
    let (rows, features, target) = match read_lines(src, header.data_start, &parser, nf, threads) {
        Lines::Read {
            rows,
            features,
            target,
        } => (rows, features, target),
        Lines::Fault { offset, fault } => {
            let line = line_at(src, offset);
            return Err(bad_row(path, header, plan, line, &fault));
        }
        Lines::TooBig { rows } => return Err(too_big(path, rows, nf)),
        Lines::Fallback => read_sequential(path, src, header, plan, &parser)?,
    };
    Ok(Part {
        file: path.to_path_buf(),
        rows,
        features,
        target,
    })
}

fn bad_row(path: &Path, header: &Header, plan: &Plan, line: u64, fault: &Fault) -> Error {
    Error::data(
        path,
        explain(fault, &header.columns, plan, &format!("line {line}")),
    )
}

/// The error of features that do not fit in memory.
pub fn too_big(path: &Path, rows: usize, nf: usize) -> Error {
    Error::data(
        path,
        format!(
            "{rows} rows × {nf} features as f32 ({} MB) do not fit in memory: use fewer rows or \
             data.features",
            (rows as u128 * nf as u128 * 4) >> 20
        ),
    )
}

/// The rows read by the `csv` crate, one at a time (a file with quotes).
fn read_sequential(
    path: &Path,
    src: &dyn Source,
    header: &Header,
    plan: &Plan,
    parser: &RowParser,
) -> Result<(usize, Vec<f32>, Target)> {
    let nf = plan.features.len();
    let mut rdr = reader(src);
    let mut record = ::csv::ByteRecord::new();
    // The header.
    rdr.read_byte_record(&mut record)
        .map_err(|e| csv_error(path, e))?;
    let mut features = Vec::new();
    let mut row = vec![0.0f32; nf];
    let mut interner = Interner::default();
    let (mut ids, mut values) = (Vec::new(), Vec::new());
    while rdr
        .read_byte_record(&mut record)
        .map_err(|e| csv_error(path, e))?
    {
        let (mut id, mut value) = (0u32, 0.0f32);
        let slot = match plan.task {
            SyntheticTask::Classification => Slot::Class(&mut id, &mut interner),
            SyntheticTask::Regression => Slot::Value(&mut value),
        };
        if let Err(fault) = parser.record(&record, &mut row, slot) {
            let line = record_line(src, record.position().map_or(0, |p| p.byte() as usize));
            return Err(bad_row(path, header, plan, line, &fault));
        }
        if features.try_reserve(nf).is_err() {
            return Err(too_big(path, ids.len().max(values.len()), nf));
        }
        features.extend_from_slice(&row);
        match plan.task {
            SyntheticTask::Classification => ids.push(id),
            SyntheticTask::Regression => values.push(value),
        }
    }
    features.shrink_to_fit();
    let rows = ids.len().max(values.len());
    let target = match plan.task {
        SyntheticTask::Classification => Target::Labels(Labels {
            ids,
            pieces: vec![interner.piece(0..rows)],
        }),
        SyntheticTask::Regression => Target::Values(values),
    };
    Ok((rows, features, target))
}

/// The 1-based line that data row `row` (0 = the first after the header) starts on.
pub fn line_of_row(path: &Path, src: &dyn Source, row: usize) -> Result<u64> {
    let mut rdr = reader(src);
    let mut record = ::csv::ByteRecord::new();
    for _ in 0..=row + 1 {
        if !rdr
            .read_byte_record(&mut record)
            .map_err(|e| csv_error(path, e))?
        {
            break;
        }
    }
    Ok(record_line(
        src,
        record.position().map_or(0, |p| p.byte() as usize),
    ))
}

/// The line of the record the `csv` crate says starts at byte `at`: its offset is where it
/// started looking, before the blank lines it skipped.
fn record_line(src: &dyn Source, at: usize) -> u64 {
    let bytes = src.bytes();
    let at = at.min(bytes.len());
    let skip = bytes[at..]
        .iter()
        .position(|&b| b != b'\n' && b != b'\r')
        .unwrap_or(bytes.len() - at);
    line_at(src, at + skip)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::table::columns::{Want, plan};
    use std::path::PathBuf;

    fn read_text(text: &str, target: &str, task: SyntheticTask) -> Result<(Plan, Part)> {
        let path = PathBuf::from("t.csv");
        let src = text.as_bytes();
        let h = header(&path, &src)?;
        let want = Want {
            target: target.into(),
            features: None,
            task,
        };
        let p = plan(&path, &h.columns, &want)?;
        let part = read(&path, &src, &h, &p, 4)?;
        Ok((p, part))
    }

    #[test]
    fn quoted_files_read_like_plain_ones() {
        let plain = "a,label,b\n1,x,2\n\n3,y,4\n";
        let quoted = "\u{feff}\"a\",label,b\r\n\"1\",\"x\",2\r\n3,y,\"4\"\r\n";
        let (p1, a) = read_text(plain, "label", SyntheticTask::Classification).unwrap();
        let (p2, b) = read_text(quoted, "label", SyntheticTask::Classification).unwrap();
        assert_eq!(p1.feature_names, vec!["a", "b"]);
        assert_eq!(p1, p2);
        assert_eq!((a.rows, &a.features), (2, &vec![1.0, 2.0, 3.0, 4.0]));
        assert_eq!((&a.features, a.rows), (&b.features, b.rows));
        let names = |p: &Part| match &p.target {
            Target::Labels(l) => l
                .pieces
                .iter()
                .flat_map(|p| p.names.clone())
                .collect::<Vec<_>>(),
            _ => panic!(),
        };
        assert_eq!(names(&a), names(&b));
    }

    #[test]
    fn kinds_come_from_the_first_row() {
        let h = header(Path::new("t.csv"), &&b"x,name,y,z\n1.5,bob,,NaN\n"[..]).unwrap();
        let kinds: Vec<_> = h.columns.iter().map(|c| c.kind.clone()).collect();
        assert_eq!(
            kinds,
            vec![
                ColumnKind::Number,
                ColumnKind::Text("line 2 holds \"bob\"".into()),
                ColumnKind::Number,
                ColumnKind::Number
            ]
        );
        assert_eq!(h.data_start, 11);
    }

    #[test]
    fn bad_files_name_the_line() {
        let e = |text: &str| {
            read_text(text, "t", SyntheticTask::Classification)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            e(""),
            "t.csv: is empty: a CSV table needs a header row naming the columns, then one row per \
             sample"
        );
        assert!(e("a,t\n").contains("has a header but no rows"));
        assert_eq!(
            e("a,t\n1,x\n\n2,y,3\n"),
            "t.csv: line 4 has 3 fields but the header has 2 columns: every row needs one value \
             per column (quote a value that holds a comma)"
        );
        assert!(e("a,t\n1,x\n2,y,3\n\"q\",z\n").starts_with("t.csv: line 3 has 3 fields"));
        assert_eq!(
            e("a,t\n1,x\nfoo,y\n"),
            "t.csv: line 3, column \"a\": \"foo\" is not a number; fix the value, or list \
             data.features without the column (it is a feature because its first row holds a \
             number)"
        );
        assert!(e("a,t\n1,x\n,y\n").starts_with(
            "t.csv: line 3, column \"a\" is empty (a missing value): fill it in or drop the row"
        ));
        assert!(e("a,t\n1,x\ninf,y\n").starts_with("t.csv: line 3, column \"a\" holds \"inf\""));
        assert!(e("a,t\n1,x\n2,\n").starts_with("t.csv: line 3: the target column \"t\" is empty"));
        let r = read_text("a,t\n1,2\n2,x\n", "t", SyntheticTask::Regression).unwrap_err();
        assert!(
            r.to_string()
                .starts_with("t.csv: line 3: the target column \"t\" holds \"x\", not a number")
        );
    }

    #[test]
    fn rows_are_found_by_line() {
        let text: &[u8] = b"a,t\n1,x\n\n\"2\n\",y\n3,z\n";
        assert_eq!(line_of_row(Path::new("t"), &text, 0).unwrap(), 2);
        assert_eq!(line_of_row(Path::new("t"), &text, 1).unwrap(), 4);
        assert_eq!(line_of_row(Path::new("t"), &text, 2).unwrap(), 6);
    }
}
