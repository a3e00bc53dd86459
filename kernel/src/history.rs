//! The inputs executed in this kernel session, for `history_request` (tail, range, search).

use jupyter_protocol::{HistoryEntry, HistoryRequest};

/// The session number history entries carry (one kernel process is one session).
const SESSION: usize = 1;

/// Executed inputs by execution count.
#[derive(Debug, Default)]
pub struct History {
    entries: Vec<(usize, String)>,
}

impl History {
    pub fn record(&mut self, count: usize, input: &str) {
        self.entries.push((count, input.to_string()));
    }

    /// The entries `request` asks for (outputs are not kept: they are empty).
    pub fn answer(&self, request: &HistoryRequest) -> Vec<HistoryEntry> {
        let (picked, output): (Vec<&(usize, String)>, bool) = match request {
            HistoryRequest::Tail { n, output, .. } => {
                let n = (*n).max(0) as usize;
                let skip = self.entries.len().saturating_sub(n);
                (self.entries.iter().skip(skip).collect(), *output)
            }
            HistoryRequest::Range {
                start,
                stop,
                output,
                ..
            } => {
                let (start, stop) = (*start as i64, *stop as i64);
                let picked = self
                    .entries
                    .iter()
                    .filter(|(c, _)| {
                        let c = *c as i64;
                        c >= start && (stop <= 0 || c < stop)
                    })
                    .collect();
                (picked, *output)
            }
            HistoryRequest::Search {
                pattern,
                unique,
                output,
                n,
                ..
            } => {
                let mut picked: Vec<&(usize, String)> = self
                    .entries
                    .iter()
                    .filter(|(_, input)| glob(pattern, input))
                    .collect();
                if *unique {
                    let mut seen = std::collections::HashSet::new();
                    picked.reverse();
                    picked.retain(|(_, input)| seen.insert(input.clone()));
                    picked.reverse();
                }
                if *n > 0 {
                    let skip = picked.len().saturating_sub(*n as usize);
                    picked.drain(..skip);
                }
                (picked, *output)
            }
        };
        picked
            .into_iter()
            .map(|(c, input)| {
                if output {
                    HistoryEntry::InputOutput(SESSION, *c, (input.clone(), String::new()))
                } else {
                    HistoryEntry::Input(SESSION, *c, input.clone())
                }
            })
            .collect()
    }
}

/// IPython's history search pattern: `*` any run of characters, `?` one; the whole input.
fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // Classic two-pointer wildcard match with backtracking to the last `*`.
    let (mut i, mut j) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while j < t.len() {
        if i < p.len() && (p[i] == '?' || p[i] == t[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(s) = star {
            i = s + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    while i < p.len() && p[i] == '*' {
        i += 1;
    }
    i == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(entries: Vec<HistoryEntry>) -> Vec<(usize, String)> {
        entries
            .into_iter()
            .map(|e| match e {
                HistoryEntry::Input(_, c, s) => (c, s),
                HistoryEntry::InputOutput(_, c, (s, _)) => (c, s),
            })
            .collect()
    }

    #[test]
    fn tail_range_and_search() {
        let mut h = History::default();
        for (c, s) in [
            (1, "let a = 1;"),
            (2, "%ddp ls"),
            (3, "a + 1"),
            (4, "%ddp ls"),
        ] {
            h.record(c, s);
        }
        let tail = HistoryRequest::Tail {
            n: 2,
            output: false,
            raw: true,
        };
        assert_eq!(
            inputs(h.answer(&tail)),
            vec![(3, "a + 1".into()), (4, "%ddp ls".into())]
        );
        let range = HistoryRequest::Range {
            session: None,
            start: 2,
            stop: 4,
            output: true,
            raw: true,
        };
        assert_eq!(
            inputs(h.answer(&range)),
            vec![(2, "%ddp ls".into()), (3, "a + 1".into())]
        );
        let search = HistoryRequest::Search {
            pattern: "%ddp*".into(),
            unique: true,
            output: false,
            raw: true,
            n: 10,
        };
        assert_eq!(inputs(h.answer(&search)), vec![(4, "%ddp ls".into())]);
        let search = HistoryRequest::Search {
            pattern: "?et*".into(),
            unique: false,
            output: false,
            raw: true,
            n: 0,
        };
        assert_eq!(inputs(h.answer(&search)), vec![(1, "let a = 1;".into())]);
    }
}
