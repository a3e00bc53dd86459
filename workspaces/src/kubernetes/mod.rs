//! Kubernetes jobs that train a run or a spec: `ddp export RUN|SPEC --kubeflow` writes Kubeflow's
//! `PyTorchJob` (kubeflow.org/v1), `--trainjob` Kubeflow Trainer's `TrainJob`
//! (trainer.kubeflow.org/v1alpha1, runtime `torch-distributed`). One pod per node runs
//! `ddp-trainer SPEC --out RUN_DIR --resume`, which starts the node's replicas itself from the
//! variables the operators set; the run folder is on a PersistentVolumeClaim every pod mounts.
//! See `docs/kubernetes.md`.
//!
//! Layout:
//! - `plan`: the policy (pure): the options checked for a run or a spec ([`Target`]) and turned
//!   into a [`JobPlan`]: name, image, claim and mount path, nodes × replicas per node, GPUs,
//!   restarts, the trainer's spec and run folder in the pods.
//! - `pod`: what both jobs put in their pods: volumes, mounts, the GPU limit, metadata, and a
//!   SPEC export's ConfigMap.
//! - `pytorchjob`, `trainjob`: each job as a JSON value, built from a plan.
//! - `yaml`: a JSON value as block-style YAML, every string quoted.
//! - `render`: a plan's documents and the manifest file (a header comment, then each document).
//! - `export`: the executor: finds what is exported (a spec file or a run of the workspace),
//!   reads its spec, plans and renders ([`export_job`]).

mod export;
mod plan;
mod pod;
mod pytorchjob;
mod render;
mod trainjob;
mod yaml;

pub use export::{Manifest, export_job};
pub use plan::{
    JobKind, JobOptions, JobPlan, MAX_NAME, SPEC_DIR, SPEC_FILE, Target, dns_label, plan,
};
pub use pod::{SHARED_VOLUME, SPEC_VOLUME};
pub use render::{documents, manifest};
pub use yaml::to_yaml;

#[cfg(test)]
mod tests;
