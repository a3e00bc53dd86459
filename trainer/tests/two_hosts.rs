//! DDP across a real link: two replicas, each in its own network namespace with its own host
//! name (scripts/two-hosts.sh: a veth pair shaped to 1 Gbit/s each way), placed by torchrun's
//! variables, end with the weights of one replica training the combined batch locally. The ring
//! carries the gradients (no shared memory between "hosts"), bucket by bucket while backward
//! runs. DiLoCo's local steps (int4 syncs, all-gathered over the ring) end with the weights of
//! the same two replicas on one host (through shared memory). Needs root (network namespaces, tc), as CI has; elsewhere it says so and passes
//! (`scripts/test.sh` sets `DDP_TWO_HOSTS_REQUIRED=1` where namespaces can be made: then a
//! failure to make them fails the test).

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/two-hosts.sh")
}

/// The two hosts, named after this process so that concurrent test runs do not meet; taken
/// down when dropped.
struct Hosts {
    name: String,
    net: String,
}

impl Hosts {
    fn up(rate: &str) -> Option<Hosts> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("two_hosts: skipped: network namespaces need root (CI runs as root)");
            return None;
        }
        let pid = std::process::id();
        let hosts = Hosts {
            name: format!("ddpt{}", pid % 100_000),
            net: (1 + pid % 250).to_string(),
        };
        let out = hosts.script().args(["up", rate]).output().unwrap();
        if !out.status.success() {
            // Root without the right to make namespaces (a container): skip, unless the test
            // command found that it can (scripts/test.sh).
            let required = std::env::var_os("DDP_TWO_HOSTS_REQUIRED").is_some();
            assert!(!required, "two-hosts.sh up: {}", text(&out));
            eprintln!("two_hosts: skipped: two-hosts.sh up failed: {}", text(&out));
            return None;
        }
        Some(hosts)
    }

    fn script(&self) -> Command {
        let mut c = Command::new(script());
        c.env("DDP_HOSTS_NAME", &self.name)
            .env("DDP_HOSTS_NET", &self.net);
        c
    }

    fn addr(&self, h: usize) -> String {
        format!("10.77.{}.{}", self.net, h + 1)
    }

    /// Rank `h` of 2 on host `h`, as torchrun starts it there.
    fn rank(&self, h: usize, spec: &Path, out: &Path, sets: &[&str]) -> std::process::Child {
        let mut c = self.script();
        c.args(["run", &h.to_string()]);
        for v in ddp_trainer::env::LAUNCHER_VARIABLES {
            c.env_remove(v);
        }
        c.arg(env!("CARGO_BIN_EXE_ddp-trainer"))
            .arg(spec)
            .arg("--out")
            .arg(out);
        for s in sets {
            c.arg("--set").arg(s);
        }
        c.env("RAYON_NUM_THREADS", "1")
            .env("RANK", h.to_string())
            .env("WORLD_SIZE", "2")
            .env("LOCAL_RANK", "0")
            .env("LOCAL_WORLD_SIZE", "1")
            .env("MASTER_ADDR", self.addr(0))
            .env("MASTER_PORT", "29600")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let _ = self.script().arg("down").output();
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn two_hosts_over_a_shaped_link_equal_one_replica() {
    let Some(hosts) = Hosts::up("1gbit") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let body = "val_fraction = 0.0\nlimit_train = 256\nlimit_test = 32\n[train]\nepochs = 1\nmax_steps = 4\noptimizer = \"adam\"\nlr = 0.001\nseed = 7\n[ddp]\ntimeout_s = 60\n[checkpoint]\nevery_epochs = 0\n";
    let spec = write_spec(dir.path(), "mnist-cnn", body);
    let (two, one) = (dir.path().join("two"), dir.path().join("one"));
    // Small buckets, so that several go out while backward runs.
    let sets = ["train.batch_size=8", "ddp.bucket_mb=0.05"];
    let ranks: Vec<_> = (0..2)
        .map(|h| hosts.rank(h, &spec, &two.join(format!("host{h}")), &sets))
        .collect();
    let outs: Vec<Output> = ranks
        .into_iter()
        .map(|c| wait_output(c, Duration::from_secs(120)))
        .collect();
    for o in &outs {
        assert_success(o);
    }
    let log = text(&outs[0]);
    for line in [
        "all-reduce through tcp ring (the ranks do not all run on one host)",
        "gradients all-reduced in buckets of 0.05 MB (the first 0.05 MB) while backward runs",
    ] {
        assert!(log.contains(line), "{line:?} not in\n{log}");
    }
    train_standalone(&spec, 1, &one, &["train.batch_size=16"]);
    let (diff, at) = worst_tensor(
        &load_model(&two.join("host0/model.safetensors")),
        &load_model(&one.join("model.safetensors")),
    );
    assert!(
        diff < 1e-5,
        "two hosts and one replica differ by {diff} (in {at})"
    );

    // DiLoCo every 2 steps in int4: the ring between the hosts and shared memory on one host
    // carry the same bytes, every rank adds them in the same order.
    let diloco = [
        "train.batch_size=8",
        "ddp.threads=1",
        "ddp.sync.method=diloco",
        "ddp.sync.every=2",
        "ddp.sync.encoding=int4",
    ];
    let (two, local) = (
        dir.path().join("two-diloco"),
        dir.path().join("local-diloco"),
    );
    let ranks: Vec<_> = (0..2)
        .map(|h| hosts.rank(h, &spec, &two.join(format!("host{h}")), &diloco))
        .collect();
    for c in ranks {
        assert_success(&wait_output(c, Duration::from_secs(120)));
    }
    let log = text(&train_standalone(&spec, 2, &local, &diloco));
    assert!(log.contains("local steps: DiLoCo"), "{log}");
    let (diff, at) = worst_tensor(
        &load_model(&two.join("host0/model.safetensors")),
        &load_model(&local.join("model.safetensors")),
    );
    assert_eq!(diff, 0.0, "DiLoCo on two hosts and on one differ in {at}");
}
