//! `data.cache = "auto"`: whether the decoded images fit in memory. They are kept as 8-bit
//! pixels, `samples × C·H·W` bytes, and fit when that is at most half of the memory available
//! (`MemAvailable` of `/proc/meminfo`) shared by the replicas of this machine (`LOCAL_WORLD_SIZE`,
//! else 1). Where the available memory cannot be read, they are not kept.

/// True when `bytes` of pixels fit within half of `available` shared by `replicas`.
pub fn fits(bytes: u64, available: Option<u64>, replicas: usize) -> bool {
    match available {
        Some(a) => bytes <= a / 2 / replicas.max(1) as u64,
        None => false,
    }
}

/// `MemAvailable` of `/proc/meminfo`, in bytes.
pub fn mem_available() -> Option<u64> {
    parse_meminfo(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

fn parse_meminfo(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The replicas on this machine: `LOCAL_WORLD_SIZE` where it is set, else 1.
pub fn local_replicas() -> usize {
    std::env::var("LOCAL_WORLD_SIZE")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|&n: &usize| n > 0)
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_the_available_memory_per_replica() {
        let gib = 1u64 << 30;
        assert!(fits(gib, Some(2 * gib), 1));
        assert!(!fits(gib + 1, Some(2 * gib), 1));
        assert!(fits(gib / 4, Some(2 * gib), 4));
        assert!(!fits(gib / 4 + 1, Some(2 * gib), 4));
        assert!(fits(gib, Some(2 * gib), 0));
        assert!(!fits(1, None, 1));
    }

    #[test]
    fn meminfo_is_read_in_kib() {
        let text = "MemTotal:       24576000 kB\nMemFree:  100 kB\nMemAvailable:   22000000 kB\n";
        assert_eq!(parse_meminfo(text), Some(22_000_000 * 1024));
        assert_eq!(parse_meminfo("MemTotal: 5 kB\n"), None);
        assert!(mem_available().is_some_and(|b| b > 0));
    }
}
