//! The log pane: buffer, terminal processing, view state, search and drawing.

use std::ops::Range;

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Span;
use ratatui::widgets::{Block, Borders, Widget};

use super::buffer::RANK_COLORS;
use super::*;

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
        "\x1b", "[", "]", ";", ":", "3", "8", "5", "2", "m", "\r", "\t", "\x07", "\\", "é", "中",
        "a", "?", "\u{9b}", "\u{9c}", "\u{9d}", "(", "\x08", "0", "9", "H",
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
