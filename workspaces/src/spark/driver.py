"""The Spark driver of a ddp run (written into the run folder by `ddp run --on spark`).

    spark-submit ... RUN/spark/driver.py RUN/spark/job.json

One barrier stage of `tasks` tasks, all scheduled together or none, as Spark's TorchDistributor
runs PyTorch: each task takes its rank from the barrier context, task 0's host and a free port
of it (agreed through the barrier) become the rendezvous, and it runs the replica's command with
torchrun's variables, its output appended to RUN/logs/rank-R.log. A task whose replica fails
fails the stage, which Spark runs again as a whole (`spark.stage.maxConsecutiveAttempts`): the
replicas of the next attempt resume from the newest checkpoint. What the workspace follows is
written to RUN/spark/state.json (the application, its web UI, the stage's attempt) and, when a
replica fails, RUN/spark/failure.json (its rank, exit code and attempt).
"""

import json
import os
import socket
import subprocess
import sys


def write_json(path, value):
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(value, f)
    os.replace(tmp, path)


def host_address():
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def main():
    job = json.load(open(sys.argv[1]))
    from pyspark import BarrierTaskContext, SparkConf, SparkContext

    sc = SparkContext(conf=SparkConf().setAppName(job["name"]))
    state = {"app_id": sc.applicationId, "ui": sc.uiWebUrl, "attempt": 0}
    write_json(job["state"], state)
    tasks, per_task = job["tasks"], job["replicas_per_task"]

    def task(_):
        ctx = BarrierTaskContext.get()
        rank = ctx.partitionId()
        attempt = ctx.stageAttemptNumber() if hasattr(ctx, "stageAttemptNumber") else ctx.attemptNumber()
        port = 0
        if rank == 0:
            s = socket.socket()
            s.bind(("", 0))
            port = s.getsockname()[1]
            s.close()
        peers = [json.loads(p) for p in ctx.allGather(json.dumps({"host": host_address(), "port": port}))]
        env = dict(os.environ)
        env.update(job["env"])
        env.update(
            MASTER_ADDR=peers[0]["host"],
            MASTER_PORT=str(peers[0]["port"]),
            WORLD_SIZE=str(tasks * per_task),
            RANK=str(rank * per_task),
            GROUP_RANK=str(rank),
            LOCAL_RANK="0",
            LOCAL_WORLD_SIZE=str(per_task),
            TORCHELASTIC_RESTART_COUNT=str(attempt),
        )
        command = list(job["command"])
        if (job["resume"] or attempt > 0) and "--resume" not in command:
            command.append("--resume")
        if rank == 0 and attempt > 0:
            write_json(job["state"], dict(state, attempt=attempt))
        log_path = os.path.join(job["logs"], f"rank-{rank * per_task}.log")
        with open(log_path, "ab") as log:
            code = subprocess.call(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=job["cwd"])
        if code != 0:
            failure = {"rank": rank * per_task, "code": code, "attempt": attempt}
            write_json(job["failure"], failure)
            raise RuntimeError(f"ddp: rank {rank * per_task} exited with {code}")
        yield rank

    sc.parallelize(range(tasks), tasks).barrier().mapPartitions(task).collect()
    sc.stop()


if __name__ == "__main__":
    main()
