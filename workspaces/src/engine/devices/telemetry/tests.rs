use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::*;
use crate::runs::run::{ProcessId, RunRecord};

/// An NVML library that does not exist: the same outcome on machines with and without a GPU.
const MISSING_NVML: &str = "libnvidia-ml-ddp-test-missing.so.1";

fn run(id: &str, status: RunStatus, supervisor: Option<u32>, replicas: &[(usize, u32)]) -> Run {
    RunRecord::sample()
        .id(id)
        .status(status)
        .replicas(replicas.len())
        .supervisor(supervisor.map(|pid| ProcessId {
            pid,
            start_ticks: 0,
        }))
        .replica_pids(replicas.iter().copied().collect())
        .in_dir(PathBuf::from("/nonexistent").join(id))
}

fn owner(run_id: &str, rank: Option<usize>) -> Owner {
    Owner {
        run_id: run_id.into(),
        experiment: "mnist".into(),
        rank,
    }
}

#[test]
fn owners_are_the_live_runs_supervisors_and_replicas() {
    let runs = [
        run("a", RunStatus::Running, Some(100), &[(0, 101), (1, 102)]),
        run("b", RunStatus::Completed, Some(200), &[(0, 201)]),
        // Queued (e.g. resumed, waiting for a GPU): the replica pids are an old attempt's.
        run("c", RunStatus::Queued, Some(300), &[(0, 301)]),
        run("d", RunStatus::Restarting, None, &[(0, 401)]),
    ];
    let owners = process_owners(&runs);
    let pids: Vec<u32> = owners.keys().copied().collect();
    assert_eq!(pids, [100, 101, 102, 300, 401]);
    assert_eq!(owners[&100], owner("a", None));
    assert_eq!(owners[&102], owner("a", Some(1)));
    assert_eq!(owners[&401], owner("d", Some(0)));
    assert_eq!(owners[&100].role(), "supervisor");
    assert_eq!(owners[&102].role(), "rank 1");
    assert!(process_owners(&[]).is_empty());
}

#[test]
fn without_a_gpu_there_are_cpus_memory_and_a_note() {
    let mut sampler = TelemetrySampler::new(None).with_nvml_library(MISSING_NVML);
    for _ in 0..2 {
        let t = sampler.sample(&ProcessOwners::new());
        assert!(t.gpus.is_empty());
        assert_eq!(
            t.gpu_note.as_deref(),
            Some(format!("no NVIDIA driver ({MISSING_NVML} not found)").as_str())
        );
        assert!(!t.cpu.per_core_pct.is_empty());
        for pct in t.cpu.per_core_pct.iter().chain([&t.cpu.total_pct]) {
            assert!((0.0..=100.0).contains(pct), "{pct}");
        }
        assert!(t.memory.total_bytes > 0);
        assert!(t.memory.available_bytes <= t.memory.total_bytes);
        assert!(t.processes.is_empty());
        assert!(t.notes.is_empty(), "{:?}", t.notes);
        assert!(t.time > 1.7e9 && t.interval_s >= 0.0);
    }
    // NVML is not asked again on every sample after it failed.
    assert_eq!(sampler.nvml_init_attempts, 1);
}

#[test]
fn the_default_sampler_never_fails() {
    // Whatever this machine has: GPUs, or none and a note.
    let mut sampler = TelemetrySampler::new(None);
    let t = sampler.sample(&ProcessOwners::new());
    assert!(!t.gpus.is_empty() || t.gpu_note.is_some());
    for (i, gpu) in t.gpus.iter().enumerate() {
        assert_eq!(gpu.index, i);
    }
}

#[test]
fn simulated_gpus_have_plausible_readings_and_their_holders() {
    let ws = tempfile::tempdir().unwrap();
    let _lease = crate::engine::devices::locks::acquire(ws.path(), &[1], "run-holding-1")
        .unwrap()
        .unwrap();
    let mut sampler = TelemetrySampler::new(Some(ws.path().to_path_buf())).with_simulated_gpus(2);
    assert_eq!(sampler.workspace(), Some(ws.path()));
    let first = sampler.sample(&ProcessOwners::new());
    assert_eq!(first.gpus.len(), 2);
    assert_eq!(
        first.gpu_note.as_deref(),
        Some("simulated: 2 GPU(s) from DDP_SIMULATED_GPUS (NVML not used)")
    );
    assert_eq!(first.gpus[0].held_by, None);
    assert_eq!(first.gpus[1].held_by.as_deref(), Some("run-holding-1"));
    let mut utils = Vec::new();
    for _ in 0..20 {
        let t = sampler.sample(&ProcessOwners::new());
        for (i, g) in t.gpus.iter().enumerate() {
            assert_eq!(g.index, i);
            assert_eq!(g.name, "Simulated GPU");
            let util = g.utilization_pct.unwrap();
            assert!((5.0..=95.0).contains(&util), "{util}");
            let (used, total) = (g.memory_used_bytes.unwrap(), g.memory_total_bytes.unwrap());
            assert!(used > 0 && used < total);
            assert!((30.0..=90.0).contains(&g.temperature_c.unwrap()));
            assert!(g.power_w.unwrap() <= g.power_limit_w.unwrap());
            utils.push(util);
        }
    }
    // The readings move (a sparkline has something to draw) and are the same every time.
    assert!(utils.iter().any(|u| *u != utils[0]));
    let mut again = TelemetrySampler::new(None).with_simulated_gpus(2);
    let replay = again.sample(&ProcessOwners::new());
    assert_eq!(
        replay.gpus[1].utilization_pct,
        first.gpus[1].utilization_pct
    );
    assert_eq!(replay.gpus[1].power_w, first.gpus[1].power_w);
    // No workspace: nobody holds anything.
    assert!(replay.gpus.iter().all(|g| g.held_by.is_none()));
}

#[test]
fn a_bad_simulated_count_is_a_note() {
    let mut sampler = TelemetrySampler::new(None);
    sampler.gpus = GpuSource::from_env(Some("two"), NVML_LIB);
    let t = sampler.sample(&ProcessOwners::new());
    assert!(t.gpus.is_empty());
    assert_eq!(
        t.gpu_note.as_deref(),
        Some("DDP_SIMULATED_GPUS=\"two\": expected a number of GPUs (0 or more)")
    );
    assert!(matches!(
        GpuSource::from_env(Some(" 3 "), NVML_LIB),
        GpuSource::Simulated(3)
    ));
    assert!(matches!(
        GpuSource::from_env(Some(""), NVML_LIB),
        GpuSource::Nvml { .. }
    ));
}

/// Kills and reaps the child when dropped, so a failed assertion leaves no process behind.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(script: &str) -> Reaped {
    Reaped(
        Command::new("sh")
            .args(["-c", script])
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

#[test]
fn owned_processes_show_cpu_and_memory() {
    // `exec` so the pid is the busy shell itself, whatever `sh` does with a last command.
    let busy = spawn("while :; do :; done");
    let idle = spawn("exec sleep 30");
    let me = std::process::id();
    let mut owners = ProcessOwners::new();
    owners.insert(me, owner("run-a", None));
    owners.insert(busy.0.id(), owner("run-a", Some(0)));
    owners.insert(idle.0.id(), owner("run-a", Some(1)));
    owners.insert(u32::MAX - 1, owner("run-a", Some(2))); // gone: left out
    let mut sampler = TelemetrySampler::new(None).with_nvml_library(MISSING_NVML);
    let first = sampler.sample(&owners);
    let pids: Vec<u32> = first.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, [me, busy.0.id(), idle.0.id()]);
    assert!(first.processes.iter().all(|p| p.cpu_pct.is_none()));
    std::thread::sleep(Duration::from_millis(500));
    let t = sampler.sample(&owners);
    assert!(t.notes.is_empty(), "{:?}", t.notes);
    let [supervisor, rank0, rank1] = &t.processes[..] else {
        panic!("{:?}", t.processes)
    };
    assert_eq!(supervisor.owner, owner("run-a", None));
    assert_eq!(rank0.owner, owner("run-a", Some(0)));
    assert!(
        rank0.command.starts_with("sh -c while"),
        "{}",
        rank0.command
    );
    assert_eq!(rank1.command, "sleep 30");
    for p in &t.processes {
        assert!(p.rss_bytes.unwrap() > 0, "{p:?}");
    }
    // The busy loop runs most of the time, even on a loaded machine; sleep barely at all.
    let busy_pct = rank0.cpu_pct.unwrap();
    assert!(busy_pct > 5.0 && busy_pct < 150.0, "{busy_pct}");
    assert!(rank1.cpu_pct.unwrap() < 5.0, "{:?}", rank1.cpu_pct);
}

#[test]
fn a_replica_pid_not_under_its_supervisor_is_someone_else() {
    let child = spawn("exec sleep 30");
    let mut owners = ProcessOwners::new();
    // The run's supervisor is some other process than this test, the child's parent.
    owners.insert(u32::MAX - 1, owner("run-b", None));
    owners.insert(child.0.id(), owner("run-b", Some(0)));
    let mut sampler = TelemetrySampler::new(None).with_simulated_gpus(0);
    assert!(sampler.sample(&owners).processes.is_empty());
    // Under its supervisor it is the replica.
    owners.remove(&(u32::MAX - 1));
    owners.insert(std::process::id(), owner("run-b", None));
    let t = sampler.sample(&owners);
    assert_eq!(t.processes.len(), 2);
    assert_eq!(t.processes[1].pid, child.0.id());
}

#[test]
fn history_follows_samples() {
    let mut sampler = TelemetrySampler::new(None).with_simulated_gpus(2);
    let mut history = TelemetryHistory::new(4);
    for _ in 0..6 {
        history.push(&sampler.sample(&ProcessOwners::new()));
    }
    assert_eq!(history.len(), 4);
    assert_eq!(history.gpus().count(), 2);
    let g = history.gpu(1).unwrap();
    assert_eq!(g.utilization_pct.len(), 4);
    assert!(g.memory_used_pct.iter().all(|v| v.is_some()));
    assert!(history.memory_used_pct().iter().all(|v| *v > 0.0));
}

#[test]
fn telemetry_serialises() {
    let mut sampler = TelemetrySampler::new(None).with_simulated_gpus(1);
    let t = sampler.sample(&ProcessOwners::new());
    let json = serde_json::to_string(&t).unwrap();
    let back: Telemetry = serde_json::from_str(&json).unwrap();
    assert_eq!(back, t);
}

#[test]
fn a_sampler_can_live_on_another_thread() {
    fn send<T: Send>() {}
    send::<TelemetrySampler>();
    let mut sampler = TelemetrySampler::new(None).with_simulated_gpus(1);
    let t = std::thread::spawn(move || sampler.sample(&ProcessOwners::new()))
        .join()
        .unwrap();
    assert_eq!(t.gpus.len(), 1);
}
