//! Parallel coordinates of a sweep (`ddp plot --sweep ID --parallel`, the notebook's sweep
//! card): one vertical axis per parameter and a last one for the metric, one line per trial
//! through its values, coloured from the worst result (pale) to the best (dark red), the best
//! drawn last. A parameter whose values are all numbers gets a linear axis (a logarithmic one
//! when they are positive and span a factor of 100 or more); any other a category axis.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::style::{FONT_FAMILY, MIN_TEXT};
use super::{Format, draw_err, drawing_failed, encode_png, ensure_font, format_of, write_file};
use crate::Result;

/// The default size of the image, in pixels.
pub const SIZE: (u32, u32) = (900, 420);

/// How an axis places its values.
#[derive(Debug, Clone, PartialEq)]
pub enum Scale {
    Linear(f64, f64),
    Log(f64, f64),
    Categories(Vec<String>),
}

/// One axis: its name and scale.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    pub name: String,
    pub scale: Scale,
}

/// One trial: its label, its parameters' values (as `--set` values) and its metric.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub label: String,
    pub values: Vec<String>,
    pub metric: Option<f64>,
}

/// What a parallel-coordinates image shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Parallel {
    /// The parameters' axes, then the metric's.
    pub axes: Vec<Axis>,
    pub lines: Vec<Line>,
    pub higher_is_better: bool,
}

impl Parallel {
    /// The axes of `keys` (named by `names`) and of the metric `metric`, scaled to the values
    /// of `lines`.
    pub fn new(names: Vec<String>, metric: &str, lines: Vec<Line>, higher_is_better: bool) -> Self {
        let mut axes: Vec<Axis> = names
            .into_iter()
            .enumerate()
            .map(|(k, name)| {
                let values: Vec<&str> = lines
                    .iter()
                    .filter_map(|l| l.values.get(k).map(String::as_str))
                    .collect();
                Axis {
                    name,
                    scale: scale_of(&values),
                }
            })
            .collect();
        let metrics: Vec<f64> = lines
            .iter()
            .filter_map(|l| l.metric)
            .filter(|m| m.is_finite())
            .collect();
        let (lo, hi) = bounds(&metrics);
        axes.push(Axis {
            name: metric.to_string(),
            scale: Scale::Linear(lo, hi),
        });
        Parallel {
            axes,
            lines,
            higher_is_better,
        }
    }

    /// Where `line` crosses each axis, from 0 (bottom) to 1 (top); `None` where it has no value.
    pub fn positions(&self, line: &Line) -> Vec<Option<f64>> {
        let n = self.axes.len();
        (0..n)
            .map(|k| {
                let axis = &self.axes[k];
                if k + 1 == n {
                    return line.metric.and_then(|m| place(&axis.scale, m, None));
                }
                let v = line.values.get(k)?;
                place(&axis.scale, v.parse().unwrap_or(f64::NAN), Some(v))
            })
            .collect()
    }

    /// Each line's colour weight, 0 (worst) to 1 (best); `None` without a metric.
    fn weight(&self, line: &Line) -> Option<f64> {
        let Some(Scale::Linear(lo, hi)) = self.axes.last().map(|a| &a.scale) else {
            return None;
        };
        let m = line.metric.filter(|m| m.is_finite())?;
        let t = if hi > lo { (m - lo) / (hi - lo) } else { 1.0 };
        Some(if self.higher_is_better { t } else { 1.0 - t })
    }
}

/// A numeric axis for numbers with a fraction (logarithmic where they are positive and span a
/// factor of 20 or more) or more than 6 whole numbers; else categories (numbers sorted as such).
fn scale_of(values: &[&str]) -> Scale {
    let nums: Vec<f64> = values.iter().filter_map(|v| v.parse().ok()).collect();
    if !values.is_empty() && nums.len() == values.len() {
        let (lo, hi) = bounds(&nums);
        let fractional = values.iter().any(|v| v.contains(['.', 'e', 'E']));
        let distinct: std::collections::BTreeSet<u64> = nums.iter().map(|x| x.to_bits()).collect();
        if fractional && lo > 0.0 && hi / lo >= 20.0 {
            return Scale::Log(lo, hi);
        }
        if fractional || distinct.len() > 6 {
            return Scale::Linear(lo, hi);
        }
    }
    let mut cats: Vec<String> = Vec::new();
    for v in values {
        if !cats.iter().any(|c| c == v) {
            cats.push(v.to_string());
        }
    }
    cats.sort_by(|a, b| match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => x.total_cmp(&y),
        _ => a.cmp(b),
    });
    Scale::Categories(cats)
}

fn bounds(v: &[f64]) -> (f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if lo.is_finite() { (lo, hi) } else { (0.0, 1.0) }
}

/// A value's place on an axis, 0..1.
fn place(scale: &Scale, x: f64, text: Option<&str>) -> Option<f64> {
    let frac = |a: f64, b: f64, v: f64| if b > a { (v - a) / (b - a) } else { 0.5 };
    match scale {
        Scale::Linear(a, b) => x.is_finite().then(|| frac(*a, *b, x)),
        Scale::Log(a, b) => (x > 0.0).then(|| frac(a.ln(), b.ln(), x.ln())),
        Scale::Categories(c) => {
            let i = c.iter().position(|v| Some(v.as_str()) == text)?;
            Some(if c.len() == 1 {
                0.5
            } else {
                i as f64 / (c.len() - 1) as f64
            })
        }
    }
}

/// A tick's text: numbers in 3 significant digits.
fn tick(x: f64) -> String {
    if x != 0.0 && (x.abs() < 1e-2 || x.abs() >= 1e4) {
        format!("{x:.1e}")
    } else {
        let s = format!("{x:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// The ticks of an axis: (place 0..1, text).
fn ticks(scale: &Scale) -> Vec<(f64, String)> {
    match scale {
        Scale::Linear(a, b) => vec![(0.0, tick(*a)), (0.5, tick((a + b) / 2.0)), (1.0, tick(*b))],
        Scale::Log(a, b) => vec![
            (0.0, tick(*a)),
            (0.5, tick((a.ln() + b.ln()).exp().sqrt())),
            (1.0, tick(*b)),
        ],
        Scale::Categories(c) => c
            .iter()
            .map(|v| {
                let text = v.trim_matches('"').to_string();
                (place(scale, f64::NAN, Some(v)).unwrap_or(0.5), text)
            })
            .collect(),
    }
}

/// The colour of a line of weight `w` (0 worst, 1 best): pale blue-grey to dark red.
fn colour(w: Option<f64>) -> RGBAColor {
    match w {
        None => RGBColor(190, 190, 190).mix(0.6),
        Some(w) => {
            let lerp = |a: f64, b: f64| (a + (b - a) * w) as u8;
            RGBColor(lerp(170.0, 200.0), lerp(190.0, 20.0), lerp(210.0, 30.0)).mix(0.35 + 0.65 * w)
        }
    }
}

fn draw<DB: DrawingBackend>(
    p: &Parallel,
    root: &DrawingArea<DB, plotters::coord::Shift>,
) -> std::result::Result<(), String> {
    root.fill(&WHITE).map_err(draw_err)?;
    let (w, h) = root.dim_in_pixel();
    let (left, right, top, bottom) = (30i32, 80i32, 44i32, 30i32);
    let n = p.axes.len().max(2);
    let x_of = |k: usize| left + (k as i32) * (w as i32 - left - right) / (n as i32 - 1);
    let y_of = |t: f64| top + ((1.0 - t) * (h as i32 - top - bottom) as f64) as i32;
    let text = TextStyle::from((FONT_FAMILY, MIN_TEXT).into_font()).color(&BLACK);
    let small =
        TextStyle::from((FONT_FAMILY, MIN_TEXT - 2).into_font()).color(&RGBColor(60, 60, 60));
    // Lines: the unweighted and worst first, the best last (on top).
    let mut order: Vec<&Line> = p.lines.iter().collect();
    order.sort_by(|a, b| {
        let (x, y) = (p.weight(a).unwrap_or(-1.0), p.weight(b).unwrap_or(-1.0));
        x.total_cmp(&y)
    });
    for line in order {
        let pts: Vec<(i32, i32)> = p
            .positions(line)
            .iter()
            .enumerate()
            .filter_map(|(k, t)| t.map(|t| (x_of(k), y_of(t))))
            .collect();
        let style = ShapeStyle::from(&colour(p.weight(line))).stroke_width(2);
        root.draw(&PathElement::new(pts, style)).map_err(draw_err)?;
    }
    for (k, axis) in p.axes.iter().enumerate() {
        let x = x_of(k);
        root.draw(&PathElement::new(
            vec![(x, y_of(1.0)), (x, y_of(0.0))],
            ShapeStyle::from(&BLACK).stroke_width(1),
        ))
        .map_err(draw_err)?;
        let centred = text.pos(Pos::new(HPos::Center, VPos::Bottom));
        root.draw_text(&axis.name, &centred, (x, top - 14))
            .map_err(draw_err)?;
        // Tick labels right of the axis, where the lines leave it.
        for (t, label) in ticks(&axis.scale) {
            let y = y_of(t);
            root.draw(&PathElement::new(vec![(x, y), (x + 4, y)], BLACK))
                .map_err(draw_err)?;
            let left_aligned = small.pos(Pos::new(HPos::Left, VPos::Center));
            root.draw_text(&label, &left_aligned, (x + 6, y))
                .map_err(draw_err)?;
        }
    }
    Ok(())
}

/// The image as SVG text.
pub fn parallel_svg(p: &Parallel, size: (u32, u32)) -> Result<String> {
    let bytes = encode(p, size, Format::Svg).map_err(|e| drawing_failed(None, e))?;
    Ok(String::from_utf8(bytes).expect("SVG is text"))
}

/// The image as PNG file bytes.
pub fn parallel_png(p: &Parallel, size: (u32, u32)) -> Result<Vec<u8>> {
    encode(p, size, Format::Png).map_err(|e| drawing_failed(None, e))
}

/// Writes the image to `out` (`.svg` or `.png`), atomically.
pub fn plot_parallel(p: &Parallel, out: &Path) -> Result<()> {
    let format = format_of(out)?;
    let bytes = encode(p, SIZE, format).map_err(|e| drawing_failed(Some(out), e))?;
    write_file(out, &bytes)
}

fn encode(p: &Parallel, size: (u32, u32), format: Format) -> std::result::Result<Vec<u8>, String> {
    ensure_font().map_err(|e| e.to_string())?;
    let (w, h) = size;
    match format {
        Format::Svg => {
            let mut text = String::new();
            draw(
                p,
                &SVGBackend::with_string(&mut text, size).into_drawing_area(),
            )?;
            Ok(text.into_bytes())
        }
        Format::Png => {
            let mut rgb = vec![0u8; w as usize * h as usize * 3];
            {
                let root = BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area();
                draw(p, &root)?;
                root.present().map_err(draw_err)?;
            }
            encode_png(&rgb, w, h).map_err(|e| format!("encoding PNG: {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(label: &str, values: &[&str], metric: Option<f64>) -> Line {
        Line {
            label: label.into(),
            values: values.iter().map(|v| v.to_string()).collect(),
            metric,
        }
    }

    fn sample() -> Parallel {
        Parallel::new(
            vec!["lr".into(), "batch_size".into(), "optimizer".into()],
            "val_accuracy",
            vec![
                line("t00", &["0.0001", "16", "\"adam\""], Some(0.5)),
                line("t01", &["0.05", "64", "\"sgd\""], Some(0.9)),
                line("t02", &["0.003", "32", "\"adam\""], None),
            ],
            true,
        )
    }

    #[test]
    fn axes_take_the_scale_their_values_call_for() {
        let p = sample();
        assert_eq!(p.axes[0].scale, Scale::Log(0.0001, 0.05));
        assert_eq!(scale_of(&["0.1", "0.2"]), Scale::Linear(0.1, 0.2));
        assert_eq!(
            scale_of(&["1", "2", "3", "4", "5", "6", "7"]),
            Scale::Linear(1.0, 7.0)
        );
        assert_eq!(
            p.axes[1].scale,
            Scale::Categories(vec!["16".into(), "32".into(), "64".into()])
        );
        assert_eq!(
            p.axes[2].scale,
            Scale::Categories(vec!["\"adam\"".into(), "\"sgd\"".into()])
        );
        assert_eq!(p.axes[3].scale, Scale::Linear(0.5, 0.9));
        assert_eq!(
            p.positions(&p.lines[1]),
            [Some(1.0), Some(1.0), Some(1.0), Some(1.0)]
        );
        assert_eq!(p.positions(&p.lines[2])[3], None);
        assert_eq!(p.weight(&p.lines[0]), Some(0.0));
        assert_eq!(p.weight(&p.lines[1]), Some(1.0));
    }

    #[test]
    fn the_image_draws_as_svg_and_png() {
        let p = sample();
        let svg = parallel_svg(&p, SIZE).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("val_accuracy"),
            "{svg}"
        );
        let png = parallel_png(&p, SIZE).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        let dir = tempfile::tempdir().unwrap();
        let e = plot_parallel(&p, &dir.path().join("x.jpg")).unwrap_err();
        assert!(e.to_string().contains(".svg or .png"), "{e}");
    }
}
