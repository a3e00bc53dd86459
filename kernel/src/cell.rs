//! A cell's source split into what runs it: `%ddp` line magics, a `%%ddp` cell magic, and Rust
//! (evcxr) between them, in order; and whether a cell is complete (`is_complete_request`).
//!
//! Rules (IPython's, for one kernel's magics): a cell whose first non-blank line starts with `%%`
//! is a cell magic, its body the rest of the cell; otherwise every line starting with `%` (after
//! indentation) is a line magic (a trailing `\` continues it on the next line), and the lines
//! between magics are Rust, run as one chunk each. Lines starting with `:` are evcxr commands
//! (`:dep`, `:vars`, ...) and belong to the Rust chunk.

/// One piece of a cell, in the order it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// `%NAME ARGS` (continuation lines joined): `name` without `%`.
    LineMagic { name: String, args: String },
    /// `%%NAME ARGS` on the first line, then the body.
    CellMagic {
        name: String,
        args: String,
        body: String,
        /// The cell's line number (1-based) of the body's first line, for messages about it.
        body_line: usize,
    },
    /// Rust code (and evcxr commands).
    Rust {
        code: String,
        /// The cell's line number (1-based) of the code's first line, for compile errors.
        first_line: usize,
    },
}

/// Splits `code` into segments; blank Rust chunks are dropped.
pub fn segments(code: &str) -> Vec<Segment> {
    let trimmed = code.trim_start();
    if let Some(rest) = trimmed.strip_prefix("%%") {
        let (first, body) = rest.split_once('\n').unwrap_or((rest, ""));
        let (name, args) = split_name(first);
        let magic_line = code[..code.len() - trimmed.len()].matches('\n').count() + 1;
        return vec![Segment::CellMagic {
            name,
            args,
            body: body.to_string(),
            body_line: magic_line + 1,
        }];
    }
    let mut out = Vec::new();
    let mut rust = String::new();
    // The cell's line number of the next line and of the pending Rust chunk's first line.
    let mut line_no = 0;
    let mut rust_line = 1;
    let mut lines = code.lines();
    while let Some(line) = lines.next() {
        line_no += 1;
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix('%') {
            flush_rust(&mut rust, rust_line, &mut out);
            let mut full = rest.to_string();
            while full.ends_with('\\') {
                full.pop();
                line_no += 1;
                match lines.next() {
                    Some(next) => {
                        full.push(' ');
                        full.push_str(next.trim());
                    }
                    None => break,
                }
            }
            let (name, args) = split_name(&full);
            out.push(Segment::LineMagic { name, args });
        } else {
            if rust.is_empty() {
                rust_line = line_no;
            }
            rust.push_str(line);
            rust.push('\n');
        }
    }
    flush_rust(&mut rust, rust_line, &mut out);
    out
}

fn flush_rust(rust: &mut String, first_line: usize, out: &mut Vec<Segment>) {
    if !rust.trim().is_empty() {
        out.push(Segment::Rust {
            code: std::mem::take(rust),
            first_line,
        });
    }
    rust.clear();
}

fn split_name(s: &str) -> (String, String) {
    let s = s.trim();
    match s.split_once(char::is_whitespace) {
        Some((n, a)) => (n.to_string(), a.trim().to_string()),
        None => (s.to_string(), String::new()),
    }
}

/// The answer to `is_complete_request`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completeness {
    Complete,
    /// More input is needed; the indent for the next line.
    Incomplete(String),
    Invalid,
}

/// Whether `code` is ready to run: for magics, a known name, balanced quotes and no trailing `\`
/// (a `%%ddp` cell needs a body); for Rust, balanced brackets outside strings and comments.
pub fn completeness(code: &str, known_magic: impl Fn(&str) -> bool) -> Completeness {
    let trimmed = code.trim_start();
    if trimmed.starts_with("%%") {
        return match segments(code).first() {
            Some(Segment::CellMagic { name, body, .. }) => {
                if !known_magic(name) {
                    Completeness::Invalid
                } else if body.trim().is_empty() {
                    Completeness::Incomplete(String::new())
                } else {
                    Completeness::Complete
                }
            }
            _ => Completeness::Invalid,
        };
    }
    if code.trim_end().ends_with('\\') && last_line_is_magic(code) {
        return Completeness::Incomplete(String::new());
    }
    let mut rust = String::new();
    for seg in segments(code) {
        match seg {
            Segment::LineMagic { name, args } => {
                if !known_magic(&name) {
                    return Completeness::Invalid;
                }
                if ddp_workspaces::commands::split(&args).is_err() {
                    return Completeness::Incomplete(String::new());
                }
            }
            Segment::Rust { code, .. } => rust.push_str(&code),
            Segment::CellMagic { .. } => return Completeness::Invalid,
        }
    }
    rust_completeness(&rust)
}

fn last_line_is_magic(code: &str) -> bool {
    // The magic a trailing `\` continues: the last line that starts one, with only continued
    // lines after it.
    let lines: Vec<&str> = code.trim_end().lines().collect();
    let mut i = lines.len();
    while i > 0 {
        i -= 1;
        if lines[i].trim_start().starts_with('%') {
            return true;
        }
        if i == 0 || !lines[i - 1].trim_end().ends_with('\\') {
            return false;
        }
    }
    false
}

/// Balanced brackets, strings and comments in Rust source.
pub fn rust_completeness(code: &str) -> Completeness {
    let chars: Vec<char> = code.chars().collect();
    let mut stack: Vec<char> = Vec::new();
    let mut i = 0;
    let n = chars.len();
    while i < n {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            '/' if next == Some('/') => {
                while i < n && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if next == Some('*') => {
                let mut depth = 1;
                i += 2;
                while i < n && depth > 0 {
                    if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                        depth += 1;
                        i += 1;
                    } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        i += 1;
                    }
                    i += 1;
                }
                if depth > 0 {
                    return Completeness::Incomplete(String::new());
                }
                continue;
            }
            'r' if matches!(next, Some('"') | Some('#')) && (i == 0 || !is_ident(chars[i - 1])) => {
                // Raw string r"..." / r#"..."#.
                let mut j = i + 1;
                let mut hashes = 0;
                while j < n && chars[j] == '#' {
                    hashes += 1;
                    j += 1;
                }
                if j < n && chars[j] == '"' {
                    j += 1;
                    loop {
                        if j >= n {
                            return Completeness::Incomplete(String::new());
                        }
                        if chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) {
                            i = j + hashes;
                            break;
                        }
                        j += 1;
                    }
                }
            }
            '"' => {
                i += 1;
                loop {
                    if i >= n {
                        return Completeness::Incomplete(String::new());
                    }
                    match chars[i] {
                        '\\' => i += 1,
                        '"' => break,
                        _ => {}
                    }
                    i += 1;
                }
            }
            '\'' => {
                // A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a).
                if next == Some('\\') {
                    let mut j = i + 2;
                    while j < n && chars[j] != '\'' {
                        j += 1;
                    }
                    i = j;
                } else if chars.get(i + 2) == Some(&'\'') {
                    i += 2;
                }
            }
            '(' | '[' | '{' => stack.push(c),
            ')' | ']' | '}' => {
                let open = match c {
                    ')' => '(',
                    ']' => '[',
                    _ => '{',
                };
                if stack.pop() != Some(open) {
                    return Completeness::Invalid;
                }
            }
            _ => {}
        }
        i += 1;
    }
    if stack.is_empty() {
        Completeness::Complete
    } else {
        Completeness::Incomplete("    ".repeat(stack.len()))
    }
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(n: &str) -> bool {
        n == "ddp"
    }

    #[test]
    fn splits_magics_and_rust_in_order() {
        let segs = segments(
            "let x = 1;\n%ddp ls --json\n\nlet y = 2;\n  %ddp show \\\n  latest\nlet z = 3;\n",
        );
        assert_eq!(
            segs,
            vec![
                Segment::Rust {
                    code: "let x = 1;\n".into(),
                    first_line: 1
                },
                Segment::LineMagic {
                    name: "ddp".into(),
                    args: "ls --json".into()
                },
                Segment::Rust {
                    code: "\nlet y = 2;\n".into(),
                    first_line: 3
                },
                Segment::LineMagic {
                    name: "ddp".into(),
                    args: "show  latest".into()
                },
                Segment::Rust {
                    code: "let z = 3;\n".into(),
                    first_line: 7
                },
            ]
        );
    }

    #[test]
    fn a_cell_magic_takes_the_whole_body() {
        let segs = segments("\n%%ddp run --wait\nname = \"x\"\n%ddp ls\n");
        assert_eq!(
            segs,
            vec![Segment::CellMagic {
                name: "ddp".into(),
                args: "run --wait".into(),
                body: "name = \"x\"\n%ddp ls\n".into(),
                body_line: 3,
            }]
        );
    }

    #[test]
    fn evcxr_commands_stay_with_rust() {
        assert_eq!(
            segments(":dep rand\nlet x = 1;"),
            vec![Segment::Rust {
                code: ":dep rand\nlet x = 1;\n".into(),
                first_line: 1
            }]
        );
    }

    #[test]
    fn completeness_of_rust() {
        use Completeness::*;
        assert_eq!(completeness("40 + 2", known), Complete);
        assert_eq!(completeness("fn f() {}", known), Complete);
        assert_eq!(completeness("fn f() {", known), Incomplete("    ".into()));
        assert_eq!(
            completeness("fn f() { if x { ", known),
            Incomplete("        ".into())
        );
        assert_eq!(completeness("fn f() }", known), Invalid);
        assert_eq!(
            completeness("let s = \"{ not a brace", known),
            Incomplete("".into())
        );
        assert_eq!(completeness("let s = \"}\";", known), Complete);
        assert_eq!(completeness("let c = '}'; let d = '\\'';", known), Complete);
        assert_eq!(completeness("fn f<'a>(x: &'a str) {}", known), Complete);
        assert_eq!(completeness("// {\n1", known), Complete);
        assert_eq!(completeness("/* { */ 1", known), Complete);
        assert_eq!(completeness("/* open", known), Incomplete("".into()));
        assert_eq!(completeness("let r = r#\"{\"#;", known), Complete);
    }

    #[test]
    fn completeness_of_magics() {
        use Completeness::*;
        assert_eq!(completeness("%ddp ls", known), Complete);
        assert_eq!(completeness("%ddp ls \\", known), Incomplete("".into()));
        assert_eq!(completeness("%ddp run \"a b", known), Incomplete("".into()));
        assert_eq!(completeness("%nosuchmagic", known), Invalid);
        assert_eq!(completeness("%%ddp run", known), Incomplete("".into()));
        assert_eq!(completeness("%%ddp run\nname = \"x\"", known), Complete);
        assert_eq!(completeness("%%other\nx", known), Invalid);
        assert_eq!(
            completeness("%ddp ls\nfn f() {", known),
            Incomplete("    ".into())
        );
    }
}
