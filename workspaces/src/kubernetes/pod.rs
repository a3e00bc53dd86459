//! What both jobs put in their pods: the volumes (the claim, and a SPEC export's ConfigMap), where
//! the trainer's container mounts them, its GPU limit, and the ConfigMap itself.

use serde_json::{Value, json};

use super::plan::{JobPlan, SPEC_DIR, SPEC_FILE};

/// The volume of the claim in the pods.
pub const SHARED_VOLUME: &str = "ddp-shared";
/// The volume of a SPEC export's ConfigMap in the pods.
pub const SPEC_VOLUME: &str = "ddp-spec";

/// The pod's `volumes`.
pub fn volumes(plan: &JobPlan) -> Value {
    let mut volumes = vec![json!({
        "name": SHARED_VOLUME,
        "persistentVolumeClaim": {"claimName": plan.claim},
    })];
    if plan.spec_text.is_some() {
        volumes.push(json!({
            "name": SPEC_VOLUME,
            "configMap": {"name": plan.config_map_name()},
        }));
    }
    Value::Array(volumes)
}

/// The trainer container's `volumeMounts`.
pub fn volume_mounts(plan: &JobPlan) -> Value {
    let mut mounts = vec![json!({"name": SHARED_VOLUME, "mountPath": plan.mount_path})];
    if plan.spec_text.is_some() {
        mounts.push(json!({"name": SPEC_VOLUME, "mountPath": SPEC_DIR, "readOnly": true}));
    }
    Value::Array(mounts)
}

/// `{"limits": {"nvidia.com/gpu": G}}`, or `None` for pods without GPUs.
pub fn resources(plan: &JobPlan) -> Option<Value> {
    plan.gpus_per_node
        .map(|g| json!({"limits": {"nvidia.com/gpu": g}}))
}

/// `metadata`: the name, and the namespace when one was given.
pub fn metadata(name: &str, plan: &JobPlan) -> Value {
    let mut meta = json!({"name": name});
    if let Some(ns) = &plan.namespace {
        meta["namespace"] = json!(ns);
    }
    meta
}

/// The ConfigMap holding a SPEC export's spec, or `None` for a run.
pub fn config_map(plan: &JobPlan) -> Option<Value> {
    let text = plan.spec_text.as_ref()?;
    Some(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(&plan.config_map_name(), plan),
        "data": {SPEC_FILE: text},
    }))
}
