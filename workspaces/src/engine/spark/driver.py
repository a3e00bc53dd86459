"""The Spark driver of a ddp run (written into the run folder by `ddp run --on spark`).

    spark-submit ... RUN/spark/driver.py RUN/spark/job.json

One barrier stage of `tasks` tasks, all scheduled together or none, as Spark's TorchDistributor
runs PyTorch. The driver first waits (at most `wait_s`) until the cluster offers a slot for every
task at once. Each task takes its rank from the barrier context, task 0's host and a free port of
it (agreed through the barrier) become the rendezvous, and it runs the replica's command with
torchrun's variables, its output appended to RUN/logs/rank-R.log; with several replicas per task
(GPUs per task), the trainer's own launcher with torchrun's node variables (PET_NNODES,
PET_NODE_RANK, PET_NPROC_PER_NODE) on the task's GPUs (CUDA_VISIBLE_DEVICES from the task's
resources), which writes each replica's log itself.

A replica that fails in a way a restart can mend (killed, lost a peer) fails its task, and Spark
runs the whole stage again (`spark.stage.maxConsecutiveAttempts`): that attempt's replicas resume
from the newest checkpoint. A replica that fails on bad input is not retried: its task reports it
and the stage ends. When RUN/spark/stop appears (`ddp stop`), every task asks its replica to stop
(SIGTERM: it checkpoints after the step under way and exits) and the stage ends.

What the workspace follows: RUN/spark/state.json (the application, its web UI, the phase:
`waiting` with why, `running`, the stage's attempt) and RUN/spark/failure.json (the rank, exit
code and attempt of the replica that failed, or `refused`: why the cluster could not run it).
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

# Exit codes of a replica that a restart can mend (ddp's restart policy): killed by SIGKILL or
# SIGTERM, or asking to be restarted (a lost peer).
RESTARTABLE = {137, 143, 75}
# torchrun's variables a task sets itself (none is inherited from the executor).
WORLD_VARIABLES = {
    "RANK", "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE", "PET_NNODES",
    "PET_NODE_RANK", "PET_NPROC_PER_NODE", "PET_MASTER_ADDR", "PET_MASTER_PORT",
}
# How long a replica asked to stop has to checkpoint and exit before it is killed.
STOP_GRACE_S = 60


def write_json(path, value):
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(value, f)
    os.replace(tmp, path)


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def host_address():
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def die_with_parent():
    """The replica gets SIGTERM (a stop: it checkpoints) when its task's worker dies."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def invisible(job):
    """Why this executor cannot run the replica where the driver put it, or None: the run folder
    and the program must be at the same paths on every executor (shared storage)."""
    if not os.path.isfile(os.path.join(job["out"], "spark", "job.json")):
        return (
            f"the run folder {job['out']} is not there: put the workspace on storage every "
            "executor mounts at the same path (NFS, a Databricks volume), as for Slurm"
        )
    program = job["command"][0]
    if not os.access(program, os.X_OK):
        return (
            f"the program {program} is not there or not executable: install ddp (or put the "
            "trainer) at the same path on every executor"
        )
    return None


def task_slots(sc):
    """Tasks the cluster can run at once now (what Spark's own barrier check counts)."""
    jsc = sc._jsc.sc()
    try:
        profile = jsc.resourceProfileManager().defaultResourceProfile()
        return int(jsc.maxNumConcurrentTasks(profile))
    except Exception:
        return int(sc.defaultParallelism)


def wait_for_slots(sc, job, state):
    """Waits until the cluster offers a slot for every task; False when stopped meanwhile. A
    wait past `wait_s` writes why to the failure file and exits."""
    tasks, started = job["tasks"], time.monotonic()
    last = None
    while True:
        if os.path.exists(job["stop"]):
            return False
        slots = task_slots(sc)
        if slots >= tasks:
            return True
        why = (
            f"waiting for executors: the barrier stage needs {tasks} task slots at once, "
            f"the cluster offers {slots} now"
        )
        if why != last:
            write_json(job["state"], dict(state, phase="waiting", waiting=why))
            last = why
        waited = time.monotonic() - started
        if waited > job["wait_s"]:
            refused = (
                f"waited {job['wait_s']} s (spark.wait_s) for {tasks} task slots at once; "
                f"the cluster at {sc.master} offers {slots}: ask for fewer tasks (--tasks) "
                "or add executors"
            )
            write_json(job["failure"], {"refused": refused})
            sc.stop()
            sys.exit(3)
        time.sleep(0.25)


def main():
    job = json.load(open(sys.argv[1]))
    from pyspark import BarrierTaskContext, SparkConf, SparkContext

    sc = SparkContext(conf=SparkConf().setAppName(job["name"]))
    state = {"app_id": sc.applicationId, "ui": sc.uiWebUrl, "attempt": 0}
    if not wait_for_slots(sc, job, state):
        sc.stop()
        return
    write_json(job["state"], dict(state, phase="running"))
    tasks, per_task = job["tasks"], job["replicas_per_task"]
    attempts_file = os.path.join(os.path.dirname(job["state"]), "attempts.json")
    if os.path.exists(attempts_file):
        os.remove(attempts_file)

    def task(_):
        ctx = BarrierTaskContext.get()
        rank = ctx.partitionId()
        port, attempt = 0, 0
        if rank == 0:
            s = socket.socket()
            s.bind(("", 0))
            port = s.getsockname()[1]
            s.close()
            # Task 0 counts the stage's attempts (PySpark's barrier context does not say).
            attempt = read_json(attempts_file) or 0
            write_json(attempts_file, attempt + 1)
        unseen = invisible(job)
        if unseen:
            unseen = f"on executor {socket.gethostname()} (task {rank}): {unseen}"
        hello = json.dumps({"host": host_address(), "port": port, "attempt": attempt, "unseen": unseen})
        peers = [json.loads(p) for p in ctx.allGather(hello)]
        attempt = peers[0]["attempt"]
        # No replica starts unless every task can run its own (the others would wait for it).
        # (The driver writes it down: this executor may not see the run folder.)
        refused = next((p["unseen"] for p in peers if p["unseen"]), None)
        if refused:
            yield (rank, (2, refused))
            return
        env = {k: v for k, v in os.environ.items() if k not in WORLD_VARIABLES}
        env.update(job["env"])
        env.update(
            MASTER_ADDR=peers[0]["host"],
            MASTER_PORT=str(peers[0]["port"]),
            WORLD_SIZE=str(tasks * per_task),
            TORCHELASTIC_RESTART_COUNT=str(attempt),
        )
        if per_task == 1:
            # One replica: torchrun's variables of one rank.
            env.update(RANK=str(rank), GROUP_RANK=str(rank), LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
        else:
            # A node of `per_task` replicas, started by the trainer's launcher on this task's
            # GPUs (torchrun's node-level variables, as a Kubeflow pod's).
            env.update(
                PET_NNODES=str(tasks), PET_NODE_RANK=str(rank), PET_NPROC_PER_NODE=str(per_task), DDP_NODE_VIA="spark"
            )
        gpus = ctx.resources().get("gpu")
        if gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus.addresses)
        command = list(job["command"])
        if (job["resume"] or attempt > 0) and "--resume" not in command:
            command.append("--resume")
        if rank == 0:
            write_json(job["state"], dict(state, phase="running", attempt=attempt))
        # A node's launcher writes its replicas' logs itself; the task's own output beside them.
        log_name = f"rank-{rank}.log" if per_task == 1 else f"spark-task-{rank}.log"
        log_path = os.path.join(job["logs"], log_name)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=job["cwd"], preexec_fn=die_with_parent
            )
            asked = None
            while True:
                try:
                    code = proc.wait(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if asked is None and os.path.exists(job["stop"]):
                    proc.send_signal(signal.SIGTERM)
                    asked = time.monotonic()
                elif asked is not None and time.monotonic() - asked > STOP_GRACE_S:
                    proc.kill()
        if code < 0:
            code = 128 - code
        # A stop that reached this replica through its peers (it stops after the same step as
        # they do) may end it before this task saw the stop file: a stop all the same.
        if code == 0 or asked is not None or os.path.exists(job["stop"]):
            yield (rank, (code, None))
            return
        first = read_json(job["failure"])
        if first is None or first.get("attempt") != attempt:
            write_json(job["failure"], {"rank": rank * per_task, "code": code, "attempt": attempt})
            first = {"code": code}
        if first.get("code") in RESTARTABLE:
            # The stage fails and Spark runs it again (a restart) while attempts are left.
            raise RuntimeError(f"ddp: rank {rank * per_task} exited with {code}")
        # Bad input: not retried; the driver reports it.
        yield (rank, (code, None))

    # The barrier stage feeds a shuffle: Spark runs a failed barrier map stage again, never a
    # failed barrier result stage.
    stage = sc.parallelize(range(tasks), tasks).barrier().mapPartitions(task)
    ended = stage.partitionBy(1).collect()
    sc.stop()
    refused = next((why for _, (_, why) in ended if why), None)
    if refused:
        write_json(job["failure"], {"refused": refused})
        sys.exit(1)
    stopped = os.path.exists(job["stop"])
    if not stopped and any(code != 0 for _, (code, _) in ended):
        sys.exit(1)


if __name__ == "__main__":
    main()
