//! What every part of a plot shares: the font family, run colours, line and marker sizes, and
//! the text sizes of an image ([`Scale`]).

use plotters::prelude::*;

/// The family every text style here uses; the embedded font is registered under it.
pub(super) const FONT_FAMILY: &str = "sans-serif";

/// The smallest text size given to plotters, which draws a font of size `n` at `n / 1.24`
/// pixels: 14 is 11.3 px, readable at the size the image is drawn.
pub(super) const MIN_TEXT: i32 = 14;

/// Run colours (matplotlib's "tab10"), reused cyclically.
pub(super) const COLOURS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

pub(super) fn colour(i: usize) -> RGBColor {
    COLOURS[i % COLOURS.len()]
}

pub(super) const LINE_WIDTH: u32 = 2;
pub(super) const VAL_RADIUS: i32 = 4;
pub(super) const TEST_SIZE: i32 = 8;

/// How much text, margins and label areas shrink on an image smaller than the default size of
/// its kind: the smaller of the width and height ratios, between 0.6 and 1 (markers, lines and
/// legend swatches keep their size). Text never gets smaller than [`MIN_TEXT`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Scale(pub(super) f64);

impl Scale {
    pub(super) fn of((w, h): (u32, u32), (full_w, full_h): (u32, u32)) -> Scale {
        let r = (w as f64 / full_w as f64).min(h as f64 / full_h as f64);
        Scale(r.clamp(0.6, 1.0))
    }

    /// `v` pixels at this scale.
    pub(super) fn px(self, v: i32) -> i32 {
        (v as f64 * self.0).round() as i32
    }

    /// A text size of `v` pixels at this scale, at least [`MIN_TEXT`].
    pub(super) fn text(self, v: i32) -> i32 {
        self.px(v).max(MIN_TEXT)
    }
}

pub(super) fn caption_style(s: Scale) -> TextStyle<'static> {
    (FONT_FAMILY, s.text(26).max(MIN_TEXT + 2))
        .into_font()
        .into()
}

/// Tick labels and legend entries.
pub(super) fn label_style(s: Scale) -> TextStyle<'static> {
    (FONT_FAMILY, s.text(17)).into_font().into()
}

/// Axis descriptions and notes in an empty panel.
pub(super) fn axis_desc_style(s: Scale) -> TextStyle<'static> {
    (FONT_FAMILY, s.text(18)).into_font().into()
}
