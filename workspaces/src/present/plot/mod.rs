//! Loss and accuracy (or, for language models, perplexity) plots of runs, as SVG or PNG (`ddp
//! plot`, and the plots the supervisor writes into a finished run's folder).
//!
//! Each run gets one colour; the line style says what a line is: training loss (rank 0's train
//! records) solid, validation dashed with a circle per evaluation, the final test evaluation a
//! triangle. Beside the loss, a panel of the runs' accuracy, or of their validation perplexity
//! when they are language models ([`crate::metrics::is_language_model`]), or both when the runs
//! are of both kinds. Several runs are overlaid in one panel; the legend, in a strip under the panels
//! (never on the data), names each run and the line styles. Text is at least 11 px at the size
//! the image is drawn, whatever its size.
//!
//! Text is measured (both formats) and drawn (PNG) with DejaVu Sans embedded in the binary
//! (`assets/fonts/`, registered with plotters at first use), so plotting needs no system fonts;
//! an SVG only names the `sans-serif` family and lets the viewer pick the font.
//!
//! Layout:
//! - [`Series`], [`XAxis`]: the input.
//! - [`plot_runs`]: one image, the loss and the evaluation panels side by side, format from the
//!   extension.
//! - [`plot_runs_svg`], [`plot_runs_png`] (and their `_sized` variants): the same image in
//!   memory (SVG text, PNG file bytes), e.g. for a notebook.
//! - [`plot_run_folder`]: `loss.svg` and `accuracy.svg` (a language model: `perplexity.svg`)
//!   for one run folder; [`panel_captions`]: what an image of runs shows.
//! - `RunData`: a run's points ([`crate::present::curves`]: NaN skipped, resumed history replaced).
//! - `draw_loss`, `draw_eval`: the panels; an accuracy or perplexity panel without any figure
//!   says why (regression, no validation yet, or none ran); `encode`: the backends (SVG text, PNG
//!   bytes), shared by the in-memory and the file variants; `write_file`: the atomic file write.
//! - `style`: colours, line and marker sizes, text styles, and `Scale`, which shrinks text and
//!   margins on small images down to a readable minimum.
//! - `legend`: the legend strip under the panels, its entries in rows that fit the width.
//! - `parallel`: parallel coordinates of a sweep's parameters against its metric.
//! - `tests` (its own file).

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::error::{Error, Result};
use crate::metrics::{MetricKind, MetricRecord, metrics_path, read_metrics};
pub use crate::present::curves::XAxis;
use crate::present::curves::curves;
use legend::{Entry, Legend, Mark};
use style::{
    FONT_FAMILY, LINE_WIDTH, Scale, TEST_SIZE, VAL_RADIUS, axis_desc_style, caption_style, colour,
    label_style,
};

mod legend;
pub mod parallel;
mod style;

/// The metric records of one run and the name the legend gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub label: String,
    pub records: Vec<MetricRecord>,
}

impl Series {
    /// Reads rank 0's metrics of the run folder `run_dir` (`metrics/rank-0.jsonl`, which holds the
    /// training, validation and test records plotted); the label is the folder's name.
    pub fn from_run_dir(run_dir: &Path) -> Result<Series> {
        let path = metrics_path(run_dir, 0);
        if !path.exists() {
            return Err(Error::NotFound(format!(
                "{}: no metrics file (has the run started?)",
                path.display()
            )));
        }
        let label = run_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| run_dir.display().to_string());
        Ok(Series {
            label,
            records: read_metrics(&path)?,
        })
    }
}

impl Series {
    /// One series per run, labelled by the run's name (or id); a name several runs share gets
    /// the id too. What `ddp plot` and the kernel's `%ddp plot` draw.
    pub fn of_runs(runs: &[crate::Run]) -> Result<Vec<Series>> {
        let names: Vec<String> = runs
            .iter()
            .map(|r| r.record.name.clone().unwrap_or_else(|| r.record.id.clone()))
            .collect();
        runs.iter()
            .zip(&names)
            .map(|(r, name)| {
                let label = if names.iter().filter(|n| *n == name).count() > 1 {
                    format!("{name} ({})", r.record.id)
                } else {
                    name.clone()
                };
                Ok(Series {
                    label,
                    records: r.metrics()?,
                })
            })
            .collect()
    }
}

/// The file name [`plot_run_folder`] gives the loss plot.
pub const LOSS_SVG: &str = "loss.svg";
/// The file name [`plot_run_folder`] gives the accuracy plot.
pub const ACCURACY_SVG: &str = "accuracy.svg";
/// The file name [`plot_run_folder`] gives a language model's perplexity plot.
pub const PERPLEXITY_SVG: &str = "perplexity.svg";

/// Size of the [`plot_runs`] image (two panels side by side, or three), pixels.
const BOTH_SIZE: (u32, u32) = (1400, 560);
/// Size of each single-panel image of [`plot_run_folder`], pixels.
const PANEL_SIZE: (u32, u32) = (800, 520);
/// The smallest image the `_sized` variants draw, pixels.
pub const MIN_SIZE: (u32, u32) = (240, 120);

/// Plots the loss (train, val, test) and the accuracy (val, test) of `series`, overlaid, against
/// `x`, into one image (language models: their val perplexity instead of the accuracy; runs of
/// both kinds: both panels): SVG or PNG as `out`'s extension says (`.svg` or `.png`, any case). The
/// file is written whole or not at all (through a temporary file renamed over `out`). A run with
/// nothing to draw (no records yet, or only NaN) keeps a legend entry marked "(no data)"; when no
/// run has accuracy figures the accuracy panel says why: "no accuracy (regression)" when every
/// run was evaluated (has validation or test records) without any, else "accuracy after the
/// first validation". Fails when no run at all has anything to draw, and does not create
/// `out`'s folder.
pub fn plot_runs(series: &[Series], x: XAxis, out: &Path) -> Result<()> {
    let format = format_of(out)?;
    let runs = prepare(series, x)?;
    let bytes = encode(&Figure::new(Panels::Both, &runs, x, BOTH_SIZE), format)
        .map_err(|e| drawing_failed(Some(out), e))?;
    write_file(out, &bytes)
}

/// The image of [`plot_runs`] (1400×560) as SVG text, in memory.
pub fn plot_runs_svg(series: &[Series], x: XAxis) -> Result<String> {
    plot_runs_svg_sized(series, x, BOTH_SIZE)
}

/// [`plot_runs_svg`] at `size` (width, height) pixels, at least [`MIN_SIZE`]: text and margins
/// shrink with images smaller than the default, but text never below 11 px, so a small chart,
/// e.g. 640×260 in a run card, stays readable at the size it is drawn.
pub fn plot_runs_svg_sized(series: &[Series], x: XAxis, size: (u32, u32)) -> Result<String> {
    let bytes = plot_in_memory(series, x, size, Format::Svg)?;
    Ok(String::from_utf8(bytes).expect("plotters writes SVG as UTF-8"))
}

/// The image of [`plot_runs`] (1400×560) as the bytes of a PNG file, in memory.
pub fn plot_runs_png(series: &[Series], x: XAxis) -> Result<Vec<u8>> {
    plot_runs_png_sized(series, x, BOTH_SIZE)
}

/// [`plot_runs_png`] at `size` (width, height) pixels, at least [`MIN_SIZE`] (see
/// [`plot_runs_svg_sized`]).
pub fn plot_runs_png_sized(series: &[Series], x: XAxis, size: (u32, u32)) -> Result<Vec<u8>> {
    plot_in_memory(series, x, size, Format::Png)
}

/// The captions of the panels [`plot_runs`] draws for `series`, left to right: `loss`, then
/// `accuracy` and/or `perplexity` (what a front end says the plot shows).
pub fn panel_captions(series: &[Series]) -> Vec<&'static str> {
    let runs: Vec<RunData> = series.iter().map(|s| run_data(s, XAxis::Step)).collect();
    let figure = Figure::new(Panels::Both, &runs, XAxis::Step, BOTH_SIZE);
    figure.shown().into_iter().map(Panels::caption).collect()
}

fn plot_in_memory(
    series: &[Series],
    x: XAxis,
    size: (u32, u32),
    format: Format,
) -> Result<Vec<u8>> {
    if size.0 < MIN_SIZE.0 || size.1 < MIN_SIZE.1 {
        return Err(Error::Invalid(format!(
            "plot size {}x{} is too small: at least {}x{} pixels",
            size.0, size.1, MIN_SIZE.0, MIN_SIZE.1
        )));
    }
    let runs = prepare(series, x)?;
    encode(&Figure::new(Panels::Both, &runs, x, size), format).map_err(|e| drawing_failed(None, e))
}

/// Writes `out_dir/loss.svg` and `out_dir/accuracy.svg` (a language model's run:
/// `out_dir/perplexity.svg`) for the run folder `run_dir`, read from its `metrics/rank-0.jsonl`
/// (the supervisor passes `run_dir/plots` as `out_dir` when a run ends). `out_dir` is created if
/// needed. A regression run's accuracy plot says that there is no accuracy, and that of a run
/// that ended before any validation that none ran.
pub fn plot_run_folder(run_dir: &Path, out_dir: &Path) -> Result<()> {
    let series = [Series::from_run_dir(run_dir)?];
    let runs = prepare(&series, XAxis::Step)?;
    std::fs::create_dir_all(out_dir).map_err(|e| Error::io(out_dir, e))?;
    let second = if runs[0].language_model {
        (PERPLEXITY_SVG, Panels::Perplexity)
    } else {
        (ACCURACY_SVG, Panels::Accuracy)
    };
    for (name, panels) in [(LOSS_SVG, Panels::Loss), second] {
        let out = out_dir.join(name);
        let figure = Figure {
            ended: true,
            ..Figure::new(panels, &runs, XAxis::Step, PANEL_SIZE)
        };
        let bytes = encode(&figure, Format::Svg).map_err(|e| drawing_failed(Some(&out), e))?;
        write_file(&out, &bytes)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Output format, encoding and file writing.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Svg,
    Png,
}

fn format_of(out: &Path) -> Result<Format> {
    let ext = out
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("svg") => Ok(Format::Svg),
        Some("png") => Ok(Format::Png),
        _ => Err(Error::Invalid(format!(
            "{}: unsupported plot file type: the name must end in .svg or .png",
            out.display()
        ))),
    }
}

/// An error while drawing, already turned into text (plotters' errors are generic over the backend).
type DrawResult = std::result::Result<(), String>;

fn draw_err<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> String {
    e.to_string()
}

/// What an image shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Panels {
    /// Loss left, then accuracy and/or perplexity, as the runs have them ([`Figure::shown`]).
    Both,
    Loss,
    Accuracy,
    Perplexity,
}

impl Panels {
    /// A panel's caption (also its y axis description).
    fn caption(self) -> &'static str {
        match self {
            Panels::Both | Panels::Loss => "loss",
            Panels::Accuracy => "accuracy",
            Panels::Perplexity => "perplexity",
        }
    }
}

/// An image's content and size, ready to draw on any backend.
struct Figure<'a> {
    panels: Panels,
    runs: &'a [RunData<'a>],
    x: XAxis,
    /// Right end of the x axis, shared by both panels.
    x_hi: f64,
    /// Width and height, pixels.
    size: (u32, u32),
    scale: Scale,
    /// The runs are over (a run folder's plots): no accuracy will come any more.
    ended: bool,
}

impl<'a> Figure<'a> {
    fn new(panels: Panels, runs: &'a [RunData<'a>], x: XAxis, size: (u32, u32)) -> Figure<'a> {
        let full = if panels == Panels::Both {
            BOTH_SIZE
        } else {
            PANEL_SIZE
        };
        Figure {
            panels,
            runs,
            x,
            x_hi: x_upper(runs, x),
            size,
            scale: Scale::of(size, full),
            ended: false,
        }
    }

    /// The panels, and the legend in a strip under them.
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult {
        root.fill(&WHITE).map_err(draw_err)?;
        let entries = self.legend_entries();
        let legend = Legend::layout(root, &entries, self.scale)?;
        let (_, h) = root.dim_in_pixel();
        let (panels, strip) = root.split_vertically(h.saturating_sub(legend.height()));
        let shown = self.shown();
        let (w, _) = panels.dim_in_pixel();
        let n = shown.len() as u32;
        let breaks: Vec<i32> = (1..n).map(|k| (w * k / n) as i32).collect();
        for (panel, area) in shown
            .iter()
            .zip(panels.split_by_breakpoints(breaks, Vec::<i32>::new()))
        {
            match panel {
                Panels::Loss => draw_loss(&area, self)?,
                eval => draw_eval(&area, self, *eval)?,
            }
        }
        legend.draw(&strip)
    }

    /// The panels, left to right: for [`Panels::Both`] the loss, then the accuracy unless every
    /// run is a language model, then the perplexity if any is.
    fn shown(&self) -> Vec<Panels> {
        if self.panels != Panels::Both {
            return vec![self.panels];
        }
        let lm = self.runs.iter().any(|r| r.language_model);
        let others = self
            .runs
            .iter()
            .any(|r| !r.language_model && (r.has_loss() || r.has_accuracy()));
        let mut shown = vec![Panels::Loss];
        if others || !lm {
            shown.push(Panels::Accuracy);
        }
        if lm {
            shown.push(Panels::Perplexity);
        }
        shown
    }

    /// A colour per run (an accuracy or perplexity plot: per run with such figures; a run with
    /// nothing to draw marked "(no data)"), then the line styles the panels use (no test when
    /// every run is a language model: they have none).
    fn legend_entries(&self) -> Vec<Entry> {
        let only = matches!(self.panels, Panels::Accuracy | Panels::Perplexity);
        let mut entries: Vec<Entry> = self
            .runs
            .iter()
            .enumerate()
            .filter(|(_, r)| match self.panels {
                Panels::Accuracy => r.has_accuracy(),
                Panels::Perplexity => r.has_perplexity(),
                _ => true,
            })
            .map(|(i, r)| Entry {
                mark: Mark::Run(colour(i)),
                label: if r.has_loss() || r.has_accuracy() || r.has_perplexity() {
                    r.label.to_string()
                } else {
                    format!("{} (no data)", r.label)
                },
            })
            .collect();
        let no_test = self.panels == Panels::Perplexity
            || (!self.runs.is_empty() && self.runs.iter().all(|r| r.language_model));
        let styles = [
            (Mark::Train, "train"),
            (Mark::Val, "val"),
            (Mark::Test, "test"),
        ];
        let styles = styles
            .into_iter()
            .filter(|(m, _)| !(only && *m == Mark::Train || no_test && *m == Mark::Test))
            .map(|(mark, label)| Entry {
                mark,
                label: label.into(),
            });
        if only && entries.is_empty() {
            return entries;
        }
        entries.extend(styles);
        entries
    }

    /// What an accuracy (or perplexity) panel without any figure says.
    fn no_figure_note(&self, panel: Panels) -> &'static str {
        if panel == Panels::Perplexity {
            return if self.ended {
                "no perplexity: no validation ran"
            } else {
                "perplexity after the first validation"
            };
        }
        if self.runs.iter().all(|r| r.evaluated) {
            "no accuracy (regression)"
        } else if self.ended {
            "no accuracy: no validation ran"
        } else {
            "accuracy after the first validation"
        }
    }
}

/// Draws `figure` with the backend of `format`: SVG text or the bytes of a PNG file.
fn encode(figure: &Figure, format: Format) -> std::result::Result<Vec<u8>, String> {
    ensure_font().map_err(|e| e.to_string())?;
    let (w, h) = figure.size;
    match format {
        Format::Svg => {
            let mut text = String::new();
            figure.draw(&SVGBackend::with_string(&mut text, figure.size).into_drawing_area())?;
            Ok(text.into_bytes())
        }
        Format::Png => {
            let mut rgb = vec![0u8; w as usize * h as usize * 3];
            {
                let root = BitMapBackend::with_buffer(&mut rgb, figure.size).into_drawing_area();
                figure.draw(&root)?;
                root.present().map_err(draw_err)?;
            }
            encode_png(&rgb, w, h).map_err(|e| format!("encoding PNG: {e}"))
        }
    }
}

/// An 8-bit RGB image as PNG file bytes.
fn encode_png(rgb: &[u8], w: u32, h: u32) -> std::result::Result<Vec<u8>, png::EncodingError> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, w, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(rgb)?;
    writer.finish()?;
    Ok(out)
}

/// A drawing error, naming the file being written if any.
fn drawing_failed(out: Option<&Path>, e: String) -> Error {
    match out {
        Some(out) => Error::Invalid(format!("{}: drawing the plot failed: {e}", out.display())),
        None => Error::Invalid(format!("drawing the plot failed: {e}")),
    }
}

/// Writes `bytes` to `out` atomically ([`crate::files::fsutil::write_atomic`]), so readers never see a
/// half-written image.
fn write_file(out: &Path, bytes: &[u8]) -> Result<()> {
    crate::files::fsutil::write_atomic(out, bytes)
}

// ---------------------------------------------------------------------------------------------
// The embedded font.

/// DejaVu Sans 2.37 from Debian's `fonts-dejavu-core` (Bitstream Vera licence; see
/// `assets/fonts/README.md`).
static FONT: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");

/// Registers the embedded font with plotters once per process.
fn ensure_font() -> Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font(FONT_FAMILY, FontStyle::Normal, FONT).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(
            "the embedded font DejaVuSans.ttf could not be loaded".into(),
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// Records to points.

/// The points of one run, in plot coordinates (x per [`XAxis`]); non-finite values left out.
#[derive(Debug, Clone, PartialEq)]
struct RunData<'a> {
    label: &'a str,
    train_loss: Vec<(f64, f64)>,
    val_loss: Vec<(f64, f64)>,
    val_acc: Vec<(f64, f64)>,
    test_loss: Option<(f64, f64)>,
    test_acc: Option<(f64, f64)>,
    val_ppl: Vec<(f64, f64)>,
    /// The run has a validation or test record: an evaluation ran (a run without accuracy
    /// figures then has none to give: regression).
    evaluated: bool,
    /// The run is a language model's: its evaluation panel is the perplexity.
    language_model: bool,
}

impl RunData<'_> {
    fn has_loss(&self) -> bool {
        !self.train_loss.is_empty() || !self.val_loss.is_empty() || self.test_loss.is_some()
    }

    fn has_accuracy(&self) -> bool {
        !self.val_acc.is_empty() || self.test_acc.is_some()
    }

    fn has_perplexity(&self) -> bool {
        !self.val_ppl.is_empty()
    }

    /// The val points and the test point of an evaluation panel (a language model's perplexity
    /// has no test).
    fn eval_points(&self, panel: Panels) -> (&[Point], Option<Point>) {
        if panel == Panels::Perplexity {
            (&self.val_ppl, None)
        } else {
            (&self.val_acc, self.test_acc)
        }
    }
}

/// A point in plot coordinates (x, y).
type Point = (f64, f64);

/// The points of every series; an error when not one of them has anything to draw.
fn prepare(series: &[Series], x: XAxis) -> Result<Vec<RunData<'_>>> {
    if series.is_empty() {
        return Err(Error::Invalid("nothing to plot: no runs given".into()));
    }
    let runs: Vec<RunData> = series.iter().map(|s| run_data(s, x)).collect();
    if runs.iter().all(|r| !r.has_loss() && !r.has_accuracy()) {
        let why: Vec<String> = series
            .iter()
            .map(|s| {
                if s.records.is_empty() {
                    format!("run `{}` has no metric records", s.label)
                } else {
                    format!(
                        "run `{}` has no finite loss or accuracy in its {} records",
                        s.label,
                        s.records.len()
                    )
                }
            })
            .collect();
        return Err(Error::Invalid(format!(
            "nothing to plot: {}",
            why.join("; ")
        )));
    }
    Ok(runs)
}

fn run_data(series: &Series, x: XAxis) -> RunData<'_> {
    let c = curves(&series.records, x, None);
    RunData {
        label: &series.label,
        train_loss: c.train_loss,
        val_loss: c.val_loss,
        val_acc: c.val_acc,
        test_loss: c.test_loss,
        test_acc: c.test_acc,
        val_ppl: c.val_perplexity,
        language_model: c.language_model,
        evaluated: series
            .records
            .iter()
            .any(|r| matches!(r.kind, MetricKind::Val | MetricKind::Test)),
    }
}

// ---------------------------------------------------------------------------------------------
// Panels.

/// Blank border around each panel, pixels.
const MARGIN: i32 = 14;

/// Right end of the x axis: the largest x of any point of any run (whole epochs rounded up), so
/// both panels share one scale.
fn x_upper(runs: &[RunData], x: XAxis) -> f64 {
    let max = runs
        .iter()
        .flat_map(|r| {
            let tests = r.test_loss.iter().chain(&r.test_acc);
            r.train_loss
                .iter()
                .chain(&r.val_loss)
                .chain(&r.val_acc)
                .chain(&r.val_ppl)
                .chain(tests)
        })
        .map(|p| p.0)
        .fold(0.0f64, f64::max);
    match x {
        // Room to the right of the last point, so a marker there is not cut in half.
        XAxis::Epoch => max.ceil().max(1.0) * 1.02,
        XAxis::Step | XAxis::Time if max <= 0.0 => 1.0,
        XAxis::Step | XAxis::Time => max * 1.02,
    }
}

fn x_label(x: XAxis) -> impl Fn(&f64) -> String {
    move |v: &f64| match x {
        XAxis::Epoch if v.fract().abs() > 1e-9 => format!("{v:.1}"),
        _ => format!("{v:.0}"),
    }
}

/// Labels for `lo..hi` with a few significant digits (plotters prints f64 in full).
fn value_label(lo: f64, hi: f64) -> impl Fn(&f64) -> String {
    let tick = (hi - lo) / 10.0;
    let decimals = if tick > 0.0 {
        (-tick.log10().floor()).clamp(0.0, 8.0) as usize
    } else {
        2
    };
    move |v: &f64| format!("{v:.decimals$}")
}

type Chart<'a, DB> = ChartContext<
    'a,
    DB,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// The loss panel: per run, train (solid), val (dashed, circles) and test (triangle) loss.
fn draw_loss<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, f: &Figure) -> DrawResult {
    let values = f.runs.iter().flat_map(|r| {
        let test = r.test_loss.iter();
        r.train_loss
            .iter()
            .chain(&r.val_loss)
            .chain(test)
            .map(|p| p.1)
    });
    let (lo, hi) = values.fold((0.0f64, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    let hi = if hi > lo {
        hi + (hi - lo) * 0.05
    } else {
        lo + 1.0
    };
    let mut chart = chart(area, "loss", f, (lo, hi), &value_label(lo, hi))?;
    for (i, run) in f.runs.iter().enumerate() {
        draw_run(&mut chart, i, &run.train_loss, &run.val_loss, run.test_loss)?;
    }
    Ok(())
}

/// An evaluation panel: the accuracy (per run with accuracy figures, val dashed with circles,
/// test a triangle) or a language model's val perplexity; without any figure, a note saying why
/// ([`Figure::no_figure_note`]).
fn draw_eval<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    f: &Figure,
    panel: Panels,
) -> DrawResult {
    let s = f.scale;
    let perplexity = panel == Panels::Perplexity;
    let caption = panel.caption();
    let ((floor, ceiling), pad) = if perplexity {
        ((1.0, f64::INFINITY), 0.05)
    } else {
        ((0.0, 1.0), 0.01)
    };
    let has = |r: &RunData| {
        let (val, test) = r.eval_points(panel);
        !val.is_empty() || test.is_some()
    };
    if !f.runs.iter().any(has) {
        let area = area
            .margin(s.px(MARGIN), s.px(MARGIN), s.px(MARGIN), s.px(MARGIN))
            .titled(caption, caption_style(s))
            .map_err(draw_err)?;
        let (w, h) = area.dim_in_pixel();
        let style = axis_desc_style(s).pos(Pos::new(HPos::Center, VPos::Center));
        let centre = (w as i32 / 2, h as i32 / 2);
        return area
            .draw(&Text::new(f.no_figure_note(panel), centre, style))
            .map_err(draw_err);
    }
    let values = f.runs.iter().flat_map(|r| {
        let (val, test) = r.eval_points(panel);
        val.iter().copied().chain(test).map(|p| p.1)
    });
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    let pad = ((hi - lo) * 0.1).max(pad);
    let (lo, hi) = ((lo - pad).max(floor), (hi + pad).min(ceiling));
    let (lo, hi) = if hi > lo {
        (lo, hi)
    } else {
        (lo - pad, hi + pad)
    };
    let mut chart = chart(area, caption, f, (lo, hi), &value_label(lo, hi))?;
    for (i, run) in f.runs.iter().enumerate().filter(|(_, r)| has(r)) {
        let (val, test) = run.eval_points(panel);
        draw_run(&mut chart, i, &[], val, test)?;
    }
    Ok(())
}

/// A chart with its caption (also the y axis description), axes, grid and axis descriptions;
/// as many tick labels as fit the panel.
fn chart<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    caption: &str,
    f: &Figure,
    (y_lo, y_hi): (f64, f64),
    y_label: &dyn Fn(&f64) -> String,
) -> std::result::Result<Chart<'a, DB>, String> {
    let (s, x, x_hi) = (f.scale, f.x, f.x_hi);
    let text = label_style(s).font.get_size();
    let mut chart = ChartBuilder::on(area)
        .caption(caption, caption_style(s))
        .margin(s.px(MARGIN))
        .x_label_area_size((text * 3.0) as i32)
        .y_label_area_size((text * 4.5) as i32)
        .build_cartesian_2d(0.0..x_hi, y_lo..y_hi)
        .map_err(draw_err)?;
    let (w, h) = chart.plotting_area().dim_in_pixel();
    // A label about every five text heights across, every two up.
    let x_labels = ((w as f64 / (text * 5.0)) as usize).clamp(2, 10);
    let y_labels = ((h as f64 / (text * 2.0)) as usize).clamp(2, 10);
    let x_label = x_label(x);
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(x.description())
        .y_desc(caption)
        .x_label_formatter(&x_label)
        .y_label_formatter(y_label)
        .x_labels(x_labels)
        .y_labels(y_labels)
        .label_style(label_style(s))
        .axis_desc_style(axis_desc_style(s))
        .light_line_style(RGBColor(240, 240, 240));
    if x == XAxis::Epoch && (x_hi as usize) < x_labels * 2 {
        mesh.x_labels(x_hi as usize + 1);
    }
    mesh.draw().map_err(draw_err)?;
    Ok(chart)
}

/// One run in colour `i`: `train` solid, `val` dashed with circles, `test` a triangle.
fn draw_run<'a, DB: DrawingBackend + 'a>(
    chart: &mut Chart<'a, DB>,
    i: usize,
    train: &[(f64, f64)],
    val: &[(f64, f64)],
    test: Option<(f64, f64)>,
) -> DrawResult {
    let c = colour(i);
    let line = c.stroke_width(LINE_WIDTH);
    // A lone point makes no line: give every point a dot then.
    let dots = if train.len() == 1 { 3 } else { 0 };
    chart
        .draw_series(LineSeries::new(train.iter().copied(), line).point_size(dots))
        .map_err(draw_err)?;
    chart
        .draw_series(DashedLineSeries::new(val.iter().copied(), 7, 5, line))
        .map_err(draw_err)?;
    chart
        .draw_series(val.iter().map(|&p| Circle::new(p, VAL_RADIUS, c.filled())))
        .map_err(draw_err)?;
    chart
        .draw_series(test.map(|p| TriangleMarker::new(p, TEST_SIZE, c.filled())))
        .map_err(draw_err)?;
    Ok(())
}

#[cfg(test)]
mod tests;
