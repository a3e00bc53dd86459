#!/usr/bin/env bash
# A real Spark standalone cluster on this machine, for the tests and by hand (docs/spark.md): one
# master and two workers of one core (and two GPU slots, see below) each, everything (logs, work
# folders, pids) in DIR.
#
#   scripts/spark-cluster.sh up DIR     # prints the master URL (also in DIR/master)
#   scripts/spark-cluster.sh down DIR
#
# Spark's client and daemons come from PySpark in $DDP_SPARK_PYTHON (else $DDP_TEST_PYTHON, else
# python3): `pip install pyspark`. Java from $JAVA_HOME, else the PATH; on Debian without one,
# openjdk-17-jre-headless is installed with apt-get. Every wait has a limit: `up` fails, naming
# what it waited for, when the workers have not registered within 90 s.
set -euo pipefail
die() { echo "spark-cluster: error: $*" >&2; exit 1; }
[ $# = 2 ] || die "usage: $0 up|down DIR"
action=$1
dir=$(mkdir -p "$2" && cd "$2" && pwd)

stop_pidfile() {
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 50); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$f"
}

if [ "$action" = down ]; then
  for f in "$dir"/worker-*.pid "$dir"/master.pid; do
    stop_pidfile "$f"
  done
  exit 0
fi
[ "$action" = up ] || die "usage: $0 up|down DIR"

py=${DDP_SPARK_PYTHON:-${DDP_TEST_PYTHON:-python3}}
home=$("$py" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))' 2>/dev/null) \
  || die "no PySpark for $py: pip install pyspark (or set DDP_SPARK_PYTHON)"
if [ -n "${JAVA_HOME:-}" ]; then
  java=$JAVA_HOME/bin/java
else
  java=java
fi
if ! "$java" -version >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "spark-cluster: installing openjdk-17-jre-headless (apt-get)" >&2
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq >&2 && $sudo apt-get install -y -qq openjdk-17-jre-headless >&2 \
      || die "no Java, and apt-get could not install openjdk-17-jre-headless"
  else
    die "no Java ($java): install a Java runtime 17 or newer and set JAVA_HOME"
  fi
fi

# Free ports for the master and its web UI.
read -r port ui <<< "$("$py" -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
')"
export SPARK_HOME=$home SPARK_LOCAL_IP=127.0.0.1 SPARK_LOG_DIR=$dir/logs SPARK_NO_DAEMONIZE=1
export PYSPARK_PYTHON=$py
mkdir -p "$dir/logs"
setsid "$home/bin/spark-class" org.apache.spark.deploy.master.Master --host 127.0.0.1 \
  --port "$port" --webui-port "$ui" > "$dir/logs/master.log" 2>&1 < /dev/null &
echo $! > "$dir/master.pid"
url=spark://127.0.0.1:$port
# Each worker also offers two GPUs to Spark's scheduler, found by a discovery script that lists
# addresses 0 and 1 whether or not there are GPUs: runs with GPUs per task are scheduled as on a
# GPU cluster, and their replicas run on the CPU where there is no NVIDIA driver.
cat > "$dir/gpus.sh" <<'GPUS'
#!/bin/sh
echo '{"name": "gpu", "addresses": ["0", "1"]}'
GPUS
chmod +x "$dir/gpus.sh"
for i in 1 2; do
  SPARK_WORKER_OPTS="-Dspark.worker.resource.gpu.amount=2 -Dspark.worker.resource.gpu.discoveryScript=$dir/gpus.sh" \
  SPARK_WORKER_DIR=$dir/work-$i setsid "$home/bin/spark-class" org.apache.spark.deploy.worker.Worker \
    --cores 1 --memory 1g --webui-port 0 "$url" > "$dir/logs/worker-$i.log" 2>&1 < /dev/null &
  echo $! > "$dir/worker-$i.pid"
done
for _ in $(seq 450); do
  n=$(grep -c "Registering worker" "$dir/logs/master.log" 2>/dev/null || true)
  [ "${n:-0}" -ge 2 ] && break
  sleep 0.2
done
if [ "${n:-0}" -lt 2 ]; then
  tail -n 20 "$dir"/logs/*.log >&2
  "$0" down "$dir"
  die "the Spark workers did not register with the master at $url within 90 s (logs above)"
fi
echo "$url" > "$dir/master"
echo "$url"
