//! TensorBoard event files, written (and read back) without a protobuf library.
//!
//! An event file is a sequence of TFRecords, each holding one serialized `tensorflow.Event`
//! protobuf. The first event carries `file_version: "brain.Event:2"`; every later one a
//! `Summary` with one scalar (`simple_value`), which TensorBoard shows under the scalar's tag.
//!
//! Layout:
//! - CRC32C (Castagnoli) and the TFRecord CRC mask.
//! - TFRecord framing: `u64 LE length`, `u32 LE masked crc32c(length bytes)`, data,
//!   `u32 LE masked crc32c(data)`.
//! - Protobuf encoding of `Event { wall_time = 1 (double), step = 2 (int64), file_version = 3
//!   (string), summary = 5 (Summary) }`, `Summary { repeated Value value = 1 }`,
//!   `Summary.Value { tag = 1 (string), simple_value = 2 (float) }`.
//! - [`EventWriter`]: creates `events.out.tfevents.<unix secs>.<hostname>.<pid>.<counter>`.
//! - [`read_events`]: verifies every record's CRCs and decodes the scalars.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

// ---------------------------------------------------------------------------------------------
// CRC32C

/// Byte-wise lookup table for the reflected Castagnoli polynomial 0x82F63B78.
const CRC32C_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// CRC32C (Castagnoli) of `data`, as used by TFRecord.
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc = CRC32C_TABLE[((crc ^ b as u32) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// TFRecord's masked CRC: rotate right by 15 bits, then add a constant (wrapping).
fn mask_crc(crc: u32) -> u32 {
    // ((crc >> 15) | (crc << 17)) + 0xa282ead8
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

fn masked_crc32c(data: &[u8]) -> u32 {
    mask_crc(crc32c(data))
}

// ---------------------------------------------------------------------------------------------
// TFRecord framing

/// Appends `data` framed as one TFRecord to `out`.
fn frame_record(data: &[u8], out: &mut Vec<u8>) {
    let len = (data.len() as u64).to_le_bytes();
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc32c(data).to_le_bytes());
}

// ---------------------------------------------------------------------------------------------
// Protobuf encoding

const WIRE_VARINT: u8 = 0;
const WIRE_FIXED64: u8 = 1;
const WIRE_LEN: u8 = 2;
const WIRE_FIXED32: u8 = 5;

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_key(out: &mut Vec<u8>, field: u8, wire: u8) {
    // All our field numbers are < 16, so the key is one byte.
    out.push((field << 3) | wire);
}

fn put_bytes(out: &mut Vec<u8>, field: u8, bytes: &[u8]) {
    put_key(out, field, WIRE_LEN);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// What one event carries besides its time and step.
enum Payload<'a> {
    FileVersion(&'a str),
    Scalar { tag: &'a str, value: f32 },
}

/// Serializes an `Event`. Like the reference (proto3) serializer, a zero `step` or `wall_time` is
/// left out; `simple_value` is always written because it is a member of a `oneof`.
fn encode_event(wall_time: f64, step: i64, payload: &Payload, out: &mut Vec<u8>) {
    if wall_time.to_bits() != 0 {
        put_key(out, 1, WIRE_FIXED64);
        out.extend_from_slice(&wall_time.to_le_bytes());
    }
    if step != 0 {
        put_key(out, 2, WIRE_VARINT);
        put_varint(out, step as u64); // int64: negative values take 10 bytes (two's complement).
    }
    match payload {
        Payload::FileVersion(version) => put_bytes(out, 3, version.as_bytes()),
        Payload::Scalar { tag, value } => {
            let mut val = Vec::with_capacity(tag.len() + 8);
            put_bytes(&mut val, 1, tag.as_bytes());
            put_key(&mut val, 2, WIRE_FIXED32);
            val.extend_from_slice(&value.to_le_bytes());
            let mut summary = Vec::with_capacity(val.len() + 2);
            put_bytes(&mut summary, 1, &val);
            put_bytes(out, 5, &summary);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Writer

/// Distinguishes event files created by this process within the same second.
static FILE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes scalar summaries to one new TensorBoard event file.
#[derive(Debug)]
pub struct EventWriter {
    path: PathBuf,
    file: BufWriter<File>,
    event: Vec<u8>,
    record: Vec<u8>,
}

impl EventWriter {
    /// Creates `dir` if needed and a new file
    /// `dir/events.out.tfevents.<unix secs>.<hostname>.<pid>.<counter>` in it (never an existing
    /// one), starting with the `brain.Event:2` file-version event.
    pub fn create(dir: &Path) -> Result<EventWriter> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let now = crate::metrics::unix_time();
        let name = format!(
            "events.out.tfevents.{}.{}.{}.{}",
            now as u64,
            crate::env::hostname(),
            std::process::id(),
            FILE_COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let path = dir.join(name);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        let mut writer = EventWriter {
            path,
            file: BufWriter::new(file),
            event: Vec::with_capacity(128),
            record: Vec::with_capacity(128),
        };
        writer.write_event(now, 0, &Payload::FileVersion("brain.Event:2"))?;
        writer.flush()?;
        Ok(writer)
    }

    /// The event file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one scalar (`tag` at `step`, recorded at `wall_time` Unix seconds). Buffered until
    /// [`EventWriter::flush`] (or the buffer fills, or the writer is dropped).
    pub fn add_scalar(&mut self, tag: &str, value: f32, step: i64, wall_time: f64) -> Result<()> {
        self.write_event(wall_time, step, &Payload::Scalar { tag, value })
    }

    /// Hands everything buffered to the OS, so TensorBoard can see it.
    pub fn flush(&mut self) -> Result<()> {
        self.file.flush().map_err(|e| Error::io(&self.path, e))
    }

    fn write_event(&mut self, wall_time: f64, step: i64, payload: &Payload) -> Result<()> {
        self.event.clear();
        self.record.clear();
        encode_event(wall_time, step, payload, &mut self.event);
        frame_record(&self.event, &mut self.record);
        self.file
            .write_all(&self.record)
            .map_err(|e| Error::io(&self.path, e))
    }
}

// ---------------------------------------------------------------------------------------------
// Reader

/// One scalar read back from an event file.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalarEvent {
    pub tag: String,
    pub value: f32,
    pub step: i64,
    pub wall_time: f64,
}

/// Reads an event file: verifies both CRCs of every record and returns its scalars
/// (`simple_value` summaries) in file order. Events without scalars (the file-version event) and
/// summary values of other kinds are skipped. A truncated last record (a writer caught mid-write)
/// is ignored; a CRC mismatch or a malformed protobuf is an error naming the file and offset.
pub fn read_events(path: impl AsRef<Path>) -> Result<Vec<ScalarEvent>> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let mut scalars = Vec::new();
    let mut pos = 0usize;
    let mut index = 0usize;
    while pos < bytes.len() {
        let bad = |msg: String| Error::data(path, format!("record {index} at byte {pos}: {msg}"));
        let Some(header) = bytes.get(pos..pos + 12) else {
            break; // truncated header
        };
        let (len_bytes, len_crc) = header.split_at(8);
        if masked_crc32c(len_bytes) != u32::from_le_bytes(len_crc.try_into().unwrap()) {
            return Err(bad("length CRC mismatch (corrupted file)".into()));
        }
        let len = u64::from_le_bytes(len_bytes.try_into().unwrap());
        let data_start = pos + 12;
        let Some(data_end) = usize::try_from(len)
            .ok()
            .and_then(|l| data_start.checked_add(l))
        else {
            return Err(bad(format!("record length {len} is too large")));
        };
        let Some(data) = bytes.get(data_start..data_end) else {
            break; // truncated data
        };
        let Some(crc) = bytes.get(data_end..data_end + 4) else {
            break; // truncated data CRC
        };
        if masked_crc32c(data) != u32::from_le_bytes(crc.try_into().unwrap()) {
            return Err(bad("data CRC mismatch (corrupted file)".into()));
        }
        decode_event(data, &mut scalars)
            .map_err(|msg| bad(format!("invalid Event protobuf: {msg}")))?;
        pos = data_end + 4;
        index += 1;
    }
    Ok(scalars)
}

/// A protobuf field: its number and its value.
enum Field<'a> {
    Varint(u64),
    Fixed64([u8; 8]),
    Len(&'a [u8]),
    Fixed32([u8; 4]),
}

/// Iterates over the fields of one protobuf message.
struct Fields<'a> {
    buf: &'a [u8],
}

impl<'a> Fields<'a> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let (&b, rest) = self.buf.split_first().ok_or("truncated varint")?;
            self.buf = rest;
            if shift == 63 && b > 1 {
                return Err("varint overflows 64 bits".into());
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint longer than 10 bytes".into())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if n > self.buf.len() {
            return Err(format!(
                "field of {n} bytes runs past the end of the message"
            ));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn next_field(&mut self) -> Result<Option<(u64, Field<'a>)>, String> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let (number, wire) = (key >> 3, (key & 7) as u8);
        let field = match wire {
            WIRE_VARINT => Field::Varint(self.varint()?),
            WIRE_FIXED64 => Field::Fixed64(self.take(8)?.try_into().unwrap()),
            WIRE_LEN => {
                let n = self.varint()?;
                Field::Len(self.take(usize::try_from(n).map_err(|_| "length overflows")?)?)
            }
            WIRE_FIXED32 => Field::Fixed32(self.take(4)?.try_into().unwrap()),
            w => return Err(format!("unsupported wire type {w} for field {number}")),
        };
        Ok(Some((number, field)))
    }
}

fn decode_event(data: &[u8], out: &mut Vec<ScalarEvent>) -> Result<(), String> {
    let (mut wall_time, mut step) = (0.0, 0i64);
    let mut summaries = Vec::new();
    let mut fields = Fields { buf: data };
    while let Some((number, field)) = fields.next_field()? {
        match (number, field) {
            (1, Field::Fixed64(b)) => wall_time = f64::from_le_bytes(b),
            (2, Field::Varint(v)) => step = v as i64,
            (5, Field::Len(s)) => summaries.push(s),
            (1 | 2 | 5, _) => return Err(format!("field {number} has the wrong wire type")),
            _ => {} // file_version and fields we do not read
        }
    }
    for summary in summaries {
        let mut values = Fields { buf: summary };
        while let Some((number, field)) = values.next_field()? {
            let (1, Field::Len(value)) = (number, field) else {
                continue; // not a `Summary.value`
            };
            if let Some((tag, value)) = decode_value(value)? {
                out.push(ScalarEvent {
                    tag,
                    value,
                    step,
                    wall_time,
                });
            }
        }
    }
    Ok(())
}

/// Decodes a `Summary.Value`; `None` when it holds something other than a `simple_value`.
fn decode_value(data: &[u8]) -> Result<Option<(String, f32)>, String> {
    let (mut tag, mut simple) = (String::new(), None);
    let mut fields = Fields { buf: data };
    while let Some((number, field)) = fields.next_field()? {
        match (number, field) {
            (1, Field::Len(t)) => {
                tag = String::from_utf8(t.to_vec()).map_err(|_| "tag is not UTF-8")?;
            }
            (2, Field::Fixed32(b)) => simple = Some(f32::from_le_bytes(b)),
            (1 | 2, _) => {
                return Err(format!(
                    "Summary.Value field {number} has the wrong wire type"
                ));
            }
            _ => {}
        }
    }
    Ok(simple.map(|v| (tag, v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_known_answers() {
        assert_eq!(crc32c(b""), 0);
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62A8_AB43);
        let ascending: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c(&ascending), 0x46DD_794E);
    }

    #[test]
    fn mask_matches_definition() {
        assert_eq!(mask_crc(0), 0xa282_ead8);
        // 0x12345678 rotated right by 15 = 0xACF02468; + 0xa282ead8 wraps to 0x4F730F40.
        assert_eq!(mask_crc(0x1234_5678), 0x4F73_0F40);
        assert_eq!(mask_crc(0xffff_ffff), 0xa282_ead7);
        assert_eq!(mask_crc(1 << 15), 0xa282_ead9);
    }

    #[test]
    fn varints() {
        let enc = |v: u64| {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            out
        };
        assert_eq!(enc(0), [0x00]);
        assert_eq!(enc(127), [0x7f]);
        assert_eq!(enc(300), [0xac, 0x02]);
        assert_eq!(
            enc(-1i64 as u64),
            [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
        );
        for v in [0, 1, 300, u64::MAX, -5i64 as u64] {
            let bytes = enc(v);
            assert_eq!(Fields { buf: &bytes }.varint().unwrap(), v);
        }
    }

    #[test]
    fn scalar_event_bytes() {
        let mut out = Vec::new();
        encode_event(
            1.5,
            3,
            &Payload::Scalar {
                tag: "a",
                value: 2.0,
            },
            &mut out,
        );
        #[rustfmt::skip]
        let expected = [
            0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, // wall_time = 1.5 (double 0x3FF8000000000000)
            0x10, 0x03,                         // step = 3
            0x2a, 0x0a,                         // summary, 10 bytes
            0x0a, 0x08,                         //   value, 8 bytes
            0x0a, 0x01, b'a',                   //     tag = "a"
            0x15, 0, 0, 0, 0x40,                //     simple_value = 2.0 (float 0x40000000)
        ];
        assert_eq!(out, expected);
    }

    #[test]
    fn file_version_event_bytes() {
        let mut out = Vec::new();
        encode_event(0.0, 0, &Payload::FileVersion("brain.Event:2"), &mut out);
        let mut expected = vec![0x1a, 13];
        expected.extend_from_slice(b"brain.Event:2");
        assert_eq!(out, expected);
    }

    #[test]
    fn framed_record_bytes() {
        // Reference bytes produced by TensorBoard 2.21's own Python writer
        // (`tensorboard.summary.writer.record_writer.RecordWriter`, with its `masked_crc32c`) for
        // `event_pb2.Event(wall_time=1.5, step=3, summary=[Value(tag="a", simple_value=2.0)])`.
        let mut event = Vec::new();
        encode_event(
            1.5,
            3,
            &Payload::Scalar {
                tag: "a",
                value: 2.0,
            },
            &mut event,
        );
        let mut framed = Vec::new();
        frame_record(&event, &mut framed);
        #[rustfmt::skip]
        let expected = [
            0x17, 0, 0, 0, 0, 0, 0, 0,  // length 23
            0xe7, 0xce, 0xf8, 0x1e,     // masked crc32c of the length
            0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0x10, 0x03, 0x2a, 0x0a, 0x0a, 0x08, 0x0a, 0x01, b'a',
            0x15, 0, 0, 0, 0x40,
            0xe8, 0x1c, 0x3a, 0x9d,     // masked crc32c of the data
        ];
        assert_eq!(framed, expected);
    }

    #[test]
    fn write_read_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("tb");
        let mut w = EventWriter::create(&sub).unwrap();
        let name = w.path().file_name().unwrap().to_str().unwrap().to_string();
        assert!(name.starts_with("events.out.tfevents."), "{name}");
        assert!(name.ends_with(&format!(
            ".{}.{}",
            std::process::id(),
            name.rsplit('.').next().unwrap()
        )));
        let expected = vec![
            ScalarEvent {
                tag: "train/loss".into(),
                value: 2.25,
                step: 1,
                wall_time: 1000.5,
            },
            ScalarEvent {
                tag: "train/lr".into(),
                value: 0.001,
                step: 1,
                wall_time: 1000.5,
            },
            ScalarEvent {
                tag: "val/accuracy".into(),
                value: 0.0,
                step: 0,
                wall_time: 1001.0,
            },
            ScalarEvent {
                tag: "train/loss".into(),
                value: -1.0e30,
                step: 1 << 40,
                wall_time: 1002.0,
            },
            ScalarEvent {
                tag: "x".repeat(200),
                value: f32::INFINITY,
                step: -7,
                wall_time: 1003.0,
            },
        ];
        for e in &expected {
            w.add_scalar(&e.tag, e.value, e.step, e.wall_time).unwrap();
        }
        w.flush().unwrap();
        assert_eq!(read_events(w.path()).unwrap(), expected);

        // The file starts with the file-version record.
        let bytes = std::fs::read(w.path()).unwrap();
        let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let first = &bytes[12..12 + len];
        assert_eq!(first[0], 0x09);
        assert_eq!(&first[9..], b"\x1a\x0dbrain.Event:2");
    }

    #[test]
    fn two_writers_get_distinct_files() {
        let dir = tempfile::tempdir().unwrap();
        let a = EventWriter::create(dir.path()).unwrap();
        let b = EventWriter::create(dir.path()).unwrap();
        assert_ne!(a.path(), b.path());
    }

    fn file_with_scalars() -> (tempfile::TempDir, PathBuf, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        let mut w = EventWriter::create(dir.path()).unwrap();
        w.add_scalar("a", 1.0, 1, 10.0).unwrap();
        w.add_scalar("b", 2.0, 2, 20.0).unwrap();
        w.flush().unwrap();
        let path = w.path().to_path_buf();
        let bytes = std::fs::read(&path).unwrap();
        (dir, path, bytes)
    }

    #[test]
    fn corrupted_byte_is_detected() {
        let (_dir, path, bytes) = file_with_scalars();
        // Flip one byte inside the data of the last record (the tag "b").
        let mut bad = bytes.clone();
        let i = bad.iter().rposition(|&b| b == b'b').unwrap();
        bad[i] = b'c';
        std::fs::write(&path, &bad).unwrap();
        let err = read_events(&path).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("{}: record 2 at byte ", path.display())),
            "{err}"
        );
        assert!(err.ends_with("data CRC mismatch (corrupted file)"), "{err}");

        // Flip one byte of the last record's length field.
        let mut bad = bytes.clone();
        let second_start = {
            let len0 = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
            let start1 = 12 + len0 + 4;
            let len1 = u64::from_le_bytes(bytes[start1..start1 + 8].try_into().unwrap()) as usize;
            start1 + 12 + len1 + 4
        };
        bad[second_start] ^= 0x01;
        std::fs::write(&path, &bad).unwrap();
        let err = read_events(&path).unwrap_err().to_string();
        assert!(
            err.ends_with(&format!(
                "record 2 at byte {second_start}: length CRC mismatch (corrupted file)"
            )),
            "{err}"
        );
    }

    #[test]
    fn truncated_last_record_is_ignored() {
        let (_dir, path, bytes) = file_with_scalars();
        // The last record ("b") is 12 + 23 + 4 = 39 bytes; cut inside it.
        for cut in [1, 4, 10, 30, 38] {
            std::fs::write(&path, &bytes[..bytes.len() - cut]).unwrap();
            let got = read_events(&path).unwrap();
            assert_eq!(got.len(), 1, "cut {cut}");
            assert_eq!(got[0].tag, "a");
        }
    }

    #[test]
    fn missing_file_error_names_the_path() {
        let err = read_events("/nonexistent/events.out.tfevents.1")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("/nonexistent/events.out.tfevents.1: "),
            "{err}"
        );
    }
}
