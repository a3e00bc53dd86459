"""Writes the small table of examples/tabular.toml: synthetic grain measurements, in
examples/data/tabular/{train,test}.csv and the same rows in
examples/data/tabular-parquet/{train,test}.parquet.

    python3 scripts/make-tabular.py [OUT_DIR]        (default: examples/data)

Plain Python (random.Random(24)), so the CSV files are the same on every machine; the Parquet
copy needs pyarrow (skipped with a note when it is missing). 1,500 training and 500 test rows:
eleven numeric columns and the label `variety` (canadian, kama, rosa; the columns' means differ
by variety, loosely after the UCI seeds data, but every value here is generated). `protein` is a
linear function of the ten other numbers plus noise, so the table also serves a regression
(`task = "regression"`, `target = "protein"`, the `linear` model's ten inputs).
"""

import os
import random
import sys

COLUMNS = [
    "area", "perimeter", "compactness", "kernel_length", "kernel_width", "asymmetry",
    "groove_length", "moisture", "density", "hardness",
]
# Per variety: the mean of each column (the spread is 6 % of the mean, and asymmetry's 25 %).
MEANS = {
    "kama": [14.3, 14.3, 0.880, 5.51, 3.24, 2.67, 5.09, 11.0, 1.32, 62.0],
    "rosa": [18.3, 16.1, 0.884, 6.15, 3.68, 3.64, 6.02, 10.4, 1.35, 71.0],
    "canadian": [11.9, 13.2, 0.849, 5.23, 2.85, 4.79, 5.12, 11.6, 1.29, 55.0],
}
WEIGHTS = [0.30, -0.20, 4.0, 0.50, 1.10, -0.15, 0.40, -0.25, 2.0, 0.03]


def rows(rng, n):
    out = []
    for _ in range(n):
        variety = rng.choice(sorted(MEANS))
        values = []
        for j, m in enumerate(MEANS[variety]):
            spread = 0.25 if COLUMNS[j] == "asymmetry" else 0.06
            values.append(rng.gauss(m, spread * m))
        protein = 2.0 + sum(w * v for w, v in zip(WEIGHTS, values)) + rng.gauss(0, 0.1)
        out.append((values, protein, variety))
    return out


def fmt(v):
    return f"{v:.4f}".rstrip("0").rstrip(".")


def write_csv(path, data):
    with open(path, "w", newline="\n") as f:
        f.write(",".join(COLUMNS + ["protein", "variety"]) + "\n")
        for values, protein, variety in data:
            f.write(",".join([fmt(v) for v in values] + [fmt(protein), variety]) + "\n")


def write_parquet(path, data):
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = {c: [float(fmt(r[0][j])) for r in data] for j, c in enumerate(COLUMNS)}
    cols["protein"] = [float(fmt(r[1])) for r in data]
    cols["variety"] = [r[2] for r in data]
    pq.write_table(pa.table(cols), path)


def main(out):
    rng = random.Random(24)
    parts = {"train": rows(rng, 1500), "test": rows(rng, 500)}
    csv_dir = os.path.join(out, "tabular")
    os.makedirs(csv_dir, exist_ok=True)
    for name, data in parts.items():
        write_csv(os.path.join(csv_dir, f"{name}.csv"), data)
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        print("pyarrow is missing: the Parquet copy was not written", file=sys.stderr)
        return
    pq_dir = os.path.join(out, "tabular-parquet")
    os.makedirs(pq_dir, exist_ok=True)
    for name, data in parts.items():
        write_parquet(os.path.join(pq_dir, f"{name}.parquet"), data)


if __name__ == "__main__":
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "examples", "data"))
