"""The table-loading benchmark's Python side (scripts/bench-tables.sh runs it).

    bench_tables.py generate DIR [ROWS] [FEATURES]
        writes DIR/table.csv and DIR/table.parquet: ROWS rows (default 1,000,000) of FEATURES
        (default 50) float32 columns f0.. (standard normal, seed 0) and an int64 column
        `label` (0..9); CSV by DataFrame.to_csv(index=False), Parquet by DataFrame.to_parquet
        (pyarrow, snappy: pandas' defaults).
    bench_tables.py read csv|parquet FILE [ENGINE]
        one timed pandas read (read_csv / read_parquet, pandas' defaults, or engine=ENGINE) in
        this fresh process; prints a JSON line: seconds (the read alone), peak_rss_mib (this
        process's peak resident memory, interpreter and imports included), rows, columns.
"""

import json
import os
import resource
import sys
import time


def generate(out, rows, features):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    data = {f"f{i}": rng.standard_normal(rows, dtype=np.float32) for i in range(features)}
    data["label"] = rng.integers(0, 10, rows, dtype=np.int64)
    df = pd.DataFrame(data)
    os.makedirs(out, exist_ok=True)
    df.to_csv(os.path.join(out, "table.csv"), index=False)
    df.to_parquet(os.path.join(out, "table.parquet"))


def read(kind, path, engine):
    import pandas as pd

    kwargs = {"engine": engine} if engine else {}
    t0 = time.perf_counter()
    if kind == "csv":
        df = pd.read_csv(path, **kwargs)
    else:
        df = pd.read_parquet(path, **kwargs)
    seconds = time.perf_counter() - t0
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "seconds": round(seconds, 4),
                "peak_rss_mib": round(peak_kib / 1024, 1),
                "rows": len(df),
                "columns": len(df.columns),
            }
        )
    )


def main(argv):
    if len(argv) >= 2 and argv[0] == "generate":
        rows = int(argv[2]) if len(argv) > 2 else 1_000_000
        features = int(argv[3]) if len(argv) > 3 else 50
        generate(argv[1], rows, features)
    elif len(argv) >= 3 and argv[0] == "read" and argv[1] in ("csv", "parquet"):
        read(argv[1], argv[2], argv[3] if len(argv) > 3 else None)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
