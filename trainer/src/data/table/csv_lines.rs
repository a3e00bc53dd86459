//! The fast CSV path: a file without quotes, read by line ranges on several threads straight
//! into the final row-major buffer.
//!
//! The data after the header is cut into one byte range per thread, each starting at a line.
//! A first pass counts every range's rows (non-blank lines, with vector compares) and looks for
//! quotes and lone carriage returns: a file with either is left to the `csv` crate
//! (sequential), since a quoted cell may hold a comma or a line break. The second pass knows
//! where every range's rows go, allocates the features once and parses every range's lines into
//! its rows. The file is mapped, not read: both passes hand its pages back as they pass them.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use super::cells::{Fault, RowParser, Slot};
use super::columns::{Target, zeroed};
use super::labels::{Interner, Labels, Piece};
use super::source::{RELEASE_EVERY, Source};
use crate::spec::SyntheticTask;

/// Below this much data, one thread reads it all.
const ONE_THREAD_BELOW: usize = 1 << 20;

/// What the fast path made of the file.
pub enum Lines {
    /// Quotes or lone carriage returns: read the file with the `csv` crate.
    Fallback,
    /// The rows, their features (`rows × nf`, row-major) and their target.
    Read {
        rows: usize,
        features: Vec<f32>,
        target: Target,
    },
    /// The first bad row: the offset its line starts at, and what is wrong.
    Fault { offset: usize, fault: Fault },
    /// The features would not fit in memory.
    TooBig { rows: usize },
}

/// Reads the data of `src` from byte `start` (after the header) with `threads` threads.
pub fn read_lines(
    src: &dyn Source,
    start: usize,
    parser: &RowParser,
    nf: usize,
    threads: usize,
) -> Lines {
    let pieces = if src.bytes().len() - start < ONE_THREAD_BELOW {
        1
    } else {
        threads.max(1)
    };
    read_pieces(src, start, parser, nf, pieces)
}

/// [`read_lines`] with the data cut into `pieces` ranges, one thread each.
fn read_pieces(
    src: &dyn Source,
    start: usize,
    parser: &RowParser,
    nf: usize,
    pieces: usize,
) -> Lines {
    let size = src.bytes().len();
    let ranges = cut(src.bytes(), start, pieces);
    let fallback = AtomicBool::new(false);
    let counts: Vec<Option<usize>> = std::thread::scope(|s| {
        let handles: Vec<_> = ranges
            .iter()
            .map(|r| {
                let fallback = &fallback;
                s.spawn(move || count_rows(src, r.clone(), r.end == size, fallback))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let Some(rows_of) = counts.into_iter().collect::<Option<Vec<usize>>>() else {
        return Lines::Fallback;
    };
    let rows: usize = rows_of.iter().sum();
    let Some(mut features) = zeroed::<f32>(rows.saturating_mul(nf)) else {
        return Lines::TooBig { rows };
    };
    let classes = parser.task() == SyntheticTask::Classification;
    let (mut ids, mut values) = if classes {
        (zeroed::<u32>(rows), Some(Vec::new()))
    } else {
        (Some(Vec::new()), zeroed::<f32>(rows))
    };
    let (Some(ids_buf), Some(values_buf)) = (ids.as_mut(), values.as_mut()) else {
        return Lines::TooBig { rows };
    };
    // Every range's rows, as disjoint slices of the outputs.
    let mut jobs = Vec::with_capacity(ranges.len());
    let (mut f_rest, mut i_rest, mut v_rest) =
        (&mut features[..], &mut ids_buf[..], &mut values_buf[..]);
    let mut row0 = 0;
    for (r, &n) in ranges.iter().zip(&rows_of) {
        let (f, fr) = f_rest.split_at_mut(n * nf);
        let (i, ir) = i_rest.split_at_mut(if classes { n } else { 0 });
        let (v, vr) = v_rest.split_at_mut(if classes { 0 } else { n });
        (f_rest, i_rest, v_rest) = (fr, ir, vr);
        jobs.push((
            r.clone(),
            row0..row0 + n,
            Out {
                feats: f,
                ids: i,
                values: v,
            },
        ));
        row0 += n;
    }
    let results: Vec<Parsed> = std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .into_iter()
            .map(|(bytes, rows, out)| {
                s.spawn(move || parse_range(src, bytes, rows, parser, nf, out))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut pieces = Vec::with_capacity(results.len());
    for r in results {
        match r {
            Parsed::Piece(p) => pieces.push(p),
            Parsed::Fault(offset, fault) => return Lines::Fault { offset, fault },
            Parsed::Miscounted => return Lines::Fallback,
        }
    }
    let target = if classes {
        Target::Labels(Labels {
            ids: ids.unwrap_or_default(),
            pieces,
        })
    } else {
        Target::Values(values.unwrap_or_default())
    };
    Lines::Read {
        rows,
        features,
        target,
    }
}

/// `bytes[start..]` cut into `pieces` ranges, each starting at a line (the last ends at the
/// end).
fn cut(bytes: &[u8], start: usize, pieces: usize) -> Vec<Range<usize>> {
    let size = bytes.len();
    let mut bounds = vec![start];
    for k in 1..pieces {
        let nominal = start + (size - start) * k / pieces;
        // The range starts after the first line feed at or after `nominal - 1`.
        let from = nominal
            .max(*bounds.last().unwrap())
            .saturating_sub(1)
            .max(start);
        let bound = bytes[from..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(size, |i| from + i + 1);
        bounds.push(bound.max(*bounds.last().unwrap()));
    }
    bounds.push(size);
    bounds.windows(2).map(|w| w[0]..w[1]).collect()
}

/// The rows (non-blank lines) of `bytes`, or None when it has a quote or a lone carriage
/// return (or another range found one: `fallback`). `last`: the range ends the file, so its
/// last line may lack a line feed.
fn count_rows(
    src: &dyn Source,
    bytes: Range<usize>,
    last: bool,
    fallback: &AtomicBool,
) -> Option<usize> {
    let mut counter = Counter::new();
    let mut at = bytes.start;
    while at < bytes.end {
        if fallback.load(Ordering::Relaxed) {
            return None;
        }
        let step = at..(at + RELEASE_EVERY).min(bytes.end);
        let ok = counter.feed(&src.bytes()[step.clone()]);
        src.release(step.clone());
        if !ok {
            fallback.store(true, Ordering::Relaxed);
            return None;
        }
        at = step.end;
    }
    let rows = counter.finish(last);
    if rows.is_none() {
        fallback.store(true, Ordering::Relaxed);
    }
    rows
}

/// Counts non-blank lines 64 bytes at a time with bit masks of the line feeds, carriage returns
/// and quotes (compiled to vector compares), refusing quotes and lone carriage returns.
struct Counter {
    rows: usize,
    /// The previous block's last byte was a line feed (true at the start: a range starts at a
    /// line).
    carry_nl: u64,
    /// The previous block's last byte was a carriage return.
    carry_cr: u64,
    /// The previous block's last byte was a carriage return starting a line.
    carry_cr_start: u64,
    /// The last line so far is not empty (for a last line without a line feed).
    open_line: bool,
}

/// Bit i set where `block[i]` is a line feed, a carriage return, a quote (three masks).
#[cfg(target_arch = "x86_64")]
#[inline]
fn masks64(block: &[u8; 64]) -> (u64, u64, u64) {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of every x86_64 CPU; the four unaligned 16-byte loads stay within
    // the 64-byte block.
    unsafe {
        let (nl, cr, q) = (
            _mm_set1_epi8(b'\n' as i8),
            _mm_set1_epi8(b'\r' as i8),
            _mm_set1_epi8(b'"' as i8),
        );
        let mut m = (0u64, 0u64, 0u64);
        for k in 0..4 {
            let v = _mm_loadu_si128(block.as_ptr().add(16 * k) as *const __m128i);
            let bits = |c| (_mm_movemask_epi8(_mm_cmpeq_epi8(v, c)) as u32 as u64) << (16 * k);
            m.0 |= bits(nl);
            m.1 |= bits(cr);
            m.2 |= bits(q);
        }
        m
    }
}

/// [`masks64`] without vector instructions.
#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn masks64(block: &[u8; 64]) -> (u64, u64, u64) {
    (mask(block, b'\n'), mask(block, b'\r'), mask(block, b'"'))
}

/// Bit i set where `block[i] == c`.
#[inline]
fn mask(block: &[u8], c: u8) -> u64 {
    let mut m = 0u64;
    for (i, &b) in block.iter().enumerate() {
        m |= ((b == c) as u64) << i;
    }
    m
}

impl Counter {
    fn new() -> Counter {
        Counter {
            rows: 0,
            carry_nl: 1,
            carry_cr: 0,
            carry_cr_start: 0,
            open_line: false,
        }
    }

    /// Counts the rows ended in `chunk`; false on a quote or a lone carriage return.
    fn feed(&mut self, chunk: &[u8]) -> bool {
        let mut blocks = chunk.chunks_exact(64);
        for block in &mut blocks {
            let block: &[u8; 64] = block.try_into().unwrap();
            let (nl, cr, quote) = masks64(block);
            if !self.block(nl, cr, quote, 64) {
                return false;
            }
        }
        let rest = blocks.remainder();
        if !rest.is_empty()
            && !self.block(
                mask(rest, b'\n'),
                mask(rest, b'\r'),
                mask(rest, b'"'),
                rest.len(),
            )
        {
            return false;
        }
        true
    }

    /// One block of `len` bytes given as masks.
    #[inline]
    fn block(&mut self, nl: u64, cr: u64, quote: u64, len: usize) -> bool {
        // Every carriage return is followed by a line feed (the next block's first byte for
        // the last one).
        let cr_next = (cr << 1) | self.carry_cr;
        if quote != 0 || cr_next & !nl & low_bits(len) != 0 {
            return false;
        }
        // A line starts after a line feed; a line feed ends a blank line when it starts one, or
        // follows a carriage return that starts one.
        let starts = (nl << 1) | self.carry_nl;
        let cr_start = cr & starts;
        let blank = nl & (starts | (cr_start << 1) | self.carry_cr_start);
        self.rows += (nl.count_ones() - blank.count_ones()) as usize;
        let top = len - 1;
        self.carry_nl = (nl >> top) & 1;
        self.carry_cr = (cr >> top) & 1;
        self.carry_cr_start = (cr_start >> top) & 1;
        // Bytes after the last line feed that are not a lone carriage return opening it.
        let after = !low_bits(64 - nl.leading_zeros() as usize) & low_bits(len);
        if nl != 0 {
            self.open_line = false;
        }
        self.open_line |= after & !cr_start != 0;
        true
    }

    /// The rows, counting a last line without a line feed when `last`; None when the range
    /// ends with a carriage return.
    fn finish(self, last: bool) -> Option<usize> {
        if self.carry_cr != 0 {
            return None;
        }
        Some(self.rows + usize::from(last && self.open_line))
    }
}

/// The mask of the lowest `n` bits (n ≤ 64).
#[inline]
fn low_bits(n: usize) -> u64 {
    if n >= 64 { u64::MAX } else { (1u64 << n) - 1 }
}

/// Where one range's rows go: its slices of the features and of the classes or values.
struct Out<'a> {
    feats: &'a mut [f32],
    ids: &'a mut [u32],
    values: &'a mut [f32],
}

/// What parsing a range gave.
enum Parsed {
    /// The labels' names of its rows.
    Piece(Piece),
    /// The first bad row: its line's offset, and what is wrong.
    Fault(usize, Fault),
    /// Not the rows counted (cannot happen: both passes skip the same blank lines).
    Miscounted,
}

/// Parses the lines of `bytes` into `rows`: features into `out.feats`, classes into `out.ids`
/// (a classification) or values into `out.values` (a regression).
fn parse_range(
    src: &dyn Source,
    bytes: Range<usize>,
    rows: Range<usize>,
    parser: &RowParser,
    nf: usize,
    out: Out,
) -> Parsed {
    let Out { feats, ids, values } = out;
    let mut interner = Interner::default();
    let all = src.bytes();
    // The whole lines, then a last line without a line feed (the file's end), given one.
    let body_end = all[bytes.clone()]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(bytes.start, |i| bytes.start + i + 1);
    let mut tail = all[body_end..bytes.end].to_vec();
    if !tail.is_empty() {
        tail.push(b'\n');
    }
    let mut row = 0usize;
    let n_rows = rows.len();
    let mut released = bytes.start;
    for (data, base, from, to) in [
        (all, 0, bytes.start, body_end),
        (&tail[..], body_end, 0, tail.len()),
    ] {
        let mut at = from;
        while at < to {
            match data[at] {
                b'\n' => {
                    at += 1;
                    continue;
                }
                b'\r' if data.get(at + 1) == Some(&b'\n') => {
                    at += 2;
                    continue;
                }
                _ => {}
            }
            if row == n_rows {
                return Parsed::Miscounted;
            }
            let slot = if ids.is_empty() {
                Slot::Value(&mut values[row])
            } else {
                Slot::Class(&mut ids[row], &mut interner)
            };
            let f = &mut feats[row * nf..(row + 1) * nf];
            match parser.line_in(data, at, f, slot) {
                Ok(next) => at = next,
                Err(fault) => return Parsed::Fault(base + at, fault),
            }
            row += 1;
            if base == 0 && at - released >= RELEASE_EVERY {
                src.release(released..at);
                released = at;
            }
        }
    }
    src.release(released..body_end);
    if row != n_rows {
        return Parsed::Miscounted;
    }
    Parsed::Piece(interner.piece(rows))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::table::columns::Role;

    fn parser(n: usize) -> RowParser {
        let mut roles: Vec<Role> = (0..n - 1).map(Role::Feature).collect();
        roles.push(Role::Target);
        RowParser::new(roles, SyntheticTask::Classification)
    }

    #[test]
    fn ranges_start_at_lines() {
        let b: &[u8] = b"h\n11\n22\n33\n44\n";
        let r = cut(b, 2, 3);
        assert_eq!(r, vec![2..8, 8..11, 11..14]);
        for k in 1..=6 {
            let r = cut(b, 2, k);
            assert_eq!(r.first().unwrap().start, 2);
            assert_eq!(r.last().unwrap().end, b.len());
            assert!(r.windows(2).all(|w| w[0].end == w[1].start));
        }
    }

    #[test]
    fn rows_are_the_non_blank_lines() {
        let count =
            |b: &[u8], last: bool| count_rows(&b, 0..b.len(), last, &AtomicBool::new(false));
        assert_eq!(count(b"1\n2\n", true), Some(2));
        assert_eq!(count(b"1\n\n2", true), Some(2));
        assert_eq!(count(b"1\n\n2", false), Some(1));
        assert_eq!(count(b"\n\n1\n\n\n", true), Some(1));
        assert_eq!(count(b"1\r\n\r\n2\r\n", true), Some(2));
        assert_eq!(count(b"1\r2\n", true), None);
        assert_eq!(count(b"1,\"a\"\n", true), None);
        assert_eq!(count(b"1\r", true), None);
        assert_eq!(count(b"\r\n\r\nx\r\ny", true), Some(2));
        assert_eq!(count(b"\r\n\r\nx\r\ny", false), Some(1));
        // Lines across 64-byte blocks, blank ones among them.
        let mut text = Vec::new();
        let mut rows = 0;
        for i in 0..300 {
            match i % 7 {
                0 => text.extend_from_slice(b"\n"),
                1 => text.extend_from_slice(b"\r\n"),
                k => {
                    text.extend(std::iter::repeat_n(b'x', i % 70 + k));
                    text.extend_from_slice(if i % 2 == 0 { b"\r\n" } else { b"\n" });
                    rows += 1;
                }
            }
        }
        for cut in [0, 1, 63, 64, 65, 127, 128, 500] {
            let mut c = Counter::new();
            assert!(c.feed(&text[..cut]) && c.feed(&text[cut..]));
            assert_eq!(c.finish(true), Some(rows), "cut at {cut}");
        }
    }

    #[test]
    fn every_cut_reads_the_same_rows() {
        let mut text = String::new();
        // A last line without a line feed, and one with a carriage return.
        let last = "1e3,-0,c9";
        for i in 0..500 {
            text += &format!("{}.5,{},c{}\n", i, i * 2, i % 3);
            if i % 97 == 0 {
                text += "\n";
            }
            if i % 101 == 0 {
                text += "\r\n";
            }
        }
        text += last;
        let b = text.as_bytes();
        let p = parser(3);
        let mut first = None;
        for pieces in [1, 2, 3, 7] {
            let ranges = cut(b, 0, pieces);
            let no = AtomicBool::new(false);
            let counts: Vec<usize> = ranges
                .iter()
                .map(|r| count_rows(&b, r.clone(), r.end == b.len(), &no).unwrap())
                .collect();
            assert_eq!(counts.iter().sum::<usize>(), 501);
            let Lines::Read {
                rows,
                features,
                target,
            } = read_pieces(&b, 0, &p, 2, pieces)
            else {
                panic!("not read");
            };
            assert_eq!(rows, 501);
            assert_eq!(features[2 * 500..], [1000.0, -0.0]);
            assert_eq!(&features[..4], &[0.5, 0.0, 1.5, 2.0]);
            assert_eq!(features[2 * 499], 499.5);
            let Target::Labels(l) = &target else { panic!() };
            let names: Vec<String> = l
                .ids
                .iter()
                .enumerate()
                .map(|(r, &id)| {
                    let piece = l.pieces.iter().find(|p| p.rows.contains(&r)).unwrap();
                    piece.names[id as usize].to_string()
                })
                .collect();
            assert_eq!(names[..4], ["c0", "c1", "c2", "c0"]);
            match &first {
                None => first = Some((features, names)),
                Some(f) => assert_eq!(f, &(features, names)),
            }
        }
    }

    #[test]
    fn a_bad_row_is_found_by_offset() {
        let b: &[u8] = b"1,2,a\n3,4,b\n5,x,c\n6,7\n";
        match read_pieces(&b, 0, &parser(3), 2, 4) {
            Lines::Fault { offset, fault } => {
                assert_eq!(offset, 12);
                assert_eq!(
                    fault,
                    Fault::NotNumber {
                        column: 1,
                        value: b"x".to_vec()
                    }
                );
            }
            _ => panic!("no fault"),
        }
        assert!(matches!(
            read_lines(&&b"1,2,\"a\"\n"[..], 0, &parser(3), 2, 1),
            Lines::Fallback
        ));
    }
}
