//! HTML tables (class `ddp-table`) and status badges, with inline styles only.

use std::fmt::Write as _;

use ddp_workspaces::RunStatus;
use ddp_workspaces::present::report::Table;

use super::html_escape;

/// The style of every `<table>`.
const TABLE_STYLE: &str = "border-collapse:collapse;font-size:13px;margin:4px 0";
/// The style of every `<th>` and `<td>`.
const CELL_STYLE: &str =
    "text-align:left;padding:2px 10px 2px 0;border-bottom:1px solid #e5e7eb;white-space:nowrap";
/// The style of a [`wrapping_html_table`]: never wider than the output area.
const WRAPPING_TABLE_STYLE: &str = "border-collapse:collapse;font-size:13px;margin:4px 0;\
                                    max-width:100%;table-layout:auto";
/// Its cells: text wraps between words and after the separators of keys, paths and ids
/// ([`breakable`]), no column wider than [`MAX_CELL_EM`] em.
const WRAPPING_CELL_STYLE: &str = "text-align:left;padding:2px 8px 2px 0;\
                                   border-bottom:1px solid #e5e7eb;vertical-align:top;\
                                   white-space:normal;overflow-wrap:break-word;max-width:14em";
/// The widest a column of a [`wrapping_html_table`] gets, em.
pub const MAX_CELL_EM: u32 = 14;

/// The colour of a status (text of status cells, background of badges); `None` for any other
/// text.
pub fn status_colour(status: &str) -> Option<&'static str> {
    Some(match status {
        "queued" => "#6b7280",
        "running" => "#2563eb",
        "restarting" => "#d97706",
        "completed" => "#15803d",
        "failed" => "#b91c1c",
        "stopped" => "#a16207",
        "paused" => "#7c3aed",
        _ => return None,
    })
}

/// A status as a small coloured pill (white text on the status colour).
pub fn status_badge(status: RunStatus) -> String {
    let colour = status_colour(status.as_str()).unwrap_or("#6b7280");
    format!(
        "<span class=\"ddp-status ddp-status-{s}\" style=\"background:{colour};color:#fff;\
         border-radius:9px;padding:1px 8px;font-size:12px;font-weight:600\">{s}</span>",
        s = status.as_str()
    )
}

/// `t` as an HTML table (`<table class="ddp-table">`, header in `<thead>`), every cell escaped;
/// the cells of a `STATUS` column are coloured by status. Cells do not wrap.
pub fn html_table(t: &Table) -> String {
    styled_table(t, TABLE_STYLE, CELL_STYLE, html_escape)
}

/// [`html_table`] whose cells wrap, so that the table fits the output area however many
/// columns it has (`%ddp compare`): columns are at most [`MAX_CELL_EM`] em wide, and the table
/// at most as wide as its container.
pub fn wrapping_html_table(t: &Table) -> String {
    styled_table(t, WRAPPING_TABLE_STYLE, WRAPPING_CELL_STYLE, breakable)
}

/// `s` escaped, with a line break opportunity (`<wbr>`) after each `/`, `.`, `_`, `-`, `=` and
/// `,` inside it, so that dotted keys, paths and ids wrap at their separators rather than
/// widening their column (letters are never split).
pub fn breakable(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        out.push_str(&html_escape(c.encode_utf8(&mut [0; 4])));
        if matches!(c, '/' | '.' | '_' | '-' | '=' | ',') && chars.peek().is_some() {
            out.push_str("<wbr>");
        }
    }
    out
}

fn styled_table(
    t: &Table,
    table_style: &str,
    cell_style: &str,
    text: fn(&str) -> String,
) -> String {
    let status_col = t.column("STATUS");
    let mut h = format!("<table class=\"ddp-table\" style=\"{table_style}\">\n<thead><tr>");
    for head in &t.header {
        let _ = write!(h, "<th style=\"{cell_style}\">{}</th>", text(head));
    }
    h.push_str("</tr></thead>\n<tbody>\n");
    for row in &t.rows {
        h.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            let colour = (Some(i) == status_col)
                .then(|| status_colour(cell))
                .flatten();
            match colour {
                Some(c) => {
                    let _ = write!(
                        h,
                        "<td style=\"{cell_style};color:{c};font-weight:600\">{}</td>",
                        text(cell)
                    );
                }
                None => {
                    let _ = write!(h, "<td style=\"{cell_style}\">{}</td>", text(cell));
                }
            }
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</tbody>\n</table>");
    h
}

/// A two-column table of `key → value` (keys in bold), both escaped; `raw_values` lists keys
/// whose value is already HTML (a status badge) and is put in as it is.
pub fn key_value_table(rows: &[(&str, String)], raw_values: &[&str]) -> String {
    let mut h = format!("<table class=\"ddp-table ddp-kv\" style=\"{TABLE_STYLE}\">\n<tbody>\n");
    for (key, value) in rows {
        let value = if raw_values.contains(key) {
            value.clone()
        } else {
            html_escape(value)
        };
        let _ = writeln!(
            h,
            "<tr><th style=\"{CELL_STYLE};font-weight:600\">{}</th>\
             <td style=\"{CELL_STYLE};white-space:pre-wrap\">{value}</td></tr>",
            html_escape(key)
        );
    }
    h.push_str("</tbody>\n</table>");
    h
}

/// A grey note under a table (`text` escaped).
pub fn note(text: &str) -> String {
    format!(
        "<div class=\"ddp-note\" style=\"color:#6b7280;font-style:italic\">{}</div>",
        html_escape(text)
    )
}

/// `text` in a `<pre>` (escaped), scrolling horizontally rather than wrapping.
pub fn pre(text: &str) -> String {
    format!(
        "<pre style=\"margin:4px 0;padding:6px;background:#f9fafb;overflow-x:auto;\
         font-size:12px\">{}</pre>",
        html_escape(text)
    )
}

/// A horizontal bar (a `div` in a `div`) filled to `pct` percent (clamped to 0..100; not a
/// number: empty) in `colour`.
pub fn bar(pct: f64, colour: &str) -> String {
    let p = if pct.is_finite() {
        pct.clamp(0.0, 100.0)
    } else {
        0.0
    };
    format!(
        "<div class=\"ddp-bar\" style=\"background:#e5e7eb;height:8px;border-radius:3px\">\
         <div style=\"background:{colour};width:{p:.1}%;height:100%;border-radius:3px\"></div></div>"
    )
}

/// A stacked bar: one coloured segment per `(share in %, colour, title)`, left to right, each
/// titled (a tooltip) with its name.
pub fn stacked_bar(parts: &[(f64, &str, &str)]) -> String {
    let mut segments = String::new();
    for (pct, colour, title) in parts {
        let p = if pct.is_finite() {
            pct.clamp(0.0, 100.0)
        } else {
            0.0
        };
        segments.push_str(&format!(
            "<div title=\"{title}\" style=\"background:{colour};width:{p:.1}%;height:100%\"></div>"
        ));
    }
    format!(
        "<div class=\"ddp-stack\" style=\"display:flex;background:#e5e7eb;height:8px;border-radius:3px;overflow:hidden\">{segments}</div>"
    )
}
