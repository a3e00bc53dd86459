//! The training operator's `PyTorchJob` (kubeflow.org/v1): a `Master` (node 0) and `Worker`s (the
//! other nodes), each pod one node whose `ddp-trainer` starts `nprocPerNode` replicas.

use serde_json::{Value, json};

use super::plan::JobPlan;
use super::pod::{metadata, resources, volume_mounts, volumes};

/// The API version of the job.
pub const API_VERSION: &str = "kubeflow.org/v1";
/// The container the operator sets the rendezvous variables in, by its name.
pub const CONTAINER: &str = "pytorch";
/// The port the operator gives the pods as `MASTER_PORT`, by its name.
pub const PORT_NAME: &str = "pytorchjob-port";
/// The operator's default for that port.
pub const PORT: u16 = 23456;

/// The job of `plan`.
pub fn pytorch_job(plan: &JobPlan) -> Value {
    let mut replicas = json!({"Master": replica_spec(plan, 1)});
    if plan.nodes > 1 {
        replicas["Worker"] = replica_spec(plan, plan.nodes - 1);
    }
    let mut job = json!({
        "apiVersion": API_VERSION,
        "kind": plan.kind.kind(),
        "metadata": metadata(&plan.name, plan),
        "spec": {
            "nprocPerNode": plan.procs_per_node.to_string(),
            "runPolicy": {"backoffLimit": plan.max_restarts},
            "pytorchReplicaSpecs": replicas,
        },
    });
    if let Some(min) = plan.min_nodes {
        job["spec"]["elasticPolicy"] = elastic_policy(plan, min);
    }
    job
}

/// An elastic spec's policy: the pods may fall to `min` (the operator sets `PET_NNODES` to
/// `MIN:MAX`); its restarts are the spec's. The group's store is node 0's launcher's, not a
/// c10d rendezvous, but the operator only knows that backend.
fn elastic_policy(plan: &JobPlan, min: usize) -> Value {
    json!({
        "rdzvBackend": "c10d",
        "minReplicas": min,
        "maxReplicas": plan.nodes,
        "maxRestarts": plan.max_restarts,
    })
}

/// `count` pods of the trainer's container, restarted when they fail.
fn replica_spec(plan: &JobPlan, count: usize) -> Value {
    let mut container = json!({
        "name": CONTAINER,
        "image": plan.image,
        "command": plan.command(),
        "ports": [{"name": PORT_NAME, "containerPort": PORT}],
        "volumeMounts": volume_mounts(plan),
    });
    if let Some(r) = resources(plan) {
        container["resources"] = r;
    }
    json!({
        "replicas": count,
        "restartPolicy": "OnFailure",
        "template": {
            "spec": {
                "containers": [container],
                "volumes": volumes(plan),
            },
        },
    })
}
