//! The braille raster: 2×4 dots per terminal cell, so dots from different
//! series merge inside a cell and a strong curve's colour wins over a dim one.

/// Braille dot bits by `[row][column]` inside a 2×4 cell.
const BRAILLE_BITS: [[u8; 2]; 4] = [[0x01, 0x08], [0x02, 0x10], [0x04, 0x20], [0x40, 0x80]];

/// Which series coloured a cell, and whether by a strong (non-dim) curve.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Ink {
    pub(super) series: usize,
    pub(super) strong: bool,
}

/// Maps a value range onto `0..pixels`.
#[derive(Debug, Clone, Copy)]
pub(super) struct PixelAxis {
    lo: f64,
    hi: f64,
    pub(super) pixels: usize,
}

impl PixelAxis {
    /// Pixel index of `v`, clamped to the axis (0 = `lo`).
    pub(super) fn pixel(self, v: f64) -> usize {
        let frac = (v / 2.0 - self.lo / 2.0) / (self.hi / 2.0 - self.lo / 2.0);
        let last = self.pixels.saturating_sub(1) as f64;
        // NaN and negatives saturate to 0 in the cast.
        (frac * last).round().min(last) as usize
    }
}

/// A grid of braille cells plus glyph overlays (dots, line-end markers).
pub(super) struct Raster {
    pub(super) width: usize,
    pub(super) height: usize,
    pub(super) x: PixelAxis,
    pub(super) y: PixelAxis,
    pub(super) bits: Vec<u8>,
    pub(super) ink: Vec<Option<Ink>>,
    pub(super) glyphs: Vec<Option<(char, usize)>>,
}

impl Raster {
    pub(super) fn new(width: u16, height: u16, x: (f64, f64), y: (f64, f64)) -> Self {
        let (width, height) = (usize::from(width), usize::from(height));
        let cells = width * height;
        Self {
            width,
            height,
            x: PixelAxis {
                lo: x.0,
                hi: x.1,
                pixels: width * 2,
            },
            y: PixelAxis {
                lo: y.0,
                hi: y.1,
                pixels: height * 4,
            },
            bits: vec![0; cells],
            ink: vec![None; cells],
            glyphs: vec![None; cells],
        }
    }

    /// Pixel position of a plot-space point (row 0 at the top).
    fn pixel(&self, (x, y): (f64, f64)) -> (usize, usize) {
        let row = self.y.pixels.saturating_sub(1) - self.y.pixel(y);
        (self.x.pixel(x), row)
    }

    fn cell_index(&self, (px, py): (usize, usize)) -> usize {
        (py / 4) * self.width + px / 2
    }

    fn dot(&mut self, (px, py): (usize, usize), ink: Ink) {
        let i = self.cell_index((px, py));
        self.bits[i] |= BRAILLE_BITS[py % 4][px % 2];
        if ink.strong || !self.ink[i].is_some_and(|old| old.strong) {
            self.ink[i] = Some(ink);
        }
    }

    /// Bresenham line between two pixels (both inside the grid).
    fn segment(&mut self, a: (usize, usize), b: (usize, usize), ink: Ink) {
        let (mut x, mut y) = (a.0 as i64, a.1 as i64);
        let (x1, y1) = (b.0 as i64, b.1 as i64);
        let (dx, dy) = ((x1 - x).abs(), -(y1 - y).abs());
        let (sx, sy) = ((x1 - x).signum(), (y1 - y).signum());
        let mut err = dx + dy;
        loop {
            self.dot((x as usize, y as usize), ink);
            if x == x1 && y == y1 {
                break;
            }
            let e2 = 2 * err;
            if e2 >= dy {
                err += dy;
                x += sx;
            }
            if e2 <= dx {
                err += dx;
                y += sy;
            }
        }
    }

    pub(super) fn polyline(&mut self, points: &[(f64, f64)], ink: Ink) {
        let mut prev: Option<(usize, usize)> = None;
        for &p in points {
            let px = self.pixel(p);
            match prev {
                Some(q) if q == px => {}
                Some(q) => self.segment(q, px, ink),
                None => self.dot(px, ink),
            }
            prev = Some(px);
        }
    }

    pub(super) fn glyph(&mut self, p: (f64, f64), glyph: char, series: usize) {
        let i = self.cell_index(self.pixel(p));
        self.glyphs[i] = Some((glyph, series));
    }

    /// Number of non-empty cells within a cell rectangle (relative coordinates).
    pub(super) fn filled(&self, col: usize, row: usize, width: usize, height: usize) -> usize {
        (row..(row + height).min(self.height))
            .flat_map(|r| (col..(col + width).min(self.width)).map(move |c| r * self.width + c))
            .filter(|&i| self.bits[i] != 0 || self.glyphs[i].is_some())
            .count()
    }
}
