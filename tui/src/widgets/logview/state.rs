//! The scroll / follow / wrap / search state of one log pane, and the rows a
//! wrapped line takes (which paging needs as much as drawing does).

use std::cell::Cell;

use ratatui::style::Style;

use super::ansi::{Sink, process};
use super::buffer::{LogBuffer, LogLine};
use super::search::Search;

/// The geometry a pane was last rendered with (or set by `viewport`), and
/// the buffer end it showed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Geometry {
    pub(super) width: u16,
    pub(super) height: u16,
    pub(super) prefix: bool,
    pub(super) end: u64,
}

/// Scrolling / follow / wrap / search state of one pane (pure state, no I/O).
///
/// The view is anchored by its *bottom* line (a monotonic index), so it holds
/// still while lines arrive and while old lines are dropped; if the anchored
/// line itself is dropped the view clamps to the oldest line. In follow mode
/// the bottom is always the newest line.
///
/// Scrolling is in log lines; paging moves so that the top line becomes the
/// bottom line (or back), which with `wrap` on takes the wrapped heights into
/// account. For that the state needs the pane size: [`LogPane`](super::LogPane) records it on
/// every render, and [`viewport`](Self::viewport) sets it explicitly (call it
/// before the first frame and on resize if you page before rendering).
///
/// Search: `n` = [`next_match`](Self::next_match) goes to the next *older*
/// match (up, like `less` after `?`), `N` = [`prev_match`](Self::prev_match)
/// to the next *newer* one; both wrap around and set
/// [`search_wrapped`](Self::search_wrapped).
#[derive(Clone, Debug)]
pub struct LogViewState {
    /// Keep the newest line at the bottom (default `true`).
    pub follow: bool,
    /// Wrap long lines at the pane width instead of cutting them (default `false`).
    pub wrap: bool,
    /// Bottom line when not following; `None` = pin to what was last shown.
    anchor: Cell<Option<u64>>,
    pub(super) geometry: Cell<Geometry>,
    search: Option<Search>,
}

impl Default for LogViewState {
    fn default() -> Self {
        Self::new()
    }
}

impl LogViewState {
    /// Following, not wrapping, no search.
    pub fn new() -> Self {
        Self {
            follow: true,
            wrap: false,
            anchor: Cell::new(None),
            geometry: Cell::new(Geometry::default()),
            search: None,
        }
    }

    /// Sets the pane size (inside its borders) used by paging, `home` and
    /// search jumps. Rendering a [`LogPane`](super::LogPane) records it too.
    pub fn viewport(&mut self, width: u16, height: u16) {
        let g = self.geometry.get();
        self.geometry.set(Geometry { width, height, ..g });
    }

    /// Monotonic index of the bottom line of the view (`None` when `buf` is
    /// empty). Clamped to the kept lines.
    pub fn bottom_index(&self, buf: &LogBuffer) -> Option<u64> {
        let last = buf.last_index()?;
        let first = buf.first_index();
        if self.follow {
            return Some(last);
        }
        let anchor = match self.anchor.get() {
            Some(a) => a,
            None => {
                // `follow` was switched off directly: pin to what was shown.
                let end = self.geometry.get().end;
                let a = if end > first { end - 1 } else { last };
                self.anchor.set(Some(a));
                a
            }
        };
        Some(anchor.clamp(first, last))
    }

    /// Scrolls up (towards older lines) by `lines`; leaves follow mode.
    pub fn scroll_up(&mut self, lines: usize, buf: &LogBuffer) {
        let Some(bottom) = self.bottom_index(buf) else {
            return;
        };
        let target = bottom.saturating_sub(lines as u64);
        self.pin(target.max(self.min_bottom(buf)));
    }

    /// Scrolls down (towards newer lines) by `lines`; reaching the newest
    /// line re-enters follow mode.
    pub fn scroll_down(&mut self, lines: usize, buf: &LogBuffer) {
        if self.follow {
            return;
        }
        let Some(bottom) = self.bottom_index(buf) else {
            return;
        };
        self.settle(bottom.saturating_add(lines as u64), buf);
    }

    /// Up one page: the current top line becomes the bottom line.
    pub fn page_up(&mut self, buf: &LogBuffer) {
        let Some(bottom) = self.bottom_index(buf) else {
            return;
        };
        let h = self.height();
        let first = buf.first_index();
        let mut rows = 0;
        let mut top = bottom;
        loop {
            rows += self.rows(buf, top);
            if rows >= h || top <= first {
                break;
            }
            top -= 1;
        }
        let target = if top < bottom {
            top
        } else {
            bottom.saturating_sub(1)
        };
        self.pin(target.max(self.min_bottom(buf)));
    }

    /// Down one page: the current bottom line becomes the top line.
    pub fn page_down(&mut self, buf: &LogBuffer) {
        if self.follow {
            return;
        }
        let (Some(bottom), Some(last)) = (self.bottom_index(buf), buf.last_index()) else {
            return;
        };
        let h = self.height();
        let mut rows = 0;
        let mut end = bottom;
        loop {
            rows += self.rows(buf, end);
            if rows >= h || end >= last {
                break;
            }
            end += 1;
        }
        self.settle(end.max(bottom.saturating_add(1)), buf);
    }

    /// To the oldest kept line (leaves follow mode).
    pub fn home(&mut self, buf: &LogBuffer) {
        if !buf.is_empty() {
            self.pin(self.min_bottom(buf));
        }
    }

    /// To the newest line: follow mode.
    pub fn end(&mut self, _buf: &LogBuffer) {
        self.follow = true;
        self.anchor.set(None);
    }

    /// Switches follow mode; switching it off holds the view on the lines
    /// shown by the last render.
    pub fn toggle_follow(&mut self) {
        if self.follow {
            self.follow = false;
            self.anchor.set(self.geometry.get().end.checked_sub(1));
        } else {
            self.follow = true;
            self.anchor.set(None);
        }
    }

    /// Switches line wrapping; the bottom line stays where it is.
    pub fn toggle_wrap(&mut self) {
        self.wrap = !self.wrap;
    }

    /// Searches case-insensitively for `query` in the visible text of every
    /// kept line and jumps to the last match at or above the current bottom
    /// (wrapping to the newest match if there is none). An empty query
    /// clears the search.
    pub fn set_search(&mut self, query: &str, buf: &LogBuffer) {
        if query.is_empty() {
            self.search = None;
            return;
        }
        let mut search = Search::new(query);
        search.rescan(buf);
        let target = search.step(true, self.bottom_index(buf));
        self.search = Some(search);
        if let Some(target) = target {
            self.reveal(target, buf);
        }
    }

    /// `n`: jumps to the next older match (wrapping to the newest).
    pub fn next_match(&mut self, buf: &LogBuffer) {
        self.step_match(true, buf);
    }

    /// `N`: jumps to the next newer match (wrapping to the oldest).
    pub fn prev_match(&mut self, buf: &LogBuffer) {
        self.step_match(false, buf);
    }

    /// Brings the search up to date with `buf` (new lines scanned, dropped
    /// ones forgotten); cheap, call once per tick so that
    /// [`search_status`](Self::search_status) counts live lines.
    /// `next_match`/`prev_match` do it themselves.
    pub fn refresh(&mut self, buf: &LogBuffer) {
        if let Some(search) = &mut self.search {
            search.update(buf);
        }
    }

    /// The active query, if any (pass it to [`LogPane::highlight`](super::LogPane::highlight)).
    pub fn search_query(&self) -> Option<&str> {
        self.search.as_ref().map(|s| s.query.as_str())
    }

    /// Whether the last search move wrapped around the buffer.
    pub fn search_wrapped(&self) -> bool {
        self.search.as_ref().is_some_and(|s| s.wrapped)
    }

    /// `"/loss  3 of 12"` (matches numbered from the oldest), with
    /// `"  (wrapped)"` after a wrap-around, or `"/xyz  no match"`; `None`
    /// without a search.
    pub fn search_status(&self) -> Option<String> {
        let s = self.search.as_ref()?;
        let total = s.matches.len();
        let mut text = match s.current {
            _ if total == 0 => format!("/{}  no match", s.query),
            Some(c) => {
                let k = s.matches.partition_point(|&m| m < c) + 1;
                format!("/{}  {} of {}", s.query, k.min(total), total)
            }
            None => format!("/{}  {} matches", s.query, total),
        };
        if s.wrapped && total > 0 {
            text.push_str("  (wrapped)");
        }
        Some(text)
    }

    fn step_match(&mut self, older: bool, buf: &LogBuffer) {
        self.refresh(buf);
        let bottom = self.bottom_index(buf);
        let target = match &mut self.search {
            Some(search) => search.step(older, bottom),
            None => None,
        };
        if let Some(target) = target {
            self.reveal(target, buf);
        }
    }

    /// Leaves follow mode with `bottom` as the bottom line.
    fn pin(&mut self, bottom: u64) {
        self.follow = false;
        self.anchor.set(Some(bottom));
    }

    /// Pins at `bottom` (not above the top page), or follows from the newest.
    fn settle(&mut self, bottom: u64, buf: &LogBuffer) {
        let target = bottom.max(self.min_bottom(buf));
        match buf.last_index() {
            Some(last) if target < last => self.pin(target),
            _ => self.end(buf),
        }
    }

    /// Viewport height for state arithmetic (at least one row).
    fn height(&self) -> usize {
        usize::from(self.geometry.get().height.max(1))
    }

    /// Screen rows line `index` takes at the recorded geometry.
    fn rows(&self, buf: &LogBuffer, index: u64) -> usize {
        let g = self.geometry.get();
        match buf.get_abs(index) {
            Some(line) if self.wrap && g.width > 0 => {
                line_rows(line, usize::from(g.width), g.prefix)
            }
            _ => 1,
        }
    }

    /// The lowest bottom line that still fills the view (so the top page
    /// starts with the oldest line); the newest line if everything fits.
    fn min_bottom(&self, buf: &LogBuffer) -> u64 {
        let first = buf.first_index();
        let Some(last) = buf.last_index() else {
            return first;
        };
        let h = self.height();
        if !self.wrap {
            return (first + h as u64 - 1).min(last);
        }
        let mut rows = 0;
        let mut i = first;
        loop {
            rows += self.rows(buf, i);
            if rows >= h || i >= last {
                return i;
            }
            i += 1;
        }
    }

    /// Moves the view to show line `target`: unchanged if it is already fully
    /// visible, else with `target` about mid-screen. Leaves follow mode.
    fn reveal(&mut self, target: u64, buf: &LogBuffer) {
        let (Some(bottom), Some(last)) = (self.bottom_index(buf), buf.last_index()) else {
            return;
        };
        let first = buf.first_index();
        let h = self.height();
        // Fully visible lines: walk up from the bottom while they fit.
        let mut rows = 0;
        let mut top = bottom.saturating_add(1);
        let mut i = bottom;
        loop {
            rows += self.rows(buf, i);
            if rows > h {
                break;
            }
            top = i;
            if i <= first {
                break;
            }
            i -= 1;
        }
        let new_bottom = if (top..=bottom).contains(&target) {
            bottom
        } else {
            let budget = h.saturating_sub(self.rows(buf, target)) / 2;
            let mut below = 0;
            let mut b = target;
            while b < last {
                let r = self.rows(buf, b + 1);
                if below + r > budget {
                    break;
                }
                below += r;
                b += 1;
            }
            b
        };
        self.pin(new_bottom.max(self.min_bottom(buf)));
    }
}

// ---------------------------------------------------------------------------
// Rows of a wrapped line
// ---------------------------------------------------------------------------

/// Char-based line breaking: a char that does not fit in the rest of the row
/// starts a new row (a row always takes at least one char).
#[derive(Clone, Copy, Debug)]
pub(super) struct RowWrap {
    width: usize,
    col: usize,
    started: bool,
}

impl RowWrap {
    pub(super) fn new(width: usize) -> Self {
        Self {
            width,
            col: 0,
            started: false,
        }
    }

    /// Places a char of width `w`; true if it starts a new row.
    pub(super) fn place(&mut self, w: usize) -> bool {
        let breaks = self.started && self.col + w > self.width;
        if breaks {
            self.col = 0;
        }
        self.col += w;
        self.started = true;
        breaks
    }
}

/// Counts the rows of a wrapped line.
struct RowCounter {
    wrap: RowWrap,
    rows: usize,
}

impl Sink for RowCounter {
    fn put(&mut self, _: char, width: usize, _: Style) {
        if self.wrap.place(width) {
            self.rows += 1;
        }
    }
}

/// Rows line `line` takes when wrapped at `width` (with or without prefix).
fn line_rows(line: &LogLine, width: usize, prefix: bool) -> usize {
    let mut counter = RowCounter {
        wrap: RowWrap::new(width),
        rows: 1,
    };
    if prefix {
        for ch in line.source.prefix().chars() {
            counter.put(ch, 1, Style::new());
        }
    }
    process(&line.text, false, &mut counter);
    counter.rows
}
