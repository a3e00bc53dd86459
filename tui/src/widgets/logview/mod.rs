//! Per-replica log panes for `ddp-tui`.
//!
//! A training run writes one log per replica (`logs/rank-R.log`) plus
//! `logs/supervisor.log`. Lines arrive live, may carry ANSI SGR colours and
//! carriage-return progress bars, and are shown in scrollable, searchable
//! panes: one per source, or all sources merged in arrival order.
//!
//! Lines are stored raw; the terminal processing (CR overwrite, escapes,
//! tabs) is done only for the lines a frame actually shows, or once per line
//! by a search scan.
//!
//! # Layout
//! - [`LogSource`], [`LogLine`]: one log line and the replica it came from.
//! - [`LogBuffer`]: bounded FIFO of the newest lines, with a monotonic line
//!   index (`dropped() + position`) that survives lines scrolling off.
//! - [`LogViewState`]: follow / scroll / wrap / search state of one pane.
//! - [`render_text`], [`visible_text`]: what one raw line looks like on screen.
//! - [`LogPane`]: the widget that draws the visible lines of a buffer.
//! - private helpers: the escape parser (`process`, `escape`, `csi`, `sgr`),
//!   case-insensitive matching (`Needle`), and row layout (`RowWrap`, `Shaper`).
//!
//! # Per frame
//! ```text
//! state.refresh(&buf); // keeps search counts live (cheap: new lines only)
//! let block = Block::bordered().title(" rank 1 ");
//! let inner = block.inner(area);
//! f.render_widget(block, area);
//! let pane = LogPane { highlight: state.search_query(), ..LogPane::new(&buf, &state) };
//! f.render_widget(pane, inner); // also records `inner`'s size in `state`
//! ```
//! Keys map to `scroll_up/down`, `page_up/down`, `home`, `end`,
//! `toggle_follow`, `toggle_wrap`, `set_search`, `next_match` (`n`, older)
//! and `prev_match` (`N`, newer); `search_status()` feeds the status line.

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::VecDeque;
use std::fmt;
use std::ops::Range;

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;
use unicode_width::UnicodeWidthChar;

/// Tab stops are every this many columns.
const TAB_WIDTH: usize = 8;

/// Colours of the merged-view prefix, picked by `rank % len`.
const RANK_COLORS: [Color; 12] = [
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

/// SGR 30–37 / 40–47.
const BASIC_COLORS: [Color; 8] = [
    Color::Black,
    Color::Red,
    Color::Green,
    Color::Yellow,
    Color::Blue,
    Color::Magenta,
    Color::Cyan,
    Color::Gray,
];

/// SGR 90–97 / 100–107.
const BRIGHT_COLORS: [Color; 8] = [
    Color::DarkGray,
    Color::LightRed,
    Color::LightGreen,
    Color::LightYellow,
    Color::LightBlue,
    Color::LightMagenta,
    Color::LightCyan,
    Color::White,
];

// ---------------------------------------------------------------------------
// Lines and the buffer
// ---------------------------------------------------------------------------

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
    fn prefix(self) -> String {
        format!("[{self}] ")
    }

    /// The merged-view prefix colour.
    fn color(self) -> Color {
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
    lines: VecDeque<LogLine>,
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
    fn last_index(&self) -> Option<u64> {
        self.end_index().checked_sub(1).filter(|_| !self.is_empty())
    }
}

// ---------------------------------------------------------------------------
// Terminal processing of one line
// ---------------------------------------------------------------------------

/// Receives the visible characters of a line, with their display width.
trait Sink {
    fn put(&mut self, ch: char, width: usize, style: Style);

    /// A run of printable ASCII (each char one column wide).
    fn put_ascii(&mut self, run: &str, style: Style) {
        for ch in run.chars() {
            self.put(ch, 1, style);
        }
    }
}

/// Discards everything (used to track the style before the last `\r`).
struct NullSink;

impl Sink for NullSink {
    fn put(&mut self, _: char, _: usize, _: Style) {}
}

impl Sink for String {
    fn put(&mut self, ch: char, _: usize, _: Style) {
        self.push(ch);
    }

    fn put_ascii(&mut self, run: &str, _: Style) {
        self.push_str(run);
    }
}

/// Builds the spans of [`render_text`], merging runs of equal style.
#[derive(Default)]
struct SpanSink {
    spans: Vec<Span<'static>>,
    run: String,
    style: Style,
}

impl SpanSink {
    fn flush(&mut self) {
        if !self.run.is_empty() {
            let text = std::mem::take(&mut self.run);
            self.spans.push(Span::styled(text, self.style));
        }
    }

    fn finish(mut self) -> Line<'static> {
        self.flush();
        Line::from(self.spans)
    }
}

impl SpanSink {
    fn restyle(&mut self, style: Style) {
        if style != self.style {
            self.flush();
            self.style = style;
        }
    }
}

impl Sink for SpanSink {
    fn put(&mut self, ch: char, _: usize, style: Style) {
        self.restyle(style);
        self.run.push(ch);
    }

    fn put_ascii(&mut self, run: &str, style: Style) {
        self.restyle(style);
        self.run.push_str(run);
    }
}

/// What a log line looks like on screen, as a styled [`Line`].
///
/// Only the text after the last `\r` that is followed by something is shown
/// (a trailing `\r` is ignored, so `"a\rb\r"` shows `b`); SGR attributes set
/// before that `\r` still apply. ANSI SGR (colours 30–37, 90–97, 40–47,
/// 100–107, `38;5;n`, `38;2;r;g;b` and their `:` forms, bold, dim, italic,
/// underline, blink, reverse, hidden, strike-through, their resets, and
/// reset) become styles; every other escape or control sequence (cursor
/// moves, OSC titles and links, `\x1b[K`, BEL, backspace, C1 controls) is
/// stripped; tabs expand to the next multiple of 8. Invalid or truncated
/// escapes never panic. With `color == false` (`NO_COLOR`) no style is set
/// at all.
pub fn render_text(text: &str, color: bool) -> Line<'static> {
    let mut sink = SpanSink::default();
    process(text, color, &mut sink);
    sink.finish()
}

/// The plain text [`render_text`] shows (used by search).
pub fn visible_text(text: &str) -> String {
    visible(text).into_owned()
}

/// [`visible_text`] without copying lines that need no processing.
fn visible(text: &str) -> Cow<'_, str> {
    if needs_processing(text) {
        let mut out = String::with_capacity(text.len());
        process(text, false, &mut out);
        Cow::Owned(out)
    } else {
        Cow::Borrowed(text)
    }
}

/// Whether `text` holds a C0 control, DEL, or C1 control (C1 is
/// U+0080..U+009F = 0xC2 0x80..0x9F; other 0xC2 chars are merely checked).
fn needs_processing(text: &str) -> bool {
    text.bytes().any(|b| b < 0x20 || b == 0x7f || b == 0xc2)
}

/// Feeds the visible characters of `text` to `sink` (see [`render_text`]).
fn process<S: Sink>(text: &str, color: bool, sink: &mut S) {
    let body = text.trim_end_matches('\r');
    let mut style = Style::new();
    let shown = match body.rfind('\r') {
        Some(i) => {
            if color {
                scan(&body[..i], true, &mut style, &mut NullSink);
            }
            &body[i + 1..]
        }
        None => body,
    };
    scan(shown, color, &mut style, sink);
}

/// Processes one CR-free segment: escapes, controls and tabs.
fn scan<S: Sink>(segment: &str, color: bool, style: &mut Style, sink: &mut S) {
    let mut col = 0;
    let mut rest = segment;
    while let Some(ch) = rest.chars().next() {
        if is_printable_ascii(ch as u32) {
            let n = rest
                .bytes()
                .position(|b| !is_printable_ascii(u32::from(b)))
                .unwrap_or(rest.len());
            sink.put_ascii(&rest[..n], *style);
            col += n;
            rest = &rest[n..];
            continue;
        }
        rest = &rest[ch.len_utf8()..];
        match ch {
            '\x1b' => rest = escape(rest, color, style),
            '\u{9b}' => rest = csi(rest, color, style),
            '\u{90}' | '\u{98}' | '\u{9d}' | '\u{9e}' | '\u{9f}' => rest = skip_string(rest),
            '\t' => {
                let n = TAB_WIDTH - col % TAB_WIDTH;
                for _ in 0..n {
                    sink.put(' ', 1, *style);
                }
                col += n;
            }
            c if c.is_control() => {}
            c => {
                let w = c.width().unwrap_or(0);
                sink.put(c, w, *style);
                col += w;
            }
        }
    }
}

/// Whether a code point is printable ASCII (space to `~`).
fn is_printable_ascii(c: u32) -> bool {
    (0x20..0x7f).contains(&c)
}

/// Skips the escape sequence after an ESC; returns the rest of the text.
fn escape<'a>(rest: &'a str, color: bool, style: &mut Style) -> &'a str {
    let bytes = rest.as_bytes();
    match bytes.first() {
        None => rest,
        Some(b'[') => csi(&rest[1..], color, style),
        Some(b']' | b'P' | b'X' | b'^' | b'_') => skip_string(&rest[1..]),
        Some(0x20..=0x2f) => {
            // nF: intermediates, then one final byte (e.g. `ESC ( B`).
            let mut i = 1;
            while bytes.get(i).is_some_and(|b| (0x20..=0x2f).contains(b)) {
                i += 1;
            }
            if bytes.get(i).is_some_and(|b| (0x30..=0x7e).contains(b)) {
                i += 1;
            }
            &rest[i..]
        }
        Some(0x30..=0x7e) => &rest[1..],
        Some(_) => rest,
    }
}

/// Skips a control sequence after its CSI, applying it when it is SGR.
/// A truncated sequence swallows the rest; an invalid byte ends it there.
fn csi<'a>(rest: &'a str, color: bool, style: &mut Style) -> &'a str {
    let bytes = rest.as_bytes();
    let params_end = bytes
        .iter()
        .position(|b| !(0x30..=0x3f).contains(b))
        .unwrap_or(bytes.len());
    let mut i = params_end;
    while bytes.get(i).is_some_and(|b| (0x20..=0x2f).contains(b)) {
        i += 1;
    }
    match bytes.get(i) {
        None => "",
        Some(&fin) if (0x40..=0x7e).contains(&fin) => {
            if color && fin == b'm' && i == params_end {
                sgr(&rest[..params_end], style);
            }
            &rest[i + 1..]
        }
        // Every byte before `i` is ASCII, so `i` is a char boundary.
        Some(_) => &rest[i..],
    }
}

/// Skips an OSC/DCS/SOS/PM/APC string up to BEL or ST; an ESC that does not
/// start ST aborts the string (and is processed as a new escape).
fn skip_string(rest: &str) -> &str {
    let bytes = rest.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            0x07 => return &rest[i + 1..],
            0x1b if bytes.get(i + 1) == Some(&b'\\') => return &rest[i + 2..],
            0x1b => return &rest[i..],
            0xc2 if bytes.get(i + 1) == Some(&0x9c) => return &rest[i + 2..],
            _ => {}
        }
    }
    ""
}

/// Applies SGR parameters (`"1;31"`, `"38;2;1;2;3"`, `"38:5:208"`) to `style`.
fn sgr(params: &str, style: &mut Style) {
    if params.starts_with(['<', '=', '>', '?']) {
        return;
    }
    let mut groups = params.split(';');
    while let Some(group) = groups.next() {
        let mut sub = group.split(':');
        let Some(code) = sub.next().and_then(param) else {
            continue;
        };
        let colon = group.contains(':');
        match code {
            0 => *style = Style::new(),
            1 => style.add_modifier.insert(Modifier::BOLD),
            2 => style.add_modifier.insert(Modifier::DIM),
            3 => style.add_modifier.insert(Modifier::ITALIC),
            4 => match sub.next().and_then(param) {
                Some(0) => style.add_modifier.remove(Modifier::UNDERLINED),
                _ => style.add_modifier.insert(Modifier::UNDERLINED),
            },
            5 => style.add_modifier.insert(Modifier::SLOW_BLINK),
            6 => style.add_modifier.insert(Modifier::RAPID_BLINK),
            7 => style.add_modifier.insert(Modifier::REVERSED),
            8 => style.add_modifier.insert(Modifier::HIDDEN),
            9 => style.add_modifier.insert(Modifier::CROSSED_OUT),
            21 => style.add_modifier.insert(Modifier::UNDERLINED),
            22 => style.add_modifier.remove(Modifier::BOLD | Modifier::DIM),
            23 => style.add_modifier.remove(Modifier::ITALIC),
            24 => style.add_modifier.remove(Modifier::UNDERLINED),
            25 => style
                .add_modifier
                .remove(Modifier::SLOW_BLINK | Modifier::RAPID_BLINK),
            27 => style.add_modifier.remove(Modifier::REVERSED),
            28 => style.add_modifier.remove(Modifier::HIDDEN),
            29 => style.add_modifier.remove(Modifier::CROSSED_OUT),
            30..=37 => style.fg = palette(&BASIC_COLORS, code - 30),
            38 => {
                if let Some(c) = extended_color(colon, &mut sub, &mut groups) {
                    style.fg = Some(c);
                }
            }
            39 => style.fg = None,
            40..=47 => style.bg = palette(&BASIC_COLORS, code - 40),
            48 => {
                if let Some(c) = extended_color(colon, &mut sub, &mut groups) {
                    style.bg = Some(c);
                }
            }
            49 => style.bg = None,
            58 => {
                // Underline colour: consumed, not shown.
                let _ = extended_color(colon, &mut sub, &mut groups);
            }
            90..=97 => style.fg = palette(&BRIGHT_COLORS, code - 90),
            100..=107 => style.bg = palette(&BRIGHT_COLORS, code - 100),
            _ => {}
        }
    }
}

/// One SGR number; empty means 0, garbage or overflow means none.
fn param(s: &str) -> Option<u32> {
    if s.is_empty() {
        Some(0)
    } else {
        s.parse().ok()
    }
}

/// One 0–255 component.
fn component(s: Option<&str>) -> Option<u8> {
    s.and_then(param).and_then(|v| u8::try_from(v).ok())
}

/// Entry `i` of an 8-colour table.
fn palette(table: &[Color; 8], i: u32) -> Option<Color> {
    table.get(usize::try_from(i).ok()?).copied()
}

/// The colour after a 38/48/58: `5;n` or `2;r;g;b`, either as further `;`
/// parameters (consumed from `groups`) or as `:` sub-parameters
/// (`38:2::r:g:b` with an optional colour-space id).
fn extended_color<'a>(
    colon: bool,
    sub: &mut impl Iterator<Item = &'a str>,
    groups: &mut impl Iterator<Item = &'a str>,
) -> Option<Color> {
    let source: &mut dyn Iterator<Item = &'a str> = if colon { sub } else { groups };
    match source.next().and_then(param)? {
        5 => component(source.next()).map(Color::Indexed),
        2 if colon => {
            let mut vals: [Option<&str>; 4] = [None; 4];
            let mut n = 0;
            for v in source {
                if let Some(slot) = vals.get_mut(n) {
                    *slot = Some(v);
                }
                n += 1;
            }
            let [a, b, c, d] = vals;
            let (r, g, b) = if n >= 4 { (b, c, d) } else { (a, b, c) };
            Some(Color::Rgb(component(r)?, component(g)?, component(b)?))
        }
        2 => {
            let (r, g, b) = (source.next(), source.next(), source.next());
            Some(Color::Rgb(component(r)?, component(g)?, component(b)?))
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Case-insensitive matching
// ---------------------------------------------------------------------------

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
struct Needle {
    /// The folded query, char by char (for highlighting).
    folded: Vec<char>,
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
    fn new(query: &str) -> Self {
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
    fn is_prefix_of(&self, mut chars: impl Iterator<Item = char>) -> bool {
        self.folded
            .iter()
            .all(|&n| chars.next().map(fold) == Some(n))
    }
}

// ---------------------------------------------------------------------------
// View state
// ---------------------------------------------------------------------------

/// The geometry a pane was last rendered with (or set by `viewport`), and
/// the buffer end it showed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Geometry {
    width: u16,
    height: u16,
    prefix: bool,
    end: u64,
}

/// An active search.
#[derive(Clone, Debug)]
struct Search {
    query: String,
    needle: Needle,
    /// Monotonic indices of matching lines, ascending.
    matches: VecDeque<u64>,
    /// Lines below this index have been scanned.
    scanned_end: u64,
    /// The match the view was last moved to.
    current: Option<u64>,
    /// Whether the last move wrapped around.
    wrapped: bool,
}

impl Search {
    fn new(query: &str) -> Self {
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
    fn rescan(&mut self, buf: &LogBuffer) {
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
    fn update(&mut self, buf: &LogBuffer) {
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
    fn step(&mut self, older: bool, bottom: Option<u64>) -> Option<u64> {
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

/// Scrolling / follow / wrap / search state of one pane (pure state, no I/O).
///
/// The view is anchored by its *bottom* line (a monotonic index), so it holds
/// still while lines arrive and while old lines are dropped; if the anchored
/// line itself is dropped the view clamps to the oldest line. In follow mode
/// the bottom is always the newest line.
///
/// Scrolling is in log lines; paging moves so that the top line becomes the
/// bottom line (or back), which with `wrap` on takes the wrapped heights into
/// account. For that the state needs the pane size: [`LogPane`] records it on
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
    geometry: Cell<Geometry>,
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
    /// search jumps. Rendering a [`LogPane`] records it too.
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

    /// The active query, if any (pass it to [`LogPane::highlight`]).
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
// Layout and the widget
// ---------------------------------------------------------------------------

/// Char-based line breaking: a char that does not fit in the rest of the row
/// starts a new row (a row always takes at least one char).
#[derive(Clone, Copy, Debug)]
struct RowWrap {
    width: usize,
    col: usize,
    started: bool,
}

impl RowWrap {
    fn new(width: usize) -> Self {
        Self {
            width,
            col: 0,
            started: false,
        }
    }

    /// Places a char of width `w`; true if it starts a new row.
    fn place(&mut self, w: usize) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    use ratatui::widgets::{Block, Borders};

    /// A buffer of `n` lines `"line i"` from rank 0.
    fn numbered(n: usize, capacity: usize) -> LogBuffer {
        let mut buf = LogBuffer::new(capacity);
        for i in 0..n {
            buf.push(LogLine::new(LogSource::Rank(0), format!("line {i}")));
        }
        buf
    }

    fn push_numbered(buf: &mut LogBuffer, range: Range<usize>) {
        for i in range {
            buf.push(LogLine::new(LogSource::Rank(0), format!("line {i}")));
        }
    }

    fn of(lines: &[&str]) -> LogBuffer {
        let mut buf = LogBuffer::new(1000);
        for l in lines {
            buf.push(LogLine::new(LogSource::Rank(0), *l));
        }
        buf
    }

    /// Renders `pane` into a fresh `w`×`h` buffer.
    fn draw(pane: LogPane<'_>, w: u16, h: u16) -> Buffer {
        let mut out = Buffer::empty(Rect::new(0, 0, w, h));
        pane.render(out.area, &mut out);
        out
    }

    /// Plain (no colour) pane of `buf`.
    fn plain(buf: &LogBuffer, state: &LogViewState, w: u16, h: u16) -> Buffer {
        let pane = LogPane {
            color: false,
            ..LogPane::new(buf, state)
        };
        draw(pane, w, h)
    }

    /// The text of each row, trailing blanks trimmed.
    fn rows(out: &Buffer) -> Vec<String> {
        let a = out.area;
        (a.top()..a.bottom())
            .map(|y| {
                let row: String = (a.left()..a.right())
                    .map(|x| out[(x, y)].symbol())
                    .collect();
                row.trim_end().to_string()
            })
            .collect()
    }

    // --- buffer ---------------------------------------------------------

    #[test]
    fn capacity_evicts_oldest_and_counts_dropped() {
        let buf = numbered(5, 3);
        assert_eq!(buf.len(), 3);
        assert_eq!(buf.dropped(), 2);
        assert_eq!(buf.first_index(), 2);
        assert_eq!(buf.end_index(), 5);
        assert_eq!(buf.get(0).map(|l| l.text.as_str()), Some("line 2"));
        assert_eq!(buf.get(3), None);
        assert_eq!(buf.get_abs(1), None);
        assert_eq!(buf.get_abs(4).map(|l| l.text.as_str()), Some("line 4"));
        assert_eq!(buf.get_abs(5), None);

        let mut zero = LogBuffer::new(0);
        zero.push(LogLine::new(LogSource::Supervisor, "x"));
        assert!(zero.is_empty());
        assert_eq!(zero.dropped(), 1);
        assert_eq!(zero.first_index(), zero.end_index());
    }

    // --- follow and scrolling -----------------------------------------------

    #[test]
    fn follow_shows_last_lines_bottom_aligned() {
        let buf = numbered(10, 100);
        let state = LogViewState::default();
        assert!(state.follow && !state.wrap);
        assert_eq!(
            plain(&buf, &state, 8, 4),
            Buffer::with_lines(["line 6  ", "line 7  ", "line 8  ", "line 9  "])
        );
        // Fewer lines than rows: still bottom-aligned.
        let few = numbered(2, 100);
        assert_eq!(
            rows(&plain(&few, &state, 8, 4)),
            ["", "", "line 0", "line 1"]
        );
    }

    #[test]
    fn terminal_draw_inside_a_block() {
        let buf = numbered(10, 100);
        let state = LogViewState::new();
        let mut terminal = Terminal::new(TestBackend::new(10, 4)).expect("test backend");
        terminal
            .draw(|f| {
                let block = Block::default().borders(Borders::ALL);
                let inner = block.inner(f.area());
                f.render_widget(block, f.area());
                f.render_widget(LogPane::new(&buf, &state), inner);
            })
            .expect("draw");
        terminal.backend().assert_buffer_lines([
            "┌────────┐",
            "│line 8  │",
            "│line 9  │",
            "└────────┘",
        ]);
    }

    #[test]
    fn scrolled_view_holds_while_lines_arrive() {
        let mut buf = numbered(10, 100);
        let mut state = LogViewState::new();
        plain(&buf, &state, 8, 3);
        state.scroll_up(2, &buf);
        assert!(!state.follow);
        assert_eq!(
            rows(&plain(&buf, &state, 8, 3)),
            ["line 5", "line 6", "line 7"]
        );
        push_numbered(&mut buf, 10..15);
        assert_eq!(
            rows(&plain(&buf, &state, 8, 3)),
            ["line 5", "line 6", "line 7"]
        );
    }

    #[test]
    fn scrolled_view_holds_while_front_is_dropped_then_clamps_to_oldest() {
        let mut buf = numbered(10, 10);
        let mut state = LogViewState::new();
        plain(&buf, &state, 8, 3);
        state.scroll_up(2, &buf);
        push_numbered(&mut buf, 10..13);
        assert_eq!(buf.dropped(), 3);
        assert_eq!(
            rows(&plain(&buf, &state, 8, 3)),
            ["line 5", "line 6", "line 7"]
        );
        // Lines above the anchor run out: the oldest line goes to the top.
        push_numbered(&mut buf, 13..16);
        assert_eq!(
            rows(&plain(&buf, &state, 8, 3)),
            ["line 6", "line 7", "line 8"]
        );
        // The anchored line itself is dropped: clamp to the oldest.
        push_numbered(&mut buf, 16..21);
        assert_eq!(buf.first_index(), 11);
        assert_eq!(state.bottom_index(&buf), Some(11));
        assert_eq!(
            rows(&plain(&buf, &state, 8, 3)),
            ["line 11", "line 12", "line 13"]
        );
    }

    #[test]
    fn scrolling_down_to_the_bottom_resumes_follow() {
        let mut buf = numbered(10, 100);
        let mut state = LogViewState::new();
        state.viewport(8, 3);
        state.scroll_up(3, &buf);
        state.scroll_down(1, &buf);
        assert!(!state.follow);
        assert_eq!(
            rows(&plain(&buf, &state, 8, 3)),
            ["line 5", "line 6", "line 7"]
        );
        state.scroll_down(5, &buf);
        assert!(state.follow);
        push_numbered(&mut buf, 10..12);
        assert_eq!(
            rows(&plain(&buf, &state, 8, 3)),
            ["line 9", "line 10", "line 11"]
        );
    }

    #[test]
    fn scroll_up_stops_at_the_top_page() {
        let buf = numbered(10, 100);
        let mut state = LogViewState::new();
        state.viewport(8, 3);
        state.scroll_up(100, &buf);
        assert_eq!(
            rows(&plain(&buf, &state, 8, 3)),
            ["line 0", "line 1", "line 2"]
        );
        // No dead zone: one line down moves the view.
        state.scroll_down(1, &buf);
        assert_eq!(
            rows(&plain(&buf, &state, 8, 3)),
            ["line 1", "line 2", "line 3"]
        );
    }

    #[test]
    fn paging_home_and_end() {
        let buf = numbered(20, 100);
        let mut state = LogViewState::new();
        state.viewport(8, 5);
        state.page_up(&buf);
        assert_eq!(
            rows(&plain(&buf, &state, 8, 5)),
            ["line 11", "line 12", "line 13", "line 14", "line 15"]
        );
        state.page_down(&buf);
        assert!(state.follow);
        state.home(&buf);
        assert!(!state.follow);
        assert_eq!(rows(&plain(&buf, &state, 8, 5))[0], "line 0");
        state.end(&buf);
        assert!(state.follow);
        assert_eq!(rows(&plain(&buf, &state, 8, 5))[4], "line 19");
    }

    #[test]
    fn toggle_follow_holds_the_rendered_view() {
        let mut buf = numbered(10, 100);
        let mut state = LogViewState::new();
        plain(&buf, &state, 8, 3);
        push_numbered(&mut buf, 10..12);
        state.toggle_follow();
        assert!(!state.follow);
        assert_eq!(
            rows(&plain(&buf, &state, 8, 3)),
            ["line 7", "line 8", "line 9"]
        );
        state.toggle_follow();
        assert_eq!(
            rows(&plain(&buf, &state, 8, 3)),
            ["line 9", "line 10", "line 11"]
        );
        // Switching the field off directly pins too.
        push_numbered(&mut buf, 12..14);
        state.follow = false;
        assert_eq!(
            rows(&plain(&buf, &state, 8, 3)),
            ["line 9", "line 10", "line 11"]
        );
        push_numbered(&mut buf, 14..16);
        assert_eq!(
            rows(&plain(&buf, &state, 8, 3)),
            ["line 9", "line 10", "line 11"]
        );
    }

    // --- wrapping -------------------------------------------------------------

    #[test]
    fn wrap_off_cuts_and_wrap_on_wraps() {
        let buf = of(&["abcdefghij", "xy"]);
        let mut state = LogViewState::new();
        assert_eq!(
            plain(&buf, &state, 4, 4),
            Buffer::with_lines(["    ", "    ", "abcd", "xy  "])
        );
        state.toggle_wrap();
        assert_eq!(
            plain(&buf, &state, 4, 4),
            Buffer::with_lines(["abcd", "efgh", "ij  ", "xy  "])
        );
        // Following: the bottom of the last line stays at the bottom.
        let long = of(&["abcdefghij"]);
        assert_eq!(rows(&plain(&long, &state, 4, 2)), ["efgh", "ij"]);
    }

    #[test]
    fn wrap_respects_display_width() {
        let buf = of(&["ab中文"]);
        let mut state = LogViewState::new();
        state.wrap = true;
        assert_eq!(
            plain(&buf, &state, 3, 3),
            Buffer::with_lines(["ab ", "中 ", "文 "])
        );
        // A wide char wider than the pane: no panic, no endless loop.
        let out = plain(&buf, &state, 1, 4);
        assert_eq!(rows(&out), ["a", "b", "", ""]);
    }

    #[test]
    fn wrapped_paging_and_home_use_wrapped_heights() {
        // Each line takes 2 rows at width 4.
        let lines: Vec<String> = (0..10).map(|i| format!("abcdef{i}")).collect();
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let buf = of(&refs);
        let mut state = LogViewState::new();
        state.wrap = true;
        assert_eq!(
            rows(&plain(&buf, &state, 4, 4)),
            ["abcd", "ef8", "abcd", "ef9"]
        );
        state.page_up(&buf);
        assert_eq!(
            rows(&plain(&buf, &state, 4, 4)),
            ["abcd", "ef7", "abcd", "ef8"]
        );
        state.home(&buf);
        assert_eq!(
            rows(&plain(&buf, &state, 4, 4)),
            ["abcd", "ef0", "abcd", "ef1"]
        );
        state.scroll_down(1, &buf);
        assert_eq!(
            rows(&plain(&buf, &state, 4, 4)),
            ["abcd", "ef1", "abcd", "ef2"]
        );
    }

    // --- text processing ------------------------------------------------------

    #[test]
    fn carriage_return_progress_shows_final_state() {
        let bar = "epoch 1  10%\r epoch 1  50%\r epoch 1 100%";
        assert_eq!(visible_text(bar), " epoch 1 100%");
        assert_eq!(visible_text("a\rb\r"), "b");
        assert_eq!(visible_text("a\r\r"), "a");
        assert_eq!(visible_text("\r"), "");
        let buf = of(&[bar]);
        let state = LogViewState::new();
        assert_eq!(rows(&plain(&buf, &state, 16, 1)), [" epoch 1 100%"]);
        // Colour set before the last CR still applies.
        let line = render_text("\x1b[31mold\rnew", true);
        assert_eq!(
            line.spans,
            [Span::styled("new", Style::new().fg(Color::Red))]
        );
    }

    #[test]
    fn ansi_sgr_becomes_styles() {
        let line = render_text("\x1b[1;31mERR\x1b[0m ok", true);
        assert_eq!(
            line.spans,
            [
                Span::styled(
                    "ERR",
                    Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
                ),
                Span::raw(" ok"),
            ]
        );
        let fg = |s: &str| {
            render_text(s, true)
                .spans
                .first()
                .and_then(|sp| sp.style.fg)
        };
        let bg = |s: &str| {
            render_text(s, true)
                .spans
                .first()
                .and_then(|sp| sp.style.bg)
        };
        let mods = |s: &str| {
            render_text(s, true)
                .spans
                .first()
                .map_or(Modifier::empty(), |sp| sp.style.add_modifier)
        };
        assert_eq!(fg("\x1b[37mx"), Some(Color::Gray));
        assert_eq!(fg("\x1b[91mx"), Some(Color::LightRed));
        assert_eq!(fg("\x1b[97mx"), Some(Color::White));
        assert_eq!(bg("\x1b[42mx"), Some(Color::Green));
        assert_eq!(bg("\x1b[100mx"), Some(Color::DarkGray));
        assert_eq!(fg("\x1b[38;5;208mx"), Some(Color::Indexed(208)));
        assert_eq!(fg("\x1b[38:5:9mx"), Some(Color::Indexed(9)));
        assert_eq!(fg("\x1b[38;2;1;2;3mx"), Some(Color::Rgb(1, 2, 3)));
        assert_eq!(bg("\x1b[48:2::10:20:30mx"), Some(Color::Rgb(10, 20, 30)));
        assert_eq!(bg("\x1b[48:2:10:20:30mx"), Some(Color::Rgb(10, 20, 30)));
        assert_eq!(fg("\x1b[38;2;300;1;1;32mx"), Some(Color::Green));
        assert_eq!(fg("\x1b[31;39mx"), None);
        assert_eq!(
            mods("\x1b[2;3;4;7mx"),
            Modifier::DIM | Modifier::ITALIC | Modifier::UNDERLINED | Modifier::REVERSED
        );
        assert_eq!(mods("\x1b[1;2;22mx"), Modifier::empty());
        assert!(mods("\x1b[1mx").contains(Modifier::BOLD));

        // In a pane: the cell's colours.
        let buf = of(&["\x1b[32mok\x1b[m \x1b[1;41mbad"]);
        let state = LogViewState::new();
        let out = draw(LogPane::new(&buf, &state), 8, 1);
        assert_eq!(out[(0, 0)].fg, Color::Green);
        assert_eq!(out[(2, 0)].fg, Color::Reset);
        assert_eq!(out[(3, 0)].bg, Color::Red);
        assert!(out[(3, 0)].modifier.contains(Modifier::BOLD));
        assert_eq!(rows(&out), ["ok bad"]);
    }

    #[test]
    fn no_color_sets_no_style() {
        let text = "\x1b[1;31mERR\x1b[0m \x1b[7mok";
        let line = render_text(text, false);
        assert_eq!(line.spans, [Span::raw("ERR ok")]);
        let buf = of(&[text]);
        let state = LogViewState::new();
        assert_eq!(plain(&buf, &state, 6, 1), Buffer::with_lines(["ERR ok"]));
    }

    #[test]
    fn other_escapes_and_controls_are_stripped() {
        let cases = [
            ("\x1b[2K\x1b[1Gdone\x1b[K", "done"),
            ("\x1b]0;title\x07text", "text"),
            ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"),
            ("bell\x07", "bell"),
            ("ab\x08c", "abc"),
            ("\x1b[?25lhid\x1b[?25h", "hid"),
            ("\x1b(Bx\x1b7y\x1b8", "xy"),
            ("\u{9b}31mx\u{9d}t\u{9c}y", "xy"),
            ("a\x1b[3;5Hb\x1b[1;2rc", "abc"),
            ("tab\there", "tab     here"),
            ("\tx", "        x"),
            ("中\tx", "中      x"),
            ("caf\u{e9} \u{a3}1", "caf\u{e9} \u{a3}1"),
        ];
        for (raw, shown) in cases {
            assert_eq!(visible_text(raw), shown, "{raw:?}");
            let line = render_text(raw, true);
            let text: String = line.spans.iter().map(|s| s.content.as_ref()).collect();
            assert_eq!(text, shown, "{raw:?}");
        }
    }

    #[test]
    fn truncated_and_invalid_escapes_never_panic() {
        let cases = [
            ("abc\x1b", "abc"),
            ("abc\x1b[", "abc"),
            ("abc\x1b[31", "abc"),
            ("abc\x1b]0;ti", "abc"),
            ("abc\x1b(", "abc"),
            ("\x1b[38;5mx", "x"),
            ("\x1b[38;2;1mx", "x"),
            ("\x1b[99999999999999999999mx", "x"),
            ("\x1b[31\u{e9}x", "\u{e9}x"),
            ("\x1b\u{e9}x", "\u{e9}x"),
            ("\x1b]0;t\x1b[31mx", "x"),
        ];
        for (raw, shown) in cases {
            assert_eq!(visible_text(raw), shown, "{raw:?}");
        }
        // Pseudo-random soup of escape fragments.
        let alphabet = [
            "\x1b", "[", "]", ";", ":", "3", "8", "5", "2", "m", "\r", "\t", "\x07", "\\", "é",
            "中", "a", "?", "\u{9b}", "\u{9c}", "\u{9d}", "(", "\x08", "0", "9", "H",
        ];
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut buf = LogBuffer::new(100);
        for _ in 0..2000 {
            let len = (next() % 24) as usize;
            let text: String = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            let styled: String = render_text(&text, true)
                .spans
                .iter()
                .map(|s| s.content.as_ref())
                .collect();
            assert_eq!(styled, visible_text(&text), "{text:?}");
            buf.push(LogLine::new(LogSource::Rank(3), text));
        }
        let mut state = LogViewState::new();
        for wrap in [false, true] {
            state.wrap = wrap;
            for (w, h) in [(1, 1), (3, 7), (40, 10)] {
                let pane = LogPane {
                    prefix_ranks: true,
                    highlight: Some("m"),
                    ..LogPane::new(&buf, &state)
                };
                draw(pane, w, h);
                state.page_up(&buf);
            }
        }
    }

    // --- merged view ------------------------------------------------------------

    #[test]
    fn merged_view_prefixes_source() {
        let mut buf = LogBuffer::new(10);
        buf.push(LogLine::new(LogSource::Rank(1), "hello"));
        buf.push(LogLine::new(LogSource::Supervisor, "boot"));
        let state = LogViewState::new();
        let pane = LogPane {
            prefix_ranks: true,
            ..LogPane::new(&buf, &state)
        };
        let out = draw(pane, 20, 2);
        assert_eq!(rows(&out), ["[rank 1] hello", "[supervisor] boot"]);
        assert_eq!(out[(0, 0)].fg, RANK_COLORS[1]);
        assert!(out[(0, 0)].modifier.contains(Modifier::DIM));
        assert!(!out[(9, 0)].modifier.contains(Modifier::DIM));
        assert_eq!(out[(9, 0)].fg, Color::Reset);
        let no_color = LogPane {
            color: false,
            ..pane
        };
        let out = draw(no_color, 20, 2);
        assert_eq!(out[(0, 0)].fg, Color::Reset);
        assert!(out[(0, 0)].modifier.contains(Modifier::DIM));
    }

    // --- search -----------------------------------------------------------------

    fn search_buffer() -> LogBuffer {
        let mut lines = vec!["Loss 1.0", "acc", "loss 0.9", "acc", "LOSS 0.8"];
        lines.extend(["acc"; 5]);
        of(&lines)
    }

    #[test]
    fn search_counts_and_jumps_to_last_match_above_bottom() {
        let buf = search_buffer();
        let mut state = LogViewState::new();
        state.viewport(10, 3);
        state.set_search("loss", &buf);
        assert_eq!(state.search_status().as_deref(), Some("/loss  3 of 3"));
        assert!(!state.follow);
        assert!(!state.search_wrapped());
        let out = plain(&buf, &state, 10, 3);
        assert!(
            rows(&out).contains(&"LOSS 0.8".to_string()),
            "{:?}",
            rows(&out)
        );
        assert_eq!(state.search_query(), Some("loss"));
    }

    #[test]
    fn search_n_goes_older_and_shift_n_newer_with_wrap_around() {
        let buf = search_buffer();
        let mut state = LogViewState::new();
        state.viewport(10, 3);
        state.set_search("loss", &buf);
        state.next_match(&buf);
        assert_eq!(state.search_status().as_deref(), Some("/loss  2 of 3"));
        state.next_match(&buf);
        assert_eq!(state.search_status().as_deref(), Some("/loss  1 of 3"));
        assert_eq!(rows(&plain(&buf, &state, 10, 3))[0], "Loss 1.0");
        state.next_match(&buf);
        assert!(state.search_wrapped());
        assert_eq!(
            state.search_status().as_deref(),
            Some("/loss  3 of 3  (wrapped)")
        );
        state.prev_match(&buf);
        assert_eq!(
            state.search_status().as_deref(),
            Some("/loss  1 of 3  (wrapped)")
        );
        state.prev_match(&buf);
        assert!(!state.search_wrapped());
        assert_eq!(state.search_status().as_deref(), Some("/loss  2 of 3"));
        assert!(rows(&plain(&buf, &state, 10, 3)).contains(&"loss 0.9".to_string()));
    }

    #[test]
    fn search_starts_at_the_scrolled_position_and_wraps_to_newest() {
        let buf = search_buffer();
        let mut state = LogViewState::new();
        state.viewport(10, 3);
        state.scroll_up(7, &buf); // bottom = line 2
        state.set_search("loss", &buf);
        assert_eq!(state.search_status().as_deref(), Some("/loss  2 of 3"));
        state.home(&buf); // bottom = line 2 (top page)
        state.set_search("acc 0", &buf);
        assert_eq!(state.search_status().as_deref(), Some("/acc 0  no match"));
        let mut only_late = of(&["a", "b", "c", "d", "x late"]);
        only_late.push(LogLine::new(LogSource::Supervisor, "y"));
        let mut state = LogViewState::new();
        state.viewport(10, 2);
        state.home(&only_late);
        state.set_search("LATE", &only_late);
        assert!(state.search_wrapped());
        assert_eq!(
            state.search_status().as_deref(),
            Some("/LATE  1 of 1  (wrapped)")
        );
    }

    #[test]
    fn search_without_match_and_clearing() {
        let buf = search_buffer();
        let mut state = LogViewState::new();
        state.set_search("xyz", &buf);
        assert_eq!(state.search_status().as_deref(), Some("/xyz  no match"));
        assert!(state.follow, "no match leaves the view alone");
        state.next_match(&buf);
        state.prev_match(&buf);
        assert_eq!(state.search_status().as_deref(), Some("/xyz  no match"));
        state.set_search("", &buf);
        assert_eq!(state.search_status(), None);
        assert_eq!(state.search_query(), None);
    }

    #[test]
    fn search_matches_visible_text_case_insensitively() {
        let buf = of(&["\x1b[31ml\x1b[0moss", "lo\rx", "ÉPOCH 3", "tab\tend"]);
        let status = |query: &str| {
            let mut state = LogViewState::new();
            state.set_search(query, &buf);
            state.search_status().unwrap_or_default()
        };
        assert_eq!(status("loss"), "/loss  1 of 1");
        assert_eq!(status("lo"), "/lo  1 of 1");
        assert_eq!(status("époch"), "/époch  1 of 1");
        assert_eq!(status("b   "), "/b     1 of 1");
        assert_eq!(status("x"), "/x  1 of 1");
    }

    #[test]
    fn search_follows_arrivals_and_drops() {
        let mut buf = LogBuffer::new(5);
        for t in ["loss a", "x", "loss b", "x", "x"] {
            buf.push(LogLine::new(LogSource::Rank(0), t));
        }
        let mut state = LogViewState::new();
        state.set_search("loss", &buf);
        assert_eq!(state.search_status().as_deref(), Some("/loss  2 of 2"));
        buf.push(LogLine::new(LogSource::Rank(0), "loss c")); // drops "loss a"
        state.refresh(&buf);
        assert_eq!(state.search_status().as_deref(), Some("/loss  1 of 2"));
        for _ in 0..3 {
            buf.push(LogLine::new(LogSource::Rank(0), "x")); // drops "loss b"
        }
        state.refresh(&buf);
        assert_eq!(state.search_status().as_deref(), Some("/loss  1 of 1"));
    }

    #[test]
    fn search_jump_centres_an_off_screen_match() {
        let mut buf = numbered(100, 1000);
        if let Some(line) = buf.lines.get_mut(10) {
            line.text = "needle".to_string();
        }
        let mut state = LogViewState::new();
        state.viewport(10, 5);
        state.set_search("needle", &buf);
        assert_eq!(
            rows(&plain(&buf, &state, 10, 5)),
            ["line 8", "line 9", "needle", "line 11", "line 12"]
        );
    }

    #[test]
    fn highlight_reverses_matches() {
        let buf = of(&["a Loss b loss"]);
        let state = LogViewState::new();
        let pane = LogPane {
            highlight: Some("LOSS"),
            color: false,
            ..LogPane::new(&buf, &state)
        };
        let out = draw(pane, 14, 1);
        let reversed: String = (0..14)
            .map(|x| {
                if out[(x, 0)].modifier.contains(Modifier::REVERSED) {
                    '^'
                } else {
                    ' '
                }
            })
            .collect();
        assert_eq!(reversed, "  ^^^^   ^^^^ ");
    }

    // --- degenerate sizes ---------------------------------------------------------

    #[test]
    fn empty_buffer_and_tiny_areas_render_without_panic() {
        let empty = LogBuffer::new(10);
        let mut state = LogViewState::new();
        for (w, h) in [(1, 0), (1, 1), (0, 0), (0, 3), (10, 5)] {
            let out = plain(&empty, &state, w, h);
            assert!(out.content.iter().all(|c| c.symbol() == " "));
        }
        state.scroll_up(3, &empty);
        state.page_up(&empty);
        state.page_down(&empty);
        state.home(&empty);
        state.set_search("x", &empty);
        state.next_match(&empty);
        assert_eq!(state.search_status().as_deref(), Some("/x  no match"));

        let buf = of(&["中文 wide", "abc"]);
        let mut state = LogViewState::new();
        for wrap in [false, true] {
            state.wrap = wrap;
            for (w, h) in [(1, 0), (1, 1), (1, 3), (2, 1)] {
                plain(&buf, &state, w, h);
                state.page_up(&buf);
                state.page_down(&buf);
            }
        }
        state.wrap = false;
        state.end(&buf);
        assert_eq!(rows(&plain(&buf, &state, 1, 1)), ["a"]);
        // An area larger than the target buffer is clipped to it.
        let mut out = Buffer::empty(Rect::new(0, 0, 2, 2));
        LogPane::new(&buf, &state).render(Rect::new(1, 1, 50, 50), &mut out);
        assert_eq!(rows(&out), ["", " a"]);
    }
}
