#!/usr/bin/env bash
# The workspace at 10,000 runs (docs/performance.md "10,000 runs"): `ddp ls`, the TUI and
# `%ddp ls` on the run index, with the figures of a build without the index beside them.
#
#   scripts/bench-index.sh                        # makes the workspace (one real run, copied)
#   scripts/bench-index.sh --workspace /tmp/ws10k # an existing one (scripts/make-workspace.py)
#   scripts/bench-index.sh --base PATH/TO/ddp     # also time that build's `ddp ls` (the folder scan)
#   scripts/bench-index.sh --reps 20              # repetitions of the TUI's first frame in tmux
#
# Prints, each beside its goal: building the index from nothing; `ddp ls --limit 50` and a
# filtered, sorted `ddp ls` (median of 5, warm page cache; then with the page cache dropped
# where root may); the peak RSS of each; the TUI's first frame as a user sees it (the release
# `ddp-tui` typed into a shell in tmux, Enter until the runs are on screen; median of --reps,
# needs tmux) and `ddp-tui --version` typed the same way (what the shell, tmux and a process
# start take alone); the TUI's first frame in-process, a filter typed key by key, a run created
# beside it and its RSS (tui/benches/dashboard.rs --workspace); `%ddp ls` through a real Jupyter
# client and the kernel's RSS (kernel/bench/kernel_bench.py --parts large; needs
# scripts/python-venv.sh's .venv-test).
set -euo pipefail
cd "$(dirname "$0")/.."
WS="" RUNS=10000 BASE="" REPS=10
while [ $# -gt 0 ]; do
  case "$1" in
    --workspace) WS=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --base) BASE=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    *) echo "usage: $0 [--workspace WS] [--runs N] [--base DDP] [--reps N]" >&2; exit 2 ;;
  esac
done
cargo build --release -q -p ddp-cli -p ddp-kernel -p ddp-tui
DDP=$PWD/target/release/ddp
TUI=$PWD/target/release/ddp-tui
if [ -z "$WS" ]; then
  tmp=$(mktemp -d)
  WS=$tmp/ws
  echo "making one real run, then $RUNS copies of it in $WS"
  "$DDP" --workspace "$tmp/src" run examples/mnist.toml --set train.epochs=1 \
    --set data.limit_train=600 --set data.limit_test=100 > "$tmp/src.log"
  src=$(ls -d "$tmp"/src/experiments/*/runs/* | head -1)
  python3 scripts/make-workspace.py --from "$src" --runs "$RUNS" --out "$WS"
fi
FILTER=(--where 'spec.train.lr < 0.01 and status = "completed"' --sort -test_accuracy --limit 20)

# Seconds and peak RSS (MB) of one command, its output dropped.
timed() {
  /usr/bin/time -f "%e %M" -o /tmp/bench-index.time "$@" > /dev/null
  awk '{ printf "%.3f %.0f\n", $1, $2 / 1024 }' /tmp/bench-index.time
}
# The median seconds and the largest RSS of five runs.
median5() {
  for _ in 1 2 3 4 5; do timed "$@"; done | sort -n |
    awk '{ s[NR] = $1; if ($2 > m) m = $2 } END { printf "%.0f ms (of 5: %.0f..%.0f), %d MB", s[3] * 1000, s[1] * 1000, s[5] * 1000, m }'
}
drop_caches() { sync && echo 3 > /proc/sys/vm/drop_caches 2> /dev/null; }
# The dashboard's first frame as a user sees it, `$3` times: a shell (bash, prompt
# `bench-index$ `, this environment) in a 200x50 tmux session of its own server (no tmux.conf);
# `$1 --workspace $2` typed at the prompt, then Enter. The clock starts as Enter is sent and
# stops when `capture-pane -p` first shows the runs listed: the header's count of them ("10000
# runs, 0 live", 0 until the first snapshot: tui/src/ui/mod.rs) and the newest run's id, the
# list's first row (newest first: tui/src/views/runs/), both drawn by the same frame. Enter, the
# captures and `q` (quit) go through one tmux control client, so a poll (every 5 ms) starts no
# process; each repetition waits for the prompt to come back first. Then `$1 --version` typed
# the same way until the prompt is back: what the shell, tmux and a process start take alone.
# Prints the two figures (median and range, ms); the last screen timed is left in
# /tmp/bench-index.tui-screen.txt.
tui_typed() {
  local newest
  newest=$(ls -d "$2"/experiments/*/runs/* | sed 's|.*/||' | sort | tail -1)
  python3 - "$1" "$2" "$3" "$newest" << 'EOF'
import os, re, select, shlex, signal, statistics, subprocess, sys, time

tui, ws, reps, newest = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
PROMPT = "bench-index$ "
POLL = 0.005
TM = ["tmux", "-L", f"bench-index-{os.getpid()}", "-f", "/dev/null"]
# This environment (TERM as tmux sets it), a known prompt, no history written.
shell = ["env", "-u", "PROMPT_COMMAND", f"PS1={PROMPT}", "HISTFILE=/dev/null",
         "bash", "--norc", "--noprofile"]
# Killed or interrupted, the tmux server still goes (the `finally` at the end).
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
signal.signal(signal.SIGHUP, lambda *_: sys.exit(129))
subprocess.run(TM + ["new-session", "-d", "-s", "bench", "-x", "200", "-y", "50", *shell],
               check=True)
ctl = subprocess.Popen(TM + ["-C", "attach-session", "-t", "bench"],
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def send(command):
    ctl.stdin.write(command.encode() + b"\n")
    ctl.stdin.flush()


class Lines:
    """The control client's output, line by line (an answer within 30 s, or the end)."""

    def __init__(self, fd):
        self.fd, self.buf = fd, b""

    def next(self):
        deadline = time.monotonic() + 30.0
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                sys.exit("tmux control client: no answer in 30 s")
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                sys.exit("tmux control client: ended")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode("utf-8", "replace")


lines = Lines(ctl.stdout.fileno())


def reply():
    """The output of the next block answering a command of ours (`%begin TIME N 1`): others
    (the attach's own, flag 0) and notifications are skipped."""
    out = None
    while True:
        line = lines.next()
        if out is None:
            f = line.split()
            if f[:1] == ["%begin"] and f[3:4] in (["1"], []):
                out = []
        elif line.startswith(("%end", "%error")):
            return out
        else:
            out.append(line)


def run(command):
    send(command)
    return reply()


def screen():
    return "\n".join(run("capture-pane -p -J -t bench"))


def last_line(s):
    rows = [r.rstrip() for r in s.splitlines() if r.strip()]
    return rows[-1] if rows else ""


def prompt_back(s):
    return last_line(s) == PROMPT.rstrip()


def wait(what, done, timeout=30.0):
    start = time.monotonic()
    while True:
        s = screen()
        if done(s):
            return s
        if time.monotonic() - start > timeout:
            sys.exit(f"waited {timeout:.0f} s for {what}; the screen:\n{s}")
        time.sleep(0.02)


COUNT = re.compile(r"\b[1-9][0-9]* runs?, [0-9]+ live\b")


def listed(s):
    # The id column shows the whole id from 170 columns, its part after the date below.
    return COUNT.search(s) is not None and newest[9:] in s


def typed(line, done, timeout=60.0):
    """Types `line` at the prompt; the seconds from Enter until `done(screen)`, and the polls."""
    wait("the prompt", prompt_back)
    subprocess.run(TM + ["send-keys", "-t", "bench", "-l", line], check=True)
    wait("the typed command", lambda s: last_line(s).endswith(line))
    t0 = time.perf_counter()
    run("send-keys -t bench Enter")
    polls = 0
    while True:
        s = screen()
        polls += 1
        t1 = time.perf_counter()
        if done(s):
            return t1 - t0, polls, s
        if done is listed and prompt_back(s):
            sys.exit(f"{line}: ended before listing the runs; the screen:\n{s}")
        if t1 - t0 > timeout:
            sys.exit(f"{line}: not there after {timeout:.0f} s; the screen:\n{s}")
        time.sleep(POLL)


def figure(seconds):
    ms = sorted(x * 1e3 for x in seconds)
    return f"{statistics.median(ms):.0f} ms (of {len(ms)}: {ms[0]:.0f}..{ms[-1]:.0f})"


try:
    # Commands once the client is attached (before, they may find no client); no %output.
    while not lines.next().startswith("%session-changed"):
        pass
    run("refresh-client -f no-output")
    size = run("display -p '#{window_width}x#{window_height}'")
    if size != ["200x50"]:
        sys.exit(f"the tmux window is {size}, not 200x50")
    command = f"{shlex.quote(tui)} --workspace {shlex.quote(ws)}"
    frames, polls = [], 0
    for _ in range(reps):
        t, n, shown = typed(command, listed)
        frames.append(t)
        polls += n
        run("send-keys -t bench q")
        wait("the prompt after q", prompt_back)
        time.sleep(0.5)
    with open("/tmp/bench-index.tui-screen.txt", "w") as f:
        f.write(shown + "\n")
    print(f"first frame typed in tmux (200x50; Enter -> the runs on screen; goal <= 300 ms): "
          f"{figure(frames)}, the first {frames[0] * 1e3:.0f} ms; "
          f"the screen read every {sum(frames) / polls * 1e3:.1f} ms")
    version = [typed(f"{shlex.quote(tui)} --version", prompt_back)[0] for _ in range(reps)]
    print(f"ddp-tui --version typed the same way (Enter -> the prompt back: the shell, tmux and "
          f"a process start): {figure(version)}")
finally:
    # The server waits for its clients: the control client is let go of and waited for.
    subprocess.run(TM + ["kill-server"], stderr=subprocess.DEVNULL)
    ctl.stdin.close()
    try:
        ctl.wait(timeout=10)
    except subprocess.TimeoutExpired:
        ctl.kill()
EOF
}

runs=$(ls -d "$WS"/experiments/*/runs/* | wc -l)
echo "workspace $WS: $runs runs, $(du -sh "$WS" | cut -f1)"
rm -f "$WS"/index.sqlite "$WS"/index.sqlite-wal "$WS"/index.sqlite-shm
read -r s mb < <(timed "$DDP" --workspace "$WS" ls --limit 1)
echo "index built from the folders (the first ls): $s s, $mb MB; $(du -h "$WS/index.sqlite" | cut -f1)"
echo "ddp ls --limit 50 (goal <= 150 ms, <= 150 MB): $(median5 "$DDP" --workspace "$WS" ls --limit 50)"
echo "ddp ls ${FILTER[*]} (goal <= 300 ms): $(median5 "$DDP" --workspace "$WS" ls "${FILTER[@]}")"
if drop_caches; then
  read -r s mb < <(timed "$DDP" --workspace "$WS" ls --limit 50)
  echo "page cache dropped: ddp ls --limit 50 $s s"
  drop_caches
  read -r s mb < <(timed "$DDP" --workspace "$WS" ls "${FILTER[@]}")
  echo "page cache dropped: filtered ddp ls $s s"
fi
if [ -n "$BASE" ]; then
  echo "base $BASE, ls --limit 50: $(median5 "$BASE" --workspace "$WS" ls --limit 50)"
  echo "base $BASE, filtered ls: $(median5 "$BASE" --workspace "$WS" ls "${FILTER[@]}")"
  if drop_caches; then
    read -r s mb < <(timed "$BASE" --workspace "$WS" ls --limit 50)
    echo "base, page cache dropped: ddp ls --limit 50 $s s"
  fi
fi
echo "ddp-tui:"
if command -v tmux > /dev/null; then
  tui_typed "$TUI" "$WS" "$REPS" | sed 's/^/  /' || echo "  first frame typed in tmux: failed (above)"
else
  echo "  first frame typed in tmux: skipped (needs tmux)"
fi
# The bench's first frame is in-process: from starting the run-list watch to a frame in memory,
# without the process start, the terminal or tmux (what the figure above adds).
cargo bench -q -p ddp-tui --bench dashboard -- --workspace "$WS" |
  sed -e 's/^first frame: /first frame in-process (run-list watch -> a frame in memory, no terminal): /' \
    -e 's/^/  /'
if [ -x .venv-test/bin/python ]; then
  echo "ddp-kernel:"
  .venv-test/bin/python kernel/bench/kernel_bench.py --parts large --workspace "$WS" | sed 's/^/  /'
else
  echo "ddp-kernel: skipped (make .venv-test with scripts/python-venv.sh)"
fi
