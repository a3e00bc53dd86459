//! Terminal processing of one raw log line: `\r` overwrite, ANSI escapes,
//! controls and tabs, fed as shown characters to a [`Sink`].

use std::borrow::Cow;

use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use unicode_width::UnicodeWidthChar;

/// Tab stops are every this many columns.
const TAB_WIDTH: usize = 8;

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

/// Receives the visible characters of a line, with their display width.
pub(super) trait Sink {
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
pub(super) fn needs_processing(text: &str) -> bool {
    text.bytes().any(|b| b < 0x20 || b == 0x7f || b == 0xc2)
}

/// Feeds the visible characters of `text` to `sink` (see [`render_text`]).
pub(super) fn process<S: Sink>(text: &str, color: bool, sink: &mut S) {
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
