//! Slurm's compressed host lists (`SLURM_JOB_NODELIST`): `node[01-04,07]` and the like.

use crate::{Error, Result};

/// Most hosts [`expand_slurm_nodelist`] produces; a larger list is certainly a typo.
pub(super) const MAX_HOSTS: usize = 1 << 20;

/// Expands a Slurm host list (`SLURM_JOB_NODELIST`) in Slurm's order: `node[01-04,07]`,
/// `a1,b[2-3]`, `gpu-[1-2]-x`, several bracket groups (`r[1-2]n[1-2]` = r1n1, r1n2, r2n1, r2n2);
/// a range keeps its first number's zero padding (`[08-10]` = 08, 09, 10).
pub fn expand_slurm_nodelist(s: &str) -> Result<Vec<String>> {
    expand_nodelist(s).map_err(|msg| Error::Env {
        var: "SLURM_JOB_NODELIST".to_string(),
        msg,
    })
}

pub(super) fn expand_nodelist(s: &str) -> std::result::Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    for item in split_outside_brackets(s)? {
        let item = item.trim();
        if !item.is_empty() {
            hosts.extend(expand_host(item).map_err(|msg| format!("{s:?}: {msg}"))?);
        }
        if hosts.len() > MAX_HOSTS {
            return Err(format!("{s:?} expands to more than {MAX_HOSTS} hosts"));
        }
    }
    if hosts.is_empty() {
        return Err(format!("{s:?} names no hosts"));
    }
    Ok(hosts)
}

/// Splits at the commas outside `[...]`, checking that brackets pair up and do not nest.
fn split_outside_brackets(s: &str) -> std::result::Result<Vec<&str>, String> {
    let mut items = Vec::new();
    let (mut start, mut open) = (0, false);
    for (i, c) in s.char_indices() {
        match c {
            '[' if open => return Err(format!("{s:?} has a nested '[' at byte {i}")),
            '[' => open = true,
            ']' if !open => return Err(format!("{s:?} has an unmatched ']' at byte {i}")),
            ']' => open = false,
            ',' if !open => {
                items.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if open {
        return Err(format!("{s:?} has an unclosed '['"));
    }
    items.push(&s[start..]);
    Ok(items)
}

/// One host pattern with balanced brackets: the product of its bracket groups, left to right.
fn expand_host(pattern: &str) -> std::result::Result<Vec<String>, String> {
    let mut hosts = vec![String::new()];
    let mut rest = pattern;
    while let Some(open) = rest.find('[') {
        let close = rest
            .find(']')
            .ok_or_else(|| format!("unclosed '[' in {pattern:?}"))?;
        let (prefix, body) = (&rest[..open], &rest[open + 1..close]);
        let numbers =
            expand_ranges(body).map_err(|msg| format!("[{body}] in {pattern:?}: {msg}"))?;
        if hosts.len().saturating_mul(numbers.len()) > MAX_HOSTS {
            return Err(format!(
                "{pattern:?} expands to more than {MAX_HOSTS} hosts"
            ));
        }
        hosts = hosts
            .iter()
            .flat_map(|host| numbers.iter().map(move |n| format!("{host}{prefix}{n}")))
            .collect();
        rest = &rest[close + 1..];
    }
    for host in &mut hosts {
        host.push_str(rest);
    }
    Ok(hosts)
}

/// `01-03,7` → `01 02 03 7`.
fn expand_ranges(body: &str) -> std::result::Result<Vec<String>, String> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let mut numbers = Vec::new();
    for part in body.split(',').map(str::trim) {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        if !digits(lo) || !digits(hi) {
            return Err(format!("{part:?} is not a number or a range like 01-04"));
        }
        let too_long = || format!("{part:?} is too large");
        let (lo_n, hi_n) = (
            lo.parse::<u64>().map_err(|_| too_long())?,
            hi.parse::<u64>().map_err(|_| too_long())?,
        );
        if hi_n < lo_n {
            return Err(format!("the range {part:?} runs backwards"));
        }
        if hi_n - lo_n >= MAX_HOSTS as u64 {
            return Err(format!(
                "the range {part:?} has more than {MAX_HOSTS} hosts"
            ));
        }
        let width = lo.len();
        numbers.extend((lo_n..=hi_n).map(|n| format!("{n:0width$}")));
    }
    Ok(numbers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    fn hosts(s: &str) -> Vec<String> {
        expand_slurm_nodelist(s).unwrap()
    }

    #[test]
    fn nodelist_expansion() {
        assert_eq!(
            hosts("node[01-04,07]"),
            ["node01", "node02", "node03", "node04", "node07"]
        );
        assert_eq!(hosts("a1,b[2-3]"), ["a1", "b2", "b3"]);
        assert_eq!(hosts("gpu-[1-2]-x"), ["gpu-1-x", "gpu-2-x"]);
        assert_eq!(hosts("n[08-10]"), ["n08", "n09", "n10"]);
        assert_eq!(hosts("n[8-10]"), ["n8", "n9", "n10"]);
        assert_eq!(hosts("n[001-002]"), ["n001", "n002"]);
        assert_eq!(
            hosts("r[1-2]n[01-02]"),
            ["r1n01", "r1n02", "r2n01", "r2n02"]
        );
        assert_eq!(
            hosts("r[1-2]-n[3,5]-[7]"),
            ["r1-n3-7", "r1-n5-7", "r2-n3-7", "r2-n5-7"]
        );
        assert_eq!(hosts("single"), ["single"]);
        assert_eq!(hosts(" a , c[1-2],b "), ["a", "c1", "c2", "b"]);
        assert_eq!(hosts("x[5]"), ["x5"]);
        assert_eq!(
            hosts("x.example.com,y[1-2].example.com"),
            ["x.example.com", "y1.example.com", "y2.example.com"]
        );
    }

    #[test]
    fn nodelist_errors() {
        for (list, needle) in [
            ("", "names no hosts"),
            (" , ", "names no hosts"),
            ("n[1-", "unclosed '['"),
            ("n1]", "unmatched ']'"),
            ("n[[1]]", "nested '['"),
            ("n[]", "\"\" is not a number or a range"),
            ("n[a-b]", "\"a-b\" is not a number or a range"),
            ("n[1-2-3]", "\"1-2-3\" is not a number or a range"),
            ("n[3-1]", "the range \"3-1\" runs backwards"),
            ("n[0-99999999]", "has more than"),
            ("n[0-999]m[0-9999]", "expands to more than"),
            ("n[99999999999999999999]", "is too large"),
        ] {
            match expand_slurm_nodelist(list) {
                Err(Error::Env { var, msg }) => {
                    assert_eq!(var, "SLURM_JOB_NODELIST");
                    assert!(msg.contains(needle), "{list:?}: {msg}");
                }
                other => panic!("{list:?}: expected an error, got {other:?}"),
            }
        }
    }
}
