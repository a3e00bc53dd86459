//! The legend: a strip under the panels (never on the data), its entries (a colour per run,
//! then the line styles) flowing in centred rows that fit the image's width.

use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::style::{LINE_WIDTH, Scale, TEST_SIZE, VAL_RADIUS, label_style};

/// What an entry's mark shows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Mark {
    /// A run: a swatch of its colour.
    Run(RGBColor),
    /// Training loss: a solid black line.
    Train,
    /// Validation: a dashed black line with a circle.
    Val,
    /// The final test evaluation: a black triangle.
    Test,
}

/// One legend entry: a mark and its text.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Entry {
    pub(super) mark: Mark,
    pub(super) label: String,
}

/// Width of a mark, pixels.
const MARK_W: i32 = 18;
/// Space between a mark and its text, and around the strip.
const GAP: i32 = 6;
/// Space between two entries of a row.
const SPACING: i32 = 20;

/// Entries laid out in rows: per row the entries' indices and x offsets.
pub(super) struct Legend<'a> {
    entries: &'a [Entry],
    rows: Vec<Vec<(usize, i32)>>,
    row_h: i32,
    style: TextStyle<'static>,
}

impl<'a> Legend<'a> {
    /// Lays `entries` out in rows no wider than `area` (text measured with the area's font).
    pub(super) fn layout<DB: DrawingBackend>(
        area: &DrawingArea<DB, Shift>,
        entries: &'a [Entry],
        s: Scale,
    ) -> Result<Legend<'a>, String> {
        let style = label_style(s);
        let width = area.dim_in_pixel().0 as i32 - 2 * GAP;
        let mut rows: Vec<Vec<(usize, i32)>> = Vec::new();
        let mut row: Vec<(usize, i32)> = Vec::new();
        let mut x = 0;
        let mut text_h = 0;
        for (i, e) in entries.iter().enumerate() {
            let (tw, th) = area
                .estimate_text_size(&e.label, &style)
                .map_err(|e| e.to_string())?;
            text_h = text_h.max(th as i32);
            let w = MARK_W + GAP + tw as i32;
            if !row.is_empty() && x + SPACING + w > width {
                rows.push(centred(std::mem::take(&mut row), x, width));
                x = 0;
            }
            if !row.is_empty() {
                x += SPACING;
            }
            row.push((i, x));
            x += w;
        }
        if !row.is_empty() {
            rows.push(centred(row, x, width));
        }
        Ok(Legend {
            entries,
            rows,
            row_h: text_h.max(TEST_SIZE * 2) + GAP,
            style,
        })
    }

    /// Height of the strip, pixels.
    pub(super) fn height(&self) -> u32 {
        (self.rows.len() as i32 * self.row_h + 2 * GAP) as u32
    }

    /// Draws the entries on `area` (the strip, [`Legend::height`] high).
    pub(super) fn draw<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
    ) -> Result<(), String> {
        let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
        let text = self.style.pos(Pos::new(HPos::Left, VPos::Center));
        let key = BLACK.stroke_width(LINE_WIDTH);
        for (r, row) in self.rows.iter().enumerate() {
            let y = GAP + r as i32 * self.row_h + self.row_h / 2;
            for &(i, x0) in row {
                let x = GAP + x0;
                let e = &self.entries[i];
                match e.mark {
                    Mark::Run(c) => area.draw(&Rectangle::new(
                        [(x, y - 6), (x + MARK_W, y + 6)],
                        c.filled(),
                    )),
                    Mark::Train => area.draw(&PathElement::new(vec![(x, y), (x + MARK_W, y)], key)),
                    Mark::Val => {
                        let dash = vec![(x, y), (x + MARK_W, y)];
                        area.draw(&DashedPathElement::new(dash, 5, 3, key))
                            .and_then(|()| {
                                let c =
                                    Circle::new((x + MARK_W / 2, y), VAL_RADIUS, BLACK.filled());
                                area.draw(&c)
                            })
                    }
                    Mark::Test => area.draw(&TriangleMarker::new(
                        (x + MARK_W / 2, y),
                        TEST_SIZE,
                        BLACK.filled(),
                    )),
                }
                .map_err(err)?;
                let at = (x + MARK_W + GAP, y);
                area.draw(&Text::new(e.label.clone(), at, text.clone()))
                    .map_err(err)?;
            }
        }
        Ok(())
    }
}

/// `row` (offsets from 0, `used` wide) shifted to the middle of `width`.
fn centred(row: Vec<(usize, i32)>, used: i32, width: i32) -> Vec<(usize, i32)> {
    let shift = ((width - used) / 2).max(0);
    row.into_iter().map(|(i, x)| (i, x + shift)).collect()
}
