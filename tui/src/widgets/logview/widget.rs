//! [`LogPane`]: lays out and draws the lines of a [`LogBuffer`] that a
//! [`LogViewState`] shows.

use std::ops::Range;

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::widgets::Widget;

use super::ansi::{Sink, process};
use super::buffer::{LogBuffer, LogLine};
use super::search::Needle;
use super::state::{Geometry, LogViewState, RowWrap};

/// One shown character.
#[derive(Clone, Copy, Debug)]
struct StyledChar {
    ch: char,
    width: u8,
    style: Style,
}

/// Collects shown characters, up to `limit` columns.
struct CellSink {
    cells: Vec<StyledChar>,
    cols: usize,
    limit: usize,
}

impl Sink for CellSink {
    fn put(&mut self, ch: char, width: usize, style: Style) {
        if self.cols < self.limit {
            self.cells.push(StyledChar {
                ch,
                width: u8::try_from(width).unwrap_or(u8::MAX),
                style,
            });
            self.cols += width;
        }
    }
}

/// A line laid out for the pane: its characters and its rows.
struct Shaped {
    cells: Vec<StyledChar>,
    rows: Vec<Range<usize>>,
}

/// How lines are laid out in one render.
struct Shaper<'a> {
    width: usize,
    wrap: bool,
    prefix: bool,
    color: bool,
    needle: Option<&'a Needle>,
}

impl Shaper<'_> {
    fn shape(&self, line: &LogLine) -> Shaped {
        let limit = if self.wrap {
            usize::MAX
        } else {
            // Enough to highlight a match that crosses the right edge.
            let extra = self.needle.map_or(0, |n| 2 * n.folded.len());
            self.width + extra + 2
        };
        let mut sink = CellSink {
            cells: Vec::new(),
            cols: 0,
            limit,
        };
        if self.prefix {
            let mut style = Style::new().add_modifier(Modifier::DIM);
            if self.color {
                style = style.fg(line.source.color());
            }
            for ch in line.source.prefix().chars() {
                sink.put(ch, 1, style);
            }
        }
        let text_start = sink.cells.len();
        process(&line.text, self.color, &mut sink);
        let mut cells = sink.cells;
        if let (Some(needle), Some(text)) = (self.needle, cells.get_mut(text_start..)) {
            highlight(text, needle);
        }
        let rows = if self.wrap {
            split_rows(&cells, self.width)
        } else {
            std::iter::once(0..cells.len()).collect()
        };
        Shaped { cells, rows }
    }
}

/// Reverses (toggles `REVERSED` on) every non-overlapping match of `needle`.
fn highlight(cells: &mut [StyledChar], needle: &Needle) {
    let n = needle.folded.len();
    if n == 0 {
        return;
    }
    let mut i = 0;
    while i + n <= cells.len() {
        let hit = cells
            .get(i..i + n)
            .is_some_and(|w| needle.is_prefix_of(w.iter().map(|c| c.ch)));
        if hit {
            for c in cells.iter_mut().skip(i).take(n) {
                c.style.add_modifier.toggle(Modifier::REVERSED);
            }
            i += n;
        } else {
            i += 1;
        }
    }
}

/// Splits cells into rows of at most `width` columns.
fn split_rows(cells: &[StyledChar], width: usize) -> Vec<Range<usize>> {
    let mut wrap = RowWrap::new(width);
    let mut rows = Vec::new();
    let mut start = 0;
    for (i, c) in cells.iter().enumerate() {
        if wrap.place(usize::from(c.width)) {
            rows.push(start..i);
            start = i;
        }
    }
    rows.push(start..cells.len());
    rows
}

/// Draws one row of cells at `(x, y)`, cut at `width` columns.
fn paint_row(out: &mut Buffer, x: u16, y: u16, width: u16, cells: &[StyledChar]) {
    let mut cols = 0;
    let fit = cells
        .iter()
        .take_while(|c| {
            cols += usize::from(c.width);
            cols <= usize::from(width)
        })
        .count();
    let right = x.saturating_add(width);
    let mut x = x;
    let mut run = String::new();
    let mut style = Style::new();
    for c in cells.iter().take(fit) {
        if c.style != style && !run.is_empty() {
            x = out.set_stringn(x, y, &run, usize::from(right - x), style).0;
            run.clear();
        }
        style = c.style;
        run.push(c.ch);
    }
    if !run.is_empty() {
        out.set_stringn(x, y, &run, usize::from(right.saturating_sub(x)), style);
    }
}

/// Draws the lines of a [`LogBuffer`] that a [`LogViewState`] says are
/// visible. No block: the caller draws borders around it.
///
/// Only the shown lines are processed: lines are laid out from the bottom
/// line upwards until the height is filled. The bottom line's last row is at
/// the bottom of the area (also when everything fits); when scrolled to the
/// very top the oldest line's first row is at the top. With `wrap` off long
/// lines are cut at the width; with `wrap` on they wrap at the width
/// (char-based, by display width).
#[derive(Clone, Copy, Debug)]
pub struct LogPane<'a> {
    /// The lines.
    pub buf: &'a LogBuffer,
    /// Scroll position, follow and wrap (the pane records its size in it).
    pub state: &'a LogViewState,
    /// Merged view: prefix each line with `"[rank R] "` / `"[supervisor] "`,
    /// dim, coloured per rank when `color`.
    pub prefix_ranks: bool,
    /// Show ANSI colours (`false` for `NO_COLOR`).
    pub color: bool,
    /// Search query whose matches are shown reversed.
    pub highlight: Option<&'a str>,
}

impl<'a> LogPane<'a> {
    /// A pane without prefixes or highlight, in colour.
    pub fn new(buf: &'a LogBuffer, state: &'a LogViewState) -> Self {
        Self {
            buf,
            state,
            prefix_ranks: false,
            color: true,
            highlight: None,
        }
    }

    /// Lays out the visible lines, top to bottom; returns them with the
    /// number of rows to skip at the top and the first screen row offset.
    fn layout(
        &self,
        bottom: u64,
        shaper: &Shaper<'_>,
        height: usize,
    ) -> (Vec<Shaped>, usize, usize) {
        let first = self.buf.first_index();
        let mut above = Vec::new();
        let mut rows = 0;
        let mut i = bottom;
        while let Some(line) = self.buf.get_abs(i) {
            let shaped = shaper.shape(line);
            rows += shaped.rows.len();
            above.push(shaped);
            if rows >= height || i <= first {
                break;
            }
            i -= 1;
        }
        above.reverse();
        if rows >= height {
            return (above, rows - height, 0);
        }
        // Everything from the oldest line fits above the anchor: fill the
        // rest with the lines below it (none when following).
        let mut i = bottom.saturating_add(1);
        while rows < height {
            let Some(line) = self.buf.get_abs(i) else {
                break;
            };
            let shaped = shaper.shape(line);
            rows += shaped.rows.len();
            above.push(shaped);
            i += 1;
        }
        if rows >= height {
            (above, 0, 0)
        } else {
            (above, 0, height - rows)
        }
    }
}

impl Widget for LogPane<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let area = area.intersection(buf.area);
        let bottom = self.state.bottom_index(self.buf);
        self.state.geometry.set(Geometry {
            width: area.width,
            height: area.height,
            prefix: self.prefix_ranks,
            end: self.buf.end_index(),
        });
        let Some(bottom) = bottom else {
            return;
        };
        if area.is_empty() {
            return;
        }
        let needle = self.highlight.filter(|q| !q.is_empty()).map(Needle::new);
        let shaper = Shaper {
            width: usize::from(area.width),
            wrap: self.state.wrap,
            prefix: self.prefix_ranks,
            color: self.color,
            needle: needle.as_ref(),
        };
        let height = usize::from(area.height);
        let (lines, skip, offset) = self.layout(bottom, &shaper, height);
        let rows = lines
            .iter()
            .flat_map(|l| {
                l.rows
                    .iter()
                    .map(move |r| l.cells.get(r.clone()).unwrap_or(&[]))
            })
            .skip(skip)
            .take(height);
        for (dy, cells) in (offset..).zip(rows) {
            let y = area.y.saturating_add(u16::try_from(dy).unwrap_or(u16::MAX));
            paint_row(buf, area.x, y, area.width, cells);
        }
    }
}
