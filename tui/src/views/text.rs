//! Small text pieces for cells: sparklines, bars, truncation.

use unicode_width::UnicodeWidthStr;

const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// The last `width` values as a line of block characters scaled between their min and max
/// (non-finite values as spaces).
pub fn sparkline(values: &[f64], width: usize) -> String {
    let tail = &values[values.len().saturating_sub(width)..];
    let finite = tail.iter().copied().filter(|v| v.is_finite());
    let (lo, hi) = finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
        (l.min(v), h.max(v))
    });
    tail.iter()
        .map(|&v| {
            if !v.is_finite() {
                ' '
            } else if hi <= lo {
                BLOCKS[3]
            } else {
                BLOCKS[(((v - lo) / (hi - lo)) * 7.0).round().clamp(0.0, 7.0) as usize]
            }
        })
        .collect()
}

/// A bar of `width` cells filled to `fraction` (eighths of a cell).
pub fn bar(fraction: f64, width: usize) -> String {
    let f = if fraction.is_finite() {
        fraction.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let eighths = (f * width as f64 * 8.0).round() as usize;
    let mut s = String::with_capacity(width * 3);
    for i in 0..width {
        let filled = eighths.saturating_sub(i * 8).min(8);
        s.push(match filled {
            0 => '·',
            8 => '█',
            n => ['▏', '▎', '▍', '▌', '▋', '▊', '▉'][n - 1],
        });
    }
    s
}

/// `s` cut to `width` display columns, with `…` when cut.
pub fn truncate(s: &str, width: usize) -> String {
    if s.width() <= width {
        return s.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut out = String::new();
    let mut w = 0;
    for c in s.chars() {
        let cw = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
        if w + cw > width - 1 {
            break;
        }
        out.push(c);
        w += cw;
    }
    out.push('…');
    out
}

/// Bytes as `512 B`, `1.5 KiB`, `3.2 GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces() {
        assert_eq!(sparkline(&[1.0, 2.0, 3.0, f64::NAN], 10), "▁▅█ ");
        assert_eq!(sparkline(&[5.0, 5.0], 10), "▄▄");
        assert_eq!(sparkline(&[1.0, 2.0, 3.0], 2), "▁█");
        assert_eq!(bar(0.5, 4), "██··");
        assert_eq!(bar(0.25, 2), "▌·");
        assert_eq!(bar(1.0 / 16.0, 2), "▏·");
        assert_eq!(bar(f64::NAN, 2), "··");
        assert_eq!(truncate("experiment", 6), "exper…");
        assert_eq!(truncate("exp", 6), "exp");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(3 * 1024 * 1024 * 1024 / 2), "1.5 GiB");
    }
}
