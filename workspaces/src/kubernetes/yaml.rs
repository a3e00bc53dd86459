//! A JSON value written as block-style YAML, the way manifests are read and written by hand.
//!
//! Every string is double-quoted with JSON's escapes (valid YAML 1.1 and 1.2), so that no value
//! can be read as something else: `kubectl`'s YAML 1.1 parser takes a bare `yes`, `on` or `no`
//! for a boolean and `010` for a number. A string of several lines ending in one newline is a
//! literal block (`|`) instead. Keys are bare where they are plain identifiers. An object's
//! `apiVersion`, `kind`, `metadata` and `name` come first, the other keys in alphabetical order.

use serde_json::{Map, Value};

/// Keys written before the others, in this order.
const FIRST: [&str; 4] = ["apiVersion", "kind", "metadata", "name"];

/// `value` (an object) as YAML lines, each ending in a newline.
pub fn to_yaml(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(map) if !map.is_empty() => object(map, 0, false, &mut out),
        other => {
            out.push_str(&scalar(other, 0));
            out.push('\n');
        }
    }
    out
}

/// The keys of `map` in writing order.
fn ordered(map: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let rank = |k: &str| FIRST.iter().position(|f| *f == k).unwrap_or(FIRST.len());
    let mut entries: Vec<_> = map.iter().collect();
    entries.sort_by(|(a, _), (b, _)| rank(a).cmp(&rank(b)).then(a.cmp(b)));
    entries
}

/// The entries of a non-empty object, each at `indent`; with `after_dash`, the first follows a
/// sequence item's `- ` on its line.
fn object(map: &Map<String, Value>, indent: usize, after_dash: bool, out: &mut String) {
    for (i, (key, value)) in ordered(map).into_iter().enumerate() {
        if i > 0 || !after_dash {
            push_indent(out, indent);
        }
        out.push_str(&self::key(key));
        out.push(':');
        nested(value, indent, out);
    }
}

/// What follows `key:` or `-`: a scalar on the same line, or a block on the next lines.
fn nested(value: &Value, indent: usize, out: &mut String) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            out.push('\n');
            object(map, indent + 2, false, out);
        }
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            sequence(items, indent + 2, out);
        }
        other => {
            out.push(' ');
            out.push_str(&scalar(other, indent + 2));
            out.push('\n');
        }
    }
}

/// The items of a non-empty array, each `- ` at `indent`.
fn sequence(items: &[Value], indent: usize, out: &mut String) {
    for item in items {
        push_indent(out, indent);
        match item {
            Value::Object(map) if !map.is_empty() => {
                out.push_str("- ");
                object(map, indent + 2, true, out);
            }
            Value::Array(inner) if !inner.is_empty() => {
                out.push_str("-\n");
                sequence(inner, indent + 2, out);
            }
            other => {
                out.push_str("- ");
                out.push_str(&scalar(other, indent + 2));
                out.push('\n');
            }
        }
    }
}

/// A scalar (or an empty container) on one line; a literal block's lines at `indent`.
fn scalar(value: &Value, indent: usize) -> String {
    match value {
        Value::String(s) if is_block(s) => {
            let mut block = String::from("|");
            for line in s.lines() {
                block.push('\n');
                if !line.is_empty() {
                    block.push_str(&" ".repeat(indent));
                    block.push_str(line);
                }
            }
            block
        }
        Value::Object(_) => "{}".to_string(),
        Value::Array(_) => "[]".to_string(),
        // JSON's own forms: quoted strings, numbers, true, false, null.
        other => other.to_string(),
    }
}

/// Several lines, one final newline, no other control character, no line starting with a space
/// (a literal block would need an indentation indicator).
fn is_block(s: &str) -> bool {
    s.ends_with('\n')
        && !s.ends_with("\n\n")
        && s.trim_end_matches('\n').contains('\n')
        && !s.chars().any(|c| c.is_control() && c != '\n')
        && !s.lines().any(|l| l.starts_with(' '))
}

/// A key bare when it is a plain identifier (`apiVersion`, `nvidia.com/gpu`), quoted otherwise.
fn key(k: &str) -> String {
    let plain = k.starts_with(|c: char| c.is_ascii_alphabetic())
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "./_-".contains(c))
        && !matches!(
            k.to_ascii_lowercase().as_str(),
            "y" | "n" | "yes" | "no" | "on" | "off" | "true" | "false" | "null"
        );
    if plain {
        k.to_string()
    } else {
        Value::String(k.to_string()).to_string()
    }
}

fn push_indent(out: &mut String, indent: usize) {
    out.push_str(&" ".repeat(indent));
}
