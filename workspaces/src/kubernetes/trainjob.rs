//! Kubeflow Trainer's `TrainJob` (trainer.kubeflow.org/v1alpha1) on the `torch-distributed`
//! runtime: `numNodes` pods of the runtime's `node` job, each starting `numProcPerNode` replicas;
//! the volumes go in through the job's runtime patch (the pod fields a TrainJob may change).

use serde_json::{Value, json};

use super::plan::JobPlan;
use super::pod::{metadata, resources, volume_mounts, volumes};

/// The API version of the job.
pub const API_VERSION: &str = "trainer.kubeflow.org/v1alpha1";
/// The ClusterTrainingRuntime the job runs on.
pub const RUNTIME: &str = "torch-distributed";
/// The runtime's replicated job and its trainer container.
pub const NODE: &str = "node";
/// Who owns the job's runtime patch.
pub const PATCH_MANAGER: &str = "ddp.export";

/// The job of `plan`.
pub fn train_job(plan: &JobPlan) -> Value {
    let mut trainer = json!({
        "image": plan.image,
        "command": plan.command(),
        "numNodes": plan.nodes,
        "numProcPerNode": plan.procs_per_node,
    });
    if let Some(r) = resources(plan) {
        trainer["resourcesPerNode"] = r;
    }
    let pod = json!({
        "volumes": volumes(plan),
        "containers": [{"name": NODE, "volumeMounts": volume_mounts(plan)}],
    });
    json!({
        "apiVersion": API_VERSION,
        "kind": plan.kind.kind(),
        "metadata": metadata(&plan.name, plan),
        "spec": {
            "runtimeRef": {
                "apiGroup": "trainer.kubeflow.org",
                "kind": "ClusterTrainingRuntime",
                "name": RUNTIME,
            },
            "trainer": trainer,
            "runtimePatches": [{
                "manager": PATCH_MANAGER,
                "trainingRuntimeSpec": {
                    "template": {
                        "spec": {
                            "replicatedJobs": [{
                                "name": NODE,
                                "template": {"spec": {"template": {"spec": pod}}},
                            }],
                        },
                    },
                },
            }],
        },
    })
}
