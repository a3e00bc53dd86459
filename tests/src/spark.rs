//! A real Spark for tests: the standalone cluster (a master and two one-core workers) that
//! `scripts/spark-cluster.sh up DIR` starts on this machine; `scripts/test.sh` brings one up and
//! exports `DDP_TEST_SPARK=DIR` (docs/spark.md).
//!
//! - Without a cluster (`DDP_TEST_SPARK` unset, or no master URL in `DIR/master`) a test skips,
//!   printing `skipped: <why>`; with `DDP_TEST_SPARK_REQUIRED=1` (CI) it fails instead.
//! - One test at a time: a [`SparkCluster`] holds `DIR/tests.lock` (`flock`, waiting at most 30
//!   minutes for the tests before it) until it is dropped.

use std::fs::File;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The cluster's folder (`scripts/spark-cluster.sh up DIR`).
pub const CLUSTER_VAR: &str = "DDP_TEST_SPARK";
/// `1`: a missing cluster fails the Spark tests instead of skipping them (CI).
pub const REQUIRED_VAR: &str = "DDP_TEST_SPARK_REQUIRED";
const LOCK_WAIT: Duration = Duration::from_secs(30 * 60);

/// The test cluster, held by one test at a time.
pub struct SparkCluster {
    pub dir: PathBuf,
    /// `spark://127.0.0.1:PORT`.
    pub master: String,
    _lock: File,
}

impl SparkCluster {
    /// The cluster in `$DDP_TEST_SPARK`, taken for this test; `None` (after printing why) when
    /// there is none, a panic instead with `DDP_TEST_SPARK_REQUIRED=1`.
    pub fn or_skip() -> Option<SparkCluster> {
        let required = std::env::var(REQUIRED_VAR).is_ok_and(|v| v.trim() == "1");
        let found = std::env::var_os(CLUSTER_VAR)
            .map(PathBuf::from)
            .filter(|d| !d.as_os_str().is_empty())
            .ok_or_else(|| {
                format!(
                    "{CLUSTER_VAR} is not set, so there is no Spark test cluster (scripts/test.sh \
                     brings one up; by hand: scripts/spark-cluster.sh up DIR, then \
                     {CLUSTER_VAR}=DIR cargo test ...)"
                )
            })
            .and_then(|dir| {
                let master = std::fs::read_to_string(dir.join("master"))
                    .map_err(|e| format!("{}: {e}", dir.join("master").display()))?;
                Ok((dir, master.trim().to_string()))
            });
        match found {
            Ok((dir, master)) => {
                let lock = take_lock(&dir);
                Some(SparkCluster {
                    dir,
                    master,
                    _lock: lock,
                })
            }
            Err(why) if required => panic!("no Spark test cluster ({REQUIRED_VAR}=1): {why}"),
            Err(why) => {
                eprintln!("skipped: {why}");
                None
            }
        }
    }
}

fn take_lock(dir: &std::path::Path) -> File {
    let path = dir.join("tests.lock");
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    let started = Instant::now();
    loop {
        // SAFETY: flock(2) on a descriptor this function owns.
        let r = unsafe {
            libc::flock(
                std::os::fd::AsRawFd::as_raw_fd(&file),
                libc::LOCK_EX | libc::LOCK_NB,
            )
        };
        if r == 0 {
            return file;
        }
        if started.elapsed() > LOCK_WAIT {
            panic!(
                "the Spark test cluster's lock {} was held for {LOCK_WAIT:?}",
                path.display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
