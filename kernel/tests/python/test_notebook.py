"""Executes examples/notebooks/mnist-ddp.ipynb (or, with --notebook, gpt-shakespeare.ipynb or
own-data.ipynb) with
nbclient (as `jupyter execute` / CI tools do) on the `ddp` kernel, from the notebook's folder, and
checks what its outputs show.

    python test_notebook.py [--notebook PATH] [--write PATH]    # --write: save the executed notebook

Run by kernel/tests/jupyter.rs (DDP_WORKSPACE is a fresh workspace; when it is not set, a
temporary one is used). Exits non-zero on failure.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient

from ddp_kernel_util import TEST_ACCURACY, repo

CELL_TIMEOUT = 600


def fail(msg: str) -> None:
    raise AssertionError(msg)


def text(output: dict[str, Any]) -> str:
    if output["output_type"] == "stream":
        return output["text"]
    if output["output_type"] == "error":
        return f"{output['ename']}: {output['evalue']}"
    return (output.get("data") or {}).get("text/plain", "")


def describe(cell: dict[str, Any]) -> str:
    outs = "\n".join(
        f"  {o['output_type']} {sorted((o.get('data') or {}))} {text(o)[:400]!r}" for o in cell.get("outputs", [])
    )
    return f"cell {cell.get('id')} ({cell.source.splitlines()[0]!r}) outputs:\n{outs or '  (none)'}"


def executed_cells(nb: Any, ids: tuple[str, ...]) -> dict[str, Any]:
    """The notebook's code cells by id, after checking that the cells `ids` are there and that
    every code cell ran without an error output."""
    cells = {c.get("id"): c for c in nb.cells if c.cell_type == "code"}
    for ident in ids:
        if ident not in cells:
            fail(f"the notebook has no code cell with id {ident!r}")
    for cell in cells.values():
        if any(o["output_type"] == "error" for o in cell.outputs):
            fail(f"error output in {describe(cell)}")
        if cell.get("execution_count") is None:
            fail(f"not executed: {describe(cell)}")
    return cells


def last_card(cell: dict[str, Any]) -> str:
    """The text of the run card a cell displayed last (nbclient applied its updates), or ""."""
    cards = [o for o in cell.outputs if o["output_type"] == "display_data" and "text/plain" in o.get("data", {})]
    return text(cards[-1]) if cards else ""


def check(nb: Any) -> None:
    cells = executed_cells(nb, ("tutorial-run", "show", "plot", "lr-run", "compare", "ls", "rust"))

    # the run cells: the card (display_data; nbclient applied the update_display_data messages)
    for ident in ("tutorial-run", "lr-run"):
        card = last_card(cells[ident])
        if "completed" not in card or not TEST_ACCURACY.search(card):
            fail(f"the run card does not show a completed run with its test accuracy: {describe(cells[ident])}")

    show = "\n".join(text(o) for o in cells["show"].outputs)
    if "completed" not in show:
        fail(f"%ddp show latest does not say completed: {describe(cells['show'])}")

    svg = [o for o in cells["plot"].outputs if "image/svg+xml" in o.get("data", {})]
    if not svg or "<svg" not in "".join(svg[0]["data"]["image/svg+xml"]):
        fail(f"no image/svg+xml plot: {describe(cells['plot'])}")

    html = [o for o in cells["compare"].outputs if "text/html" in o.get("data", {})]
    if not html:
        fail(f"no text/html comparison: {describe(cells['compare'])}")
    if not re.search(r"train\.lr", "".join(html[0]["data"]["text/html"]) + text(html[0])):
        fail(f"the comparison does not show the differing key train.lr: {describe(cells['compare'])}")

    ls = "\n".join(text(o) for o in cells["ls"].outputs)
    for name in ("tutorial", "lr-0.002"):
        if name not in ls:
            fail(f"%ddp ls does not list the run {name!r}: {describe(cells['ls'])}")

    results = [text(o) for o in cells["rust"].outputs if o["output_type"] == "execute_result"]
    if not results or "effective lr 0.0020" not in results[0]:
        fail(f"the Rust cell's result is not 'effective lr 0.0020': {describe(cells['rust'])}")


def check_gpt(nb: Any) -> None:
    """gpt-shakespeare.ipynb: a trained GPT, its figures, a sample, a cell's own language model."""
    cells = executed_cells(nb, ("gpt-run", "show", "plot", "sample", "own-lm", "compare"))
    for ident in ("gpt-run", "own-lm"):
        card = last_card(cells[ident])
        if "completed" not in card or "perplexity" not in card:
            fail(f"the run card does not show a completed language model: {describe(cells[ident])}")
    show = "\n".join(text(o) for o in cells["show"].outputs)
    if "completed" not in show or "perplexity" not in show or "accuracy" in show:
        fail(f"%ddp show does not show a language model's figures: {describe(cells['show'])}")
    sample = "".join(text(o) for o in cells["sample"].outputs if o["output_type"] == "stream")
    if not sample.startswith("KING") or len(sample) < 400:
        fail(f"%ddp sample did not stream 400 characters after KING: {describe(cells['sample'])}")
    html = [o for o in cells["compare"].outputs if "text/html" in o.get("data", {})]
    if not html or "PERPLEXITY" not in "".join(html[0]["data"]["text/html"]).upper():
        fail(f"the comparison has no perplexity: {describe(cells['compare'])}")


def check_own_data(nb: Any) -> None:
    """own-data.ipynb: an image folder, a CSV table, a tensors file and a cell's own data set."""
    cells = executed_cells(nb, ("images", "table", "tensors", "show", "own-data", "compare"))
    for ident in ("images", "table", "tensors", "own-data"):
        card = last_card(cells[ident])
        if "completed" not in card or not TEST_ACCURACY.search(card):
            fail(f"the run card does not show a completed run with its test accuracy: {describe(cells[ident])}")
    show = "\n".join(text(o) for o in cells["show"].outputs)
    if "csv: 1500 train, 500 test, 3 classes" not in show:
        fail(f"%ddp show does not name the table: {describe(cells['show'])}")
    html = [o for o in cells["compare"].outputs if "text/html" in o.get("data", {})]
    if not html or "".join(html[0]["data"]["text/html"]).count("completed") < 4:
        fail(f"the comparison does not hold the four runs: {describe(cells['compare'])}")


def coalesce_streams(nb: Any) -> None:
    """Merges each cell's consecutive outputs of one stream into one output, as JupyterLab shows
    them (a streamed sample is one message per token)."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        merged: list[Any] = []
        for out in cell.outputs:
            last = merged[-1] if merged else None
            if (
                out["output_type"] == "stream"
                and last is not None
                and last["output_type"] == "stream"
                and last["name"] == out["name"]
            ):
                last["text"] += out["text"]
            else:
                merged.append(out)
        cell.outputs = merged


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="save the executed notebook here")
    parser.add_argument("--notebook", type=Path, default=repo() / "examples" / "notebooks" / "mnist-ddp.ipynb")
    args = parser.parse_args()

    if not os.environ.get("DDP_WORKSPACE"):
        os.environ["DDP_WORKSPACE"] = tempfile.mkdtemp(prefix="ddp-notebook-ws-")
    path = args.notebook.resolve()
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        kernel_name="ddp",
        timeout=CELL_TIMEOUT,
        startup_timeout=120,
        resources={"metadata": {"path": str(path.parent)}},
    )
    started = time.monotonic()
    try:
        client.execute()
        print(f"executed {path.name} in {time.monotonic() - started:.1f} s", file=sys.stderr)
        checks = {"gpt-shakespeare.ipynb": check_gpt, "own-data.ipynb": check_own_data}
        checks.get(path.name, check)(nb)
    finally:
        if args.write:  # also when something failed: the outputs show what
            coalesce_streams(nb)
            nbformat.write(nb, args.write)
            print(f"wrote {args.write}", file=sys.stderr)
    print("notebook OK", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
