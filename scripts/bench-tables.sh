#!/usr/bin/env bash
# Loading a table: ddp-trainer's CSV and Parquet readers (data::table::open, through the
# `table_load` example) against pandas' read_csv and read_parquet, on a generated 1,000,000-row
# table of 50 float32 features and an integer label (docs/data.md, "Tables: CSV and Parquet").
#
#   scripts/bench-tables.sh [ROWS] [FEATURES]      (defaults: 1000000 50)
#
# PYTHON (default python3) needs pandas and pyarrow (`pip install pandas pyarrow`). TABLES_DIR
# keeps the generated files there (made once, reused); by default they go to a temporary
# folder, removed at the end. Needs cargo (it builds the example). Each reader runs 3 times, each
# in a fresh process, alternating; the table shows the best time and that run's peak RSS (the
# whole process's: interpreter and imports for pandas). pandas' pyarrow engine for CSV is shown
# too, for reference.
set -euo pipefail
rows=${1:-1000000}
features=${2:-50}
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
"$py" -c 'import pandas, pyarrow' 2>/dev/null ||
    { echo "$py lacks pandas or pyarrow: $py -m pip install pandas pyarrow" >&2; exit 2; }
(cd "$root" && cargo build --release --locked -q -p ddp-trainer --example table_load)
loader=$root/target/release/examples/table_load
if [ -n "${TABLES_DIR:-}" ]; then
    work=$TABLES_DIR
    mkdir -p "$work"
else
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
fi
data=$work/table-$rows-$features
if [ ! -f "$data/table.parquet" ]; then
    echo "generating $rows x $features into $data ..." >&2
    "$py" "$root/scripts/bench_tables.py" generate "$data" "$rows" "$features"
fi
for kind in csv parquet; do
    cat > "$work/$kind.toml" <<SPEC
name = "table-load"
[model]
name = "mlp"
[data]
name = "$kind"
path = "$data/table.$kind"
target = "label"
SPEC
done
ls -l "$data" >&2

field() { # JSON KEY
    "$py" -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"
}
best() { # LABEL COMMAND... -> "seconds rss" of the fastest of 3 runs
    local label=$1 b_s="" b_r="" out s
    shift
    for _ in 1 2 3; do
        sync
        out=$("$@" | tail -1)
        echo "  $label: $out" >&2
        s=$(field "$out" seconds)
        if [ -z "$b_s" ] || "$py" -c "import sys; sys.exit(not $s < $b_s)"; then
            b_s=$s
            b_r=$(field "$out" peak_rss_mib)
        fi
    done
    echo "$b_s $b_r"
}

printf '%-34s %10s %14s\n' "reader ($rows rows x $features)" "best s" "peak RSS MiB"
for kind in csv parquet; do
    read -r ours ours_rss < <(best "ddp $kind" "$loader" "$work/$kind.toml")
    read -r pd pd_rss < <(best "pandas $kind" "$py" "$root/scripts/bench_tables.py" read "$kind" "$data/table.$kind")
    printf '%-34s %10s %14s\n' "ddp-trainer $kind" "$ours" "$ours_rss"
    printf '%-34s %10s %14s\n' "pandas read_$kind" "$pd" "$pd_rss"
    "$py" -c "print(f'{\"speed-up\":<34} {$pd / $ours:9.2f}x {\"RSS ratio\":>14} {$ours_rss / $pd_rss:.2f}')"
done
read -r pa pa_rss < <(best "pandas csv (pyarrow engine)" "$py" "$root/scripts/bench_tables.py" read csv "$data/table.csv" pyarrow)
printf '%-34s %10s %14s\n' "pandas read_csv(engine=pyarrow)" "$pa" "$pa_rss"
