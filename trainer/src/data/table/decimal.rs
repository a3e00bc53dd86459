//! Fast decimal parsing of a CSV cell's number, bit-identical to `str::parse::<f64>`.
//!
//! [`prefix`] reads the plain decimal at the start of a byte slice (`-12.5`, `3e-4`, `.5`,
//! `+7.`) and stops at the first byte that cannot continue it. Most numbers a program writes
//! have at most 19 digits and a small exponent: when the digits fit in 53 bits and the power
//! of ten is within ±22, both are exact `f64`s and one multiplication or division rounds
//! correctly (Clinger's fast path, which the standard parser takes too). Anything else goes to
//! `str::parse::<f64>` with the same digits, so the result never differs from it.

/// Exact powers of ten as `f64` (10^0 ..= 10^22).
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// The decimal number at the start of `b` and the bytes it spans; `(0.0, 0)` when `b` does not
/// start with one (a sign alone, a point alone, `inf`, a space...).
#[inline]
pub fn prefix(b: &[u8]) -> (f64, usize) {
    let mut i = 0;
    let negative = match b.first() {
        Some(b'-') => {
            i = 1;
            true
        }
        Some(b'+') => {
            i = 1;
            false
        }
        _ => false,
    };
    let mut mantissa: u64 = 0;
    let int_start = i;
    i = run(b, i, &mut mantissa);
    let mut digits = i - int_start;
    let mut any = i > int_start;
    let mut frac = 0i32;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let frac_start = i;
        i = run(b, i, &mut mantissa);
        digits += i - frac_start;
        frac = (i - frac_start) as i32;
        any |= i > frac_start;
    }
    if !any {
        return (0.0, 0);
    }
    let mut exp = 0i32;
    if matches!(b.get(i), Some(b'e' | b'E')) {
        let mut j = i + 1;
        let exp_negative = match b.get(j) {
            Some(b'-') => {
                j += 1;
                true
            }
            Some(b'+') => {
                j += 1;
                false
            }
            _ => false,
        };
        let exp_start = j;
        while let Some(&c) = b.get(j) {
            let d = c.wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            exp = exp.saturating_mul(10).saturating_add(d as i32);
            j += 1;
        }
        // `1e` or `1e-`: the number ends before the `e` (and the cell is then not a number).
        if j > exp_start {
            if exp_negative {
                exp = -exp;
            }
            i = j;
        } else {
            exp = 0;
        }
    }
    let e = exp.saturating_sub(frac);
    if digits <= 19 && mantissa <= 1 << 53 && (-22..=22).contains(&e) {
        let m = mantissa as f64;
        let v = if e >= 0 {
            m * POW10[e as usize]
        } else {
            m / POW10[(-e) as usize]
        };
        return (if negative { -v } else { v }, i);
    }
    // SAFETY: b[..i] is ASCII digits, signs, a point and an exponent: valid UTF-8.
    let text = unsafe { std::str::from_utf8_unchecked(&b[..i]) };
    (text.parse().unwrap_or(f64::NAN), i)
}

/// Reads the run of digits at `b[i..]` into `mantissa` (wrapping: the caller counts digits);
/// returns where it ends. Eight and four digits at a time where it can (SWAR, as the standard
/// parser does).
#[inline]
fn run(b: &[u8], mut i: usize, mantissa: &mut u64) -> usize {
    while let Some(chunk) = b.get(i..i + 8) {
        let v = u64::from_le_bytes(chunk.try_into().unwrap());
        let a = v.wrapping_add(0x4646_4646_4646_4646);
        let d = v.wrapping_sub(0x3030_3030_3030_3030);
        if (a | d) & 0x8080_8080_8080_8080 != 0 {
            break;
        }
        const MASK: u64 = 0x0000_00FF_0000_00FF;
        const MUL1: u64 = 0x000F_4240_0000_0064; // 100 + (1000000 << 32)
        const MUL2: u64 = 0x0000_2710_0000_0001; // 1 + (10000 << 32)
        let x = d.wrapping_mul(10).wrapping_add(d >> 8);
        let x = ((x & MASK).wrapping_mul(MUL1)).wrapping_add(((x >> 16) & MASK).wrapping_mul(MUL2))
            >> 32;
        *mantissa = mantissa
            .wrapping_mul(100_000_000)
            .wrapping_add(x & 0xFFFF_FFFF);
        i += 8;
    }
    if let Some(chunk) = b.get(i..i + 4) {
        let v = u32::from_le_bytes(chunk.try_into().unwrap());
        let a = v.wrapping_add(0x4646_4646);
        let d = v.wrapping_sub(0x3030_3030);
        if (a | d) & 0x8080_8080 == 0 {
            let x = d.wrapping_mul(10).wrapping_add(d >> 8);
            let x = (x & 0xFF) * 100 + ((x >> 16) & 0xFF);
            *mantissa = mantissa.wrapping_mul(10_000).wrapping_add(x as u64);
            i += 4;
        }
    }
    while let Some(&c) = b.get(i) {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        *mantissa = mantissa.wrapping_mul(10).wrapping_add(d as u64);
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(s: &str) {
        let (v, n) = prefix(s.as_bytes());
        assert_eq!(n, s.len(), "{s}: consumed {n}");
        let want: f64 = s.parse().unwrap();
        assert_eq!(v.to_bits(), want.to_bits(), "{s}: {v} vs {want}");
    }

    #[test]
    fn plain_numbers_match_the_standard_parser() {
        for s in [
            "0",
            "-0",
            "+5",
            "1.",
            ".5",
            "-.25",
            "12345678901234567890",
            "1e22",
            "1e23",
            "9e-23",
            "0.1",
            "0.30000000000000004",
            "1.7976931348623157e308",
            "4.9e-324",
            "1e-400",
            "123456789012345678901234567890",
            "-2.407340",
            "0.015736666",
            "1E5",
            "3e+2",
            "9007199254740993",
            "0.000000000000000000000000000001",
        ] {
            same(s);
        }
        // A spread of f32 and f64 values written the shortest way.
        let mut x = 0x1234_5678_9abc_def0u64;
        for _ in 0..20000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let f = f64::from_bits(x);
            if f.is_finite() {
                same(&format!("{f}"));
                same(&format!("{f:e}"));
            }
            let g = f32::from_bits(x as u32);
            if g.is_finite() {
                same(&format!("{g}"));
                same(&format!("{}", g as f64 * 1e-3));
            }
        }
    }

    #[test]
    fn digit_runs_of_every_length() {
        for len in 1..=20 {
            let text: String = (0..len)
                .map(|k| char::from(b'0' + (k * 7 % 10) as u8))
                .collect();
            for tail in ["", ",", "x9", ".5"] {
                let s = format!("{text}{tail}");
                let mut m = 0u64;
                assert_eq!(run(s.as_bytes(), 0, &mut m), len, "{s}");
                if len <= 19 {
                    assert_eq!(m, text.parse::<u64>().unwrap(), "{s}");
                }
            }
        }
    }

    #[test]
    fn prefixes_stop_where_the_number_does() {
        assert_eq!(prefix(b"1.5,2"), (1.5, 3));
        assert_eq!(prefix(b"-7\r\n"), (-7.0, 2));
        assert_eq!(prefix(b"2e5x"), (2e5, 3));
        assert_eq!(prefix(b"2e,"), (2.0, 1));
        assert_eq!(prefix(b"3e-,"), (3.0, 1));
        for none in [&b""[..], b"-", b".", b"-.", b"inf", b" 1", b"e5", b",1"] {
            assert_eq!(prefix(none).1, 0, "{:?}", String::from_utf8_lossy(none));
        }
    }
}
