//! Human formatting shared by front ends: durations, timestamps, percentages, losses, a language
//! model's perplexity and bits, throughputs, a step's time breakdown and byte counts. Every
//! function is pure and renders a missing or meaningless value as `-`.

use crate::metrics::{PrecisionFigures, StepBreakdown, SyncFigures};

/// Seconds as `1h02m`, `3m05s` or `12.3s`; `-` when negative or not finite.
pub fn duration(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "-".into();
    }
    let s = seconds.round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{seconds:.1}s")
    }
}

/// An optional duration ([`duration`]), `-` when absent.
pub fn opt_duration(seconds: Option<f64>) -> String {
    seconds.map(duration).unwrap_or_else(|| "-".into())
}

/// Unix seconds as `2026-11-21 10:15:00` (UTC); `-` when out of range.
pub fn timestamp(t: f64) -> String {
    match time::OffsetDateTime::from_unix_timestamp(t as i64) {
        Ok(d) => format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
            d.year(),
            d.month() as u8,
            d.day(),
            d.hour(),
            d.minute(),
            d.second()
        ),
        Err(_) => "-".into(),
    }
}

/// A fraction as a percentage with 2 decimals (`0.9123` → `91.23%`), `-` when absent.
pub fn percent(a: Option<f64>) -> String {
    a.map(|a| format!("{:.2}%", a * 100.0))
        .unwrap_or_else(|| "-".into())
}

/// A loss with 4 decimals (`0.1234`), `-` when absent.
pub fn loss(l: Option<f64>) -> String {
    l.map(|v| format!("{v:.4}")).unwrap_or_else(|| "-".into())
}

/// A learning rate without trailing zeros (see [`crate::metrics::fmt_lr`]).
pub use crate::metrics::fmt_lr as lr;

/// A perplexity with 2 decimals (`4.26`), `-` when absent or not finite.
pub fn perplexity(p: Option<f64>) -> String {
    p.filter(|v| v.is_finite())
        .map(|v| format!("{v:.2}"))
        .unwrap_or_else(|| "-".into())
}

/// A language model's loss in bits, with its unit: `bits/char 2.092` (the `char` tokenizer) or
/// `bits/byte 2.092` (`byte`); `None` when the record has neither (token files).
pub fn bits(per_char: Option<f64>, per_byte: Option<f64>) -> Option<String> {
    match (per_char, per_byte) {
        (Some(b), _) => Some(format!("bits/char {b:.3}")),
        (None, Some(b)) => Some(format!("bits/byte {b:.3}")),
        (None, None) => None,
    }
}

/// A throughput (samples or tokens per second) without decimals (`16640`), `-` when absent or
/// not finite.
pub fn rate(r: Option<f64>) -> String {
    r.filter(|v| v.is_finite())
        .map(|v| format!("{v:.0}"))
        .unwrap_or_else(|| "-".into())
}

/// A step-time breakdown in one line: `0.184 s/step: compute 62 %, communication 30 % (0.120 s
/// in all, 0.055 s exposed), data 1 %, optimizer 7 %; 44.7 MB sent; compute-bound`.
pub fn breakdown(b: &StepBreakdown) -> String {
    let share = |s: f64| {
        if b.step_s > 0.0 {
            format!("{:.0} %", 100.0 * s / b.step_s)
        } else {
            "-".into()
        }
    };
    let sent = b
        .bytes_sent
        .map(|x| format!("; {} sent", bytes(x)))
        .unwrap_or_default();
    format!(
        "{:.3} s/step: compute {}, communication {} ({:.3} s in all, {:.3} s exposed), data {}, optimizer {}{sent}; {}-bound",
        b.step_s,
        share(b.compute_s),
        share(b.comm_exposed_s),
        b.comm_s,
        b.comm_exposed_s,
        share(b.data_s),
        share(b.optimizer_s),
        b.bound()
    )
}

/// A mixed-precision run's precision in one line: `bf16`, or `fp16, loss scale 32768, 3 steps
/// skipped`.
pub fn precision(p: &PrecisionFigures) -> String {
    let mut s = p.name.clone();
    if let Some(scale) = p.loss_scale {
        s += &format!(", loss scale {scale}");
    }
    match p.skipped_steps {
        Some(1) => s += ", 1 step skipped",
        Some(n) => s += &format!(", {n} steps skipped"),
        None => {}
    }
    s
}

/// Local steps' syncs in one line, after `step` steps: `diloco every 50 steps (int4), last
/// sync at step 100, 7 steps ago, drift 0.12 0.15`.
pub fn sync(s: &SyncFigures, step: u64) -> String {
    let mut line = format!("{} every {} steps ({})", s.method, s.every, s.encoding);
    match s.last_sync {
        0 => line += ", no sync yet",
        at => {
            line += &format!(", last sync at step {at}");
            match step.saturating_sub(at) {
                0 => {}
                1 => line += ", 1 step ago",
                n => line += &format!(", {n} steps ago"),
            }
        }
    }
    if !s.drift.is_empty() {
        let drifts: Vec<String> = s.drift.iter().map(|d| format!("{d:.3}")).collect();
        line += &format!(", drift {}", drifts.join(" "));
    }
    line
}

/// A byte count in decimal units: `512 B`, `44.7 MB`, `1.2 GB`.
pub fn bytes(n: f64) -> String {
    match n {
        n if n >= 1e9 => format!("{:.1} GB", n / 1e9),
        n if n >= 1e6 => format!("{:.1} MB", n / 1e6),
        n if n >= 1e3 => format!("{:.1} kB", n / 1e3),
        n => format!("{n:.0} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_precision_in_one_line() {
        let p = |name: &str, loss_scale, skipped_steps| PrecisionFigures {
            name: name.into(),
            loss_scale,
            skipped_steps,
        };
        assert_eq!(precision(&p("bf16", None, None)), "bf16");
        assert_eq!(
            precision(&p("fp16", Some(32768.0), Some(3))),
            "fp16, loss scale 32768, 3 steps skipped"
        );
        assert_eq!(
            precision(&p("fp16", Some(65536.0), Some(1))),
            "fp16, loss scale 65536, 1 step skipped"
        );
    }

    #[test]
    fn local_steps_syncs_in_one_line() {
        let mut s = SyncFigures {
            method: "diloco".into(),
            every: 50,
            encoding: "int4".into(),
            last_sync: 0,
            drift: vec![],
        };
        assert_eq!(sync(&s, 10), "diloco every 50 steps (int4), no sync yet");
        s.last_sync = 100;
        s.drift = vec![0.1234, 0.15];
        assert_eq!(
            sync(&s, 107),
            "diloco every 50 steps (int4), last sync at step 100, 7 steps ago, drift 0.123 0.150"
        );
        assert_eq!(
            sync(&s, 100),
            "diloco every 50 steps (int4), last sync at step 100, drift 0.123 0.150"
        );
    }

    #[test]
    fn a_breakdown_in_one_line() {
        let b = StepBreakdown {
            step_s: 0.2,
            compute_s: 0.124,
            comm_exposed_s: 0.06,
            data_s: 0.002,
            optimizer_s: 0.014,
            comm_s: 0.12,
            bytes_sent: Some(44.7e6),
        };
        assert_eq!(
            breakdown(&b),
            "0.200 s/step: compute 62 %, communication 30 % (0.120 s in all, 0.060 s exposed), data 1 %, optimizer 7 %; 44.7 MB sent; compute-bound"
        );
        assert_eq!(bytes(512.0), "512 B");
        assert_eq!(bytes(2.5e9), "2.5 GB");
    }

    #[test]
    fn durations() {
        assert_eq!(duration(65.0), "1m05s");
        assert_eq!(duration(3.25), "3.2s");
        assert_eq!(duration(59.96), "1m00s");
        assert_eq!(duration(3725.0), "1h02m");
        assert_eq!(duration(-1.0), "-");
        assert_eq!(duration(f64::NAN), "-");
        assert_eq!(opt_duration(None), "-");
        assert_eq!(opt_duration(Some(12.34)), "12.3s");
    }

    #[test]
    fn timestamps_are_utc() {
        assert_eq!(timestamp(0.0), "1970-01-01 00:00:00");
        assert_eq!(timestamp(1_795_270_959.8), "2026-11-21 14:22:39");
        assert_eq!(timestamp(1e300), "-");
    }

    #[test]
    fn percents_and_losses() {
        assert_eq!(percent(Some(0.91234)), "91.23%");
        assert_eq!(percent(Some(1.0)), "100.00%");
        assert_eq!(percent(None), "-");
        assert_eq!(loss(Some(0.123456)), "0.1235");
        assert_eq!(loss(None), "-");
        assert_eq!(lr(0.0005), "0.0005");
    }

    #[test]
    fn a_language_models_figures() {
        assert_eq!(perplexity(Some(4.263115)), "4.26");
        assert_eq!(perplexity(Some(f64::INFINITY)), "-");
        assert_eq!(perplexity(None), "-");
        assert_eq!(
            bits(Some(2.09191), None).as_deref(),
            Some("bits/char 2.092")
        );
        assert_eq!(bits(None, Some(1.0)).as_deref(), Some("bits/byte 1.000"));
        assert_eq!(bits(None, None), None);
        assert_eq!(rate(Some(16640.4)), "16640");
        assert_eq!(rate(Some(f64::NAN)), "-");
        assert_eq!(rate(None), "-");
    }
}
