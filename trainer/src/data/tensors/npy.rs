//! `.npy` files (NumPy's `np.save`): the magic `\x93NUMPY`, a major and a minor version byte, the
//! header's length (`u16` little-endian in version 1.0, `u32` in 2.0 and 3.0), the header (a
//! Python dict literal: `{'descr': '<f4', 'fortran_order': False, 'shape': (3, 28, 28), }`, ASCII
//! in 1.0 and 2.0, UTF-8 in 3.0), then the array's bytes.
//!
//! Read: little-endian (`<`) or byte-order-free (`|`) numeric types, in C order. A big-endian
//! array, a Fortran-order one, a structured (`descr` a list) or non-numeric type is an error
//! saying how to save it instead.

use std::sync::Arc;

use super::array::{Array, Store, byte_len, show_shape};
use super::dtype::{Dtype, supported};
use crate::error::{Error, Result};

const MAGIC: &[u8] = b"\x93NUMPY";

/// What an `.npy` header says.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    /// Bytes from the start of the `.npy` data to the array's first byte.
    pub data_offset: usize,
}

/// Parses the `.npy` data `bytes` (a file, or a member of an `.npz`), checking that the array's
/// bytes are all there and that nothing follows them. Messages name the file `path`, and the
/// member `member` of it when there is one.
pub fn header(bytes: &[u8], member: Option<&str>, path: &std::path::Path) -> Result<Header> {
    let fail = |msg: String| match member {
        Some(m) => Error::data(path, format!("{m}: {msg}")),
        None => Error::data(path, msg),
    };
    let bad = |msg: String| Err(fail(msg));
    if bytes.len() < 10 || !bytes.starts_with(MAGIC) {
        return bad(if MAGIC.starts_with(&bytes[..bytes.len().min(6)]) {
            format!(
                "truncated: {} bytes, shorter than an .npy header",
                bytes.len()
            )
        } else {
            "not an .npy array: it does not start with \\x93NUMPY (write it with np.save)".into()
        });
    }
    let (major, minor) = (bytes[6], bytes[7]);
    let (len, start): (usize, usize) = match major {
        1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        2 | 3 => {
            return bad(format!(
                "truncated: {} bytes, shorter than an .npy header",
                bytes.len()
            ));
        }
        _ => {
            return bad(format!(
                "format version {major}.{minor} is not read (1.0, 2.0 and 3.0 are): save it with \
                 np.save"
            ));
        }
    };
    let Some(text) = bytes.get(start..start.saturating_add(len)) else {
        return bad(format!(
            "truncated: the header is {len} bytes but only {} follow its length",
            bytes.len() - start
        ));
    };
    let text = String::from_utf8_lossy(text);
    let dict = parse_dict(&text).map_err(|why| {
        fail(format!(
            "the header {:?} is not a dict of descr, fortran_order and shape: {why}",
            text.trim_end()
        ))
    })?;
    let get = |key: &str| dict.iter().find(|(k, _)| k == key).map(|(_, v)| v);
    let descr = match get("descr") {
        Some(Value::Str(s)) => s.as_str(),
        Some(Value::List) => {
            return bad(
                "a structured array (its descr is a list of fields) is not read: save the \
                 inputs and the targets as two plain numeric arrays"
                    .into(),
            );
        }
        _ => return bad("the header has no descr string (the element type)".into()),
    };
    let fortran = match get("fortran_order") {
        Some(Value::Bool(b)) => *b,
        _ => return bad("the header has no fortran_order True or False".into()),
    };
    let shape = match get("shape") {
        Some(Value::Tuple(t)) => t.clone(),
        _ => return bad("the header has no shape tuple".into()),
    };
    let dtype = dtype(descr).map_err(fail)?;
    if fortran && shape.len() > 1 {
        return bad(format!(
            "a Fortran-order array (fortran_order: True, shape {}) is not read: save it in C order \
             with np.save(file, np.ascontiguousarray(a))",
            show_shape(&shape)
        ));
    }
    let data_offset = start + len;
    let have = bytes.len() - data_offset;
    match byte_len(dtype, &shape) {
        Some(need) if need == have => {}
        Some(need) if need > have => {
            return bad(format!(
                "truncated: the header declares shape {} of {descr} ({need} bytes) but only {have} \
                 bytes follow it; the file was cut short: save or copy it again",
                show_shape(&shape)
            ));
        }
        Some(need) => {
            return bad(format!(
                "{} unexpected bytes after the array of shape {} of {descr} the header declares \
                 (several arrays saved into one file?): save one array per .npy file",
                have - need,
                show_shape(&shape)
            ));
        }
        None => {
            return bad(format!(
                "shape {} of {descr} has more bytes than can be addressed",
                show_shape(&shape)
            ));
        }
    }
    Ok(Header {
        dtype,
        shape,
        data_offset,
    })
}

/// The `.npy` file `store` holds as an array labelled `label`.
pub fn array(store: &Arc<Store>, label: &str) -> Result<Array> {
    let h = header(store.bytes(), None, store.path())?;
    Array::new(store.clone(), label.into(), h.dtype, h.shape, h.data_offset)
}

/// The element type of a `descr` such as `<f4`, `|u1` or `u1`; the error says what to do.
fn dtype(descr: &str) -> std::result::Result<Dtype, String> {
    let (order, code) = match descr.chars().next() {
        Some(c @ ('<' | '>' | '|' | '=')) => (c, &descr[1..]),
        _ => ('|', descr),
    };
    let Some(d) = Dtype::from_numpy(code) else {
        return Err(format!(
            "dtype {descr:?} is not read: save the array as one of {} (e.g. a.astype(np.float32))",
            supported().replace(", bfloat16", "")
        ));
    };
    if order == '>' && d.size() > 1 {
        return Err(format!(
            "a big-endian array ({descr:?}) is not read: save it little-endian with \
             np.save(file, a.astype(a.dtype.newbyteorder('<')))"
        ));
    }
    Ok(d)
}

/// A value of the header dict.
#[derive(Clone, Debug, PartialEq)]
enum Value {
    Str(String),
    Bool(bool),
    Tuple(Vec<usize>),
    /// A list (a structured dtype's fields), not looked into.
    List,
}

/// Parses `{'key': value, ...}` with string, `True`/`False`, integer tuple and list values.
fn parse_dict(text: &str) -> std::result::Result<Vec<(String, Value)>, String> {
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
    };
    p.expect(b'{')?;
    let mut out = Vec::new();
    loop {
        p.skip_space();
        if p.eat(b'}') {
            break;
        }
        let key = p.string()?;
        p.skip_space();
        p.expect(b':')?;
        p.skip_space();
        let value = p.value()?;
        out.push((key, value));
        p.skip_space();
        if !p.eat(b',') {
            p.skip_space();
            p.expect(b'}')?;
            break;
        }
    }
    p.skip_space();
    if p.i != p.s.len() {
        return Err(format!("unexpected text after the dict at byte {}", p.i));
    }
    Ok(out)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        let hit = self.peek() == Some(c);
        self.i += usize::from(hit);
        hit
    }

    fn expect(&mut self, c: u8) -> std::result::Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!("expected '{}' at byte {}", c as char, self.i))
        }
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            self.i += 1;
        }
    }

    fn string(&mut self) -> std::result::Result<String, String> {
        let q = match self.peek() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => return Err(format!("expected a quoted string at byte {}", self.i)),
        };
        let start = self.i + 1;
        let Some(len) = self.s[start..].iter().position(|&c| c == q) else {
            return Err(format!("unterminated string at byte {}", self.i));
        };
        self.i = start + len + 1;
        Ok(String::from_utf8_lossy(&self.s[start..start + len]).into_owned())
    }

    fn value(&mut self) -> std::result::Result<Value, String> {
        match self.peek() {
            Some(b'\'' | b'"') => Ok(Value::Str(self.string()?)),
            Some(b'(') => self.tuple(),
            Some(b'[') => {
                // Skip to the matching bracket, strings included.
                let mut depth = 0usize;
                while let Some(c) = self.peek() {
                    match c {
                        b'\'' | b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'[' | b'(' => depth += 1,
                        b']' | b')' => depth -= 1,
                        _ => {}
                    }
                    self.i += 1;
                    if depth == 0 {
                        return Ok(Value::List);
                    }
                }
                Err("unterminated list".into())
            }
            _ if self.s[self.i..].starts_with(b"True") => {
                self.i += 4;
                Ok(Value::Bool(true))
            }
            _ if self.s[self.i..].starts_with(b"False") => {
                self.i += 5;
                Ok(Value::Bool(false))
            }
            _ => Err(format!("unexpected value at byte {}", self.i)),
        }
    }

    /// `()`, `(5,)`, `(3, 28, 28)`; Python 2's `3L` is read too.
    fn tuple(&mut self) -> std::result::Result<Value, String> {
        self.expect(b'(')?;
        let mut dims = Vec::new();
        loop {
            self.skip_space();
            if self.eat(b')') {
                return Ok(Value::Tuple(dims));
            }
            let start = self.i;
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.i += 1;
            }
            let digits = std::str::from_utf8(&self.s[start..self.i]).expect("ASCII digits");
            let d: usize = digits
                .parse()
                .map_err(|_| format!("expected a dimension at byte {start}"))?;
            dims.push(d);
            self.eat(b'L');
            self.skip_space();
            if !self.eat(b',') {
                self.skip_space();
                self.expect(b')')?;
                return Ok(Value::Tuple(dims));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::tensors::write::npy_with as npy;
    use std::path::Path;

    fn parse(b: &[u8]) -> std::result::Result<Header, String> {
        header(b, Some("member \"x.npy\""), Path::new("d")).map_err(|e| e.to_string())
    }

    #[test]
    fn versions_1_2_and_3_are_read() {
        let data = [0u8; 24];
        for v in [1, 2, 3] {
            let b = npy(
                v,
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                &data,
            );
            let h = parse(&b).unwrap();
            assert_eq!(h.dtype, Dtype::F32);
            assert_eq!(h.shape, vec![2, 3]);
            assert_eq!(h.data_offset, 128);
            assert_eq!(h.data_offset + 24, b.len());
        }
        // Version 3.0 headers are UTF-8 (a field name with a non-ASCII character is fine here).
        let b = npy(
            3,
            "{\"descr\": \"|u1\", \"fortran_order\": False, \"shape\": (5,), \"note\": \"é\"}",
            &[9; 5],
        );
        assert_eq!(parse(&b).unwrap().shape, vec![5]);
        // Python 2's long integers, no spaces, no trailing comma; a 1-D Fortran-order array.
        let b = npy(
            1,
            "{'descr':'<i8','fortran_order':True,'shape':(2L,)}",
            &[0; 16],
        );
        let h = parse(&b).unwrap();
        assert_eq!((h.dtype, h.shape), (Dtype::I64, vec![2]));
        // A scalar (shape ()) has one element; an empty array none.
        let b = npy(
            1,
            "{'descr': '<f8', 'fortran_order': False, 'shape': (), }",
            &[0; 8],
        );
        assert_eq!(parse(&b).unwrap().shape, Vec::<usize>::new());
        let b = npy(
            1,
            "{'descr': 'u1', 'fortran_order': False, 'shape': (0, 4), }",
            &[],
        );
        assert_eq!(parse(&b).unwrap().dtype, Dtype::U8);
        // '=' (native) is read as little-endian; one-byte types in any order.
        let b = npy(
            1,
            "{'descr': '=f2', 'fortran_order': False, 'shape': (1,), }",
            &[0; 2],
        );
        assert_eq!(parse(&b).unwrap().dtype, Dtype::F16);
        let b = npy(
            1,
            "{'descr': '>i1', 'fortran_order': False, 'shape': (1,), }",
            &[0; 1],
        );
        assert_eq!(parse(&b).unwrap().dtype, Dtype::I8);
    }

    #[test]
    fn unsupported_arrays_say_how_to_save_them() {
        let e = |dict: &str, data: &[u8]| parse(&npy(1, dict, data)).unwrap_err();
        assert_eq!(
            e(
                "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }",
                &[0; 8]
            ),
            "d: member \"x.npy\": a big-endian array (\">f4\") is not read: save it little-endian with \
             np.save(file, a.astype(a.dtype.newbyteorder('<')))"
        );
        assert_eq!(
            e(
                "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
                &[0; 24]
            ),
            "d: member \"x.npy\": a Fortran-order array (fortran_order: True, shape (2, 3)) is not read: \
             save it in C order with np.save(file, np.ascontiguousarray(a))"
        );
        assert_eq!(
            e(
                "{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }",
                &[0; 2]
            ),
            "d: member \"x.npy\": dtype \"|b1\" is not read: save the array as one of float32, float64, \
             float16, uint8, int8, uint16, int16, uint32, int32, uint64, int64 (e.g. \
             a.astype(np.float32))"
        );
        assert!(
            e(
                "{'descr': [('a', '<f4'), ('b', '<i8')], 'fortran_order': False, 'shape': (2,), }",
                &[0; 24]
            )
            .contains("a structured array (its descr is a list of fields) is not read")
        );
        assert_eq!(
            e(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                &[0; 20]
            ),
            "d: member \"x.npy\": truncated: the header declares shape (2, 3) of <f4 (24 bytes) but only 20 \
             bytes follow it; the file was cut short: save or copy it again"
        );
        assert!(
            e(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
                &[0; 9]
            )
            .contains("1 unexpected bytes after the array of shape (2,) of <f4")
        );
        assert!(
            e("{'descr': '<f4', 'shape': (2,), }", &[0; 8])
                .contains("the header has no fortran_order True or False")
        );
        assert!(
            e(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }",
                &[0; 8]
            )
            .contains(
                "is not a dict of descr, fortran_order and shape: expected a dimension at byte"
            )
        );
        assert!(
            e(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }",
                &[]
            )
            .contains("expected a dimension")
        );
        assert!(
            e(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4), }",
                &[]
            )
            .contains("has more bytes than can be addressed")
        );
    }

    #[test]
    fn broken_files_are_errors() {
        assert_eq!(
            parse(b"\x93NUM").unwrap_err(),
            "d: member \"x.npy\": truncated: 4 bytes, shorter than an .npy header"
        );
        assert_eq!(
            parse(b"PK\x03\x04 not npy").unwrap_err(),
            "d: member \"x.npy\": not an .npy array: it does not start with \\x93NUMPY (write it with np.save)"
        );
        let mut b = npy(
            1,
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
            &[0; 8],
        );
        b[6] = 4;
        assert_eq!(
            parse(&b).unwrap_err(),
            "d: member \"x.npy\": format version 4.0 is not read (1.0, 2.0 and 3.0 are): save it with np.save"
        );
        let b = npy(
            2,
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
            &[0; 8],
        );
        assert_eq!(
            parse(&b[..30]).unwrap_err(),
            "d: member \"x.npy\": truncated: the header is 116 bytes but only 18 follow its length"
        );
        assert_eq!(
            parse(&b[..11]).unwrap_err(),
            "d: member \"x.npy\": truncated: 11 bytes, shorter than an .npy header"
        );
    }
}
