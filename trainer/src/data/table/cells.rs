//! A CSV row's cells to features and a target: numbers parsed from byte slices without
//! allocating, labels interned. Shared by the parallel and the sequential CSV readers; what
//! goes wrong is a [`Fault`] that the reader turns into a message with the line.

use super::columns::{Column, Plan, Role, shown};
use super::decimal;
use super::labels::Interner;
use crate::spec::SyntheticTask;

/// What is wrong with a row (the reader adds the file and line).
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// Not one field per column.
    Ragged { found: usize },
    /// A cell of a numeric column that is not a number.
    NotNumber { column: usize, value: Vec<u8> },
    /// An empty cell of a feature or target column.
    Empty { column: usize },
    /// A null (Parquet) in a feature or target column.
    Null { column: usize },
    /// NaN, an infinity, or a number beyond `f32`'s range.
    NotFinite { column: usize, value: Vec<u8> },
    /// A label that is not UTF-8.
    NotUtf8 { column: usize },
}

/// The message of `fault`, found `at` (`line 5`, `row 4`), for the file's `columns` read by
/// `plan` (the reader puts the file in front).
pub fn explain(fault: &Fault, columns: &[Column], plan: &Plan, at: &str) -> String {
    let name = |c: usize| &columns[c].name;
    let is_target = |c: usize| c == plan.target;
    let drop_it = if plan.defaulted {
        "list data.features without the column to leave it out"
    } else {
        "or leave the column out of data.features"
    };
    match fault {
        Fault::Ragged { found } => format!(
            "{at} has {found} fields but the header has {} columns: every row needs one value \
             per column (quote a value that holds a comma)",
            columns.len()
        ),
        Fault::NotNumber { column, value } if is_target(*column) => format!(
            "{at}: the target column {:?} holds {}, not a number: data.task = \"regression\" \
             needs a number in every row",
            name(*column),
            shown(value)
        ),
        Fault::NotNumber { column, value } => format!(
            "{at}, column {:?}: {} is not a number; fix the value, {}",
            name(*column),
            shown(value),
            if plan.defaulted {
                "or list data.features without the column (it is a feature because its first \
                 row holds a number)"
            } else {
                "or leave the column out of data.features"
            }
        ),
        Fault::Empty { column } | Fault::Null { column } if is_target(*column) => format!(
            "{at}: the target column {:?} is {}: every row needs a {}",
            name(*column),
            if matches!(fault, Fault::Null { .. }) {
                "null"
            } else {
                "empty"
            },
            if plan.task == SyntheticTask::Regression {
                "value"
            } else {
                "label"
            }
        ),
        Fault::Empty { column } | Fault::Null { column } => format!(
            "{at}, column {:?} is {} (a missing value): fill it in or drop the row; {drop_it}",
            name(*column),
            if matches!(fault, Fault::Null { .. }) {
                "null"
            } else {
                "empty"
            },
        ),
        Fault::NotFinite { column, value } => format!(
            "{at}, column {:?} holds {}: {} must be finite numbers (no NaN or infinity, within \
             ±3.4e38, f32's range); fix the value or drop the row",
            name(*column),
            shown(value),
            if is_target(*column) {
                "targets"
            } else {
                "features"
            }
        ),
        Fault::NotUtf8 { column } => format!(
            "{at}: the label in column {:?} is not UTF-8: save the file as UTF-8",
            name(*column)
        ),
    }
}

/// The offset of the first comma or line feed at or after `pos` (there is a line feed).
#[inline]
fn field_end(data: &[u8], pos: usize) -> usize {
    pos + data[pos..]
        .iter()
        .position(|&b| b == b',' || b == b'\n')
        .unwrap_or(data.len() - pos)
}

/// The offset of the first line feed in `line` (its length when none).
fn field_end_of_line(line: &[u8]) -> usize {
    line.iter().position(|&b| b == b'\n').unwrap_or(line.len())
}

/// The cell from `pos` to `end` (a comma or line feed), without a carriage return before a
/// line feed.
#[inline]
fn cell_of(data: &[u8], pos: usize, end: usize) -> &[u8] {
    let cell = &data[pos..end];
    if data.get(end) == Some(&b'\n') {
        cell.strip_suffix(b"\r").unwrap_or(cell)
    } else {
        cell
    }
}

/// A number cell (ASCII spaces around it allowed), as `f64` rounded to `f32` (so a CSV value
/// and the same double in Parquet give the same bits).
pub fn number(cell: &[u8], column: usize) -> Result<f32, Fault> {
    let t = cell.trim_ascii();
    if t.is_empty() {
        return Err(Fault::Empty { column });
    }
    let not = || Fault::NotNumber {
        column,
        value: cell.to_vec(),
    };
    let s = std::str::from_utf8(t).map_err(|_| not())?;
    let v: f64 = s.parse().map_err(|_| not())?;
    let f = v as f32;
    if !f.is_finite() {
        return Err(Fault::NotFinite {
            column,
            value: cell.to_vec(),
        });
    }
    Ok(f)
}

/// True when a first row's cell makes its column numeric: a number (finite or not) or empty.
pub fn looks_numeric(cell: &[u8]) -> bool {
    !matches!(number(cell, 0), Err(Fault::NotNumber { .. }))
}

/// Where a row's target goes.
pub enum Slot<'a> {
    Class(&'a mut u32, &'a mut Interner),
    Value(&'a mut f32),
}

/// Parses rows of a file whose columns have the given roles.
pub struct RowParser {
    roles: Vec<Role>,
    task: SyntheticTask,
}

impl RowParser {
    pub fn new(roles: Vec<Role>, task: SyntheticTask) -> RowParser {
        RowParser { roles, task }
    }

    pub fn task(&self) -> SyntheticTask {
        self.task
    }

    /// One cell of column `j`.
    #[inline]
    fn cell(&self, j: usize, cell: &[u8], feats: &mut [f32], slot: &mut Slot) -> Result<(), Fault> {
        match self.roles[j] {
            Role::Skip => Ok(()),
            Role::Feature(k) => {
                feats[k] = number(cell, j)?;
                Ok(())
            }
            Role::Target => match slot {
                Slot::Value(v) => {
                    **v = number(cell, j)?;
                    Ok(())
                }
                Slot::Class(id, interner) => {
                    if cell.is_empty() {
                        return Err(Fault::Empty { column: j });
                    }
                    **id = interner.text(cell).ok_or(Fault::NotUtf8 { column: j })?;
                    Ok(())
                }
            },
        }
    }

    /// The line starting at `data[start]` of a file without quotes or lone carriage returns:
    /// its comma-separated cells. `data` holds a line feed at or after the line's end; returns
    /// the offset after it. Numbers are read by [`decimal::prefix`] as the cells are split,
    /// falling back to [`number`] for anything else (spaces, `inf`, errors).
    #[inline]
    pub fn line_in(
        &self,
        data: &[u8],
        start: usize,
        feats: &mut [f32],
        mut slot: Slot,
    ) -> Result<usize, Fault> {
        let n = self.roles.len();
        let mut pos = start;
        for j in 0..n {
            let end = match self.roles[j] {
                Role::Feature(k) => {
                    let (v, used) = decimal::prefix(&data[pos..]);
                    let e = pos + used;
                    if used > 0 && matches!(data[e], b',' | b'\n' | b'\r') {
                        let f = v as f32;
                        if !f.is_finite() {
                            return Err(Fault::NotFinite {
                                column: j,
                                value: data[pos..e].to_vec(),
                            });
                        }
                        feats[k] = f;
                        e
                    } else {
                        let e = field_end(data, pos);
                        feats[k] = number(cell_of(data, pos, e), j)?;
                        e
                    }
                }
                _ => {
                    let e = field_end(data, pos);
                    self.cell(j, cell_of(data, pos, e), feats, &mut slot)?;
                    e
                }
            };
            match (data[end], j + 1 == n) {
                (b',', false) => pos = end + 1,
                (b'\r', true) => return Ok(end + 2),
                (b'\n', true) => return Ok(end + 1),
                _ => {
                    let line_end = start + field_end_of_line(&data[start..]);
                    let line = &data[start..line_end];
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    let found = 1 + line.iter().filter(|&&b| b == b',').count();
                    return Err(Fault::Ragged { found });
                }
            }
        }
        unreachable!("a table has at least one column")
    }

    /// A record the `csv` crate parsed (quotes removed).
    pub fn record(
        &self,
        record: &csv::ByteRecord,
        feats: &mut [f32],
        mut slot: Slot,
    ) -> Result<(), Fault> {
        if record.len() != self.roles.len() {
            return Err(Fault::Ragged {
                found: record.len(),
            });
        }
        for (j, cell) in record.iter().enumerate() {
            self.cell(j, cell, feats, &mut slot)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_parse_as_f64_then_f32() {
        assert_eq!(number(b"1.5", 0), Ok(1.5));
        assert_eq!(number(b" -2e3 ", 0), Ok(-2000.0));
        assert_eq!(number(b"7", 0), Ok(7.0));
        assert_eq!(number(b".25", 0), Ok(0.25));
        // Rounded once from the decimal's f64, as a double column converted to f32 is.
        assert_eq!(
            number(b"0.1000000000000000055511151231257827", 0),
            Ok(0.1f64 as f32)
        );
        assert_eq!(number(b"", 3), Err(Fault::Empty { column: 3 }));
        assert_eq!(number(b"  ", 3), Err(Fault::Empty { column: 3 }));
        assert_eq!(
            number(b"1,5", 1),
            Err(Fault::NotNumber {
                column: 1,
                value: b"1,5".to_vec()
            })
        );
        for bad in [&b"nan"[..], b"inf", b"-Infinity", b"1e39"] {
            assert_eq!(
                number(bad, 2),
                Err(Fault::NotFinite {
                    column: 2,
                    value: bad.to_vec()
                })
            );
        }
        assert!(looks_numeric(b"") && looks_numeric(b"NaN") && looks_numeric(b"3"));
        assert!(!looks_numeric(b"red") && !looks_numeric(b"NA"));
    }

    #[test]
    fn lines_fill_features_in_plan_order() {
        let p = RowParser::new(
            vec![Role::Feature(1), Role::Skip, Role::Target, Role::Feature(0)],
            SyntheticTask::Classification,
        );
        let mut f = [0.0; 2];
        let mut id = 9;
        let mut interner = Interner::default();
        let data = b"1.5,whatever,cat,-2\n0,x,dog,1\r\n";
        let next = p
            .line_in(data, 0, &mut f, Slot::Class(&mut id, &mut interner))
            .unwrap();
        assert_eq!(next, 20);
        assert_eq!((f, id), ([-2.0, 1.5], 0));
        let end = p
            .line_in(data, next, &mut f, Slot::Class(&mut id, &mut interner))
            .unwrap();
        assert_eq!(end, data.len());
        assert_eq!((f, id), ([1.0, 0.0], 1));
        let mut fault = |l: &[u8]| {
            p.line_in(l, 0, &mut f, Slot::Class(&mut id, &mut interner))
                .unwrap_err()
        };
        assert_eq!(fault(b"1,2,3\n"), Fault::Ragged { found: 3 });
        assert_eq!(fault(b"1,2,3\r\n"), Fault::Ragged { found: 3 });
        assert_eq!(fault(b"1,2,3,4,5,6\n"), Fault::Ragged { found: 6 });
        assert_eq!(fault(b"1,x,,4\n"), Fault::Empty { column: 2 });
        assert_eq!(
            fault(b"1,x,c,1e99\n"),
            Fault::NotFinite {
                column: 3,
                value: b"1e99".to_vec()
            }
        );
        assert_eq!(
            fault(b"1,x,c, inf\n"),
            Fault::NotFinite {
                column: 3,
                value: b" inf".to_vec()
            }
        );
        assert_eq!(
            fault(b"1,x,c,four\n"),
            Fault::NotNumber {
                column: 3,
                value: b"four".to_vec()
            }
        );
        let mut v = 0.0;
        let reg = RowParser::new(
            vec![Role::Target, Role::Feature(0)],
            SyntheticTask::Regression,
        );
        reg.line_in(b"2.5, 1 \n", 0, &mut f[..1], Slot::Value(&mut v))
            .unwrap();
        assert_eq!((v, f[0]), (2.5, 1.0));
        let rec = csv::ByteRecord::from(vec!["3", "4"]);
        reg.record(&rec, &mut f[..1], Slot::Value(&mut v)).unwrap();
        assert_eq!((v, f[0]), (3.0, 4.0));
    }
}
