//! The policy of `ddp export --kubeflow/--trainjob`: the options and what is exported (a run or a
//! spec) checked and turned into a [`JobPlan`], everything a manifest says. Pure: the caller
//! resolved the run, loaded the spec and made the paths absolute.

use std::path::{Component, Path, PathBuf};

use ddp_trainer::cli::ReplicaArgs;
use ddp_trainer::spec::Spec;

use crate::runs::run::Run;
use crate::{Error, Result};

/// The longest job name: the pods' host names (`NAME-worker-N`, `NAME-node-0-N`) are DNS labels
/// of at most 63 characters.
pub const MAX_NAME: usize = 50;
/// Where a spec's ConfigMap is mounted in the pods (a SPEC export).
pub const SPEC_DIR: &str = "/etc/ddp";
/// The spec's file name in its ConfigMap and in [`SPEC_DIR`].
pub const SPEC_FILE: &str = "spec.toml";

/// Which Kubeflow job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobKind {
    /// The training operator's `PyTorchJob` (kubeflow.org/v1).
    PyTorchJob,
    /// Kubeflow Trainer's `TrainJob` (trainer.kubeflow.org/v1alpha1).
    TrainJob,
}

impl JobKind {
    /// The job's `kind`.
    pub fn kind(self) -> &'static str {
        match self {
            JobKind::PyTorchJob => "PyTorchJob",
            JobKind::TrainJob => "TrainJob",
        }
    }
}

/// How the job is laid out and where it runs: the options of `ddp export --kubeflow/--trainjob`
/// (each `None`: its default, or required where [`plan`] says so).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JobOptions {
    /// Container image with `ddp-trainer` on its PATH (required).
    pub image: Option<String>,
    /// PersistentVolumeClaim mounted in every pod: the shared storage of the run folder (required).
    pub volume: Option<String>,
    /// Where the claim is mounted in the pods (default: the workspace folder).
    pub mount_path: Option<PathBuf>,
    /// The folder a spec's job writes (default: MOUNT_PATH/kubernetes/NAME).
    pub run_dir: Option<PathBuf>,
    /// Nodes (pods), default 1.
    pub nodes: Option<usize>,
    /// Replicas per node (default: the GPUs per node, else the replicas spread over the nodes).
    pub procs_per_node: Option<usize>,
    /// GPUs per node, as an `nvidia.com/gpu` limit on each pod (default: none, CPU pods).
    pub gpus_per_node: Option<usize>,
    /// Namespace of the job (default: kubectl's current one).
    pub namespace: Option<String>,
    /// Name of the job (default: EXPERIMENT-RUN_ID for a run, the spec's name for a spec).
    pub name: Option<String>,
}

/// What a job trains.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// A run of the workspace, with its frozen spec; its folder (absolute) is the job's.
    Run { run: &'a Run, spec: &'a Spec },
    /// A spec file (`path` absolute), shipped in a ConfigMap; nothing is created.
    Spec { path: &'a Path, spec: &'a Spec },
}

/// Everything a manifest says, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPlan {
    pub kind: JobKind,
    /// `metadata.name`: an RFC 1035 label of at most [`MAX_NAME`] characters.
    pub name: String,
    pub namespace: Option<String>,
    pub image: String,
    /// The PersistentVolumeClaim every pod mounts.
    pub claim: String,
    /// Where the claim is mounted (absolute).
    pub mount_path: String,
    pub nodes: usize,
    pub procs_per_node: usize,
    /// An `nvidia.com/gpu` limit per pod.
    pub gpus_per_node: Option<usize>,
    /// `restart.max_restarts`: the PyTorchJob's `backoffLimit`.
    pub max_restarts: u32,
    /// An elastic spec's least pods (`ddp.elastic.min_replicas` over `procs_per_node`, rounded
    /// up): the PyTorchJob's `elasticPolicy.minReplicas`.
    pub min_nodes: Option<usize>,
    /// The spec `ddp-trainer` reads in the pods.
    pub spec_path: String,
    /// The folder the job writes (`--out`), under `mount_path`.
    pub run_dir: String,
    /// A SPEC export's spec text (with `ddp.replicas` = the world), for its ConfigMap.
    pub spec_text: Option<String>,
    /// What is exported, for the manifest's header: `run ID (experiment E)`, `spec PATH`.
    pub source: String,
}

impl JobPlan {
    /// Replicas in the whole job.
    pub fn world_size(&self) -> usize {
        self.nodes * self.procs_per_node
    }

    /// The spec's ConfigMap (a SPEC export).
    pub fn config_map_name(&self) -> String {
        format!("{}-spec", self.name)
    }

    /// `ddp-trainer SPEC --out RUN_DIR --resume`: a restarted pod continues from the newest
    /// checkpoint (none yet: from the start).
    pub fn command(&self) -> Vec<String> {
        let replica = ReplicaArgs::new(&self.spec_path, &self.run_dir).resuming(true);
        std::iter::once("ddp-trainer".to_string())
            .chain(replica.to_strings())
            .collect()
    }
}

/// Checks `opts` for `target` and makes the plan. `workspace` (absolute) is the default mount
/// path. Every refusal is [`Error::Invalid`] naming the option, except a run that is still live
/// ([`Error::Refused`]).
pub fn plan(kind: JobKind, opts: &JobOptions, target: Target, workspace: &Path) -> Result<JobPlan> {
    let image = required(
        &opts.image,
        "--image IMAGE",
        "the container image with ddp-trainer",
    )?;
    if image.chars().any(char::is_whitespace) {
        return Err(invalid(format!("--image {image:?} has white space")));
    }
    let claim = required(
        &opts.volume,
        "--volume CLAIM",
        "the PersistentVolumeClaim the run folder is on, mounted in every pod",
    )?;
    if !is_dns_subdomain(&claim) {
        return Err(invalid(format!(
            "--volume {claim:?} is not a PersistentVolumeClaim name (lower-case letters, digits, \
             '-' and '.', at most 253)"
        )));
    }
    let namespace = opts.namespace.clone();
    if let Some(ns) = &namespace
        && !is_dns_label(ns, 63)
    {
        return Err(invalid(format!(
            "--namespace {ns:?} is not a namespace name (lower-case letters, digits and '-', at \
             most 63, starting and ending with a letter or digit)"
        )));
    }
    let mount = absolute(
        opts.mount_path.as_deref().unwrap_or(workspace),
        "--mount-path",
    )?;
    let (spec, replicas) = match target {
        Target::Run { run, spec } => (spec, run.record.replicas),
        Target::Spec { spec, .. } => (spec, spec.ddp.replicas),
    };
    let nodes = opts.nodes.unwrap_or(1);
    if nodes == 0 {
        return Err(invalid("--nodes must be at least 1"));
    }
    let gpus_per_node = match opts.gpus_per_node {
        Some(0) => {
            return Err(invalid(
                "--gpus-per-node must be at least 1 (leave it out for pods without GPUs)",
            ));
        }
        g => g,
    };
    let procs_per_node = match (opts.procs_per_node, gpus_per_node) {
        (Some(0), _) => return Err(invalid("--procs-per-node must be at least 1")),
        (Some(p), _) | (None, Some(p)) => p,
        (None, None) if replicas % nodes == 0 && replicas >= nodes => replicas / nodes,
        (None, None) => {
            return Err(invalid(format!(
                "ddp.replicas = {replicas} does not spread evenly over --nodes {nodes}; pass \
                 --procs-per-node"
            )));
        }
    };
    let name = match &opts.name {
        Some(n) if is_dns_label(n, MAX_NAME) && n.starts_with(|c: char| c.is_ascii_lowercase()) => {
            n.clone()
        }
        Some(n) => {
            return Err(invalid(format!(
                "--name {n:?} is not a job name: lower-case letters, digits and '-', starting \
                 with a letter, at most {MAX_NAME} characters"
            )));
        }
        None => default_name(target),
    };
    let world = nodes * procs_per_node;
    let (spec_path, run_dir, spec_text, source) = match target {
        Target::Run { run, .. } => {
            if opts.run_dir.is_some() {
                return Err(invalid(format!(
                    "--run-dir is for a spec: the job of run {} writes into the run's own folder",
                    run.record.id
                )));
            }
            if !run.record.status.is_terminal() {
                return Err(Error::Refused(format!(
                    "run {} is {}: stop it first (ddp stop {}), so that only the job writes its \
                     folder",
                    run.record.id, run.record.status, run.record.id
                )));
            }
            if world != replicas {
                return Err(invalid(format!(
                    "run {} has ddp.replicas = {replicas}, but --nodes {nodes} × \
                     --procs-per-node {procs_per_node} = {world}; a run continues with its own \
                     world (export its spec to train another)",
                    run.record.id
                )));
            }
            let dir = absolute(&run.dir, "the run folder")?;
            let spec_path = utf8(&run.spec_path(), "the run's spec")?;
            let source = format!(
                "run {} (experiment {})",
                run.record.id, run.record.experiment
            );
            (spec_path, dir, None, source)
        }
        Target::Spec { path, .. } => {
            let dir = match &opts.run_dir {
                Some(d) => absolute(d, "--run-dir")?,
                None => format!("{}/kubernetes/{name}", mount.trim_end_matches('/')),
            };
            let mut frozen = spec.clone();
            frozen.ddp.replicas = world;
            let spec_path = format!("{SPEC_DIR}/{SPEC_FILE}");
            let source = format!("spec {}", utf8(path, "the spec's path")?);
            (spec_path, dir, Some(frozen.to_toml()), source)
        }
    };
    let min_nodes = match spec.ddp.elastic {
        Some(e) if e.min_replicas > world => {
            return Err(invalid(format!(
                "ddp.elastic.min_replicas = {} is more than the job's {world} replicas \
                 (--nodes {nodes} × --procs-per-node {procs_per_node}); lower it or add nodes",
                e.min_replicas
            )));
        }
        Some(e) => Some(e.min_replicas.div_ceil(procs_per_node).max(1)),
        None => None,
    };
    if !Path::new(&run_dir).starts_with(&mount) {
        return Err(invalid(format!(
            "{run_dir} is not under --mount-path {mount}: the pods would not write it to the \
             claim (pass a --mount-path that holds it)"
        )));
    }
    Ok(JobPlan {
        kind,
        name,
        namespace,
        image,
        claim,
        mount_path: mount,
        nodes,
        procs_per_node,
        gpus_per_node,
        max_restarts: spec.restart.max_restarts,
        min_nodes,
        spec_path,
        run_dir,
        spec_text,
        source,
    })
}

/// `EXPERIMENT-RUN_ID` for a run (the experiment shortened to fit), the spec's name for a spec,
/// as RFC 1035 labels.
fn default_name(target: Target) -> String {
    match target {
        Target::Run { run, .. } => {
            let mut id = dns_chars(&run.record.id);
            id.truncate(MAX_NAME / 2);
            let room = MAX_NAME - id.len() - 1;
            format!(
                "{}-{}",
                dns_label(&run.record.experiment, room),
                id.trim_matches('-')
            )
        }
        Target::Spec { spec, .. } => dns_label(&spec.name, MAX_NAME),
    }
}

/// `text` as an RFC 1035 label of at most `max` characters: lower case, runs of other characters
/// as one `-`, starting with a letter (`ddp-` put first if need be).
pub fn dns_label(text: &str, max: usize) -> String {
    let mut label = dns_chars(text);
    if !label.starts_with(|c: char| c.is_ascii_lowercase()) {
        label.insert_str(0, "ddp-");
    }
    label.truncate(max);
    label.trim_end_matches('-').to_string()
}

/// `text` in lower case with each run of other characters than letters and digits as one `-`,
/// none first.
fn dns_chars(text: &str) -> String {
    let mut label = String::new();
    for c in text.chars().map(|c| c.to_ascii_lowercase()) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            label.push(c);
        } else if !label.is_empty() && !label.ends_with('-') {
            label.push('-');
        }
    }
    label
}

/// An RFC 1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most `max` characters.
fn is_dns_label(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// An RFC 1123 subdomain: labels joined by `.`, at most 253 characters.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(|label| is_dns_label(label, 63))
}

fn required(value: &Option<String>, option: &str, what: &str) -> Result<String> {
    match value.as_deref().map(str::trim) {
        Some(v) if !v.is_empty() => Ok(v.to_string()),
        _ => Err(invalid(format!(
            "{option} is required with --kubeflow and --trainjob: {what}"
        ))),
    }
}

/// An absolute, normalised path as text (Kubernetes paths cannot hold `:`).
fn absolute(path: &Path, what: &str) -> Result<String> {
    if !path.is_absolute() {
        return Err(invalid(format!(
            "{what} {} is not an absolute path",
            path.display()
        )));
    }
    if path
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(invalid(format!(
            "{what} {} holds `.` or `..`; give it without them",
            path.display()
        )));
    }
    let text = utf8(&path.components().collect::<PathBuf>(), what)?;
    if text.contains(':') {
        return Err(invalid(format!(
            "{what} {text} holds ':', which Kubernetes does not allow in a mount path"
        )));
    }
    Ok(text)
}

fn utf8(path: &Path, what: &str) -> Result<String> {
    path.to_str()
        .map(String::from)
        .ok_or_else(|| invalid(format!("{what} {} is not UTF-8", path.display())))
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::Invalid(msg.into())
}
