//! Rich outputs of the `%ddp` magics: what a notebook cell shows for a run list, a run, a
//! comparison, a plot, the devices, and the live run card.
//!
//! Every [`Output`] has a faithful `text/plain` (for `ls`, `show` and `compare` exactly the text
//! the `ddp` CLI prints, from [`ddp_workspaces::present::report`]), usually a `text/html` beside it;
//! plots add `image/svg+xml` and `image/png`, the `--json` variants `application/json`.
//! [`Output::to_mime_map`] turns one into the MIME bundle of a Jupyter `display_data`,
//! `execute_result` or `update_display_data` message.
//!
//! The HTML uses inline `style` attributes only (no `<style>` element, no JavaScript), so it
//! looks the same in JupyterLab, Notebook, VS Code and exported pages; every piece of text that
//! comes from a run (ids, names, log lines, errors, spec) goes through [`html_escape`]. Charts
//! are `<img>` elements with the SVG in a data URI ([`svg_img`]), never inline `<svg>`, which the
//! sanitiser of an untrusted notebook strips; they are as wide as they were drawn at most and
//! shrink with the output area.
//!
//! Layout:
//! - this file: [`Output`] and its MIME bundle, [`html_escape`], [`svg_img`].
//! - `table`: HTML tables from [`ddp_workspaces::present::report::Table`] (status cells coloured; cells
//!   that wrap for a table that must fit the output area, `compare`), key/value tables, status
//!   badges.
//! - `runs`: `ls`, `show`, `compare` (text, HTML, JSON) and `plot` (HTML with the image, SVG,
//!   PNG).
//! - `sweep`: the sweep card (a search's status, budget, rungs, leaderboard, parallel
//!   coordinates; a plain sweep's runs).
//! - `devices`: the GPUs, CPU, memory and the runs' processes ([`devices::devices`]).
//! - `card`: the run card ([`card::Card`]), built from [`ddp_workspaces::RunEvent`]s and
//!   re-rendered in place while the run trains; `text`: its text helpers (progress bar,
//!   supervisor events in words, log lines cleaned of terminal escapes).
//! - `tests`, `card_tests`: unit tests.

pub mod card;
pub mod devices;
pub mod runs;
pub mod sweep;
pub mod table;
pub mod text;

#[cfg(test)]
mod card_tests;
#[cfg(test)]
mod tests;

use base64::Engine as _;
use serde_json::{Map, Value};

/// One rich output: `plain` always, the other representations when there are any.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Output {
    /// `text/plain`.
    pub plain: String,
    /// `text/html`.
    pub html: Option<String>,
    /// `application/json`.
    pub json: Option<Value>,
    /// `image/svg+xml`.
    pub svg: Option<String>,
    /// `image/png`: the bytes of a PNG file (base64-encoded in the MIME bundle).
    pub png: Option<Vec<u8>>,
}

impl Output {
    /// Plain text only (messages, errors).
    pub fn plain(plain: impl Into<String>) -> Output {
        Output {
            plain: plain.into(),
            ..Output::default()
        }
    }

    /// Plain text and HTML.
    pub fn rich(plain: impl Into<String>, html: impl Into<String>) -> Output {
        Output::plain(plain).with_html(html)
    }

    /// A JSON value, with `plain` as its text form.
    pub fn json(plain: impl Into<String>, value: Value) -> Output {
        Output::plain(plain).with_json(value)
    }

    /// An image as SVG and PNG, with `plain` describing it.
    pub fn image(plain: impl Into<String>, svg: String, png: Vec<u8>) -> Output {
        Output {
            svg: Some(svg),
            png: Some(png),
            ..Output::plain(plain)
        }
    }

    pub fn with_html(mut self, html: impl Into<String>) -> Output {
        self.html = Some(html.into());
        self
    }

    pub fn with_json(mut self, value: Value) -> Output {
        self.json = Some(value);
        self
    }

    /// The Jupyter MIME bundle (the `data` of a display message): `text/plain`, and `text/html`,
    /// `application/json` (the value itself, not its text), `image/svg+xml`, `image/png`
    /// (base64) for those present.
    pub fn to_mime_map(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("text/plain".into(), Value::String(self.plain.clone()));
        if let Some(html) = &self.html {
            m.insert("text/html".into(), Value::String(html.clone()));
        }
        if let Some(json) = &self.json {
            m.insert("application/json".into(), json.clone());
        }
        if let Some(svg) = &self.svg {
            m.insert("image/svg+xml".into(), Value::String(svg.clone()));
        }
        if let Some(png) = &self.png {
            let b64 = base64::engine::general_purpose::STANDARD.encode(png);
            m.insert("image/png".into(), Value::String(b64));
        }
        m
    }
}

/// An SVG image as an `<img class="ddp-chart">` whose `src` is a base64 `data:image/svg+xml`
/// URI: it survives the HTML sanitiser of an untrusted notebook, which strips inline `<svg>`.
/// It is `width` pixels wide at most (the width it was drawn at, so it never scales up) and
/// shrinks with a narrower output area; `alt` is escaped.
pub fn svg_img(svg: &str, width: u32, alt: &str) -> String {
    let data = base64::engine::general_purpose::STANDARD.encode(svg);
    format!(
        "<img class=\"ddp-chart\" src=\"data:image/svg+xml;base64,{data}\" \
         style=\"width:100%;max-width:{width}px;height:auto\" alt=\"{}\">",
        html_escape(alt)
    )
}

/// `s` safe as HTML text and as a quoted attribute value: `&`, `<`, `>`, `"` and `'` escaped.
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
