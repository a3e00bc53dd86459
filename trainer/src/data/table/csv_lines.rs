//! The fast CSV path: a file without quotes, read by line ranges on several threads straight
//! into the final row-major buffer.
//!
//! The data after the header is cut into one byte range per thread, each starting at a line.
//! A first pass counts every range's rows (non-blank lines) and looks for quotes and lone
//! carriage returns: a file with either is left to the `csv` crate (sequential), since a quoted
//! cell may hold a comma or a line break. The second pass knows where every range's rows go,
//! allocates the features once and parses every range's lines into its rows, reading the file a
//! megabyte at a time per thread: the file is never held whole.

use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use super::cells::{Fault, RowParser, Slot};
use super::columns::Target;
use super::labels::{Interner, Labels, Piece};
use super::source::Source;
use crate::spec::SyntheticTask;

/// Bytes read at a time per thread.
const CHUNK: usize = 1 << 20;
/// Below this much data, one thread reads it all.
const ONE_THREAD_BELOW: u64 = 1 << 20;

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
    Fault { offset: u64, fault: Fault },
    /// The features would not fit in memory.
    TooBig { rows: usize },
}

/// Reads the data of `src` from byte `start` (after the header) with `threads` threads.
pub fn read_lines(
    src: &dyn Source,
    start: u64,
    parser: &RowParser,
    nf: usize,
    threads: usize,
) -> io::Result<Lines> {
    let pieces = if src.size() - start < ONE_THREAD_BELOW {
        1
    } else {
        threads.max(1)
    };
    read_pieces(src, start, parser, nf, pieces)
}

/// [`read_lines`] with the data cut into `pieces` ranges, one thread each.
fn read_pieces(
    src: &dyn Source,
    start: u64,
    parser: &RowParser,
    nf: usize,
    pieces: usize,
) -> io::Result<Lines> {
    let size = src.size();
    let ranges = cut(src, start, size, pieces)?;
    let fallback = AtomicBool::new(false);
    let counts: Vec<io::Result<Option<usize>>> = std::thread::scope(|s| {
        let handles: Vec<_> = ranges
            .iter()
            .map(|r| {
                let fallback = &fallback;
                s.spawn(move || count_rows(src, r.clone(), r.end == size, fallback))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut rows_of = Vec::with_capacity(counts.len());
    for c in counts {
        match c? {
            Some(n) => rows_of.push(n),
            None => return Ok(Lines::Fallback),
        }
    }
    let rows: usize = rows_of.iter().sum();
    let Some(mut features) = zeroed::<f32>(rows * nf) else {
        return Ok(Lines::TooBig { rows });
    };
    let classes = parser.task() == SyntheticTask::Classification;
    let (mut ids, mut values) = if classes {
        (zeroed::<u32>(rows), Some(Vec::new()))
    } else {
        (Some(Vec::new()), zeroed::<f32>(rows))
    };
    let (Some(ids_buf), Some(values_buf)) = (ids.as_mut(), values.as_mut()) else {
        return Ok(Lines::TooBig { rows });
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
        jobs.push((r.clone(), row0..row0 + n, f, i, v));
        row0 += n;
    }
    let results: Vec<io::Result<Result<Piece, (u64, Fault)>>> = std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .into_iter()
            .map(|(bytes, rows, f, i, v)| {
                s.spawn(move || parse_range(src, bytes, rows, parser, nf, f, i, v))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut pieces = Vec::with_capacity(results.len());
    for r in results {
        match r? {
            Ok(p) => pieces.push(p),
            Err((offset, fault)) => return Ok(Lines::Fault { offset, fault }),
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
    Ok(Lines::Read {
        rows,
        features,
        target,
    })
}

/// A zeroed vector of `n` values, or None when the memory cannot be had.
fn zeroed<T: Clone + Default>(n: usize) -> Option<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).ok()?;
    v.resize(n, T::default());
    Some(v)
}

/// `[start, size)` cut into `pieces` ranges, each starting at a line (the last ends at `size`).
fn cut(src: &dyn Source, start: u64, size: u64, pieces: usize) -> io::Result<Vec<Range<u64>>> {
    let mut bounds = vec![start];
    let mut buf = vec![0u8; 64 << 10];
    for k in 1..pieces {
        let nominal = start + (size - start) * k as u64 / pieces as u64;
        let mut at = nominal.max(*bounds.last().unwrap());
        // The range starts after the first line feed at or after `at - 1`.
        at = at.saturating_sub(1).max(start);
        let bound = loop {
            let n = src.read_full(&mut buf, at)?;
            if n == 0 {
                break size;
            }
            if let Some(i) = buf[..n].iter().position(|&b| b == b'\n') {
                break at + i as u64 + 1;
            }
            at += n as u64;
        };
        bounds.push(bound.max(*bounds.last().unwrap()));
    }
    bounds.push(size);
    Ok(bounds.windows(2).map(|w| w[0]..w[1]).collect())
}

/// The rows (non-blank lines) of `bytes`, or None when it has a quote or a lone carriage
/// return (or another range found one: `fallback`). `last`: the range ends the file, so its
/// last line may lack a line feed.
fn count_rows(
    src: &dyn Source,
    bytes: Range<u64>,
    last: bool,
    fallback: &AtomicBool,
) -> io::Result<Option<usize>> {
    let mut buf = vec![0u8; CHUNK];
    let mut pos = bytes.start;
    let mut rows = 0usize;
    // The byte before the chunk: a range starts at a line, as if after a line feed.
    let (mut prev_nl, mut prev_cr, mut nonblank) = (true, false, false);
    while pos < bytes.end {
        if fallback.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let want = ((bytes.end - pos) as usize).min(CHUNK);
        let n = src.read_full(&mut buf[..want], pos)?;
        if n == 0 {
            break;
        }
        let chunk = &buf[..n];
        pos += n as u64;
        if chunk.contains(&b'"') {
            fallback.store(true, Ordering::Relaxed);
            return Ok(None);
        }
        if !prev_cr && !chunk.contains(&b'\r') {
            // Unix line ends: every line feed ends a row unless it follows a line feed.
            let feeds = chunk.iter().filter(|&&b| b == b'\n').count();
            let doubled = chunk
                .iter()
                .zip(&chunk[1..])
                .filter(|&(&a, &b)| a == b'\n' && b == b'\n')
                .count()
                + usize::from(prev_nl && chunk[0] == b'\n');
            rows += feeds - doubled;
            prev_nl = chunk[n - 1] == b'\n';
            nonblank = !prev_nl;
            continue;
        }
        for &b in chunk {
            match b {
                b'\n' => {
                    rows += usize::from(nonblank);
                    (nonblank, prev_cr) = (false, false);
                }
                b'\r' if prev_cr => {
                    fallback.store(true, Ordering::Relaxed);
                    return Ok(None);
                }
                b'\r' => prev_cr = true,
                _ if prev_cr => {
                    fallback.store(true, Ordering::Relaxed);
                    return Ok(None);
                }
                _ => nonblank = true,
            }
        }
        prev_nl = chunk[n - 1] == b'\n';
    }
    if prev_cr {
        fallback.store(true, Ordering::Relaxed);
        return Ok(None);
    }
    if last && nonblank {
        rows += 1;
    }
    Ok(Some(rows))
}

/// Parses the lines of `bytes` into `rows`: features into `feats`, classes into `ids` (a
/// classification) or values into `values` (a regression). The first bad row's line offset
/// and fault on error.
#[allow(clippy::too_many_arguments)]
fn parse_range(
    src: &dyn Source,
    bytes: Range<u64>,
    rows: Range<usize>,
    parser: &RowParser,
    nf: usize,
    feats: &mut [f32],
    ids: &mut [u32],
    values: &mut [f32],
) -> io::Result<Result<Piece, (u64, Fault)>> {
    let mut interner = Interner::default();
    let mut buf = vec![0u8; CHUNK];
    // buf[..kept] is the start of a line not yet complete, read from `kept_at`.
    let (mut kept, mut kept_at) = (0usize, bytes.start);
    let mut pos = bytes.start;
    let mut row = 0usize;
    let n_rows = rows.len();
    let changed = || io::Error::other("the file changed while it was read");
    loop {
        if kept == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        let want = ((bytes.end - pos) as usize).min(buf.len() - kept);
        let n = src.read_full(&mut buf[kept..kept + want], pos)?;
        pos += n as u64;
        let end_of_range = pos >= bytes.end || n == 0;
        let data = &buf[..kept + n];
        let mut line_start = 0usize;
        loop {
            let rest = &data[line_start..];
            let (line, next) = match rest.iter().position(|&b| b == b'\n') {
                Some(i) => (&rest[..i], line_start + i + 1),
                None if end_of_range && !rest.is_empty() => (rest, data.len()),
                None => break,
            };
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if !line.is_empty() {
                if row == n_rows {
                    return Err(changed());
                }
                let slot = if ids.is_empty() {
                    Slot::Value(&mut values[row])
                } else {
                    Slot::Class(&mut ids[row], &mut interner)
                };
                let f = &mut feats[row * nf..(row + 1) * nf];
                if let Err(fault) = parser.line(line, f, slot) {
                    return Ok(Err((kept_at + line_start as u64, fault)));
                }
                row += 1;
            }
            line_start = next;
        }
        if end_of_range {
            break;
        }
        buf.copy_within(line_start..kept + n, 0);
        kept = kept + n - line_start;
        kept_at += line_start as u64;
    }
    if row != n_rows {
        return Err(changed());
    }
    Ok(Ok(interner.piece(rows)))
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
        let r = cut(&b, 2, b.len() as u64, 3).unwrap();
        assert_eq!(r, vec![2..8, 8..11, 11..14]);
        for k in 1..=6 {
            let r = cut(&b, 2, b.len() as u64, k).unwrap();
            assert_eq!(r.first().unwrap().start, 2);
            assert_eq!(r.last().unwrap().end, b.len() as u64);
            assert!(r.windows(2).all(|w| w[0].end == w[1].start));
        }
    }

    #[test]
    fn rows_are_the_non_blank_lines() {
        let no = AtomicBool::new(false);
        let count = |b: &[u8], last: bool| count_rows(&b, 0..b.len() as u64, last, &no).unwrap();
        assert_eq!(count(b"1\n2\n", true), Some(2));
        assert_eq!(count(b"1\n\n2", true), Some(2));
        assert_eq!(count(b"1\n\n2", false), Some(1));
        assert_eq!(count(b"\n\n1\n\n\n", true), Some(1));
        assert_eq!(count(b"1\r\n\r\n2\r\n", true), Some(2));
        assert_eq!(count(b"1\r2\n", true), None);
        assert_eq!(count(b"1,\"a\"\n", true), None);
    }

    #[test]
    fn every_cut_reads_the_same_rows() {
        let mut text = String::new();
        for i in 0..500 {
            text += &format!("{}.5,{},c{}\n", i, i * 2, i % 3);
            if i % 97 == 0 {
                text += "\n";
            }
        }
        let b = text.as_bytes();
        let p = parser(3);
        let mut first = None;
        for pieces in [1, 2, 3, 7] {
            let ranges = cut(&b, 0, b.len() as u64, pieces).unwrap();
            let no = AtomicBool::new(false);
            let counts: Vec<usize> = ranges
                .iter()
                .map(|r| {
                    count_rows(&b, r.clone(), r.end == b.len() as u64, &no)
                        .unwrap()
                        .unwrap()
                })
                .collect();
            assert_eq!(counts.iter().sum::<usize>(), 500);
            let Lines::Read {
                rows,
                features,
                target,
            } = read_pieces(&b, 0, &p, 2, pieces).unwrap()
            else {
                panic!("not read");
            };
            assert_eq!(rows, 500);
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
        match read_lines(&b, 0, &parser(3), 2, 4).unwrap() {
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
            read_lines(&&b"1,2,\"a\"\n"[..], 0, &parser(3), 2, 1).unwrap(),
            Lines::Fallback
        ));
    }
}
