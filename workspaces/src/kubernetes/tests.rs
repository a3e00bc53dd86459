use std::path::Path;

use serde_json::{Value, json};

use super::*;
use crate::runs::run::{Run, RunRecord, RunStatus};
use crate::spec::Spec;

const WS: &str = "/shared/ws";

/// An MLP spec of 4 replicas and 3 restarts.
fn spec() -> Spec {
    Spec::parse(
        "name = \"MNIST ddp\"\n[model]\nname = \"mlp\"\n[data]\nname = \"synthetic\"\n\
         [ddp]\nreplicas = 4\n[restart]\nmax_restarts = 3\n",
        Path::new("/shared/specs/mnist.toml"),
        &[],
    )
    .unwrap()
}

/// A completed run of 4 replicas of experiment `mnist` in the workspace [`WS`].
fn run() -> Run {
    RunRecord::sample()
        .status(RunStatus::Completed)
        .replicas(4)
        .in_workspace(WS)
}

fn opts() -> JobOptions {
    JobOptions {
        image: Some("registry.example.com/ddp:1".into()),
        volume: Some("ddp-data".into()),
        ..JobOptions::default()
    }
}

fn plan_run(kind: JobKind, o: &JobOptions) -> crate::Result<JobPlan> {
    let (run, spec) = (run(), spec());
    plan(
        kind,
        o,
        Target::Run {
            run: &run,
            spec: &spec,
        },
        Path::new(WS),
    )
}

fn plan_spec(kind: JobKind, o: &JobOptions) -> crate::Result<JobPlan> {
    let spec = spec();
    plan(
        kind,
        o,
        Target::Spec {
            path: Path::new("/shared/specs/mnist.toml"),
            spec: &spec,
        },
        Path::new(WS),
    )
}

fn invalid(result: crate::Result<JobPlan>) -> String {
    match result {
        Err(crate::Error::Invalid(msg)) => msg,
        other => panic!("expected Error::Invalid, got {other:?}"),
    }
}

#[test]
fn a_run_trains_in_its_own_folder_from_its_frozen_spec() {
    let p = plan_run(JobKind::PyTorchJob, &opts()).unwrap();
    let dir = "/shared/ws/experiments/mnist/runs/20261121-101500-abc123";
    assert_eq!(p.name, "mnist-20261121-101500-abc123");
    assert_eq!(p.mount_path, WS);
    assert_eq!((p.nodes, p.procs_per_node, p.world_size()), (1, 4, 4));
    assert_eq!(p.max_restarts, 3);
    assert_eq!(p.spec_text, None);
    assert_eq!(
        p.command(),
        [
            "ddp-trainer",
            &format!("{dir}/spec.toml"),
            "--out",
            dir,
            "--resume"
        ]
    );
    assert_eq!(p.source, "run 20261121-101500-abc123 (experiment mnist)");
    // The replicas spread over the nodes.
    let two = JobOptions {
        nodes: Some(2),
        ..opts()
    };
    let p = plan_run(JobKind::TrainJob, &two).unwrap();
    assert_eq!((p.nodes, p.procs_per_node), (2, 2));
}

#[test]
fn a_spec_ships_in_a_config_map_with_the_world_it_trains() {
    let o = JobOptions {
        nodes: Some(3),
        gpus_per_node: Some(2),
        namespace: Some("ml".into()),
        ..opts()
    };
    let p = plan_spec(JobKind::PyTorchJob, &o).unwrap();
    assert_eq!(p.name, "mnist-ddp");
    // One replica per GPU.
    assert_eq!(
        (p.nodes, p.procs_per_node, p.gpus_per_node),
        (3, 2, Some(2))
    );
    assert_eq!(p.spec_path, "/etc/ddp/spec.toml");
    assert_eq!(p.run_dir, "/shared/ws/kubernetes/mnist-ddp");
    assert_eq!(p.source, "spec /shared/specs/mnist.toml");
    let text = p.spec_text.as_deref().unwrap();
    let shipped = Spec::parse(text, Path::new("spec.toml"), &[]).unwrap();
    assert_eq!(shipped.ddp.replicas, 6);
    assert_eq!(shipped.model, spec().model);
    let docs = documents(&p);
    assert_eq!(docs.len(), 2);
    assert_eq!(docs[0]["kind"], "ConfigMap");
    assert_eq!(
        docs[0]["metadata"],
        json!({"name": "mnist-ddp-spec", "namespace": "ml"})
    );
    assert_eq!(docs[0]["data"]["spec.toml"], text);
    // Its own run folder and mount path.
    let o = JobOptions {
        mount_path: Some("/data".into()),
        run_dir: Some("/data/runs/a".into()),
        name: Some("first-try".into()),
        procs_per_node: Some(1),
        ..opts()
    };
    let p = plan_spec(JobKind::TrainJob, &o).unwrap();
    assert_eq!(
        (p.name.as_str(), p.mount_path.as_str(), p.run_dir.as_str()),
        ("first-try", "/data", "/data/runs/a")
    );
    assert_eq!(p.world_size(), 1);
}

#[test]
fn bad_options_are_refused_naming_the_option() {
    let cases: Vec<(JobOptions, &str)> = vec![
        (
            JobOptions {
                image: None,
                ..opts()
            },
            "--image IMAGE is required with --kubeflow and --trainjob",
        ),
        (
            JobOptions {
                volume: Some(" ".into()),
                ..opts()
            },
            "--volume CLAIM is required",
        ),
        (
            JobOptions {
                volume: Some("Data_1".into()),
                ..opts()
            },
            "--volume \"Data_1\" is not a PersistentVolumeClaim name",
        ),
        (
            JobOptions {
                nodes: Some(0),
                ..opts()
            },
            "--nodes must be at least 1",
        ),
        (
            JobOptions {
                procs_per_node: Some(0),
                ..opts()
            },
            "--procs-per-node must be at least 1",
        ),
        (
            JobOptions {
                gpus_per_node: Some(0),
                ..opts()
            },
            "--gpus-per-node must be at least 1",
        ),
        (
            JobOptions {
                nodes: Some(3),
                ..opts()
            },
            "ddp.replicas = 4 does not spread evenly over --nodes 3; pass --procs-per-node",
        ),
        (
            JobOptions {
                name: Some("9lives".into()),
                ..opts()
            },
            "--name \"9lives\" is not a job name",
        ),
        (
            JobOptions {
                name: Some("a".repeat(51)),
                ..opts()
            },
            "at most 50 characters",
        ),
        (
            JobOptions {
                namespace: Some("ML".into()),
                ..opts()
            },
            "--namespace \"ML\" is not a namespace name",
        ),
        (
            JobOptions {
                mount_path: Some("data".into()),
                ..opts()
            },
            "--mount-path data is not an absolute path",
        ),
        (
            JobOptions {
                mount_path: Some("/data".into()),
                ..opts()
            },
            "is not under --mount-path /data",
        ),
        (
            JobOptions {
                run_dir: Some("/shared/ws/x".into()),
                ..opts()
            },
            "--run-dir is for a spec",
        ),
        (
            JobOptions {
                nodes: Some(2),
                procs_per_node: Some(1),
                ..opts()
            },
            "run 20261121-101500-abc123 has ddp.replicas = 4, but --nodes 2 × --procs-per-node 1 = 2",
        ),
    ];
    for (o, want) in cases {
        let msg = invalid(plan_run(JobKind::PyTorchJob, &o));
        assert!(msg.contains(want), "{o:?}: {msg}");
    }
    let o = JobOptions {
        run_dir: Some("/elsewhere/run".into()),
        ..opts()
    };
    let msg = invalid(plan_spec(JobKind::TrainJob, &o));
    assert!(
        msg.contains("/elsewhere/run is not under --mount-path /shared/ws"),
        "{msg}"
    );
    let o = JobOptions {
        run_dir: Some("/shared/ws/../x".into()),
        ..opts()
    };
    assert!(invalid(plan_spec(JobKind::TrainJob, &o)).contains("holds `.` or `..`"));
}

#[test]
fn a_live_run_is_refused() {
    let (run, spec) = (RunRecord::sample().replicas(4).in_workspace(WS), spec());
    let target = Target::Run {
        run: &run,
        spec: &spec,
    };
    match plan(JobKind::PyTorchJob, &opts(), target, Path::new(WS)) {
        Err(crate::Error::Refused(msg)) => {
            assert!(
                msg.contains("run 20261121-101500-abc123 is running: stop it first"),
                "{msg}"
            )
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn names_become_dns_labels() {
    assert_eq!(dns_label("MNIST ddp", 50), "mnist-ddp");
    assert_eq!(dns_label("--a__b--", 50), "a-b");
    assert_eq!(dns_label("2024 run", 50), "ddp-2024-run");
    assert_eq!(dns_label("!!!", 50), "ddp");
    assert_eq!(dns_label("abcdef-ghi", 7), "abcdef");
    // A long experiment name is shortened; the run id stays whole.
    let run = RunRecord::sample()
        .status(RunStatus::Completed)
        .replicas(4)
        .experiment("a".repeat(80))
        .in_workspace(WS);
    let spec = spec();
    let target = Target::Run {
        run: &run,
        spec: &spec,
    };
    let p = plan(JobKind::TrainJob, &opts(), target, Path::new(WS)).unwrap();
    assert_eq!(p.name.len(), MAX_NAME);
    assert!(p.name.ends_with("-20261121-101500-abc123"), "{}", p.name);
}

#[test]
fn a_pytorchjob_has_a_master_and_workers_restarted_on_failure() {
    let o = JobOptions {
        nodes: Some(2),
        gpus_per_node: Some(2),
        ..opts()
    };
    let p = plan_run(JobKind::PyTorchJob, &o).unwrap();
    let job = &documents(&p)[0];
    assert_eq!(job["apiVersion"], "kubeflow.org/v1");
    assert_eq!(job["spec"]["nprocPerNode"], "2");
    assert_eq!(job["spec"]["runPolicy"]["backoffLimit"], 3);
    let specs = &job["spec"]["pytorchReplicaSpecs"];
    for (role, count) in [("Master", 1), ("Worker", 1)] {
        let r = &specs[role];
        assert_eq!(r["replicas"], count);
        assert_eq!(r["restartPolicy"], "OnFailure");
        let pod = &r["template"]["spec"];
        let c = &pod["containers"][0];
        assert_eq!(c["name"], "pytorch");
        assert_eq!(
            c["ports"],
            json!([{"name": "pytorchjob-port", "containerPort": 23456}])
        );
        assert_eq!(c["resources"]["limits"]["nvidia.com/gpu"], 2);
        assert_eq!(
            c["volumeMounts"],
            json!([{"name": "ddp-shared", "mountPath": WS}])
        );
        assert_eq!(
            pod["volumes"],
            json!([{"name": "ddp-shared", "persistentVolumeClaim": {"claimName": "ddp-data"}}])
        );
    }
    // One node: the master alone.
    let p = plan_run(JobKind::PyTorchJob, &opts()).unwrap();
    let job = &documents(&p)[0];
    assert_eq!(job["spec"]["pytorchReplicaSpecs"]["Worker"], Value::Null);
    assert_eq!(
        job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resources"],
        Value::Null
    );
}

/// An elastic spec's job may lose pods down to the spec's minimum; a fixed one has no policy.
#[test]
fn an_elastic_spec_gives_the_pytorchjob_an_elastic_policy() {
    let elastic = |min: usize| {
        Spec::parse(
            &format!(
                "name = \"MNIST ddp\"\n[model]\nname = \"mlp\"\n[data]\nname = \"synthetic\"\n\
                 [ddp]\nreplicas = 4\nelastic = {{ min_replicas = {min} }}\n\
                 [restart]\nmax_restarts = 3\n"
            ),
            Path::new("/shared/specs/mnist.toml"),
            &[],
        )
        .unwrap()
    };
    let plan_of = |spec: &Spec, nodes: usize| {
        let o = JobOptions {
            nodes: Some(nodes),
            procs_per_node: Some(2),
            ..opts()
        };
        let target = Target::Spec {
            path: Path::new("/shared/specs/mnist.toml"),
            spec,
        };
        plan(JobKind::PyTorchJob, &o, target, Path::new(WS))
    };
    // 3 replicas must remain: 2 pods of 2 (of 4 pods).
    let p = plan_of(&elastic(3), 4).unwrap();
    assert_eq!(p.min_nodes, Some(2));
    let docs = documents(&p);
    let job = docs.last().unwrap();
    assert_eq!(
        job["spec"]["elasticPolicy"],
        json!({"rdzvBackend": "c10d", "minReplicas": 2, "maxReplicas": 4, "maxRestarts": 3})
    );
    // The shipped spec keeps its minimum, with the job's world.
    let text = p.spec_text.unwrap();
    assert!(
        text.contains("replicas = 8") && text.contains("min_replicas = 3"),
        "{text}"
    );
    // More replicas must remain than the job has.
    let msg = invalid(plan_of(&elastic(4), 1));
    assert!(
        msg.contains("ddp.elastic.min_replicas = 4 is more than the job's 2 replicas"),
        "{msg}"
    );
    let fixed = documents(&plan_of(&spec(), 2).unwrap()).pop().unwrap();
    assert_eq!(fixed["spec"]["elasticPolicy"], Value::Null);
}

#[test]
fn a_trainjob_patches_the_volumes_into_the_runtime_node() {
    let o = JobOptions {
        nodes: Some(2),
        ..opts()
    };
    let p = plan_spec(JobKind::TrainJob, &o).unwrap();
    let docs = documents(&p);
    let job = &docs[1];
    assert_eq!(job["apiVersion"], "trainer.kubeflow.org/v1alpha1");
    assert_eq!(job["spec"]["runtimeRef"]["name"], "torch-distributed");
    let t = &job["spec"]["trainer"];
    assert_eq!(
        (&t["numNodes"], &t["numProcPerNode"]),
        (&json!(2), &json!(2))
    );
    assert_eq!(t["command"], json!(p.command()));
    assert_eq!(t["resourcesPerNode"], Value::Null);
    let patch = &job["spec"]["runtimePatches"][0];
    assert_eq!(patch["manager"], "ddp.export");
    let node = &patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0];
    assert_eq!(node["name"], "node");
    let pod = &node["template"]["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["volumeMounts"],
        json!([
            {"name": "ddp-shared", "mountPath": WS},
            {"name": "ddp-spec", "mountPath": "/etc/ddp", "readOnly": true},
        ])
    );
    assert_eq!(pod["volumes"][1]["configMap"]["name"], "mnist-ddp-spec");
}

/// Reads YAML back as JSON.
fn read_yaml(text: &str) -> Value {
    serde_norway::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

#[test]
fn yaml_reads_back_as_the_value_with_every_string_quoted() {
    let v = json!({
        "kind": "K",
        "apiVersion": "v1",
        "b": {"yes": "yes", "on": "010", "colon": "a: b", "hash": "#x", "dash": "- x", "empty": ""},
        "a": [1, 2.5, true, null, "no", {}, [], [["x"]], {"name": "n", "z": {"k": [1]}}],
        "text": "name = \"t\"\n\n[model]\n  indented = 1\n",
        "block": "line one\nline two: x\n# not a comment\n",
        "tab": "a\tb\n",
        "unicode": "× é\n",
        "nvidia.com/gpu": 2,
        "odd key": {},
    });
    let text = to_yaml(&v);
    assert_eq!(read_yaml(&text), v, "{text}");
    assert!(
        text.starts_with("apiVersion: \"v1\"\nkind: \"K\"\n"),
        "{text}"
    );
    // YAML 1.1 would read a bare yes, on or 010 as a boolean or a number.
    assert!(text.contains("\n  \"yes\": \"yes\"\n"), "{text}");
    assert!(text.contains("\n  \"on\": \"010\"\n"), "{text}");
    assert!(
        text.contains("\n  - {}\n  - []\n  -\n    -\n      - \"x\"\n  - name: \"n\"\n    z:\n"),
        "{text}"
    );
    assert!(
        text.contains("block: |\n  line one\n  line two: x\n  # not a comment\n"),
        "{text}"
    );
    assert!(text.contains("\"odd key\": {}\n"), "{text}");
}

#[test]
fn the_manifest_is_a_header_then_each_document() {
    let p = plan_spec(JobKind::PyTorchJob, &opts()).unwrap();
    let text = manifest(&p);
    let (header, docs) = text.split_once("---\n").unwrap();
    assert_eq!(
        header,
        "# Kubeflow PyTorchJob mnist-ddp written by `ddp export`: spec /shared/specs/mnist.toml on 1 node × 4 replicas.\n\
         # Start it with `kubectl apply -f` on this file.\n"
    );
    let read: Vec<Value> = docs.split("---\n").map(read_yaml).collect();
    assert_eq!(read, documents(&p));
}
