//! Smoothing, downsampling, ticks and the rendered chart.

use ratatui::buffer::{Buffer, Cell};
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier};
use ratatui::widgets::Widget;

use super::downsample::{bucket_starts, plot_value};
use super::smooth::Ema;
use super::ticks::linear_ticks;
use super::widget::{prepare, truncate, widen};
use super::*;

// -- helpers ------------------------------------------------------------

fn pts(ys: &[f64]) -> Vec<(f64, f64)> {
    ys.iter().enumerate().map(|(i, &y)| (i as f64, y)).collect()
}

/// Deterministic pseudo-random numbers in [0, 1).
fn noise(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (s >> 11) as f64 / (1u64 << 53) as f64
        })
        .collect()
}

fn chart<'a>(series: &'a [Series]) -> LineChart<'a> {
    LineChart {
        title: "loss",
        x_title: "step",
        series,
        scale: Scale::Linear,
        smoothing: 0.0,
        color: true,
    }
}

fn render(chart: LineChart<'_>, width: u16, height: u16) -> Buffer {
    let mut buf = Buffer::empty(Rect::new(0, 0, width, height));
    chart.render(buf.area, &mut buf);
    buf
}

fn rows(buf: &Buffer) -> Vec<String> {
    let a = buf.area;
    (a.top()..a.bottom())
        .map(|y| {
            (a.left()..a.right())
                .map(|x| buf[(x, y)].symbol())
                .collect()
        })
        .collect()
}

fn has_text(buf: &Buffer, text: &str) -> bool {
    rows(buf).iter().any(|r| r.contains(text))
}

fn is_braille(symbol: &str) -> bool {
    symbol
        .chars()
        .any(|c| ('\u{2801}'..='\u{28FF}').contains(&c))
}

fn braille_cells(buf: &Buffer) -> Vec<(u16, u16)> {
    let a = buf.area;
    (a.top()..a.bottom())
        .flat_map(|y| (a.left()..a.right()).map(move |x| (x, y)))
        .filter(|&p| is_braille(buf[p].symbol()))
        .collect()
}

/// Position of the axis corner `└`.
fn corner(buf: &Buffer) -> (u16, u16) {
    let a = buf.area;
    (a.top()..a.bottom())
        .flat_map(|y| (a.left()..a.right()).map(move |x| (x, y)))
        .find(|&p| buf[p].symbol() == "└")
        .expect("axes drawn")
}

fn train_and_val() -> Vec<Series> {
    let train = (0..=100).map(|i| (f64::from(i), f64::from(i))).collect();
    let val = (1..=4)
        .map(|e| (f64::from(e) * 25.0, f64::from(e) * 20.0))
        .collect();
    vec![
        Series::line("train loss", Color::Cyan, train),
        Series::dots("val loss", Color::Yellow, val),
    ]
}

// -- smoothing ----------------------------------------------------------

#[test]
fn smooth_matches_tensorboard_with_debias() {
    // Hand-computed with w = 0.6: last = 0.4, 1.04, 1.824, 2.6944 and
    // debias 1 - 0.6^n = 0.4, 0.64, 0.784, 0.8704.
    let got = smooth(&pts(&[1.0, 2.0, 3.0, 4.0]), 0.6);
    let want = [1.0, 1.625, 1.824 / 0.784, 2.6944 / 0.8704];
    for ((x, y), (i, w)) in got.iter().zip(want.iter().enumerate()) {
        assert_eq!(*x, i as f64);
        assert!((y - w).abs() < 1e-12, "point {i}: {y} vs {w}");
    }
    assert!((got[2].1 - 2.326_530_612_244_898).abs() < 1e-12);
    assert!((got[3].1 - 3.095_588_235_294_117_6).abs() < 1e-12);
}

#[test]
fn smooth_passes_non_finite_through_without_poisoning() {
    let got = smooth(&pts(&[1.0, f64::NAN, 2.0, f64::INFINITY, 3.0]), 0.6);
    assert_eq!(got[0].1, 1.0);
    assert!(got[1].1.is_nan());
    assert!((got[2].1 - 1.625).abs() < 1e-12, "NaN must not count");
    assert_eq!(got[3].1, f64::INFINITY);
    assert!((got[4].1 - 1.824 / 0.784).abs() < 1e-12);
}

#[test]
fn smooth_weight_zero_constant_and_clamping() {
    let raw = pts(&[3.0, 1.0, 4.0, 1.0, 5.0]);
    assert_eq!(smooth(&raw, 0.0), raw);
    assert_eq!(smooth(&raw, f64::NAN), raw);
    assert_eq!(smooth(&raw, -1.0), raw);
    let flat = pts(&[0.7; 50]);
    assert_eq!(smooth(&flat, 0.9), flat);
    assert!(smooth(&raw, 5.0).iter().all(|p| p.1.is_finite()));
    assert!(smooth(&[], 0.5).is_empty());
}

#[test]
fn fast_ema_matches_smooth() {
    let mut ys: Vec<f64> = noise(20_000, 7).iter().map(|v| v * 10.0 - 3.0).collect();
    ys[5] = f64::NAN;
    ys[9_001] = f64::INFINITY;
    let raw = pts(&ys);
    for weight in [0.3, 0.6, 0.95, 0.999] {
        let want = smooth(&raw, weight);
        let mut ema = Ema::new(weight);
        let mut got = Vec::new();
        // Feed in uneven buckets, as the renderer does.
        let mut start = 0;
        for len in [3, 1, 997, 4, 5_000, 13_995] {
            let mut next_index = 0;
            ema.scan(&raw[start..start + len], |i, _, v| {
                assert_eq!(i, next_index);
                next_index += 1;
                got.push(v);
            });
            start += len;
        }
        assert_eq!(got.len(), want.len());
        for (g, (_, w)) in got.iter().zip(&want) {
            if w.is_finite() {
                assert!(
                    (g - w).abs() <= 1e-9 * w.abs().max(1.0),
                    "{g} vs {w} (w={weight})"
                );
            } else {
                assert_eq!(g.to_bits(), w.to_bits(), "non-finite passes through");
            }
        }
    }
}

// -- scale & preparation --------------------------------------------------

#[test]
fn log_scale_drops_non_positive() {
    let series = [Series::line(
        "lr",
        Color::Green,
        pts(&[1.0, 0.0, -2.0, 0.1, f64::NAN, 0.01]),
    )];
    let data = prepare(&series, Scale::Log10, 0.0, 100).expect("drawable");
    let ys: Vec<f64> = data.tracks[0].points.iter().map(|p| p.1).collect();
    assert_eq!(ys.len(), 3);
    for (got, want) in ys.iter().zip([0.0, -1.0, -2.0]) {
        assert!((got - want).abs() < 1e-12, "log10 values: {ys:?}");
    }
    assert_eq!(data.latest[0], Some(0.01));

    let non_positive = [Series::line("x", Color::Red, pts(&[0.0, -1.0, -5.0]))];
    assert!(prepare(&non_positive, Scale::Log10, 0.0, 100).is_none());
    let buf = render(
        LineChart {
            scale: Scale::Log10,
            ..chart(&non_positive)
        },
        40,
        10,
    );
    assert!(has_text(&buf, NO_DATA));
}

#[test]
fn log_axis_labels_show_real_values() {
    let ys: Vec<f64> = (0..=40)
        .map(|i| 10f64.powf(-3.0 + f64::from(i) / 10.0))
        .collect();
    let series = [Series::line("grad norm", Color::Magenta, pts(&ys))];
    let buf = render(
        LineChart {
            scale: Scale::Log10,
            ..chart(&series)
        },
        60,
        20,
    );
    let text = rows(&buf).join("\n");
    for label in ["0.001┤", "0.01┤", "0.1┤", "1┤", "10┤"] {
        assert!(text.contains(label), "missing {label}:\n{text}");
    }
    assert!(rows(&buf)[0].contains("log"));
}

#[test]
fn flat_and_degenerate_ranges_are_widened() {
    assert_eq!(widen(2.0, 2.0, 0.05), (1.9, 2.1));
    assert_eq!(widen(0.0, 0.0, 0.05), (-1.0, 1.0));
    let (lo, hi) = widen(0.0, 10.0, 0.05);
    assert!((lo + 0.5).abs() < 1e-12 && (hi - 10.5).abs() < 1e-12);
    let (lo, hi) = widen(-f64::MAX, f64::MAX, 0.05);
    assert!(lo.is_finite() && hi.is_finite() && lo < hi);
    // Float noise on a constant is treated as flat, not zoomed into.
    let (lo, hi) = widen(1.0, 1.0 + 1e-15, 0.05);
    assert!(hi - lo > 0.09);
}

// -- downsampling ---------------------------------------------------------

#[test]
fn downsample_keeps_bucket_extremes_and_ends() {
    let n = 10_000;
    let mut points: Vec<(f64, f64)> = noise(n, 3)
        .into_iter()
        .enumerate()
        .map(|(i, r)| (i as f64 + 0.5, (i as f64 / 900.0).sin() + r))
        .collect();
    points[4_321].1 = 50.0;
    points[7_777].1 = -50.0;
    points[100].1 = f64::NAN;
    let buckets = 50;
    let out = downsample(&points, buckets);
    assert!(out.len() <= 2 * buckets + 2, "{} points", out.len());
    assert_eq!(out.first(), points.first());
    assert_eq!(out.last(), points.last());
    assert!(out.contains(&points[4_321]) && out.contains(&points[7_777]));

    // Every bucket's min and max survive (bucket edges avoid the x values).
    let (x0, x1) = (points[0].0, points[n - 1].0);
    let bucket = |x: f64| (((x - x0) / (x1 - x0) * buckets as f64) as usize).min(buckets - 1);
    for b in 0..buckets {
        let inside = points
            .iter()
            .filter(|p| p.1.is_finite() && bucket(p.0) == b);
        let min = inside.clone().min_by(|a, c| a.1.total_cmp(&c.1)).unwrap();
        let max = inside.max_by(|a, c| a.1.total_cmp(&c.1)).unwrap();
        assert!(out.contains(min) && out.contains(max), "bucket {b}");
    }
    // Output keeps the input order.
    assert!(out.windows(2).all(|w| w[0].0 < w[1].0));
}

#[test]
fn downsample_small_empty_and_degenerate_input() {
    assert!(downsample(&[], 10).is_empty());
    let small = pts(&[1.0, f64::NAN, 3.0, f64::NEG_INFINITY]);
    assert_eq!(downsample(&small, 10), vec![(0.0, 1.0), (2.0, 3.0)]);
    assert_eq!(downsample(&small, 0), vec![(0.0, 1.0), (2.0, 3.0)]);
    // All x equal: one bucket, still first/min/max/last.
    let same_x: Vec<(f64, f64)> = noise(1_000, 5).into_iter().map(|y| (7.0, y)).collect();
    let out = downsample(&same_x, 4);
    assert!(out.len() <= 4);
    let min = same_x.iter().min_by(|a, b| a.1.total_cmp(&b.1)).unwrap();
    let max = same_x.iter().max_by(|a, b| a.1.total_cmp(&b.1)).unwrap();
    assert!(out.contains(min) && out.contains(max));
    assert_eq!(out.first(), same_x.first());
    assert_eq!(out.last(), same_x.last());
    // Unsorted input must not panic.
    let unsorted: Vec<(f64, f64)> = noise(500, 9).into_iter().map(|r| (r * 100.0, r)).collect();
    assert!(!downsample(&unsorted, 8).is_empty());
}

#[test]
fn bucket_starts_match_a_plain_binary_search() {
    // Uneven spacing (quadratic, then a gap) exercises both gallop directions.
    let mut points: Vec<(f64, f64)> = (0..3_000).map(|i| ((i * i) as f64, 0.0)).collect();
    points.extend((0..500).map(|i| (2e7 + f64::from(i), 0.0)));
    points.insert(10, points[10]); // duplicate x
    let (x0, x1) = (points[0].0, points[points.len() - 1].0);
    for buckets in [1, 2, 7, 64, 400] {
        let got = bucket_starts(&points, x0, x1, buckets);
        let want: Vec<usize> = (0..=buckets)
            .map(|b| match b {
                0 => 0,
                b if b == buckets => points.len(),
                b => {
                    let edge = x0 + (x1 - x0) * (b as f64 / buckets as f64);
                    points.partition_point(|p| p.0 < edge)
                }
            })
            .collect();
        assert_eq!(got, want, "{buckets} buckets");
    }
}

// -- ticks ----------------------------------------------------------------

#[test]
fn nice_ticks_cases() {
    assert_eq!(nice_ticks(0.0, 1.0, 5), vec![0.0, 0.25, 0.5, 0.75, 1.0]);
    assert_eq!(
        nice_ticks(0.0, 100.0, 5),
        vec![0.0, 25.0, 50.0, 75.0, 100.0]
    );
    assert_eq!(nice_ticks(0.03, 2.77, 5), vec![0.5, 1.0, 1.5, 2.0, 2.5]);
    assert_eq!(nice_ticks(-1.0, 1.0, 3), vec![-1.0, 0.0, 1.0]);
    assert_eq!(nice_ticks(0.0, 1234.0, 4), vec![0.0, 500.0, 1000.0]);
    assert_eq!(
        nice_ticks(1.0, 0.0, 3),
        vec![0.0, 0.5, 1.0],
        "reversed bounds"
    );
    let ticks = nice_ticks(0.1, 0.3, 5);
    assert_eq!(ticks, vec![0.1, 0.15, 0.2, 0.25, 0.3]);
    // Degenerate input.
    assert_eq!(nice_ticks(5.0, 5.0, 4), vec![5.0]);
    assert!(nice_ticks(f64::NAN, 1.0, 4).is_empty());
    assert!(nice_ticks(0.0, 1.0, 0).is_empty());
    let wide = nice_ticks(-f64::MAX, f64::MAX, 5);
    assert!(wide.len() >= 2 && wide.iter().all(|t| t.is_finite()));
    // Any range: ascending, inside the range, within budget.
    for (lo, hi) in [
        (1e-300, 3e-300),
        (1.0, 1.0 + 1e-12),
        (-7.3, 1e6),
        (3e15, 3.5e15),
    ] {
        let t = nice_ticks(lo, hi, 5);
        assert!(!t.is_empty() && t.len() <= 5, "{lo}..{hi}: {t:?}");
        assert!(t.windows(2).all(|w| w[0] < w[1]));
        assert!(
            t.iter()
                .all(|&v| v >= lo - (hi - lo) * 1e-6 && v <= hi + (hi - lo) * 1e-6)
        );
    }
}

#[test]
fn format_tick_cases() {
    let cases = [
        (0.0, "0"),
        (2.5, "2.5"),
        (100.0, "100"),
        (123.4, "123.4"),
        (0.035, "0.035"),
        (0.001, "0.001"),
        (0.1 + 0.2, "0.3"),
        (-0.5, "-0.5"),
        (1200.0, "1.2k"),
        (1234.0, "1.23k"),
        (12_345.0, "12.3k"),
        (999.96, "1k"),
        (999_999.0, "1M"),
        (1e6, "1M"),
        (2.5e9, "2.5G"),
        (1.5e12, "1.5T"),
        (3e-4, "3e-4"),
        (2.5e-5, "2.5e-5"),
        (1e20, "1e20"),
        (-1e300, "-1e300"),
        (f64::NAN, "NaN"),
        (f64::INFINITY, "inf"),
        (f64::NEG_INFINITY, "-inf"),
    ];
    for (v, want) in cases {
        assert_eq!(format_tick(v), want, "format_tick({v})");
    }
}

#[test]
fn truncate_keeps_both_ends() {
    assert_eq!(truncate("val loss (rank 0)", 11), "val l…nk 0)");
    assert_eq!(truncate("short", 10), "short");
    assert_eq!(truncate("abcdefgh", 5), "ab…gh");
    assert_eq!(truncate("abcdef", 1), "…");
    assert_eq!(truncate("abcdef", 0), "");
}

#[test]
fn tick_labels_stay_distinct_on_narrow_ranges() {
    let ticks = linear_ticks(&[1000.01, 1000.02, 1000.03]);
    let labels: Vec<&str> = ticks.iter().map(|t| t.label.as_str()).collect();
    assert_eq!(labels, ["1000.01", "1000.02", "1000.03"]);
}

// -- rendering ------------------------------------------------------------

#[test]
fn renders_title_legend_axes_and_x_title() {
    let series = train_and_val();
    let buf = render(chart(&series), 80, 24);
    let r = rows(&buf);
    let text = r.join("\n");
    assert!(r[0].contains(" loss "), "{text}");
    assert!(
        r[23].contains(" step "),
        "x title in the bottom border:\n{text}"
    );
    assert!(
        has_text(&buf, "─ train loss 100"),
        "legend with latest value:\n{text}"
    );
    assert!(has_text(&buf, "• val loss 80"), "{text}");
    for y_label in ["100┤", "50┤", "0┤"] {
        assert!(text.contains(y_label), "missing y label {y_label}:\n{text}");
    }
    let label_row = &r[22];
    for x_label in ["0", "25", "50", "75", "100"] {
        assert!(
            label_row.contains(x_label),
            "missing x label {x_label}: {label_row}"
        );
    }
    assert!(!r[0].contains("smoothing") && !r[0].contains("log"));
}

#[test]
fn braille_lies_inside_the_plot_area() {
    let series = train_and_val();
    let buf = render(chart(&series), 80, 24);
    let (cx, cy) = corner(&buf);
    let cells = braille_cells(&buf);
    assert!(cells.len() > 20, "line drawn");
    assert!(
        cells
            .iter()
            .all(|&(x, y)| x > cx && y < cy && y > 0 && x < 79)
    );
    assert!(has_text(&buf, "•"), "dots drawn");
}

#[test]
fn no_data_message() {
    let nan = [Series::line("loss", Color::Red, pts(&[f64::NAN; 5]))];
    for series in [&[][..], &nan[..]] {
        let buf = render(chart(series), 40, 10);
        assert!(has_text(&buf, NO_DATA));
        assert!(rows(&buf)[0].contains("loss"));
        assert!(braille_cells(&buf).is_empty());
    }
}

#[test]
fn title_notes_smoothing_and_log() {
    let series = train_and_val();
    let c = LineChart {
        smoothing: 0.6,
        scale: Scale::Log10,
        ..chart(&series)
    };
    let top = rows(&render(c, 80, 24))[0].clone();
    assert!(
        top.contains(" smoothing 0.60") && top.contains(" log"),
        "{top}"
    );
}

#[test]
fn smoothing_draws_raw_dim_behind_and_never_smooths_dots() {
    let ys: Vec<f64> = noise(2_000, 11)
        .iter()
        .enumerate()
        .map(|(i, r)| 1.0 / (1.0 + i as f64 / 200.0) + r)
        .collect();
    let series = [Series::line("train", Color::Cyan, pts(&ys))];
    let dim = |buf: &Buffer| {
        braille_cells(buf)
            .iter()
            .filter(|&&p| buf[p].modifier.contains(Modifier::DIM))
            .count()
    };
    let smoothed = render(
        LineChart {
            smoothing: 0.9,
            ..chart(&series)
        },
        80,
        24,
    );
    let strong = braille_cells(&smoothed).len() - dim(&smoothed);
    assert!(
        dim(&smoothed) > 0 && strong > 0,
        "raw dim + smoothed bright"
    );
    assert_eq!(
        dim(&render(chart(&series), 80, 24)),
        0,
        "no smoothing, no dim"
    );

    let dots = [Series::dots("val", Color::Yellow, pts(&[3.0, 1.0, 2.0]))];
    let buf = render(
        LineChart {
            smoothing: 0.9,
            ..chart(&dots)
        },
        40,
        12,
    );
    assert_eq!(dim(&buf), 0);
    let dot_cells = rows(&buf)
        .iter()
        .map(|r| r.matches('•').count())
        .sum::<usize>();
    assert_eq!(dot_cells, 4, "3 dots + legend marker");
}

#[test]
fn monochrome_has_no_colours_and_distinct_markers() {
    let series = train_and_val();
    let c = LineChart {
        color: false,
        smoothing: 0.6,
        ..chart(&series)
    };
    let buf = render(c, 80, 24);
    for cell in buf.content() {
        assert_eq!((cell.fg, cell.bg), (Color::Reset, Color::Reset), "{cell:?}");
    }
    assert!(has_text(&buf, "• train loss") && has_text(&buf, "+ val loss"));
    assert!(!braille_cells(&buf).is_empty());

    let coloured = render(chart(&series), 80, 24);
    assert!(coloured.content().iter().any(|c| c.fg == Color::Cyan));
}

#[test]
fn legend_hidden_when_too_small_and_summarised_when_crowded() {
    let series = train_and_val();
    let buf = render(chart(&series), 16, 8);
    assert!(!braille_cells(&buf).is_empty(), "plot still drawn");
    assert!(!has_text(&buf, "train") && !has_text(&buf, "val"));

    let many: Vec<Series> = (0..8)
        .map(|r| {
            Series::line(
                format!("rank {r}"),
                Color::Indexed(r as u8 + 1),
                pts(&[1.0, 2.0 + f64::from(r)]),
            )
        })
        .collect();
    let buf = render(chart(&many), 60, 12);
    assert!(has_text(&buf, "rank 0") && has_text(&buf, "more"));
}

#[test]
fn edge_case_data_renders() {
    let cases: Vec<Vec<(f64, f64)>> = vec![
        vec![(5.0, 1.0)],
        vec![(3.0, 1.0), (3.0, 2.0), (3.0, -4.0)],
        pts(&[2.0; 10]),
        pts(&[1e300, -1e300, 1e300]),
        pts(&[f64::MAX, -f64::MAX]),
        pts(&[1e-300, 2e-300, 3e-300]),
        pts(&[1.0, f64::INFINITY, f64::NEG_INFINITY, 2.0]),
        vec![(0.0, 1.0), (0.0, 1.0), (1.0, 2.0), (1.0, 0.5)],
        vec![(f64::NAN, 1.0), (1.0, 2.0), (f64::INFINITY, 3.0)],
    ];
    for points in cases {
        let series = [Series::line("s", Color::Red, points.clone())];
        for scale in [Scale::Linear, Scale::Log10] {
            let buf = render(
                LineChart {
                    scale,
                    ..chart(&series)
                },
                50,
                15,
            );
            let any_drawable = points
                .iter()
                .any(|&(x, y)| !plot_value(scale, x, y).is_nan());
            assert_eq!(
                !braille_cells(&buf).is_empty(),
                any_drawable,
                "{points:?} {scale:?}"
            );
        }
    }
    let huge = [Series::line("s", Color::Red, pts(&[1e300, 2e300]))];
    assert!(has_text(&render(chart(&huge), 50, 15), "e300"));
    // Wide x labels in a narrow chart are skipped, not squeezed.
    let wide_x = [Series::line(
        "s",
        Color::Red,
        vec![(-1.25e-300, 1.0), (-1.1e-300, 2.0)],
    )];
    for width in 6..24 {
        let buf = render(chart(&wide_x), width, 8);
        let r = rows(&buf);
        assert!(
            r[1..7]
                .iter()
                .all(|row| row.starts_with('│') && row.ends_with('│')),
            "{r:#?}"
        );
    }
}

#[test]
fn tiny_and_odd_areas_never_panic() {
    let datasets: Vec<Vec<Series>> = vec![
        vec![],
        train_and_val(),
        vec![Series::line("nan", Color::Red, pts(&[f64::NAN; 3]))],
        vec![Series::line("one", Color::Red, vec![(1.0, 1.0)])],
        vec![Series::line(
            "same x",
            Color::Red,
            vec![(1.0, 1.0), (1.0, 9.0)],
        )],
        vec![Series::line(
            "huge",
            Color::Red,
            pts(&[1e308, -1e308, 1e-308]),
        )],
    ];
    for series in &datasets {
        for (scale, smoothing, color) in [(Scale::Linear, 0.0, true), (Scale::Log10, 0.95, false)] {
            let c = LineChart {
                scale,
                smoothing,
                color,
                ..chart(series)
            };
            for w in 0..28 {
                for h in 0..12 {
                    let mut buf = Buffer::empty(Rect::new(0, 0, 30, 14));
                    let area = Rect::new(2, 1, w, h);
                    c.render(area, &mut buf);
                    // Nothing is drawn outside the area.
                    let outside = buf.area.positions().filter(|&p| !area.contains(p));
                    for p in outside {
                        assert_eq!(buf[p], Cell::EMPTY, "{p:?} in {w}x{h}");
                    }
                }
            }
            // An area larger than the buffer is clipped, not a panic.
            let mut buf = Buffer::empty(Rect::new(0, 0, 10, 5));
            c.render(Rect::new(5, 2, 100, 100), &mut buf);
        }
    }
}

#[test]
fn too_small_for_axes_draws_only_the_block() {
    let series = train_and_val();
    let buf = render(chart(&series), 12, 5);
    assert!(rows(&buf)[0].contains("loss"));
    assert!(braille_cells(&buf).is_empty());
}
