//! CPU threads per replica, decided here for every launch path (the local launcher, a
//! replica's own start-up, the workspace's device plan, a Spark task): the explicit count
//! (`ddp.threads`, `DDP_THREADS`), else the cores this process may use shared by the replicas of
//! the host, at least one.

/// `explicit`, else `cores / replicas` (the replicas that share this host's cores), at least 1.
pub fn per_replica(explicit: Option<usize>, replicas: usize, cores: usize) -> usize {
    explicit.unwrap_or(cores / replicas.max(1)).max(1)
}

/// The cores this process may use (its CPU affinity; 1 when unknown).
pub fn available_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cores_are_shared_unless_a_count_is_given() {
        assert_eq!(per_replica(None, 2, 16), 8);
        assert_eq!(per_replica(None, 3, 16), 5);
        assert_eq!(per_replica(None, 32, 16), 1);
        assert_eq!(per_replica(None, 0, 4), 4);
        assert_eq!(per_replica(Some(3), 2, 16), 3);
        assert_eq!(per_replica(Some(0), 2, 16), 1);
        assert!(available_cores() >= 1);
    }
}
