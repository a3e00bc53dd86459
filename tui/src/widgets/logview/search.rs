//! Case-insensitive matching of the shown text, and the matches of an
//! active search, kept up to date as lines arrive and drop off.

use std::collections::VecDeque;

use super::ansi::{needs_processing, process};
use super::buffer::LogBuffer;

/// Folds a char for case-insensitive comparison (one char in, one char out,
/// so match positions map 1:1 onto the shown characters).
fn fold(c: char) -> char {
    if c.is_ascii() {
        c.to_ascii_lowercase()
    } else {
        c.to_lowercase().next().unwrap_or(c)
    }
}

/// A search query prepared for matching.
#[derive(Clone, Debug)]
pub(super) struct Needle {
    /// The folded query, char by char (for highlighting).
    pub(super) folded: Vec<char>,
    /// The same as a string (for substring search).
    text: String,
}

/// Reusable buffers for matching many lines without allocating per line.
#[derive(Default)]
struct Scratch {
    visible: String,
    folded: String,
}

impl Needle {
    pub(super) fn new(query: &str) -> Self {
        let folded: Vec<char> = query.chars().map(fold).collect();
        Self {
            text: folded.iter().collect(),
            folded,
        }
    }

    /// Whether the visible text of raw line `text` contains the query.
    fn matches_line(&self, text: &str, scratch: &mut Scratch) -> bool {
        let visible = if needs_processing(text) {
            scratch.visible.clear();
            process(text, false, &mut scratch.visible);
            scratch.visible.as_str()
        } else {
            text
        };
        scratch.folded.clear();
        if visible.is_ascii() {
            scratch.folded.push_str(visible);
            scratch.folded.make_ascii_lowercase();
        } else {
            scratch.folded.extend(visible.chars().map(fold));
        }
        // `fold` maps char to char, so a substring match of the folded UTF-8
        // is exactly a char-by-char match.
        scratch.folded.contains(self.text.as_str())
    }

    /// Whether the query matches at the start of `chars`.
    pub(super) fn is_prefix_of(&self, mut chars: impl Iterator<Item = char>) -> bool {
        self.folded
            .iter()
            .all(|&n| chars.next().map(fold) == Some(n))
    }
}

/// An active search.
#[derive(Clone, Debug)]
pub(super) struct Search {
    pub(super) query: String,
    needle: Needle,
    /// Monotonic indices of matching lines, ascending.
    pub(super) matches: VecDeque<u64>,
    /// Lines below this index have been scanned.
    scanned_end: u64,
    /// The match the view was last moved to.
    pub(super) current: Option<u64>,
    /// Whether the last move wrapped around.
    pub(super) wrapped: bool,
}

impl Search {
    pub(super) fn new(query: &str) -> Self {
        Self {
            query: query.to_string(),
            needle: Needle::new(query),
            matches: VecDeque::new(),
            scanned_end: 0,
            current: None,
            wrapped: false,
        }
    }

    /// Scans the whole buffer.
    pub(super) fn rescan(&mut self, buf: &LogBuffer) {
        let mut scratch = Scratch::default();
        let first = buf.first_index();
        self.matches = (first..)
            .zip(buf.iter())
            .filter(|(_, line)| self.needle.matches_line(&line.text, &mut scratch))
            .map(|(i, _)| i)
            .collect();
        self.scanned_end = buf.end_index();
    }

    /// Forgets dropped matches and scans lines pushed since the last scan.
    pub(super) fn update(&mut self, buf: &LogBuffer) {
        let (first, end) = (buf.first_index(), buf.end_index());
        if end < self.scanned_end {
            // A different (or reset) buffer: start over.
            self.rescan(buf);
        } else {
            while self.matches.front().is_some_and(|&m| m < first) {
                self.matches.pop_front();
            }
            let mut scratch = Scratch::default();
            for i in self.scanned_end.max(first)..end {
                let hit = buf
                    .get_abs(i)
                    .is_some_and(|line| self.needle.matches_line(&line.text, &mut scratch));
                if hit {
                    self.matches.push_back(i);
                }
            }
            self.scanned_end = end;
        }
        if self.current.is_some_and(|c| c < first) {
            self.current = self.matches.front().copied();
        }
    }

    /// Moves to the next older (`older`) or newer match from the current one,
    /// or from `bottom` (inclusive when going older) if there is none yet;
    /// wraps around at the ends. Returns the new current match.
    pub(super) fn step(&mut self, older: bool, bottom: Option<u64>) -> Option<u64> {
        let oldest = self.matches.front().copied()?;
        let newest = self.matches.back().copied()?;
        let found = match (older, self.current) {
            (true, Some(c)) => self.before(c),
            (true, None) => bottom.and_then(|b| self.before(b.saturating_add(1))),
            (false, Some(c)) => self.after(c),
            (false, None) => bottom.and_then(|b| self.after(b)),
        };
        self.wrapped = found.is_none();
        let target = found.unwrap_or(if older { newest } else { oldest });
        self.current = Some(target);
        Some(target)
    }

    /// The newest match older than `i`.
    fn before(&self, i: u64) -> Option<u64> {
        let k = self.matches.partition_point(|&m| m < i);
        self.matches.get(k.checked_sub(1)?).copied()
    }

    /// The oldest match newer than `i`.
    fn after(&self, i: u64) -> Option<u64> {
        let k = self.matches.partition_point(|&m| m <= i);
        self.matches.get(k).copied()
    }
}
