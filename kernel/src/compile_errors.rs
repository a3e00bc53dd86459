//! Compile errors of Rust cells in the cell's own terms, as rustc would show them for a file
//! named `cell`: the message, `--> cell:LINE:COLUMN`, the cell's lines with each span underlined
//! and labelled, then rustc's notes and help. evcxr compiles a generated crate, and rustc's own
//! text (`rendered`) points into it (`src/lib.rs:19:9`); it is never shown.
//!
//! evcxr maps each span back to the code it was given (`CompilationError::spanned_messages`:
//! 1-based lines and character columns); a cell's Rust is run in chunks between its magics, so a
//! chunk's first line in the cell (`first_line`) moves them to the cell's lines.

use evcxr::CompilationError;
use serde_json::Value;

/// One compile error (or warning), as rustc reported it, with its spans in the chunk's lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// `error`, `warning`.
    pub level: String,
    /// `E0308`.
    pub code: Option<String>,
    pub message: String,
    /// Spans in the chunk, with their labels.
    pub labels: Vec<Label>,
    /// What rustc and evcxr add (`note: ...`, `help: ...`), and labels that point outside the
    /// chunk (into code evcxr generated).
    pub notes: Vec<String>,
}

/// A labelled span of the chunk: 1-based lines, 1-based character columns (end exclusive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    pub start_line: usize,
    pub start_column: usize,
    pub end_line: usize,
    pub end_column: usize,
    pub text: String,
    /// The span rustc reports the error at (`^`); others are context (`-`).
    pub primary: bool,
}

impl Diagnostic {
    /// What evcxr reports of one error.
    pub fn of(e: &CompilationError) -> Diagnostic {
        let level = match e.level() {
            "" => "error".to_string(),
            l => l.to_string(),
        };
        let message = e.message();
        // evcxr labels a span rustc left unlabelled with `LEVEL: MESSAGE`, the header's words.
        let header_words = format!("{level}: {message}");
        let mut labels = Vec::new();
        let mut notes = Vec::new();
        for m in e.spanned_messages() {
            let text = if m.label == header_words {
                String::new()
            } else {
                m.label.clone()
            };
            match &m.span {
                Some(s) => labels.push(Label {
                    start_line: s.start_line,
                    start_column: s.start_column,
                    end_line: s.end_line,
                    end_column: s.end_column,
                    text,
                    primary: m.is_primary,
                }),
                None if !text.is_empty() => notes.push(format!("note: {text}")),
                None => {}
            }
        }
        notes.extend(children(&e.json));
        if let Some(hint) = e.evcxr_extra_hint() {
            notes.push(format!("note: {hint}"));
        }
        Diagnostic {
            level,
            code: e.code().map(str::to_string),
            message,
            labels,
            notes,
        }
    }

    /// The diagnostic's lines for the chunk `code`, whose first line is the cell's line
    /// `first_line`.
    pub fn render(&self, code: &str, first_line: usize) -> Vec<String> {
        let source: Vec<&str> = code.lines().collect();
        let cell_line = |chunk_line: usize| chunk_line + first_line - 1;
        let mut labels: Vec<&Label> = self.labels.iter().collect();
        labels.sort_by_key(|l| (l.start_line, !l.primary, l.start_column));
        let width = labels
            .iter()
            .map(|l| cell_line(l.start_line).to_string().len())
            .max()
            .unwrap_or(1);
        let pad = " ".repeat(width);
        let mut out = vec![match &self.code {
            Some(c) => format!("{}[{c}]: {}", self.level, self.message),
            None => format!("{}: {}", self.level, self.message),
        }];
        let at = labels.iter().find(|l| l.primary).or(labels.first());
        if let Some(at) = at {
            out.push(format!(
                "{pad}--> cell:{}:{}",
                cell_line(at.start_line),
                at.start_column
            ));
            out.push(format!("{pad} |"));
        }
        let mut shown: Option<usize> = None;
        for label in &labels {
            let text = source.get(label.start_line - 1).copied().unwrap_or("");
            if shown != Some(label.start_line) {
                if shown.is_some_and(|s| label.start_line > s + 1) {
                    out.push("...".to_string());
                }
                out.push(
                    format!("{:>width$} | {text}", cell_line(label.start_line))
                        .trim_end()
                        .to_string(),
                );
                shown = Some(label.start_line);
            }
            out.push(
                format!("{pad} | {}", underline(text, label))
                    .trim_end()
                    .to_string(),
            );
        }
        for note in &self.notes {
            let mut lines = note.lines();
            if let Some(first) = lines.next() {
                out.push(format!("{pad} = {first}"));
            }
            out.extend(lines.map(|l| format!("{pad}   {l}").trim_end().to_string()));
        }
        out
    }
}

/// The traceback of a cell's compile errors: each error's lines, a blank line between errors.
pub fn traceback(diagnostics: &[Diagnostic], code: &str, first_line: usize) -> Vec<String> {
    let mut out = Vec::new();
    for (i, d) in diagnostics.iter().enumerate() {
        if i > 0 {
            out.push(String::new());
        }
        out.extend(d.render(code, first_line));
    }
    out
}

/// `^^^ label` (or `---` for a secondary span) under `line`'s characters the label covers; a
/// span running onto later lines is underlined to the end of its first line.
fn underline(line: &str, label: &Label) -> String {
    let before = label.start_column.saturating_sub(1);
    // Tabs kept, so the marks line up under the code whatever the tab width.
    let indent: String = line
        .chars()
        .take(before)
        .map(|c| if c == '\t' { '\t' } else { ' ' })
        .chain(std::iter::repeat(' '))
        .take(before)
        .collect();
    let end = if label.end_line > label.start_line {
        line.chars().count() + 1
    } else {
        label.end_column
    };
    let mark = if label.primary { "^" } else { "-" };
    let marks = mark.repeat(end.saturating_sub(label.start_column).max(1));
    format!("{indent}{marks} {}", label.text)
}

/// rustc's notes and help for the error (its `children`), with any suggested replacement.
fn children(json: &Value) -> Vec<String> {
    let Some(children) = json["children"].as_array() else {
        return Vec::new();
    };
    children
        .iter()
        .filter_map(|child| {
            let level = child["level"].as_str()?;
            let message = child["message"].as_str()?;
            let message = message.replace("`evcxr_variable_store`", "<end of input>");
            let replacement = child["spans"][0]["suggested_replacement"].as_str();
            Some(match replacement {
                Some(r) if !r.trim().is_empty() => format!("{level}: {message}: `{}`", r.trim()),
                _ => format!("{level}: {message}"),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(line: usize, start: usize, end: usize, text: &str, primary: bool) -> Label {
        Label {
            start_line: line,
            start_column: start,
            end_line: line,
            end_column: end,
            text: text.into(),
            primary,
        }
    }

    fn mismatched() -> Diagnostic {
        Diagnostic {
            level: "error".into(),
            code: Some("E0308".into()),
            message: "mismatched types".into(),
            labels: vec![
                label(2, 12, 14, "expected due to this", false),
                label(2, 17, 23, "expected `u8`, found `&str`", true),
            ],
            notes: vec!["note: a note".into()],
        }
    }

    #[test]
    fn an_error_shows_the_cells_line_with_its_spans() {
        let code = "let a = 1;\nlet total: u8 = \"many\";\n";
        assert_eq!(
            mismatched().render(code, 1),
            [
                "error[E0308]: mismatched types",
                " --> cell:2:17",
                "  |",
                "2 | let total: u8 = \"many\";",
                "  |                 ^^^^^^ expected `u8`, found `&str`",
                "  |            -- expected due to this",
                "  = note: a note",
            ]
        );
    }

    #[test]
    fn a_chunk_after_magics_is_numbered_from_its_first_line_in_the_cell() {
        let code = "let a = 1;\nlet total: u8 = \"many\";\n";
        let lines = mismatched().render(code, 9);
        assert_eq!(lines[1], "  --> cell:10:17");
        assert_eq!(lines[3], "10 | let total: u8 = \"many\";");
        assert_eq!(
            lines[4],
            "   |                 ^^^^^^ expected `u8`, found `&str`"
        );
    }

    #[test]
    fn spans_on_several_lines_and_tabs() {
        let d = Diagnostic {
            level: "error".into(),
            code: None,
            message: "oops".into(),
            labels: vec![
                Label {
                    start_line: 1,
                    start_column: 2,
                    end_line: 2,
                    end_column: 3,
                    text: "from here".into(),
                    primary: false,
                },
                label(4, 3, 6, "", true),
            ],
            notes: vec!["note: first\nsecond".into()],
        };
        assert_eq!(
            d.render("\tab\nc\nd\n\t fooz\n", 1),
            [
                "error: oops",
                " --> cell:4:3",
                "  |",
                "1 | \tab",
                "  | \t-- from here",
                "...",
                "4 | \t fooz",
                "  | \t ^^^",
                "  = note: first",
                "    second",
            ]
        );
    }

    #[test]
    fn without_spans_only_the_message_and_notes() {
        let d = Diagnostic {
            level: "error".into(),
            code: None,
            message: "cannot persist `x`".into(),
            labels: vec![],
            notes: vec!["note: a reason".into()],
        };
        assert_eq!(
            traceback(&[d.clone(), d], "", 1),
            [
                "error: cannot persist `x`",
                "  = note: a reason",
                "",
                "error: cannot persist `x`",
                "  = note: a reason",
            ]
        );
    }

    #[test]
    fn notes_and_help_come_from_rustcs_children() {
        let json = serde_json::json!({"children": [
            {"level": "note", "message": "expected `u32`", "spans": []},
            {"level": "help", "message": "try", "spans": [{"suggested_replacement": "x.into()"}]},
            {"level": "help", "message": "remove `evcxr_variable_store`", "spans": []},
        ]});
        assert_eq!(
            children(&json),
            [
                "note: expected `u32`",
                "help: try: `x.into()`",
                "help: remove <end of input>",
            ]
        );
    }
}
