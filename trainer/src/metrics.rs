//! Machine-readable training metrics: one JSON object per line in `DIR/metrics/rank-R.jsonl`.
//!
//! Every rank writes its own file, so no two processes ever append to the same file. Each record
//! is written with one `write` call of the complete line (the file is opened with `O_APPEND` and is
//! unbuffered), so a concurrent `tail -f` or [`read_metrics`] never sees half a line from a live
//! writer. A resumed run opens the same file again and appends; a torn last line left by a crash
//! is cut off first so the new records start on a line of their own.
//!
//! JSON has no NaN or infinity: a non-finite `loss`, `lr` or `samples_per_sec` is written as
//! `null` and read back as NaN, so a diverged run still produces a readable file (a non-finite
//! optional figure, such as the perplexity of a diverged language model, reads back as `None`).
//!
//! Layout:
//! - [`MetricRecord`], [`MetricKind`]: the schema (documented field by field in `docs/metrics.md`).
//! - [`MetricsWriter`]: the per-rank appender.
//! - [`read_metrics`]: the reader for tests and tools.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize};

use crate::error::{Error, Result};

/// Which phase a record describes.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum MetricKind {
    /// Training figures of this rank (loss averaged over the records' window, this rank's samples).
    Train,
    /// Validation at the end of an epoch (rank 0: all-reduced over all ranks).
    Val,
    /// Final test evaluation (rank 0: all-reduced over all ranks).
    Test,
}

/// One line of `rank-R.jsonl`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct MetricRecord {
    /// Wall-clock time the record was made, seconds since the Unix epoch.
    pub time: f64,
    /// Rank of the process that wrote the record.
    pub rank: usize,
    pub kind: MetricKind,
    /// Epoch, 1-based.
    pub epoch: usize,
    /// Global optimizer step (number of optimizer updates done so far, identical on all ranks).
    pub step: u64,
    #[serde(deserialize_with = "f64_or_nan")]
    pub loss: f64,
    /// Fraction of correct predictions in `[0, 1]`; omitted from the JSON when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<f64>,
    /// A language model's evaluation: `exp(loss)`; omitted from the JSON when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perplexity: Option<f64>,
    /// A language model's evaluation with the `char` tokenizer: `loss / ln 2`, bits per
    /// character (one token is one character); omitted from the JSON when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bits_per_char: Option<f64>,
    /// The same with the `byte` tokenizer: bits per byte; omitted from the JSON when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bits_per_byte: Option<f64>,
    /// Learning rate in effect for `step`.
    #[serde(deserialize_with = "f64_or_nan")]
    pub lr: f64,
    /// Throughput of the writing rank (train) or of the evaluation (val/test), samples per second
    /// (a language model's samples are its windows of `block` tokens).
    #[serde(deserialize_with = "f64_or_nan")]
    pub samples_per_sec: f64,
    /// Number of samples the figures cover; omitted from the JSON when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<u64>,
    /// A language model's train record: the writing rank's throughput in tokens per second;
    /// omitted from the JSON when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_sec: Option<f64>,
    /// A language model's train record: the tokens the figures cover; omitted when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    pub world_size: usize,
    /// A custom objective's metrics by name (evaluation records); omitted when empty.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub metrics: std::collections::BTreeMap<String, f64>,
    /// A train record: where the writing rank's steps of the window went; omitted when `None`
    /// (evaluation records, a window of no step timed by this process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breakdown: Option<StepBreakdown>,
    /// A train record of a mixed-precision run (`train.precision` other than f32); omitted in
    /// f32 and on evaluation records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precision: Option<PrecisionFigures>,
    /// A train record of a run taking local steps (`[ddp.sync]` other than every step);
    /// omitted otherwise and on evaluation records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncFigures>,
}

/// A train record of local steps: how they sync, and where the syncs stand after the record's
/// last step. (The bytes each step sent are the breakdown's.)
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SyncFigures {
    /// `average`, `diloco` or `streaming`, as `ddp.sync.method` says.
    pub method: String,
    /// Steps between two syncs of the whole model (each fragment's, streaming).
    pub every: u64,
    /// `f32`, `bf16`, `int8` or `int4`, as `ddp.sync.encoding` says.
    pub encoding: String,
    /// The step at which the last sync landed (0: none yet).
    pub last_sync: u64,
    /// Each replica's distance (L2 norm) from the global weights when the last sync began, of
    /// the fragment it synced, by rank; empty before the first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<f64>,
}

/// A mixed-precision run's train record: the precision and, with fp16, its loss scaler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrecisionFigures {
    /// `bf16` or `fp16`, as `train.precision` says.
    pub name: String,
    /// fp16: the loss scale after the record's last step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<f64>,
    /// fp16: the steps skipped so far in the run (gradients not finite).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped_steps: Option<u64>,
}

/// Where a training step's time goes, per step on average over a train record's window (this
/// rank's): the four parts add up to the step time, less the loop's own bookkeeping.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct StepBreakdown {
    /// Seconds per step, wall clock.
    pub step_s: f64,
    /// Forward and backward passes (with the gradients' hand-over to the buckets).
    pub compute_s: f64,
    /// Communication the step waited for: not hidden behind backward.
    pub comm_exposed_s: f64,
    /// Waiting for the next batch (the loader's workers behind, or reading it).
    pub data_s: f64,
    /// The optimizer and the parameters' write-back.
    pub optimizer_s: f64,
    /// Time spent communicating, hidden or not (the communication thread's, where it overlaps).
    pub comm_s: f64,
    /// Bytes this rank sent to the others per step; `None` where they share memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_sent: Option<f64>,
}

impl StepBreakdown {
    /// The largest part's name: what bounds the step (`compute`, `communication`, `data` or
    /// `optimizer`).
    pub fn bound(&self) -> &'static str {
        [
            (self.compute_s, "compute"),
            (self.comm_exposed_s, "communication"),
            (self.data_s, "data"),
            (self.optimizer_s, "optimizer"),
        ]
        .into_iter()
        .fold(
            (f64::MIN, "compute"),
            |best, p| if p.0 > best.0 { p } else { best },
        )
        .1
    }

    /// The four parts' sum (what the step's wall time should be, bookkeeping aside).
    pub fn parts_s(&self) -> f64 {
        self.compute_s + self.comm_exposed_s + self.data_s + self.optimizer_s
    }
}

/// serde_json writes NaN and infinities as `null`; read `null` back as NaN instead of failing.
fn f64_or_nan<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// The current wall-clock time in seconds since the Unix epoch (0 if the clock is before 1970).
pub fn unix_time() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Where rank `rank` writes its metrics under the run directory `out_dir`.
pub fn metrics_path(out_dir: &Path, rank: usize) -> PathBuf {
    out_dir.join("metrics").join(format!("rank-{rank}.jsonl"))
}

/// Appends [`MetricRecord`]s to `DIR/metrics/rank-R.jsonl`, one complete line per write.
#[derive(Debug)]
pub struct MetricsWriter {
    path: PathBuf,
    file: File,
    line: Vec<u8>,
}

impl MetricsWriter {
    /// Creates `out_dir/metrics/` and opens `rank-<rank>.jsonl` for appending (an existing file,
    /// from the run being resumed, is continued). A torn last line is cut off first.
    pub fn create(out_dir: &Path, rank: usize) -> Result<MetricsWriter> {
        let path = metrics_path(out_dir, rank);
        let dir = out_dir.join("metrics");
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        cut_torn_line(&mut file).map_err(|e| Error::io(&path, e))?;
        Ok(MetricsWriter {
            path,
            file,
            line: Vec::with_capacity(256),
        })
    }

    /// The file this writer appends to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record as one line, handed to the OS in a single `write` call.
    pub fn write(&mut self, record: &MetricRecord) -> Result<()> {
        self.line.clear();
        serde_json::to_writer(&mut self.line, record)
            .map_err(|e| Error::io(&self.path, std::io::Error::other(e)))?;
        self.line.push(b'\n');
        // The file is unbuffered and in append mode: `write_all` issues one `write(2)` of the
        // whole line (it only loops on a short write, which regular files do not produce short of
        // an error such as a full disk).
        self.file
            .write_all(&self.line)
            .map_err(|e| Error::io(&self.path, e))
    }

    /// Forces the records written so far to stable storage (`fsync`).
    pub fn sync(&mut self) -> Result<()> {
        self.file.sync_all().map_err(|e| Error::io(&self.path, e))
    }
}

/// If the file does not end with a newline (a crash in the middle of a line), truncates it after
/// its last newline so the next record starts on a fresh line.
fn cut_torn_line(file: &mut File) -> std::io::Result<()> {
    let len = file.seek(SeekFrom::End(0))?;
    if len == 0 {
        return Ok(());
    }
    // Scan backwards in chunks for the last '\n'.
    let mut end = len;
    let mut chunk = [0u8; 4096];
    loop {
        let start = end.saturating_sub(chunk.len() as u64);
        let buf = &mut chunk[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(buf)?;
        if let Some(i) = buf.iter().rposition(|&b| b == b'\n') {
            let keep = start + i as u64 + 1;
            if keep != len {
                file.set_len(keep)?;
            }
            return Ok(());
        }
        if start == 0 {
            // No newline at all: the whole file is one torn line.
            return file.set_len(0);
        }
        end = start;
    }
}

/// Reads every complete record of a metrics file. A trailing line without its newline (a writer
/// caught mid-write, or a crash) is skipped; blank lines are ignored; any other line that is not a
/// valid record is an error naming the file and line number.
pub fn read_metrics(path: impl AsRef<Path>) -> Result<Vec<MetricRecord>> {
    let path = path.as_ref();
    let text = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let complete = match text.iter().rposition(|&b| b == b'\n') {
        Some(i) => &text[..=i],
        None => &[][..],
    };
    let mut records = Vec::new();
    for (i, line) in complete.split(|&b| b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let record = serde_json::from_slice(line).map_err(|e| {
            Error::data(path, format!("line {}: invalid metric record: {e}", i + 1))
        })?;
        records.push(record);
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: MetricKind, step: u64) -> MetricRecord {
        MetricRecord::sample()
            .time(1_700_000_000.25)
            .rank(1)
            .at(kind, 2, step)
            .loss(0.5)
            .lr(0.001)
            .samples_per_sec(1234.5)
            .world_size(4)
    }

    #[test]
    fn serializes_exact_line_and_omits_none() {
        let r = record(MetricKind::Train, 7);
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"time":1700000000.25,"rank":1,"kind":"train","epoch":2,"step":7,"loss":0.5,"lr":0.001,"samples_per_sec":1234.5,"world_size":4}"#
        );
        let v = record(MetricKind::Val, 7)
            .accuracy(Some(0.75))
            .samples(Some(10000));
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"time":1700000000.25,"rank":1,"kind":"val","epoch":2,"step":7,"loss":0.5,"accuracy":0.75,"lr":0.001,"samples_per_sec":1234.5,"samples":10000,"world_size":4}"#
        );
    }

    #[test]
    fn a_language_model_records_tokens_and_perplexity() {
        let t = record(MetricKind::Train, 7)
            .samples(Some(24))
            .tokens_per_sec(Some(79_012.0))
            .tokens(Some(1536));
        let line = r#"{"time":1700000000.25,"rank":1,"kind":"train","epoch":2,"step":7,"loss":0.5,"lr":0.001,"samples_per_sec":1234.5,"samples":24,"tokens_per_sec":79012.0,"tokens":1536,"world_size":4}"#;
        assert_eq!(serde_json::to_string(&t).unwrap(), line);
        assert_eq!(serde_json::from_str::<MetricRecord>(line).unwrap(), t);
        let v = record(MetricKind::Val, 7)
            .perplexity(Some(2.0))
            .bits_per_char(Some(1.5));
        let line = r#"{"time":1700000000.25,"rank":1,"kind":"val","epoch":2,"step":7,"loss":0.5,"perplexity":2.0,"bits_per_char":1.5,"lr":0.001,"samples_per_sec":1234.5,"world_size":4}"#;
        assert_eq!(serde_json::to_string(&v).unwrap(), line);
        assert_eq!(serde_json::from_str::<MetricRecord>(line).unwrap(), v);
        let b = record(MetricKind::Val, 7).bits_per_byte(Some(0.25));
        assert!(
            serde_json::to_string(&b)
                .unwrap()
                .contains(r#""loss":0.5,"bits_per_byte":0.25,"lr""#)
        );
        // A diverged language model: its perplexity is infinite, written null, read as absent.
        let inf = record(MetricKind::Val, 7).perplexity(Some(f64::INFINITY));
        let text = serde_json::to_string(&inf).unwrap();
        assert!(text.contains(r#""perplexity":null"#), "{text}");
        let back: MetricRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back.perplexity, None);
    }

    #[test]
    fn records_written_before_the_language_model_fields_still_read() {
        let old = r#"{"time":1.0,"rank":0,"kind":"train","epoch":1,"step":10,"loss":3.5,"lr":0.001,"samples_per_sec":5398.0,"samples":15360,"world_size":2}"#;
        let r: MetricRecord = serde_json::from_str(old).unwrap();
        assert_eq!(
            (r.tokens_per_sec, r.tokens, r.perplexity, r.bits_per_char),
            (None, None, None, None)
        );
        assert_eq!(r.samples, Some(15360));
    }

    #[test]
    fn write_read_round_trip_in_rank_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = MetricsWriter::create(dir.path(), 3).unwrap();
        assert_eq!(w.path(), dir.path().join("metrics/rank-3.jsonl"));
        let records = vec![
            record(MetricKind::Train, 1),
            record(MetricKind::Val, 2)
                .accuracy(Some(0.9))
                .samples(Some(500)),
            record(MetricKind::Test, 2).accuracy(Some(0.8)),
        ];
        for r in &records {
            w.write(r).unwrap();
        }
        w.sync().unwrap();
        // Written through to the OS without any flush or drop.
        let text = std::fs::read_to_string(w.path()).unwrap();
        assert_eq!(text.lines().count(), 3);
        assert!(text.ends_with('\n'));
        assert_eq!(read_metrics(w.path()).unwrap(), records);
    }

    #[test]
    fn reopening_appends() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = MetricsWriter::create(dir.path(), 0).unwrap();
        w.write(&record(MetricKind::Train, 1)).unwrap();
        w.write(&record(MetricKind::Train, 2)).unwrap();
        drop(w);
        let mut w = MetricsWriter::create(dir.path(), 0).unwrap();
        w.write(&record(MetricKind::Train, 2)).unwrap();
        let steps: Vec<u64> = read_metrics(w.path())
            .unwrap()
            .iter()
            .map(|r| r.step)
            .collect();
        assert_eq!(steps, [1, 2, 2]);
    }

    #[test]
    fn reader_skips_trailing_partial_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.jsonl");
        let full = serde_json::to_string(&record(MetricKind::Train, 5)).unwrap();
        std::fs::write(&path, format!("{full}\n{}", &full[..20])).unwrap();
        assert_eq!(
            read_metrics(&path).unwrap(),
            vec![record(MetricKind::Train, 5)]
        );
        std::fs::write(&path, &full[..20]).unwrap();
        assert_eq!(read_metrics(&path).unwrap(), vec![]);
    }

    #[test]
    fn reader_reports_bad_line_with_file_and_number() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.jsonl");
        let full = serde_json::to_string(&record(MetricKind::Train, 5)).unwrap();
        std::fs::write(&path, format!("{full}\n\n{{\"oops\":1}}\n")).unwrap();
        let msg = read_metrics(&path).unwrap_err().to_string();
        assert!(
            msg.starts_with(&format!(
                "{}: line 3: invalid metric record",
                path.display()
            )),
            "{msg}"
        );
    }

    #[test]
    fn resume_cuts_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = metrics_path(dir.path(), 0);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let full = serde_json::to_string(&record(MetricKind::Train, 1)).unwrap();
        std::fs::write(&path, format!("{full}\n{{\"time\":17")).unwrap();
        let mut w = MetricsWriter::create(dir.path(), 0).unwrap();
        w.write(&record(MetricKind::Train, 2)).unwrap();
        let steps: Vec<u64> = read_metrics(&path)
            .unwrap()
            .iter()
            .map(|r| r.step)
            .collect();
        assert_eq!(steps, [1, 2]);

        // A file with no newline at all is entirely torn.
        std::fs::write(&path, "{\"ti").unwrap();
        let mut w = MetricsWriter::create(dir.path(), 0).unwrap();
        w.write(&record(MetricKind::Train, 3)).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!(
                "{}\n",
                serde_json::to_string(&record(MetricKind::Train, 3)).unwrap()
            )
        );
    }

    #[test]
    fn non_finite_values_round_trip_as_nan() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = MetricsWriter::create(dir.path(), 0).unwrap();
        let r = record(MetricKind::Train, 1)
            .loss(f64::NAN)
            .samples_per_sec(f64::INFINITY);
        w.write(&r).unwrap();
        let text = std::fs::read_to_string(w.path()).unwrap();
        assert!(
            text.contains(r#""loss":null"#) && text.contains(r#""samples_per_sec":null"#),
            "{text}"
        );
        let back = read_metrics(w.path()).unwrap();
        assert!(back[0].loss.is_nan() && back[0].samples_per_sec.is_nan());
        assert_eq!(back[0].lr, 0.001);
    }

    #[test]
    fn create_error_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, "x").unwrap();
        let err = MetricsWriter::create(&blocker, 0).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("{}", blocker.join("metrics").display())),
            "{err}"
        );
    }

    #[test]
    fn missing_file_error_names_the_path() {
        let err = read_metrics("/nonexistent/rank-0.jsonl")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("/nonexistent/rank-0.jsonl: "), "{err}");
    }
}
