//! Reading Linux's `/proc`: CPU time counters (`/proc/stat`), memory (`/proc/meminfo`) and one
//! process's CPU time, parent, start time (`/proc/PID/stat`), resident memory (`/proc/PID/statm`)
//! and command line.
//!
//! The parsers are pure (text in, numbers out) and return `None` on text they do not understand;
//! the `read_*` functions add the file access and name the file in their errors.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Time one CPU (or all of them together) spent busy and in total, in clock ticks since boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTimes {
    /// Ticks not idle: `user + nice + system + irq + softirq + steal` (guest time is already in
    /// `user` and `nice`).
    pub busy: u64,
    /// `busy + idle + iowait`.
    pub total: u64,
}

impl CpuTimes {
    /// Percent of the time between `earlier` and `self` the CPU was busy (0 when no time passed,
    /// or the counters went backwards).
    pub fn utilization_since(&self, earlier: &CpuTimes) -> f64 {
        let total = self.total.saturating_sub(earlier.total);
        if total == 0 {
            return 0.0;
        }
        let busy = self.busy.saturating_sub(earlier.busy).min(total);
        busy as f64 / total as f64 * 100.0
    }
}

/// The `cpu` lines of `/proc/stat`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CpuStat {
    /// All CPUs together (the `cpu` line).
    pub all: CpuTimes,
    /// Each online core (`cpuN` lines) as `(N, times)`, in file order.
    pub cores: Vec<(usize, CpuTimes)>,
}

impl CpuStat {
    /// Per-core and overall utilisation (percent) between `earlier` and `self`. A core missing
    /// from `earlier` (just brought online) is measured from boot.
    pub fn utilization_since(&self, earlier: &CpuStat) -> (Vec<f64>, f64) {
        let per_core = self
            .cores
            .iter()
            .map(|(id, now)| {
                let before = earlier
                    .cores
                    .iter()
                    .find(|(e, _)| e == id)
                    .map(|(_, t)| *t)
                    .unwrap_or_default();
                now.utilization_since(&before)
            })
            .collect();
        (per_core, self.all.utilization_since(&earlier.all))
    }
}

/// Parses the `cpu` lines of `/proc/stat` (`cpu  user nice system idle iowait irq softirq steal
/// guest guest_nice`; kernels before 2.6.11 stop after `softirq`). `None` without a `cpu` line.
pub fn parse_proc_stat(text: &str) -> Option<CpuStat> {
    let mut all = None;
    let mut cores = Vec::new();
    for line in text.lines() {
        let mut words = line.split_ascii_whitespace();
        let Some(name) = words.next().and_then(|w| w.strip_prefix("cpu")) else {
            continue;
        };
        let values: Vec<u64> = words.map_while(|w| w.parse().ok()).collect();
        if values.len() < 4 {
            continue;
        }
        let field = |i: usize| values.get(i).copied().unwrap_or(0);
        let idle = field(3) + field(4);
        let busy = field(0) + field(1) + field(2) + field(5) + field(6) + field(7);
        let times = CpuTimes {
            busy,
            total: busy + idle,
        };
        if name.is_empty() {
            all = Some(times);
        } else if let Ok(id) = name.parse() {
            cores.push((id, times));
        }
    }
    Some(CpuStat { all: all?, cores })
}

/// `MemTotal` and `MemAvailable` of `/proc/meminfo`, in bytes. Kernels before 3.14 have no
/// `MemAvailable`: `MemFree + Buffers + Cached` stands in for it.
pub fn parse_meminfo(text: &str) -> Option<(u64, u64)> {
    let mut total = None;
    let mut available = None;
    let mut fallback = 0u64;
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let mut words = rest.split_ascii_whitespace();
        let Some(value) = words.next().and_then(|w| w.parse::<u64>().ok()) else {
            continue;
        };
        let bytes = match words.next() {
            Some("kB") => value * 1024,
            _ => value,
        };
        match key {
            "MemTotal" => total = Some(bytes),
            "MemAvailable" => available = Some(bytes),
            "MemFree" | "Buffers" | "Cached" => fallback += bytes,
            _ => {}
        }
    }
    let total = total?;
    Some((total, available.unwrap_or(fallback).min(total)))
}

/// What `/proc/PID/stat` says about a process that telemetry uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PidStat {
    /// The executable's name (`comm`, at most 15 bytes; may hold spaces and parentheses).
    pub comm: String,
    /// `R`, `S`, `D`, `Z`, ...
    pub state: char,
    pub ppid: u32,
    /// `utime + stime`: CPU time used, in clock ticks.
    pub cpu_ticks: u64,
    /// Start time in clock ticks since boot (with the pid, identifies the process).
    pub start_ticks: u64,
}

/// Parses `/proc/PID/stat`: `pid (comm) state ppid ... utime stime ... starttime ...`. `comm`
/// may contain spaces and `)`, so the fields are read after the last `)`.
pub fn parse_pid_stat(text: &str) -> Option<PidStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let fields: Vec<&str> = text[close + 1..].split_ascii_whitespace().collect();
    // fields[0] is field 3 of proc(5) (state): field k is fields[k - 3].
    let number = |k: usize| fields.get(k - 3)?.parse::<u64>().ok();
    Some(PidStat {
        comm,
        state: fields.first()?.chars().next()?,
        ppid: u32::try_from(number(4)?).ok()?,
        cpu_ticks: number(14)? + number(15)?,
        start_ticks: number(22)?,
    })
}

/// Resident pages (the second number) of `/proc/PID/statm`.
pub fn parse_statm_resident_pages(text: &str) -> Option<u64> {
    text.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// `/proc/PID/cmdline` (NUL-separated arguments) as one line, arguments joined by spaces;
/// empty for kernel threads and zombies.
pub fn parse_cmdline(bytes: &[u8]) -> String {
    bytes
        .split(|b| *b == 0)
        .filter(|arg| !arg.is_empty())
        .map(String::from_utf8_lossy)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, almost always 100), the unit of `/proc`'s
/// CPU times.
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as u64 } else { 100 }
}

/// The memory page size in bytes (`sysconf(_SC_PAGESIZE)`), the unit of `/proc/PID/statm`.
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 { size as u64 } else { 4096 }
}

/// `/proc/stat`, parsed.
pub fn read_cpu_stat() -> Result<CpuStat> {
    read_parsed(Path::new("/proc/stat"), parse_proc_stat, "no `cpu` line")
}

/// `/proc/meminfo`: (total, available) bytes.
pub fn read_meminfo() -> Result<(u64, u64)> {
    read_parsed(Path::new("/proc/meminfo"), parse_meminfo, "no MemTotal")
}

/// `/proc/PID/stat`, parsed; `Ok(None)` when the process does not exist (any more).
pub fn read_pid_stat(pid: u32) -> Result<Option<PidStat>> {
    let path = pid_path(pid, "stat");
    match read_if_exists(&path)? {
        Some(text) => parse_pid_stat(&text)
            .map(Some)
            .ok_or_else(|| Error::Corrupt {
                path,
                msg: "not a process status line".into(),
            }),
        None => Ok(None),
    }
}

/// Resident memory of a process in bytes (`/proc/PID/statm`); `Ok(None)` when it is gone.
pub fn read_rss_bytes(pid: u32) -> Result<Option<u64>> {
    let path = pid_path(pid, "statm");
    match read_if_exists(&path)? {
        Some(text) => parse_statm_resident_pages(&text)
            .map(|pages| Some(pages * page_size()))
            .ok_or_else(|| Error::Corrupt {
                path,
                msg: "no resident page count".into(),
            }),
        None => Ok(None),
    }
}

/// A process's command line (`/proc/PID/cmdline`); `Ok(None)` when it is gone.
pub fn read_cmdline(pid: u32) -> Result<Option<String>> {
    let path = pid_path(pid, "cmdline");
    match std::fs::read(&path) {
        Ok(bytes) => Ok(Some(parse_cmdline(&bytes))),
        Err(e) if gone(&e) => Ok(None),
        Err(e) => Err(Error::io(path, e)),
    }
}

fn pid_path(pid: u32, file: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/{file}"))
}

/// A vanished process shows as a missing file, or as ESRCH while its folder is torn down.
fn gone(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
}

fn read_if_exists(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if gone(&e) => Ok(None),
        Err(e) => Err(Error::io(path, e)),
    }
}

fn read_parsed<T>(path: &Path, parse: fn(&str) -> Option<T>, what: &str) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    parse(&text).ok_or_else(|| Error::Corrupt {
        path: path.to_path_buf(),
        msg: what.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT_A: &str = "cpu  100 0 50 800 50 0 0 0 0 0\n\
                          cpu0 60 0 20 400 20 0 0 0 0 0\n\
                          cpu1 40 0 30 400 30 0 0 0 0 0\n\
                          intr 5 0 0\nctxt 123\n";
    const STAT_B: &str = "cpu  250 10 90 900 50 0 0 0 0 0\n\
                          cpu0 160 10 30 400 20 0 0 0 0 0\n\
                          cpu1 90 0 30 500 30 0 0 0 0 0\n";

    #[test]
    fn proc_stat_gives_busy_and_total_ticks() {
        let a = parse_proc_stat(STAT_A).unwrap();
        assert_eq!(
            a.all,
            CpuTimes {
                busy: 150,
                total: 1000
            }
        );
        assert_eq!(a.cores.len(), 2);
        assert_eq!(
            a.cores[1],
            (
                1,
                CpuTimes {
                    busy: 70,
                    total: 500
                }
            )
        );
        // guest and guest_nice are already counted in user and nice; steal, irq, softirq count.
        let s = parse_proc_stat("cpu 10 1 2 80 3 1 1 2 7 7\n").unwrap();
        assert_eq!(
            s.all,
            CpuTimes {
                busy: 17,
                total: 100
            }
        );
        // Old kernels stop after softirq.
        let s = parse_proc_stat("cpu 1 2 3 4 5 6 7\n").unwrap();
        assert_eq!(
            s.all,
            CpuTimes {
                busy: 19,
                total: 28
            }
        );
        assert_eq!(parse_proc_stat("intr 1 2 3\n"), None);
        assert_eq!(parse_proc_stat(""), None);
    }

    #[test]
    fn utilization_is_the_busy_share_between_two_snapshots() {
        let a = parse_proc_stat(STAT_A).unwrap();
        let b = parse_proc_stat(STAT_B).unwrap();
        let (cores, total) = b.utilization_since(&a);
        // cpu0: busy 80 → 200 (+120) of 500 → 620 (+120): 100 %; cpu1: +50 of +150.
        assert_eq!(cores.len(), 2);
        assert!((cores[0] - 100.0).abs() < 1e-9, "{cores:?}");
        assert!((cores[1] - 100.0 / 3.0).abs() < 1e-9, "{cores:?}");
        // all: busy 150 → 350 (+200) of 1000 → 1300 (+300).
        assert!((total - 200.0 / 3.0).abs() < 1e-9);
        // No time passed: 0, not NaN; counters going backwards: 0.
        assert_eq!(a.utilization_since(&a), (vec![0.0, 0.0], 0.0));
        assert_eq!(a.all.utilization_since(&b.all), 0.0);
        // A core that appeared since counts from boot.
        let one = parse_proc_stat("cpu 1 0 0 1 0\ncpu0 1 0 0 1 0\n").unwrap();
        assert_eq!(b.utilization_since(&one).0[1], 120.0 / 650.0 * 100.0);
    }

    #[test]
    fn meminfo_gives_total_and_available_bytes() {
        let text = "MemTotal:       24684092 kB\nMemFree:        20304152 kB\n\
                    MemAvailable:   23789448 kB\nBuffers:            9752 kB\n";
        assert_eq!(
            parse_meminfo(text),
            Some((24_684_092 * 1024, 23_789_448 * 1024))
        );
        // Before MemAvailable existed: free + buffers + cached.
        let old = "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 10 kB\nCached: 200 kB\n";
        assert_eq!(parse_meminfo(old), Some((1_024_000, 310 * 1024)));
        assert_eq!(parse_meminfo("MemFree: 1 kB\n"), None);
    }

    #[test]
    fn pid_stat_is_read_after_the_last_parenthesis() {
        let text = "11338 (cat) R 11332 11332 9368 0 -1 4194304 99 0 0 0 7 3 0 0 20 0 1 0 \
                    95940 3133440 382 18446744073709551615 0 0 0";
        let s = parse_pid_stat(text).unwrap();
        assert_eq!(s.comm, "cat");
        assert_eq!(
            (s.state, s.ppid, s.cpu_ticks, s.start_ticks),
            ('R', 11332, 10, 95940)
        );
        // A name with spaces and parentheses.
        let text = "42 (my (odd) name)) S 1 42 42 0 -1 0 0 0 0 0 250 50 0 0 20 0 4 0 777 0 0";
        let s = parse_pid_stat(text).unwrap();
        assert_eq!(s.comm, "my (odd) name)");
        assert_eq!(
            (s.state, s.ppid, s.cpu_ticks, s.start_ticks),
            ('S', 1, 300, 777)
        );
        assert_eq!(parse_pid_stat("42 (truncated) S 1 2"), None);
        assert_eq!(parse_pid_stat(""), None);
    }

    #[test]
    fn statm_and_cmdline() {
        assert_eq!(
            parse_statm_resident_pages("765 407 378 5 0 123 0\n"),
            Some(407)
        );
        assert_eq!(parse_statm_resident_pages("765"), None);
        assert_eq!(
            parse_cmdline(b"ddp\0__replica\0--resume\0"),
            "ddp __replica --resume"
        );
        assert_eq!(parse_cmdline(b""), "");
    }

    #[test]
    fn this_process_can_be_read() {
        let pid = std::process::id();
        let stat = read_pid_stat(pid).unwrap().unwrap();
        assert_eq!(
            stat.start_ticks,
            crate::runs::run::ProcessId::current().start_ticks
        );
        assert!(read_rss_bytes(pid).unwrap().unwrap() > 0);
        assert!(!read_cmdline(pid).unwrap().unwrap().is_empty());
        assert!(!read_cpu_stat().unwrap().cores.is_empty());
        let (total, available) = read_meminfo().unwrap();
        assert!(total > 0 && available <= total);
        assert!(clock_ticks_per_second() > 0 && page_size() >= 4096);
        // A pid that cannot exist is gone, not an error.
        assert_eq!(read_pid_stat(u32::MAX - 1).unwrap(), None);
        assert_eq!(read_rss_bytes(u32::MAX - 1).unwrap(), None);
        assert_eq!(read_cmdline(u32::MAX - 1).unwrap(), None);
    }
}
