//! Class labels of a table: interned as they are read ([`Interner`], one per reading thread),
//! then made classes ([`Classes`]: the training part's sorted distinct labels, integers
//! numerically, text lexicographically) and class indices.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;

/// One distinct label as a file holds it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Label {
    /// An integer column's value (Parquet).
    Int(i64),
    /// A text value (a CSV cell, a Parquet string).
    Text(String),
}

impl Label {
    /// The integer this label is (text that parses as one, around ASCII spaces), if any.
    fn as_int(&self) -> Option<i64> {
        match self {
            Label::Int(v) => Some(*v),
            Label::Text(t) => t.trim_ascii().parse().ok(),
        }
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Label::Int(v) => write!(f, "{v}"),
            Label::Text(t) => write!(f, "{t}"),
        }
    }
}

/// The labels of a part: per row an id into the names of the piece that row is in. Every
/// reading thread interns the rows it reads (a piece) on its own.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Labels {
    pub ids: Vec<u32>,
    pub pieces: Vec<Piece>,
}

/// The rows one thread read, and the distinct labels their ids point at.
#[derive(Clone, Debug, PartialEq)]
pub struct Piece {
    pub rows: Range<usize>,
    pub names: Vec<Label>,
}

/// Gives each distinct label of the rows one thread reads a small id.
#[derive(Default)]
pub struct Interner {
    ints: HashMap<i64, u32>,
    texts: HashMap<Box<[u8]>, u32>,
    names: Vec<Label>,
}

impl Interner {
    pub fn int(&mut self, v: i64) -> u32 {
        let next = self.names.len() as u32;
        *self.ints.entry(v).or_insert_with(|| {
            self.names.push(Label::Int(v));
            next
        })
    }

    /// The id of a text label; None when it is not UTF-8.
    pub fn text(&mut self, bytes: &[u8]) -> Option<u32> {
        if let Some(&id) = self.texts.get(bytes) {
            return Some(id);
        }
        let text = std::str::from_utf8(bytes).ok()?.to_string();
        let id = self.names.len() as u32;
        self.texts.insert(bytes.into(), id);
        self.names.push(Label::Text(text));
        Some(id)
    }

    /// The names in id order, for the piece of `rows`.
    pub fn piece(self, rows: Range<usize>) -> Piece {
        Piece {
            rows,
            names: self.names,
        }
    }
}

/// The classes of a table: the training part's distinct labels, sorted.
#[derive(Clone, Debug, PartialEq)]
pub struct Classes {
    /// True when every training label is an integer: classes sort numerically and a label is
    /// compared as its integer (`07` is `7`).
    integers: bool,
    sorted: Vec<Label>,
    index: HashMap<Label, u32>,
}

/// A label of a part that is not among the classes: the first row holding it.
#[derive(Clone, Debug, PartialEq)]
pub struct Unseen {
    pub row: usize,
    pub label: String,
}

impl Classes {
    /// The sorted distinct labels of `parts` (the training part's files).
    pub fn of(parts: &[&Labels]) -> Classes {
        let all = || parts.iter().flat_map(|l| &l.pieces).flat_map(|p| &p.names);
        let integers = all().all(|l| l.as_int().is_some());
        let mut sorted: Vec<Label> = all().map(|l| canonical(l, integers)).collect();
        sorted.sort();
        sorted.dedup();
        let index = sorted
            .iter()
            .enumerate()
            .map(|(i, l)| (l.clone(), i as u32))
            .collect();
        Classes {
            integers,
            sorted,
            index,
        }
    }

    /// The number of classes.
    pub fn count(&self) -> usize {
        self.sorted.len()
    }

    /// The class names in index order.
    pub fn names(&self) -> Vec<String> {
        self.sorted.iter().map(|l| l.to_string()).collect()
    }

    /// The first `n` class names, quoted, for a message (`"cat", "dog" and 8 more`).
    pub fn some_names(&self, n: usize) -> String {
        let mut s = self
            .sorted
            .iter()
            .take(n)
            .map(|l| format!("{:?}", l.to_string()))
            .collect::<Vec<_>>()
            .join(", ");
        if self.sorted.len() > n {
            s += &format!(" and {} more", self.sorted.len() - n);
        }
        s
    }

    /// The class index of every row of `labels`; the first row (in row order) whose label is
    /// not a class when there is one.
    pub fn indices(&self, labels: &Labels) -> Result<Vec<u32>, Unseen> {
        let mut out = labels.ids.clone();
        let mut unseen: Option<Unseen> = None;
        for piece in &labels.pieces {
            let map: Vec<Option<u32>> = piece
                .names
                .iter()
                .map(|l| self.index.get(&canonical(l, self.integers)).copied())
                .collect();
            for row in piece.rows.clone() {
                match map[out[row] as usize] {
                    Some(class) => out[row] = class,
                    None => {
                        if unseen.as_ref().is_none_or(|u| row < u.row) {
                            unseen = Some(Unseen {
                                row,
                                label: piece.names[labels.ids[row] as usize].to_string(),
                            });
                        }
                        break;
                    }
                }
            }
        }
        match unseen {
            Some(u) => Err(u),
            None => Ok(out),
        }
    }
}

/// The form labels are compared in: integers when the classes are integers (a text that is not
/// one stays text, and matches no class), text otherwise.
fn canonical(label: &Label, integers: bool) -> Label {
    match (integers, label.as_int()) {
        (true, Some(v)) => Label::Int(v),
        (_, _) => Label::Text(label.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One piece per slice of `rows`, interning text labels.
    fn labels(pieces: &[&[&str]]) -> Labels {
        let mut out = Labels::default();
        for rows in pieces {
            let mut interner = Interner::default();
            let start = out.ids.len();
            for r in *rows {
                out.ids.push(interner.text(r.as_bytes()).unwrap());
            }
            out.pieces.push(interner.piece(start..out.ids.len()));
        }
        out
    }

    #[test]
    fn integer_labels_sort_numerically() {
        let train = labels(&[&["10", "2", "07"], &["2", "1", "7"]]);
        let c = Classes::of(&[&train]);
        assert_eq!(c.names(), vec!["1", "2", "7", "10"]);
        assert_eq!(c.indices(&train).unwrap(), vec![3, 1, 2, 1, 0, 2]);
        let test = labels(&[&["1", " 10"], &["3"]]);
        assert_eq!(
            c.indices(&test).unwrap_err(),
            Unseen {
                row: 2,
                label: "3".into()
            }
        );
    }

    #[test]
    fn text_labels_sort_lexicographically() {
        let train = labels(&[&["dog", "cat", "Zebra", "10", "9"]]);
        let c = Classes::of(&[&train]);
        assert_eq!(c.names(), vec!["10", "9", "Zebra", "cat", "dog"]);
        assert_eq!(c.indices(&train).unwrap(), vec![4, 3, 2, 0, 1]);
        assert_eq!(c.some_names(2), "\"10\", \"9\" and 3 more");
        let test = labels(&[&["cat", "bird"], &["fish", "dog"]]);
        assert_eq!(
            c.indices(&test).unwrap_err(),
            Unseen {
                row: 1,
                label: "bird".into()
            }
        );
    }

    #[test]
    fn integer_and_text_labels_of_one_value_meet() {
        let mut ints = Interner::default();
        let ids = vec![ints.int(3), ints.int(-1), ints.int(3)];
        let train = Labels {
            ids,
            pieces: vec![ints.piece(0..3)],
        };
        let c = Classes::of(&[&train]);
        assert_eq!(c.names(), vec!["-1", "3"]);
        assert_eq!(c.indices(&labels(&[&["3", "-1"]])).unwrap(), vec![1, 0]);
        assert!(Interner::default().text(&[0xff]).is_none());
    }
}
