//! Axis ticks: "nice" values, compact labels, and the labelled ticks of
//! linear and log10 axes.

/// "Nice" tick values (1, 2, 2.5 or 5 times a power of ten apart) lying inside
/// `[min, max]`: as many as possible without exceeding `n` (the finest such
/// step), so `n` is a label budget.
///
/// Returns `[min]` for an empty range, `[min, max]` for a range too wide for
/// f64 steps, and nothing for non-finite bounds or `n == 0`.
#[must_use]
pub fn nice_ticks(min: f64, max: f64, n: usize) -> Vec<f64> {
    let (lo, hi) = if min <= max { (min, max) } else { (max, min) };
    if n == 0 || !lo.is_finite() || !hi.is_finite() {
        return Vec::new();
    }
    let span = hi - lo;
    if span <= 0.0 {
        return vec![lo];
    }
    if !span.is_finite() {
        return vec![lo, hi];
    }
    let base = 10f64.powf((span / n as f64).log10().floor());
    // Candidate steps from coarse to fine: the last one within budget wins.
    let mut best: Option<f64> = None;
    for scale in [100.0, 10.0, 1.0, 0.1] {
        for mantissa in [5.0, 2.5, 2.0, 1.0] {
            let step = base * scale * mantissa;
            if tick_range(lo, hi, step).is_some_and(|(k0, k1)| k1 - k0 < n as f64) {
                best = Some(step);
            }
        }
    }
    let Some(step) = best else {
        return if n == 1 { vec![lo] } else { vec![lo, hi] };
    };
    let Some((k0, k1)) = tick_range(lo, hi, step) else {
        return vec![lo, hi];
    };
    let mut ticks: Vec<f64> = (0..=(k1 - k0) as usize)
        .map(|i| clean_tick((k0 + i as f64) * step, step))
        .collect();
    ticks.dedup();
    ticks
}

/// `t` without the float noise of `k * step` (0.30000000000000004 → 0.3).
fn clean_tick(t: f64, step: f64) -> f64 {
    if t.abs() < step * 1e-9 {
        return 0.0;
    }
    // Two digits below the step's leading digit cover steps like 0.25.
    let digits = (t.abs().log10().floor() - step.log10().floor()) as usize + 2;
    round_sig(t, digits.min(17))
}

/// Integer multiples `k0..=k1` of `step` inside `[lo, hi]` (with a hair of
/// tolerance), or `None` when there are none or absurdly many.
fn tick_range(lo: f64, hi: f64, step: f64) -> Option<(f64, f64)> {
    if !(step > 0.0 && step.is_finite()) {
        return None;
    }
    let k0 = (lo / step - 1e-9).ceil();
    let k1 = (hi / step + 1e-9).floor();
    let ok = k0.is_finite() && k1.is_finite() && k1 >= k0 && k1 - k0 <= 1000.0;
    ok.then_some((k0, k1))
}

/// Compact tick/value label: `0`, `0.035`, `2.5`, `123.4`, `1.2k`, `45M`,
/// `3e-4`, `1.5e20`. Up to 4 significant digits below 1000, 3 with a k/M/G/T
/// suffix, scientific notation below 0.001 and from 1e15 up.
#[must_use]
pub fn format_tick(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.into();
    }
    if v == 0.0 {
        return "0".into();
    }
    let a = v.abs();
    if !(1e-3..1e15).contains(&a) {
        return format_sci(v);
    }
    let plain = round_sig(v, 4);
    if plain.abs() < 1000.0 {
        return format!("{plain}");
    }
    let r = round_sig(v, 3);
    for (div, suffix) in [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")] {
        if r.abs() >= div {
            return format!("{}{suffix}", round_sig(r / div, 3));
        }
    }
    format!("{plain}")
}

/// `v` rounded to `digits` significant digits.
fn round_sig(v: f64, digits: usize) -> f64 {
    format!("{:.*e}", digits.saturating_sub(1), v)
        .parse()
        .unwrap_or(v)
}

/// Scientific notation with up to 3 significant digits and no trailing zeros.
fn format_sci(v: f64) -> String {
    let s = format!("{v:.2e}");
    match s.split_once('e') {
        Some((mantissa, exp)) if mantissa.contains('.') => {
            let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
            format!("{mantissa}e{exp}")
        }
        _ => s,
    }
}

/// A tick: its position in plot coordinates and its label.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Tick {
    pub(super) pos: f64,
    pub(super) label: String,
}

/// Ticks for linear values, with labels made distinct when [`format_tick`]
/// rounds neighbours to the same text.
pub(super) fn linear_ticks(values: &[f64]) -> Vec<Tick> {
    let distinct = |labels: &[String]| labels.windows(2).all(|w| w[0] != w[1]);
    let mut labels: Vec<String> = values.iter().map(|&v| format_tick(v)).collect();
    for decimals in 0..=20 {
        if distinct(&labels) {
            break;
        }
        labels = values.iter().map(|v| format!("{v:.decimals$}")).collect();
    }
    values
        .iter()
        .zip(labels)
        .map(|(&pos, label)| Tick { pos, label })
        .collect()
}

/// Ticks for a log10 axis spanning `[l0, l1]` in log space, labelled with real
/// values: whole decades when two or more are visible, else 1-2-5 values, else
/// linear nice values.
pub(super) fn log_ticks(l0: f64, l1: f64, n: usize) -> Vec<Tick> {
    let log_tick = |v: f64| Tick {
        pos: v.log10(),
        label: format_tick(v),
    };
    let (e0, e1) = (l0.ceil(), l1.floor());
    if e0.is_finite() && e1.is_finite() && e1 - e0 >= 1.0 {
        let count = (e1 - e0) as usize + 1;
        let stride = [1, 2, 3, 5, 10, 20, 50, 100, 200, 500]
            .into_iter()
            .find(|&k| count.div_ceil(k) <= n.max(2))
            .unwrap_or(count);
        return (0..count)
            .map(|i| e0 + i as f64)
            .filter(|e| (*e as i64).rem_euclid(stride as i64) == 0)
            .map(|e| Tick {
                pos: e,
                label: format_tick(10f64.powi(e as i32)),
            })
            .collect();
    }
    let one_two_five: Vec<Tick> = (e0 as i32 - 1..=e1 as i32)
        .flat_map(|e| [1.0, 2.0, 5.0].map(|m| round_sig(m * 10f64.powi(e), 3)))
        .filter(|v| (l0..=l1).contains(&v.log10()))
        .map(log_tick)
        .collect();
    if (2..=n.max(2) + 1).contains(&one_two_five.len()) {
        return one_two_five;
    }
    let (r0, r1) = (10f64.powf(l0), 10f64.powf(l1));
    let values: Vec<f64> = nice_ticks(r0, r1, n)
        .into_iter()
        .filter(|&v| v > 0.0)
        .collect();
    linear_ticks(&values)
        .into_iter()
        .map(|t| Tick {
            pos: t.pos.log10(),
            label: t.label,
        })
        .collect()
}
