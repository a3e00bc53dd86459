//! A run's replica logs as every front end prints them: `logs/rank-R.log`, each line prefixed
//! with `[rank R] ` when several ranks are shown, the last N lines of each with `--tail N`; and
//! a failed replica's own last error line in its log ([`last_error_since`]).

use crate::Result;
use crate::files::tail::{LineTailer, TailFrom};
use crate::runs::run::Run;

/// Which of a run's logs are shown: one rank, or all of them.
pub fn ranks(run: &Run, rank: Option<usize>) -> Vec<usize> {
    match rank {
        Some(r) => vec![r],
        None => (0..run.record.replicas.max(1)).collect(),
    }
}

/// A log line as shown: `[rank R] line` when several ranks are shown, else the line itself.
pub fn shown_line(rank: usize, several: bool, line: &str) -> String {
    if several {
        format!("[rank {rank}] {line}")
    } else {
        line.to_string()
    }
}

/// The lines of the run's logs (`rank`: one, `None`: every rank, one after the other), the last
/// `tail` of each when given, each as [`shown_line`] makes it. A log not written yet has none.
pub fn log_lines(run: &Run, rank: Option<usize>, tail: Option<usize>) -> Result<Vec<String>> {
    let ranks = ranks(run, rank);
    let several = ranks.len() > 1;
    let mut shown = Vec::new();
    for r in ranks {
        let from = tail.map_or(TailFrom::Start, TailFrom::LastLines);
        let lines = LineTailer::new(run.log_path(r), from).poll()?;
        let skip = tail.map_or(0, |n| lines.len().saturating_sub(n));
        shown.extend(lines[skip..].iter().map(|l| shown_line(r, several, l)));
    }
    Ok(shown)
}

/// Where each rank's log of a run ends at the start of an attempt (logs are appended across
/// attempts): what [`AttemptLogs::error_of`] reads a failed rank's error after.
pub struct AttemptLogs {
    dir: std::path::PathBuf,
    starts: Vec<u64>,
}

impl AttemptLogs {
    /// The ends of the `replicas` ranks' logs of the run in `dir`, now.
    pub fn mark(dir: &std::path::Path, replicas: usize) -> AttemptLogs {
        let starts = (0..replicas)
            .map(|rank| {
                let log = ddp_trainer::launcher::log_path(dir, rank);
                std::fs::metadata(log).map_or(0, |m| m.len())
            })
            .collect();
        AttemptLogs {
            dir: dir.to_path_buf(),
            starts,
        }
    }

    /// The last error line `rank` wrote in this attempt ([`last_error_since`] its mark).
    pub fn error_of(&self, rank: usize) -> Option<String> {
        last_error_since(
            &ddp_trainer::launcher::log_path(&self.dir, rank),
            self.starts.get(rank).copied().unwrap_or(0),
        )
    }
}

/// The last error line ([`last_error_line`]) a replica wrote to its log `log`
/// after byte `from` (this attempt's part), read from the log's last 64 KiB at most.
pub fn last_error_since(log: &std::path::Path, from: u64) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL: u64 = 64 << 10;
    let mut file = std::fs::File::open(log).ok()?;
    let len = file.metadata().ok()?.len();
    let start = from.max(len.saturating_sub(TAIL)).min(len);
    file.seek(SeekFrom::Start(start)).ok()?;
    let mut bytes = Vec::new();
    file.take(len - start).read_to_end(&mut bytes).ok()?;
    last_error_line(&String::from_utf8_lossy(&bytes)).map(str::to_string)
}

/// The last error line of a replica's log text: the last line starting with `ddp-trainer: `
/// (what a replica prints on stderr before it exits with an error, e.g. `ddp-trainer: rank 0:
/// PATH: MESSAGE`), trimmed.
pub fn last_error_line(log: &str) -> Option<&str> {
    log.lines()
        .rev()
        .map(str::trim_end)
        .find(|l| l.starts_with("ddp-trainer: "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_line_is_the_last_one_the_trainer_wrote() {
        let log = "mnist | rank 0 of 1 | out /r\n\
                   ddp-trainer: rank 0: an old failure\n\
                   epoch 1 step 3 loss 2.3\n\
                   ddp-trainer: rank 0: /d/x.png: cannot be decoded as PNG  \n\
                   trailing noise\n";
        assert_eq!(
            last_error_line(log),
            Some("ddp-trainer: rank 0: /d/x.png: cannot be decoded as PNG")
        );
        assert_eq!(last_error_line("epoch 1\nnothing wrong\n"), None);
        assert_eq!(last_error_line(""), None);
    }
    use crate::RunRecord;

    #[test]
    fn lines_of_every_rank_prefixed_and_tailed() {
        let tmp = tempfile::tempdir().unwrap();
        let mut record = RunRecord::sample();
        record.replicas = 2;
        let run = record.in_dir(tmp.path().join("r"));
        std::fs::create_dir_all(run.dir.join("logs")).unwrap();
        std::fs::write(run.log_path(0), "a\nb\nc\n").unwrap();
        std::fs::write(run.log_path(1), "x\ny\n").unwrap();
        assert_eq!(
            log_lines(&run, None, None).unwrap(),
            [
                "[rank 0] a",
                "[rank 0] b",
                "[rank 0] c",
                "[rank 1] x",
                "[rank 1] y"
            ]
        );
        assert_eq!(
            log_lines(&run, None, Some(1)).unwrap(),
            ["[rank 0] c", "[rank 1] y"]
        );
        assert_eq!(log_lines(&run, Some(1), Some(5)).unwrap(), ["x", "y"]);
        assert_eq!(
            log_lines(&run, Some(0), Some(0)).unwrap(),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_log_not_written_yet_has_no_lines() {
        let tmp = tempfile::tempdir().unwrap();
        let run = RunRecord::sample().in_dir(tmp.path().join("r"));
        assert!(log_lines(&run, Some(0), None).unwrap().is_empty());
    }
}

#[cfg(test)]
mod error_line_tests {
    use super::*;

    #[test]
    fn a_replicas_error_is_read_from_this_attempts_part_of_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("rank-0.log");
        assert_eq!(last_error_since(&log, 0), None, "no log yet");
        std::fs::write(
            &log,
            "x | rank 0 of 1\nddp-trainer: rank 0: the first attempt's\n",
        )
        .unwrap();
        let start = std::fs::metadata(&log).unwrap().len();
        assert_eq!(
            last_error_since(&log, 0).as_deref(),
            Some("ddp-trainer: rank 0: the first attempt's")
        );
        // The next attempt wrote no error line: the old one is not its error.
        let mut text = std::fs::read_to_string(&log).unwrap();
        text.push_str("x | rank 0 of 1\nepoch 1\n");
        std::fs::write(&log, &text).unwrap();
        assert_eq!(last_error_since(&log, start), None);
        text.push_str("ddp-trainer: rank 0: /d/a.csv: line 3 has 2 fields\n");
        std::fs::write(&log, &text).unwrap();
        assert_eq!(
            last_error_since(&log, start).as_deref(),
            Some("ddp-trainer: rank 0: /d/a.csv: line 3 has 2 fields")
        );
        // A long log is read from its end.
        let long = format!(
            "{}ddp-trainer: rank 0: late\n",
            "epoch 1 loss 2.3\n".repeat(10_000)
        );
        std::fs::write(&log, long).unwrap();
        assert_eq!(
            last_error_since(&log, 0).as_deref(),
            Some("ddp-trainer: rank 0: late")
        );
    }
}
