//! A plan's manifest: its documents (a SPEC export's ConfigMap, then the job) and their YAML.

use serde_json::Value;

use super::plan::{JobKind, JobPlan};
use super::pod::config_map;
use super::pytorchjob::pytorch_job;
use super::trainjob::train_job;
use super::yaml::to_yaml;

/// The objects to apply, in order: the spec's ConfigMap (a SPEC export), then the job.
pub fn documents(plan: &JobPlan) -> Vec<Value> {
    let job = match plan.kind {
        JobKind::PyTorchJob => pytorch_job(plan),
        JobKind::TrainJob => train_job(plan),
    };
    config_map(plan).into_iter().chain([job]).collect()
}

/// The manifest file: a comment saying what it trains and how to start it, then each document
/// after `---`.
pub fn manifest(plan: &JobPlan) -> String {
    let replicas = match plan.procs_per_node {
        1 => "1 replica".to_string(),
        n => format!("{n} replicas"),
    };
    let nodes = match plan.nodes {
        1 => "1 node".to_string(),
        n => format!("{n} nodes"),
    };
    let mut text = format!(
        "# Kubeflow {} {} written by `ddp export`: {} on {nodes} × {replicas}.\n\
         # Start it with `kubectl apply -f` on this file.\n",
        plan.kind.kind(),
        plan.name,
        plan.source,
    );
    for doc in documents(plan) {
        text.push_str("---\n");
        text.push_str(&to_yaml(&doc));
    }
    text
}
