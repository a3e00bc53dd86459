//! The Kubernetes manifests of `ddp export --kubeflow/--trainjob`: golden files
//! (`tests/kubernetes/*.yaml`), read back and validated against the Kubeflow operators' published
//! CRD schemas (`tests/kubernetes/schemas/`, see the README there), as strictly as
//! `kubectl apply` (unknown fields refused).
//!
//! After a deliberate change of the manifests, regenerate the golden files with
//! `DDP_UPDATE_GOLDEN=1 cargo test -p ddp-workspaces --test kubernetes` and review their diff.

use std::path::{Path, PathBuf};

use ddp_workspaces::kubernetes::JobOptions;
use ddp_workspaces::kubernetes::{JobKind, JobPlan, Target, documents, manifest, plan};
use ddp_workspaces::spec::Spec;
use ddp_workspaces::{RunRecord, RunStatus};
use serde_json::{Value, json};

const WS: &str = "/shared/ddp-workspace";
const SPEC_PATH: &str = "/shared/specs/mnist.toml";

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kubernetes")
}

/// The spec every case exports: the MNIST CNN, 4 replicas, 3 restarts.
fn spec() -> Spec {
    Spec::parse(
        "name = \"mnist\"\n[model]\nname = \"mnist-cnn\"\n[data]\nname = \"mnist\"\n\
         path = \"/shared/data/mnist\"\n[train]\nepochs = 3\n[ddp]\nreplicas = 4\n\
         [restart]\nmax_restarts = 3\n",
        Path::new(SPEC_PATH),
        &[],
    )
    .unwrap()
}

fn options(nodes: usize, gpus: Option<usize>, procs: Option<usize>) -> JobOptions {
    JobOptions {
        image: Some("registry.example.com/ddp-trainer:0.1".into()),
        volume: Some("ddp-shared".into()),
        nodes: Some(nodes),
        gpus_per_node: gpus,
        procs_per_node: procs,
        namespace: Some("ml".into()),
        ..JobOptions::default()
    }
}

/// Each golden file and its plan: a run (2 nodes × 2 GPUs) and a spec of each kind.
fn cases() -> Vec<(&'static str, JobPlan)> {
    let spec = spec();
    let run = RunRecord::sample()
        .status(RunStatus::Stopped)
        .replicas(4)
        .in_workspace(WS);
    let of_run = |kind| {
        let target = Target::Run {
            run: &run,
            spec: &spec,
        };
        plan(kind, &options(2, Some(2), None), target, Path::new(WS)).unwrap()
    };
    let of_spec = |kind, opts: JobOptions| {
        let target = Target::Spec {
            path: Path::new(SPEC_PATH),
            spec: &spec,
        };
        plan(kind, &opts, target, Path::new(WS)).unwrap()
    };
    vec![
        ("pytorchjob-run.yaml", of_run(JobKind::PyTorchJob)),
        (
            "pytorchjob-spec.yaml",
            of_spec(JobKind::PyTorchJob, options(1, None, None)),
        ),
        ("trainjob-run.yaml", of_run(JobKind::TrainJob)),
        (
            "trainjob-spec.yaml",
            of_spec(JobKind::TrainJob, options(2, None, Some(1))),
        ),
    ]
}

/// The documents of a manifest file (each after a `---` line), each read from its YAML.
fn read_manifest(text: &str) -> Vec<Value> {
    let mut docs: Vec<String> = Vec::new();
    for line in text.split_inclusive('\n') {
        match docs.last_mut() {
            _ if line == "---\n" => docs.push(String::new()),
            Some(doc) => doc.push_str(line),
            None => assert!(line.starts_with('#'), "{line:?} before the first `---`"),
        }
    }
    docs.iter()
        .map(|doc| serde_norway::from_str(doc).unwrap_or_else(|e| panic!("{e}\n{doc}")))
        .collect()
}

#[test]
fn manifests_match_their_golden_files() {
    let update = std::env::var_os("DDP_UPDATE_GOLDEN").is_some();
    for (file, plan) in cases() {
        let path = dir().join(file);
        let text = manifest(&plan);
        if update {
            std::fs::write(&path, &text).unwrap();
        }
        let golden =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            text == golden,
            "{file} differs from the manifest written now; if the change is meant, regenerate \
             with DDP_UPDATE_GOLDEN=1 cargo test -p ddp-workspaces --test kubernetes\n\
             --- now:\n{text}"
        );
        assert_eq!(read_manifest(&golden), documents(&plan), "{file}");
    }
}

/// A CRD's schema (`schemas/FILE`) made as strict as the API server with kubectl's default
/// strict field validation: an object that lists its properties refuses others, unless it keeps
/// unknown fields (`x-kubernetes-preserve-unknown-fields`) or says what others may be.
fn strict_schema(file: &str) -> Value {
    let path = dir().join("schemas").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut schema: Value = serde_json::from_str(&text).unwrap();
    close(&mut schema);
    schema
}

fn close(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            let open = map.contains_key("additionalProperties")
                || map.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
            if map.contains_key("properties") && !open {
                map.insert("additionalProperties".into(), json!(false));
            }
            for (key, value) in map.iter_mut() {
                if key == "properties" {
                    value
                        .as_object_mut()
                        .into_iter()
                        .flatten()
                        .for_each(|(_, s)| close(s));
                } else if key != "default" && key != "example" && key != "enum" {
                    close(value);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(close),
        _ => {}
    }
}

/// The errors of `doc` against `schema` (empty when valid), one line each.
fn errors(schema: &Value, doc: &Value) -> Vec<String> {
    let validator = jsonschema::draft4::new(schema).expect("a valid schema");
    validator
        .iter_errors(doc)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

fn schema_of(kind: &str) -> Value {
    match kind {
        "PyTorchJob" => strict_schema("pytorchjob-v1.json"),
        "TrainJob" => strict_schema("trainjob-v1alpha1.json"),
        other => panic!("no schema for {other}"),
    }
}

/// The CEL rules of the TrainJob CRD on `metadata.name`, which a JSON Schema validator does not
/// run: an RFC 1035 label of at most 63 characters.
fn check_trainjob_name(doc: &Value) {
    let name = doc["metadata"]["name"].as_str().unwrap();
    assert!(name.len() <= 63, "{name}");
    assert!(name.starts_with(|c: char| c.is_ascii_lowercase()), "{name}");
    assert!(!name.ends_with('-'), "{name}");
    assert!(
        name.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
        "{name}"
    );
}

#[test]
fn golden_manifests_are_valid_against_the_operators_crds() {
    for (file, _) in cases() {
        let text = std::fs::read_to_string(dir().join(file)).unwrap();
        let docs = read_manifest(&text);
        let job = docs.last().unwrap();
        let kind = job["kind"].as_str().unwrap();
        let bad = errors(&schema_of(kind), job);
        assert!(
            bad.is_empty(),
            "{file} is not a valid {kind}:\n{}",
            bad.join("\n")
        );
        if kind == "TrainJob" {
            check_trainjob_name(job);
        }
        // A spec's ConfigMap comes first, and holds the spec the job reads.
        if docs.len() == 2 {
            let cm = &docs[0];
            assert_eq!(
                (&cm["apiVersion"], &cm["kind"]),
                (&json!("v1"), &json!("ConfigMap"))
            );
            let text = cm["data"]["spec.toml"].as_str().unwrap();
            Spec::parse(text, Path::new("spec.toml"), &[]).unwrap();
        }
    }
}

/// `base` with `f` after it.
fn field<'a>(base: &[&'a str], f: &'a str) -> Vec<&'a str> {
    [base, &[f]].concat()
}

/// Takes the value at `path` (keys and indexes) out of `doc` and puts `put` (if any) under
/// `rename` beside it.
fn edit(doc: &Value, path: &[&str], rename: Option<&str>, put: Option<Value>) -> Value {
    let mut doc = doc.clone();
    let (last, parents) = path.split_last().unwrap();
    let mut at = &mut doc;
    for p in parents {
        at = match p.parse::<usize>() {
            Ok(i) => &mut at[i],
            Err(_) => &mut at[*p],
        };
    }
    let taken = at
        .as_object_mut()
        .unwrap()
        .remove(*last)
        .expect("the field");
    if let Some(new) = rename {
        at[new] = put.unwrap_or(taken);
    } else if let Some(v) = put {
        at[*last] = v;
    }
    doc
}

#[test]
fn the_schemas_catch_a_missing_misspelled_or_mistyped_field() {
    let plans = cases();
    let job = |file: &str| {
        let (_, p) = plans.iter().find(|(f, _)| *f == file).unwrap();
        documents(p).pop().unwrap()
    };
    let pytorch = job("pytorchjob-run.yaml");
    let master = ["spec", "pytorchReplicaSpecs", "Master"];
    let container = [&master[..], &["template", "spec", "containers", "0"]].concat();
    let train = job("trainjob-spec.yaml");
    let pod = [
        "spec",
        "runtimePatches",
        "0",
        "trainingRuntimeSpec",
        "template",
        "spec",
        "replicatedJobs",
        "0",
        "template",
        "spec",
        "template",
        "spec",
    ];
    let cases: Vec<(&str, Value)> = vec![
        // missing required fields
        (
            "no pytorchReplicaSpecs",
            edit(&pytorch, &["spec", "pytorchReplicaSpecs"], None, None),
        ),
        (
            "no container name",
            edit(&pytorch, &field(&container, "name"), None, None),
        ),
        (
            "no containerPort",
            edit(
                &pytorch,
                &[&container[..], &["ports", "0", "containerPort"]].concat(),
                None,
                None,
            ),
        ),
        (
            "no runtimeRef",
            edit(&train, &["spec", "runtimeRef"], None, None),
        ),
        (
            "no runtimeRef name",
            edit(&train, &["spec", "runtimeRef", "name"], None, None),
        ),
        (
            "no patch manager",
            edit(
                &train,
                &["spec", "runtimePatches", "0", "manager"],
                None,
                None,
            ),
        ),
        // misspelled fields
        (
            "restartPolcy",
            edit(
                &pytorch,
                &field(&master, "restartPolicy"),
                Some("restartPolcy"),
                None,
            ),
        ),
        (
            "nprocsPerNode",
            edit(
                &pytorch,
                &["spec", "nprocPerNode"],
                Some("nprocsPerNode"),
                None,
            ),
        ),
        (
            "backofLimit",
            edit(
                &pytorch,
                &["spec", "runPolicy", "backoffLimit"],
                Some("backofLimit"),
                None,
            ),
        ),
        (
            "volumeMount",
            edit(
                &pytorch,
                &field(&container, "volumeMounts"),
                Some("volumeMount"),
                None,
            ),
        ),
        (
            "numNode",
            edit(
                &train,
                &["spec", "trainer", "numNodes"],
                Some("numNode"),
                None,
            ),
        ),
        (
            "runtimePatch",
            edit(
                &train,
                &["spec", "runtimePatches"],
                Some("runtimePatch"),
                None,
            ),
        ),
        (
            "volume",
            edit(&train, &field(&pod, "volumes"), Some("volume"), None),
        ),
        // mistyped fields
        (
            "nprocPerNode a number",
            edit(&pytorch, &["spec", "nprocPerNode"], None, Some(json!(2))),
        ),
        (
            "replicas a string",
            edit(
                &pytorch,
                &field(&master, "replicas"),
                None,
                Some(json!("1")),
            ),
        ),
        (
            "numProcPerNode a string",
            edit(
                &train,
                &["spec", "trainer", "numProcPerNode"],
                None,
                Some(json!("auto")),
            ),
        ),
    ];
    for (what, doc) in cases {
        let kind = doc["kind"].as_str().unwrap();
        assert!(
            !errors(&schema_of(kind), &doc).is_empty(),
            "{kind} with {what} passed the schema"
        );
    }
    // The unchanged jobs pass.
    assert_eq!(
        errors(&schema_of("PyTorchJob"), &pytorch),
        Vec::<String>::new()
    );
    assert_eq!(errors(&schema_of("TrainJob"), &train), Vec::<String>::new());
}
