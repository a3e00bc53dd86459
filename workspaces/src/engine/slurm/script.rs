//! `job.sbatch`: the batch script a run on Slurm is submitted with, written into the run folder
//! so that it can be read, and submitted again by hand (`sbatch job.sbatch`).
//!
//! The script checks that the run folder is visible from the node, runs one `srun` task per
//! replica (`--kill-on-bad-exit=1`: one failed replica ends the step), each writing
//! `logs/rank-R.log` (`--output` with `%t`, appended across requeues), passes `--resume` when a
//! checkpoint exists, and forwards the warning Slurm sends before the time limit or a
//! preemption (`--signal=B:USR2@N`: to the batch shell, which hands it to the step; USR1 is
//! NCCL's) so that the replicas checkpoint and stop. A job that did not complete and was not
//! stopped on purpose (`slurm/stop` in the run folder, written by `ddp stop`) requeues itself
//! with `scontrol requeue` while its requeue count is under `restart.max_restarts`. It writes
//! `slurm/exit` (`CODE ATTEMPT`) as it ends, for when Slurm has forgotten the job.
//!
//! An elastic run (`ddp.elastic`) is the exception to "one failed replica ends the step": the
//! job and the step are `--no-kill` (a node's failure leaves the others running) without
//! `--kill-on-bad-exit`, the group's store is served by the batch step on the first node
//! (`--serve-store`, `DDP_STORE_ELSEWHERE=1`) where no replica's loss takes it down, and a step
//! that ends non-zero after the group wrote its final model is the run's completion (the
//! failed replicas were left behind); otherwise, below `ddp.elastic.min_replicas`, the requeue
//! rule applies.

use std::path::PathBuf;

/// Everything the script says, resolved: paths absolute, counts checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPlan {
    /// The run folder (on storage every node sees).
    pub run_dir: PathBuf,
    /// `sbatch --job-name`.
    pub job_name: String,
    /// The command line of one replica, without `--resume` (the script adds it when a checkpoint
    /// exists): `EXE __replica SPEC --out RUN_DIR` for the built-in trainer, `TRAINER SPEC --out
    /// RUN_DIR` for a run's own (written by `ddp_trainer::cli::ReplicaArgs`).
    pub replica: Vec<String>,
    pub nodes: usize,
    pub tasks_per_node: usize,
    /// GPUs per node (`--gpus-per-node`), for runs on GPUs.
    pub gpus_per_node: Option<usize>,
    pub partition: Option<String>,
    pub time: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
    pub constraint: Option<String>,
    /// Passed through as `#SBATCH` lines.
    pub sbatch_args: Vec<String>,
    /// Seconds before the end that the job is warned.
    pub warn_s: u32,
    /// Requeues allowed (`restart.max_restarts`).
    pub max_restarts: u32,
    /// An elastic run (`ddp.elastic`): the group goes on without failed replicas.
    pub elastic: bool,
}

/// The script's name in the run folder.
pub const SCRIPT: &str = "job.sbatch";

/// `s` quoted for the shell (single quotes; a quote inside becomes `'\''`).
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,@%+".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

impl JobPlan {
    /// The batch script.
    pub fn script(&self) -> String {
        let run = self.run_dir.display().to_string();
        let q = shell_quote;
        let mut s = String::new();
        let mut opt = |line: String| {
            s.push_str("#SBATCH ");
            s.push_str(&line);
            s.push('\n');
        };
        opt(format!("--job-name={}", q(&self.job_name)));
        opt(format!("--nodes={}", self.nodes));
        opt(format!("--ntasks-per-node={}", self.tasks_per_node));
        if let Some(g) = self.gpus_per_node {
            opt(format!("--gpus-per-node={g}"));
        }
        for (name, value) in [
            ("partition", &self.partition),
            ("time", &self.time),
            ("account", &self.account),
            ("qos", &self.qos),
            ("constraint", &self.constraint),
        ] {
            if let Some(v) = value {
                opt(format!("--{name}={}", q(v)));
            }
        }
        opt(format!("--chdir={}", q(&run)));
        opt(format!(
            "--output={}",
            q(&format!("{run}/logs/slurm-%j.out"))
        ));
        opt("--open-mode=append".into());
        opt("--requeue".into());
        opt(format!("--signal=B:USR2@{}", self.warn_s));
        if self.elastic {
            opt("--no-kill".into());
        }
        for a in &self.sbatch_args {
            opt(a.clone());
        }
        let options = s;
        let replica: Vec<String> = self.replica.iter().map(|a| q(a)).collect();
        let tasks = self.nodes * self.tasks_per_node;
        let (store, kill, store_end) = if self.elastic {
            (
                format!(
                    r#"# An elastic run: its store is served here, on the first node, for the whole job.
export DDP_STORE_ELSEWHERE=1
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)     {replica} --serve-store {tasks} >> "$run/logs/store.log" 2>&1 &
store=$!
touch "$run/slurm/attempt"
"#,
                    replica = replica.join(" "),
                ),
                "--no-kill",
                r#"kill -TERM $store 2>/dev/null
wait $store 2>/dev/null
if [ "$code" -ne 0 ] && [ "$run/model.safetensors" -nt "$run/slurm/attempt" ]; then
    echo "ddp: the elastic group completed without the replicas that failed (exit code $code)"
    code=0
fi
"#,
            )
        } else {
            (String::new(), "--kill-on-bad-exit=1", "")
        };
        format!(
            r#"#!/bin/bash
# A ddp run on Slurm: written by `ddp run --on slurm` into the run folder, and submitted with
# `sbatch --parsable job.sbatch`. Submitting it again by hand continues the run.
{options}
run={run_q}
max_restarts={max_restarts}
attempt=${{SLURM_RESTART_COUNT:-0}}
if [ ! -f "$run/run.json" ]; then
    echo "ddp: the run folder $run is not visible on $(hostname): a run on Slurm needs its workspace on storage every node sees (docs/slurm.md)" >&2
    exit 2
fi
mkdir -p "$run/slurm" "$run/logs"
# One rendezvous port per job, so that jobs sharing a node do not meet: derived from the job id,
# passing over ports that something on this node (rank 0's) already listens on, such as a job of
# another cluster or a requeued job's leftover.
port=$((20000 + ${{SLURM_JOB_ID:-0}} % 20000))
for _ in $(seq 200); do
    taken=0
    for host in 127.0.0.1 "${{SLURMD_NODENAME:-localhost}}"; do
        if timeout 1 bash -c "exec 3<>/dev/tcp/$host/$port" 2>/dev/null; then
            taken=1
            break
        fi
    done
    [ "$taken" = 0 ] && break
    port=$((20000 + (port - 19999) % 20000))
done
export MASTER_PORT=$port
resume=()
if compgen -G "$run/checkpoints/*.safetensors" >/dev/null; then
    resume=(--resume)
fi
{store}echo "ddp: job ${{SLURM_JOB_ID:-?}} attempt $((attempt + 1)) on ${{SLURM_JOB_NODELIST:-?}}: {tasks} replicas, rendezvous port $MASTER_PORT${{resume:+, resuming}}"
srun {kill} --ntasks={tasks} --ntasks-per-node={per_node} \
    --output="$run/logs/rank-%t.log" --error="$run/logs/rank-%t.log" --open-mode=append \
    {replica} "${{resume[@]}}" &
step=$!
# The warning before the time limit or a preemption, and scancel's TERM: the replicas finish
# their step, rank 0 checkpoints, and they stop.
trap 'echo "ddp: warned by Slurm (time limit or preemption): checkpointing"; kill -USR2 $step 2>/dev/null' USR2
trap 'echo "ddp: terminated: checkpointing"; kill -TERM $step 2>/dev/null' TERM
code=0
while :; do
    wait $step
    code=$?
    kill -0 $step 2>/dev/null || break
done
{store_end}echo "$code $attempt" > "$run/slurm/exit"
if [ "$code" -ne 0 ] && [ ! -e "$run/slurm/stop" ]; then
    if [ "$attempt" -lt "$max_restarts" ]; then
        echo "ddp: replicas ended with exit code $code: requeueing (restart $((attempt + 1)) of $max_restarts)"
        scontrol requeue "$SLURM_JOB_ID" && exit 0
        echo "ddp: scontrol requeue failed: the run ends here" >&2
    else
        echo "ddp: replicas ended with exit code $code; no restart left (restart.max_restarts = $max_restarts)"
    fi
fi
exit $code
"#,
            run_q = q(&run),
            max_restarts = self.max_restarts,
            per_node = self.tasks_per_node,
            replica = replica.join(" "),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> JobPlan {
        JobPlan {
            run_dir: "/shared/ws/experiments/mnist/runs/r1".into(),
            job_name: "ddp-mnist-r1".into(),
            replica: [
                "/opt/ddp/bin/ddp",
                "__replica",
                "/shared/ws/experiments/mnist/runs/r1/spec.toml",
                "--out",
                "/shared/ws/experiments/mnist/runs/r1",
            ]
            .map(String::from)
            .to_vec(),
            nodes: 2,
            tasks_per_node: 1,
            gpus_per_node: None,
            partition: Some("debug".into()),
            time: Some("1:00:00".into()),
            account: None,
            qos: None,
            constraint: None,
            sbatch_args: vec!["--mem=4G".into()],
            warn_s: 90,
            max_restarts: 3,
            elastic: false,
        }
    }

    #[test]
    fn an_elastic_script_keeps_the_step_through_a_failure_and_serves_the_store() {
        let s = JobPlan {
            elastic: true,
            ..plan()
        }
        .script();
        for line in [
            "#SBATCH --no-kill\n",
            "srun --no-kill --ntasks=2 --ntasks-per-node=1 \\\n",
            "export DDP_STORE_ELSEWHERE=1\n",
            "/opt/ddp/bin/ddp __replica /shared/ws/experiments/mnist/runs/r1/spec.toml --out \
             /shared/ws/experiments/mnist/runs/r1 --serve-store 2 >> \"$run/logs/store.log\" 2>&1 &\n",
            "[ \"$run/model.safetensors\" -nt \"$run/slurm/attempt\" ]",
        ] {
            assert!(s.contains(line), "{line:?} missing from\n{s}");
        }
        assert!(!s.contains("--kill-on-bad-exit"));
        assert!(!plan().script().contains("--no-kill"));
        assert!(!plan().script().contains("--serve-store"));
    }

    #[test]
    fn the_script_asks_slurm_for_what_the_issue_lists() {
        let s = plan().script();
        for line in [
            "#SBATCH --job-name=ddp-mnist-r1\n",
            "#SBATCH --nodes=2\n",
            "#SBATCH --ntasks-per-node=1\n",
            "#SBATCH --partition=debug\n",
            "#SBATCH --time=1:00:00\n",
            "#SBATCH --chdir=/shared/ws/experiments/mnist/runs/r1\n",
            "#SBATCH --output=/shared/ws/experiments/mnist/runs/r1/logs/slurm-%j.out\n",
            "#SBATCH --open-mode=append\n",
            "#SBATCH --requeue\n",
            "#SBATCH --signal=B:USR2@90\n",
            "#SBATCH --mem=4G\n",
            "srun --kill-on-bad-exit=1 --ntasks=2 --ntasks-per-node=1 \\\n",
            "--output=\"$run/logs/rank-%t.log\"",
            "/opt/ddp/bin/ddp __replica /shared/ws/experiments/mnist/runs/r1/spec.toml --out \
             /shared/ws/experiments/mnist/runs/r1 \"${resume[@]}\" &\n",
            "max_restarts=3\n",
        ] {
            assert!(s.contains(line), "{line:?} missing from\n{s}");
        }
        assert!(!s.contains("--gpus-per-node"));
        assert!(!s.contains("--account"));
        // #SBATCH lines must come before the first command.
        let first_command = s.find("\nrun=").unwrap();
        assert!(s.rfind("#SBATCH").unwrap() < first_command);
    }

    #[test]
    fn gpus_and_odd_paths_are_written_safely() {
        let mut p = plan();
        p.gpus_per_node = Some(4);
        p.tasks_per_node = 4;
        p.run_dir = "/shared/my runs/it's".into();
        let s = p.script();
        assert!(s.contains("#SBATCH --gpus-per-node=4\n"));
        assert!(s.contains("--ntasks=8 --ntasks-per-node=4"));
        assert!(s.contains(r"run='/shared/my runs/it'\''s'"), "{s}");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("x=1,y"), "x=1,y");
    }
}
