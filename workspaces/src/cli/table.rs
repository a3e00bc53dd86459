//! Plain text tables (left-aligned columns, two spaces apart) and small formatting helpers.

pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  "));
            }
        }
        s.trim_end().to_string()
    };
    let mut out = line(header.to_vec());
    out.push('\n');
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}

/// `1h02m`, `3m05s`, `12.3s`.
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

/// Unix seconds as `2026-11-21 10:15:00` (UTC).
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

pub fn percent(a: Option<f64>) -> String {
    a.map(|a| format!("{:.2}%", a * 100.0))
        .unwrap_or_else(|| "-".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_aligned_columns() {
        let t = render(
            &["ID", "STATUS"],
            &[
                vec!["a".into(), "running".into()],
                vec!["bbbb".into(), "failed".into()],
            ],
        );
        assert_eq!(t, "ID    STATUS\na     running\nbbbb  failed\n");
        assert_eq!(duration(65.0), "1m05s");
        assert_eq!(duration(3.25), "3.2s");
        assert_eq!(timestamp(0.0), "1970-01-01 00:00:00");
    }
}
