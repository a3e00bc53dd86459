//! Log lines and the bounded buffer that keeps the newest of them.

use std::collections::VecDeque;
use std::fmt;

use ratatui::style::Color;

/// Colours of the merged-view prefix, picked by `rank % len`.
pub(super) const RANK_COLORS: [Color; 12] = [
    Color::Cyan,
    Color::Green,
    Color::Yellow,
    Color::Magenta,
    Color::Blue,
    Color::LightRed,
    Color::LightCyan,
    Color::LightGreen,
    Color::LightYellow,
    Color::LightMagenta,
    Color::LightBlue,
    Color::Red,
];

/// Where a log line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogSource {
    /// `logs/rank-R.log` of replica `R`.
    Rank(usize),
    /// `logs/supervisor.log`.
    Supervisor,
}

impl LogSource {
    /// The merged-view prefix: `"[rank 1] "` or `"[supervisor] "`.
    pub(super) fn prefix(self) -> String {
        format!("[{self}] ")
    }

    /// The merged-view prefix colour.
    pub(super) fn color(self) -> Color {
        match self {
            LogSource::Rank(r) => RANK_COLORS[r % RANK_COLORS.len()],
            LogSource::Supervisor => Color::White,
        }
    }
}

impl fmt::Display for LogSource {
    /// `rank 1` or `supervisor`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogSource::Rank(r) => write!(f, "rank {r}"),
            LogSource::Supervisor => f.write_str("supervisor"),
        }
    }
}

/// One raw log line (without its newline), as read from the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// The log it came from.
    pub source: LogSource,
    /// The raw text: may hold ANSI escapes, `\r` and tabs.
    pub text: String,
}

impl LogLine {
    /// A line of `source`.
    pub fn new(source: LogSource, text: impl Into<String>) -> Self {
        Self {
            source,
            text: text.into(),
        }
    }
}

/// Bounded store of the newest `capacity` lines of one source, or of all
/// sources merged in arrival order.
///
/// Every line ever pushed has a monotonic index: the first kept line has
/// index [`first_index`](Self::first_index) (`== dropped()`), the next one
/// pushed gets [`end_index`](Self::end_index). Views keep their place by
/// these indices while lines scroll off the front.
#[derive(Clone, Debug, Default)]
pub struct LogBuffer {
    pub(super) lines: VecDeque<LogLine>,
    capacity: usize,
    dropped: u64,
}

impl LogBuffer {
    /// An empty buffer keeping at most `capacity` lines.
    pub fn new(capacity: usize) -> Self {
        Self {
            lines: VecDeque::new(),
            capacity,
            dropped: 0,
        }
    }

    /// The most lines it keeps.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Appends a line, dropping (and counting) the oldest beyond capacity.
    /// O(1) amortised.
    pub fn push(&mut self, line: LogLine) {
        if self.capacity == 0 {
            self.dropped += 1;
            return;
        }
        if self.lines.len() >= self.capacity {
            self.lines.pop_front();
            self.dropped += 1;
        }
        self.lines.push_back(line);
    }

    /// Number of lines kept.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Whether no line is kept.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The `i`-th kept line, 0 = oldest kept.
    pub fn get(&self, i: usize) -> Option<&LogLine> {
        self.lines.get(i)
    }

    /// Lines dropped off the front so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Monotonic index of the first kept line (`== dropped()`), so views can
    /// keep their place while lines scroll off.
    pub fn first_index(&self) -> u64 {
        self.dropped
    }

    /// Monotonic index the next pushed line will get (`first_index() + len()`).
    pub fn end_index(&self) -> u64 {
        self.dropped + self.lines.len() as u64
    }

    /// The line with monotonic index `index`, if still kept.
    pub fn get_abs(&self, index: u64) -> Option<&LogLine> {
        let i = index.checked_sub(self.dropped)?;
        self.lines.get(usize::try_from(i).ok()?)
    }

    /// The kept lines, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &LogLine> + ExactSizeIterator {
        self.lines.iter()
    }

    /// Monotonic index of the newest line, if any.
    pub(super) fn last_index(&self) -> Option<u64> {
        self.end_index().checked_sub(1).filter(|_| !self.is_empty())
    }
}
