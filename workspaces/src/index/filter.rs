//! Run filters (`--where`): an expression over a run's fields, parsed once into an [`Expr`]
//! and evaluated against any source of field values. Pure.
//!
//! ```text
//! spec.train.lr < 0.01 and status = "completed"
//! (val_accuracy >= 0.98 or tags = "keep") and not experiment = "scratch"
//! ```
//!
//! A comparison is `FIELD OP VALUE` with `OP` one of `= != < <= > >=`; values are numbers,
//! `"strings"` (or `'strings'`) and `true`/`false`; `and` binds tighter than `or`, `not`
//! tighter than both; parentheses group. The fields ([`FIELDS`], and `spec.KEY` for every spec
//! key) are checked when the expression is parsed: an unknown one is named with the nearest
//! known one. A field a run does not have (a metric not recorded yet) makes its comparison
//! false, and its `!=` true. `tags = "x"` is true when the run has tag `x`.

use ddp_trainer::spec::KEYS;

use crate::runs::workspace::nearest;
use crate::{Error, Result};

/// The fields a filter may name besides `spec.KEY`.
pub const FIELDS: &[&str] = &[
    "id",
    "experiment",
    "name",
    "status",
    "sweep",
    "host",
    "replicas",
    "restarts",
    "tags",
    "created",
    "val_loss",
    "val_accuracy",
    "test_loss",
    "test_accuracy",
    "perplexity",
    "samples_per_sec",
    "epoch",
    "step",
];

/// A field's value in a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Num(f64),
    Str(String),
    Bool(bool),
    /// Several values (a run's tags): a comparison holds when it holds for one of them.
    List(Vec<String>),
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// A parsed filter.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Cmp { field: String, op: Op, value: Value },
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
}

impl Expr {
    /// Parses `text`; the error names the position and what was expected there.
    pub fn parse(text: &str) -> Result<Expr> {
        let tokens = lex(text)?;
        let mut p = Parser {
            text,
            tokens,
            at: 0,
        };
        let e = p.or()?;
        match p.peek() {
            None => Ok(e),
            Some(t) => Err(p.error(t.at, "expected `and`, `or` or the end")),
        }
    }

    /// The fields the filter reads, each once.
    pub fn fields(&self) -> Vec<&str> {
        let mut out = Vec::new();
        self.collect_fields(&mut out);
        out
    }

    fn collect_fields<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Expr::And(a, b) | Expr::Or(a, b) => {
                a.collect_fields(out);
                b.collect_fields(out);
            }
            Expr::Not(e) => e.collect_fields(out),
            Expr::Cmp { field, .. } => {
                if !out.contains(&field.as_str()) {
                    out.push(field);
                }
            }
        }
    }

    /// Whether a run whose fields `get` gives satisfies the filter.
    pub fn matches(&self, get: &dyn Fn(&str) -> Option<Value>) -> bool {
        match self {
            Expr::And(a, b) => a.matches(get) && b.matches(get),
            Expr::Or(a, b) => a.matches(get) || b.matches(get),
            Expr::Not(e) => !e.matches(get),
            Expr::Cmp { field, op, value } => match get(field) {
                None => *op == Op::Ne,
                Some(Value::List(items)) => {
                    let any = items
                        .iter()
                        .any(|i| compare(&Value::Str(i.clone()), *op, value));
                    if *op == Op::Ne {
                        items
                            .iter()
                            .all(|i| compare(&Value::Str(i.clone()), *op, value))
                    } else {
                        any
                    }
                }
                Some(v) => compare(&v, *op, value),
            },
        }
    }
}

/// A `--where` expression as given and as parsed (parsed once, where the argument is read).
#[derive(Debug, Clone)]
pub struct Where {
    pub text: String,
    pub expr: Expr,
}

impl std::str::FromStr for Where {
    type Err = Error;

    fn from_str(s: &str) -> Result<Where> {
        Ok(Where {
            text: s.to_string(),
            expr: Expr::parse(s)?,
        })
    }
}

impl PartialEq for Where {
    fn eq(&self, other: &Where) -> bool {
        self.text == other.text
    }
}

impl Eq for Where {}

/// A `--sort` field: ascending, or descending with a leading `-` (`-val_accuracy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortKey {
    pub field: String,
    pub descending: bool,
}

impl std::str::FromStr for SortKey {
    type Err = Error;

    fn from_str(s: &str) -> Result<SortKey> {
        let (descending, field) = match s.strip_prefix('-') {
            Some(f) => (true, f),
            None => (false, s),
        };
        check_field(field).map_err(|m| Error::Invalid(format!("--sort {s}: {m}")))?;
        Ok(SortKey {
            field: field.to_string(),
            descending,
        })
    }
}

impl SortKey {
    /// How `a` and `b` (this field's values of two runs) are ordered: a run without the field
    /// comes last either way; numbers before strings.
    pub fn order(&self, a: Option<&Value>, b: Option<&Value>) -> std::cmp::Ordering {
        use std::cmp::Ordering::*;
        let rank = |v: &Value| match v {
            Value::Num(_) => 0,
            Value::Bool(_) => 1,
            Value::Str(_) | Value::List(_) => 2,
        };
        let (a, b) = match (a, b) {
            (None, None) => return Equal,
            (None, Some(_)) => return Greater,
            (Some(_), None) => return Less,
            (Some(a), Some(b)) => (a, b),
        };
        let o = match (a, b) {
            (Value::Num(x), Value::Num(y)) => x.partial_cmp(y).unwrap_or(Equal),
            (Value::Str(x), Value::Str(y)) => x.cmp(y),
            (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
            (Value::List(x), Value::List(y)) => x.cmp(y),
            _ => rank(a).cmp(&rank(b)),
        };
        if self.descending { o.reverse() } else { o }
    }
}

/// `have OP want`; values of different kinds are unequal and unordered.
fn compare(have: &Value, op: Op, want: &Value) -> bool {
    let ord = match (have, want) {
        (Value::Num(a), Value::Num(b)) => a.partial_cmp(b),
        (Value::Str(a), Value::Str(b)) => Some(a.cmp(b)),
        (Value::Bool(a), Value::Bool(b)) => Some(a.cmp(b)),
        _ => None,
    };
    use std::cmp::Ordering::*;
    match (op, ord) {
        (Op::Ne, None) => true,
        (_, None) => false,
        (Op::Eq, Some(o)) => o == Equal,
        (Op::Ne, Some(o)) => o != Equal,
        (Op::Lt, Some(o)) => o == Less,
        (Op::Le, Some(o)) => o != Greater,
        (Op::Gt, Some(o)) => o == Greater,
        (Op::Ge, Some(o)) => o != Less,
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(String),
    Str(String),
    Num(f64),
    Op(Op),
    Open,
    Close,
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    /// Byte offset in the text, for messages.
    at: usize,
}

fn lex(text: &str) -> Result<Vec<Token>> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let err = |at: usize, msg: &str| {
        Error::Invalid(format!("--where {text:?}: at character {}: {msg}", at + 1))
    };
    while i < bytes.len() {
        let c = bytes[i] as char;
        let start = i;
        let tok = match c {
            c if c.is_whitespace() => {
                i += 1;
                continue;
            }
            '(' => {
                i += 1;
                Tok::Open
            }
            ')' => {
                i += 1;
                Tok::Close
            }
            '"' | '\'' => {
                let end = text[i + 1..]
                    .find(c)
                    .ok_or_else(|| err(start, "a string without its closing quote"))?;
                let s = text[i + 1..i + 1 + end].to_string();
                i += end + 2;
                Tok::Str(s)
            }
            '=' | '!' | '<' | '>' => {
                let two = text.get(i..i + 2).unwrap_or("");
                let (op, len) = match (c, two) {
                    (_, "!=") => (Op::Ne, 2),
                    (_, "<=") => (Op::Le, 2),
                    (_, ">=") => (Op::Ge, 2),
                    (_, "==") => (Op::Eq, 2),
                    ('=', _) => (Op::Eq, 1),
                    ('<', _) => (Op::Lt, 1),
                    ('>', _) => (Op::Gt, 1),
                    _ => return Err(err(start, "`!` needs `=`")),
                };
                i += len;
                Tok::Op(op)
            }
            c if c.is_ascii_digit() || c == '-' || c == '.' => {
                let end = text[i..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+')))
                    .map_or(text.len(), |e| i + e);
                let n = text[i..end]
                    .parse::<f64>()
                    .map_err(|_| err(start, &format!("`{}` is not a number", &text[i..end])))?;
                i = end;
                Tok::Num(n)
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let end = text[i..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.')))
                    .map_or(text.len(), |e| i + e);
                let w = text[i..end].to_string();
                i = end;
                Tok::Word(w)
            }
            other => return Err(err(start, &format!("unexpected `{other}`"))),
        };
        out.push(Token { tok, at: start });
    }
    Ok(out)
}

struct Parser<'a> {
    text: &'a str,
    tokens: Vec<Token>,
    at: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn error(&self, at: usize, msg: &str) -> Error {
        Error::Invalid(format!(
            "--where {:?}: at character {}: {msg}",
            self.text,
            at + 1
        ))
    }

    fn end(&self) -> usize {
        self.text.len()
    }

    fn keyword(&mut self, word: &str) -> bool {
        match self.peek() {
            Some(Token {
                tok: Tok::Word(w), ..
            }) if w.eq_ignore_ascii_case(word) => {
                self.at += 1;
                true
            }
            _ => false,
        }
    }

    fn or(&mut self) -> Result<Expr> {
        let mut e = self.and()?;
        while self.keyword("or") {
            e = Expr::Or(Box::new(e), Box::new(self.and()?));
        }
        Ok(e)
    }

    fn and(&mut self) -> Result<Expr> {
        let mut e = self.not()?;
        while self.keyword("and") {
            e = Expr::And(Box::new(e), Box::new(self.not()?));
        }
        Ok(e)
    }

    fn not(&mut self) -> Result<Expr> {
        if self.keyword("not") {
            return Ok(Expr::Not(Box::new(self.not()?)));
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<Expr> {
        let Some(t) = self.peek().cloned() else {
            return Err(self.error(
                self.end(),
                "expected a comparison such as status = \"completed\"",
            ));
        };
        self.at += 1;
        match t.tok {
            Tok::Open => {
                let e = self.or()?;
                match self.peek() {
                    Some(Token {
                        tok: Tok::Close, ..
                    }) => {
                        self.at += 1;
                        Ok(e)
                    }
                    Some(t) => Err(self.error(t.at, "expected `)`")),
                    None => Err(self.error(self.end(), "expected `)`")),
                }
            }
            Tok::Word(field) => {
                check_field(&field).map_err(|m| self.error(t.at, &m))?;
                let op = match self.peek() {
                    Some(Token {
                        tok: Tok::Op(op), ..
                    }) => *op,
                    Some(o) => return Err(self.error(o.at, "expected one of = != < <= > >=")),
                    None => return Err(self.error(self.end(), "expected one of = != < <= > >=")),
                };
                self.at += 1;
                let value = match self.peek().cloned() {
                    Some(Token {
                        tok: Tok::Num(n), ..
                    }) => Value::Num(n),
                    Some(Token {
                        tok: Tok::Str(s), ..
                    }) => Value::Str(s),
                    Some(Token {
                        tok: Tok::Word(w), ..
                    }) if w == "true" || w == "false" => Value::Bool(w == "true"),
                    Some(Token {
                        tok: Tok::Word(w),
                        at,
                    }) => {
                        return Err(
                            self.error(at, &format!("`{w}` is no value: quote a string (\"{w}\")"))
                        );
                    }
                    Some(o) => return Err(self.error(o.at, "expected a value")),
                    None => return Err(self.error(self.end(), "expected a value")),
                };
                self.at += 1;
                Ok(Expr::Cmp { field, op, value })
            }
            _ => Err(self.error(t.at, "expected a field name or `(`")),
        }
    }
}

/// A field a filter may name, or why not (with the nearest).
fn check_field(field: &str) -> std::result::Result<(), String> {
    if FIELDS.contains(&field) {
        return Ok(());
    }
    if let Some(key) = field.strip_prefix("spec.")
        && KEYS.contains(&key)
    {
        return Ok(());
    }
    let mut known: Vec<String> = FIELDS.iter().map(|f| f.to_string()).collect();
    known.extend(KEYS.iter().map(|k| format!("spec.{k}")));
    let known: Vec<&str> = known.iter().map(String::as_str).collect();
    let hint = match nearest(field, &known).first() {
        Some(k) => format!("; did you mean `{k}`?"),
        None => String::new(),
    };
    Err(format!("no field `{field}`{hint}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(field: &str) -> Option<Value> {
        match field {
            "status" => Some(Value::Str("completed".into())),
            "spec.train.lr" => Some(Value::Num(0.005)),
            "val_loss" => Some(Value::Num(0.12)),
            "tags" => Some(Value::List(vec!["keep".into(), "lr".into()])),
            "spec.ddp.overlap" => Some(Value::Bool(true)),
            _ => None,
        }
    }

    fn holds(text: &str) -> bool {
        Expr::parse(text).unwrap().matches(&run)
    }

    #[test]
    fn comparisons_and_logic_evaluate_on_a_run() {
        let cases = [
            ("spec.train.lr < 0.01 and status = \"completed\"", true),
            ("spec.train.lr >= 0.01 or status = 'failed'", false),
            ("not status = \"failed\"", true),
            (
                "val_loss <= 0.12 and val_loss > 0.11 and val_loss != 0.2",
                true,
            ),
            // `and` binds tighter than `or`.
            (
                "status = \"failed\" and val_loss < 1 or spec.train.lr < 1",
                true,
            ),
            (
                "status = \"failed\" and (val_loss < 1 or spec.train.lr < 1)",
                false,
            ),
            ("tags = \"keep\"", true),
            ("tags != \"keep\"", false),
            ("tags != \"other\"", true),
            ("spec.ddp.overlap = true", true),
            // A field the run does not have: false, and its != true.
            ("test_accuracy > 0.5", false),
            ("test_accuracy != 0.5", true),
            // Kinds that differ are unequal and unordered.
            ("status < 3", false),
            ("status != 3", true),
            ("STATUS = \"completed\" AND NOT val_loss > 1", false),
        ];
        for (text, want) in cases {
            if text.starts_with("STATUS") {
                // Field names are exact; keywords are not.
                assert!(Expr::parse(text).is_err());
                continue;
            }
            assert_eq!(holds(text), want, "{text}");
        }
        assert!(holds("status = \"completed\" AND NOT val_loss > 1"));
    }

    #[test]
    fn sort_keys_order_missing_values_last_either_way() {
        let asc: SortKey = "val_loss".parse().unwrap();
        let desc: SortKey = "-val_loss".parse().unwrap();
        let (one, two) = (Value::Num(1.0), Value::Num(2.0));
        use std::cmp::Ordering::*;
        assert_eq!(asc.order(Some(&one), Some(&two)), Less);
        assert_eq!(desc.order(Some(&one), Some(&two)), Greater);
        assert_eq!(asc.order(None, Some(&one)), Greater);
        assert_eq!(desc.order(None, Some(&one)), Greater);
        let e = "-val_los".parse::<SortKey>().unwrap_err().to_string();
        assert!(
            e.contains("--sort -val_los: no field `val_los`; did you mean `val_loss`?"),
            "{e}"
        );
    }

    #[test]
    fn mistakes_are_named_where_they_are() {
        let cases = [
            (
                "spec.train.lrr < 0.01",
                "at character 1: no field `spec.train.lrr`; did you mean `spec.train.lr`?",
            ),
            ("val_los < 1", "did you mean `val_loss`?"),
            (
                "status = completed",
                "at character 10: `completed` is no value: quote a string (\"completed\")",
            ),
            ("status = \"completed", "a string without its closing quote"),
            ("status \"x\"", "expected one of = != < <= > >="),
            ("status =", "expected a value"),
            ("(status = \"x\"", "expected `)`"),
            (
                "status = \"x\" val_loss < 1",
                "expected `and`, `or` or the end",
            ),
            ("status ! \"x\"", "`!` needs `=`"),
            ("val_loss < 1.2.3", "`1.2.3` is not a number"),
            ("", "expected a comparison"),
            ("status = \"x\" and", "expected a comparison"),
            ("val_loss < 1 # x", "unexpected `#`"),
        ];
        for (text, want) in cases {
            let e = Expr::parse(text).unwrap_err().to_string();
            assert!(e.contains(want) && e.starts_with("--where"), "{text}: {e}");
        }
    }
}
