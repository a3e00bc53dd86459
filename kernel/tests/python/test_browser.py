"""The committed tutorial in JupyterLab, in a real browser (headless Chromium through Selenium),
as a new user sees it: opened untrusted, its outputs as saved; then cells typed and run.

    python test_browser.py [--screenshots DIR] [--only saved,live,rust]

Checks:
- the notebook is untrusted for this Jupyter (a fresh data folder), as a notebook someone else
  saved is;
- every image in its outputs (each run card's chart, the plot) is rendered (natural width > 0) and
  fits its output area, and no output is wider than its output area (tables included);
- a typed `%ddp run` cell shows one card whose step text changes at least twice while it trains;
- a `%ddp wait` cell, interrupted, says so on stdout and the run goes on; `%ddp stop` stops it;
- a Rust cell with a type error shows the cell's own line (2) and code.

Screenshots of the cards, the plot, the comparison, the live card and the error go to DIR
(default: <repo>/target/browser-screenshots); docs/kernel.md shows the ones that
scripts/notebook-screenshots.sh writes to docs/images/.

Run by kernel/tests/jupyter.rs in a sandbox (JUPYTER_PATH finds the `ddp` kernelspec, Jupyter's
folders and DDP_WORKSPACE are fresh). Chromium and chromedriver: $DDP_CHROMIUM and
$DDP_CHROMEDRIVER, else `chromium` and `chromedriver` on the PATH. Exits non-zero on failure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

import nbformat
from nbformat.sign import NotebookNotary
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webelement import WebElement

from ddp_kernel_util import repo, runs, workspace

NOTEBOOK = "notebooks/mnist-ddp.ipynb"
#: A browser window of a laptop screen; JupyterLab's output area is then about 950 px wide.
WINDOW = (1400, 1000)
SERVER_START_S = 120
PAGE_S = 120
RUN_S = 300
RUST_S = 600


def fail(msg: str) -> None:
    raise AssertionError(msg)


def wait_for(what: str, check: Callable[[], Any], timeout: float, every: float = 0.25) -> Any:
    """Polls `check` until it returns something truthy; fails naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except (StaleElementReferenceException, WebDriverException) as e:
            last_error = e
        time.sleep(every)
    fail(f"timed out after {timeout:.0f} s waiting for {what}" + (f" (last error: {last_error})" if last_error else ""))


def tool(env: str, name: str) -> str:
    path = os.environ.get(env) or shutil.which(name)
    if not path:
        fail(f"{name} not found (set ${env} or put {name} on the PATH)")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# The server


def prepare_root(root: Path) -> Path:
    """A copy of the tutorial's folder layout (the notebook, the spec beside `notebooks/`, the
    data), so nothing the browser saves lands in the repository."""
    examples = repo() / "examples"
    (root / "notebooks").mkdir(parents=True)
    shutil.copy(examples / NOTEBOOK, root / NOTEBOOK)
    shutil.copy(examples / "mnist.toml", root / "mnist.toml")
    (root / "data").symlink_to(examples / "data", target_is_directory=True)
    return root / NOTEBOOK


def lab_settings(folder: Path) -> None:
    """User settings: no autosave (the test must not write the notebook), no news pop-up, every
    cell rendered (not only those in view)."""
    settings = {
        "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
        "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
        "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    }
    for plugin, values in settings.items():
        path = folder / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


def start_lab(root: Path, scratch: Path) -> tuple[subprocess.Popen, str, Path]:
    port = free_port()
    settings = scratch / "lab-settings"
    lab_settings(settings)
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(settings), JUPYTERLAB_WORKSPACES_DIR=str(scratch / "lab-workspaces"))
    log = scratch / "jupyterlab.log"
    server = subprocess.Popen(
        [
            sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
            "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
            "--IdentityProvider.token=", "--ServerApp.password=",
            f"--ServerApp.root_dir={root}",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ],
        env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if server.poll() is not None:
            fail(f"jupyter lab exited ({server.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/api/status", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    wait_for(f"jupyter lab to answer on {url} (log: {log})", up, SERVER_START_S, every=0.5)
    return server, url, log


# ---------------------------------------------------------------------------------------------
# The page


class Lab:
    def __init__(self, driver: webdriver.Chrome, shots: Path):
        self.d = driver
        self.shots = shots

    def js(self, script: str, *args: Any) -> Any:
        return self.d.execute_script(script, *args)

    def shot(self, element: WebElement, name: str) -> None:
        self.js("arguments[0].scrollIntoView({block: 'center'})", element)
        time.sleep(0.3)
        element.screenshot(str(self.shots / f"{name}.png"))

    def cells(self) -> list[WebElement]:
        return self.d.find_elements(By.CSS_SELECTOR, ".jp-Notebook .jp-CodeCell")

    def new_cell(self, source: str) -> WebElement:
        """Adds a code cell at the end (the notebook's footer), types `source` and runs it; returns
        the cell."""
        before = len(self.cells())
        footer = self.d.find_element(By.CSS_SELECTOR, ".jp-Notebook-footer")
        self.js("arguments[0].scrollIntoView({block: 'center'})", footer)
        footer.click()
        wait_for("a new cell", lambda: len(self.cells()) == before + 1, 10)
        cell = self.cells()[-1]
        editor = cell.find_element(By.CSS_SELECTOR, ".cm-content")
        editor.click()
        lines = source.split("\n")
        for i, line in enumerate(lines):
            editor.send_keys(line)
            if i + 1 < len(lines):
                editor.send_keys(Keys.ENTER)
        typed = wait_for("the typed source", lambda: self.js("return arguments[0].innerText", editor), 5)
        if typed.replace("\u00a0", " ").strip() != source.strip():
            fail(f"the cell holds {typed!r}, typed {source!r}")
        editor.send_keys(Keys.SHIFT, Keys.ENTER)
        return cell

    def outputs(self, cell: WebElement) -> list[WebElement]:
        return cell.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output")

    def text(self, element: WebElement) -> str:
        return self.js("return arguments[0].innerText", element) or ""

    def prompt(self, cell: WebElement) -> str:
        """The execution prompt: `[*]` while running, `[N]` when done."""
        return self.text(cell.find_element(By.CSS_SELECTOR, ".jp-InputPrompt")).strip()

    def interrupt(self) -> None:
        button = self.d.find_element(By.CSS_SELECTOR, "[data-command='notebook:interrupt-kernel']")
        (button.find_elements(By.CSS_SELECTOR, "button") or [button])[0].click()


def kernel_state(url: str) -> str | None:
    """The execution state of the notebook's kernel, as the server knows it."""
    with urllib.request.urlopen(f"{url}/api/sessions", timeout=5) as r:
        sessions = json.load(r)
    for s in sessions:
        if s.get("path", "").endswith(NOTEBOOK) and (s.get("kernel") or {}).get("name") == "ddp":
            return s["kernel"].get("execution_state")
    return None


def chrome(shots: Path, scratch: Path) -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = tool("DDP_CHROMIUM", "chromium")
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage", f"--window-size={WINDOW[0]},{WINDOW[1]}",
        f"--user-data-dir={scratch / 'chromium-profile'}",
    ):
        options.add_argument(flag)
    service = Service(tool("DDP_CHROMEDRIVER", "chromedriver"), log_output=str(scratch / "chromedriver.log"))
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(PAGE_S)
    return driver


# ---------------------------------------------------------------------------------------------
# The checks


def check_untrusted(notebook: Path) -> None:
    data_dir = os.environ.get("JUPYTER_DATA_DIR")
    if not data_dir:
        fail("JUPYTER_DATA_DIR is not set (kernel/tests/jupyter.rs sets it)")
    nb = nbformat.read(notebook, as_version=4)
    if NotebookNotary(data_dir=data_dir).check_signature(nb):
        fail(f"{notebook} is trusted for {data_dir}: the test must open it as someone else's notebook")


FITS = """
const out = [];
for (const o of document.querySelectorAll('.jp-OutputArea-output')) {
  const area = o.getBoundingClientRect();
  const imgs = [...o.querySelectorAll('img')].map(i => ({
    cls: i.className, complete: i.complete, natural: i.naturalWidth,
    width: i.getBoundingClientRect().width, src: (i.getAttribute('src') || '').slice(0, 30)}));
  out.push({text: o.innerText.slice(0, 80), width: area.width, scroll: o.scrollWidth,
            client: o.clientWidth, imgs, cards: o.querySelectorAll('.ddp-card').length});
}
return out;
"""


def check_saved_outputs(lab: Lab) -> None:
    outputs = lab.js(FITS)
    images = [(o, i) for o in outputs for i in o["imgs"]]
    cards = sum(o["cards"] for o in outputs)
    if cards < 2:
        fail(f"expected the notebook's two run cards, found {cards}: {json.dumps(outputs)[:2000]}")
    charts = [i for _, i in images if "ddp-chart" in i["cls"]]
    if len(charts) < cards:
        fail(f"{cards} cards but {len(charts)} chart images (a chart stripped by the sanitizer?): {json.dumps(outputs)[:3000]}")
    if len(images) < cards + 1:
        fail(f"expected the cards' charts and the plot as images, found {len(images)}: {json.dumps(outputs)[:3000]}")
    for o, i in images:
        if not i["complete"] or i["natural"] <= 0:
            fail(f"an image is not rendered (natural width {i['natural']}): {i} in output {o['text']!r}")
        if i["width"] > o["width"] + 0.5:
            fail(f"an image ({i['width']:.0f} px) is wider than its output area ({o['width']:.0f} px): {i}")
    for o in outputs:
        if o["scroll"] > o["client"] + 1:
            fail(f"an output is cut: {o['scroll']} px of content in {o['client']} px: {o['text']!r}")
    print(f"saved outputs: {cards} cards, {len(images)} images, all rendered and inside their output areas")


def card_step(lab: Lab, cell: WebElement) -> tuple[int, int | None]:
    """(cards in the cell, the step the card shows)."""
    cards = cell.find_elements(By.CSS_SELECTOR, ".ddp-card")
    if not cards:
        return 0, None
    m = re.search(r"step (\d+)", lab.text(cards[0]))
    return len(cards), int(m.group(1)) if m else None


def live_run(lab: Lab) -> None:
    cell = lab.new_cell("%ddp run ../mnist.toml --set train.epochs=30 --name browser")
    seen: list[int] = []

    def stepped() -> bool:
        n, step = card_step(lab, cell)
        if n > 1:
            fail(f"the cell shows {n} cards: a card must update in place")
        if step is not None and (not seen or seen[-1] != step):
            seen.append(step)
        return len(seen) >= 3

    wait_for(f"the card's step to change twice (saw {seen})", stepped, RUN_S, every=0.1)
    print(f"live card: one card, steps seen {seen}")
    lab.shot(cell, "live-card")

    wait = lab.new_cell("%ddp wait latest")
    wait_for("the wait cell to start", lambda: lab.prompt(wait) == "[*]:", 30)
    wait_for("the wait cell's card", lambda: card_step(lab, wait)[0] == 1, 30)
    time.sleep(1)
    lab.interrupt()
    note = wait_for(
        "the interrupted wait's note on stdout",
        lambda: [lab.text(o) for o in wait.find_elements(By.CSS_SELECTOR, "[data-mime-type='application/vnd.jupyter.stdout']") if "stopped waiting" in lab.text(o)],
        30,
    )
    stderr = [lab.text(o) for o in wait.find_elements(By.CSS_SELECTOR, "[data-mime-type='application/vnd.jupyter.stderr']")]
    if any("stopped waiting" in t for t in stderr):
        fail(f"the interrupted wait's note went to stderr: {stderr}")
    browser_run = [r for r in runs() if r.get("name") == "browser"]
    if len(browser_run) != 1 or browser_run[0].get("status") != "running":
        fail(f"after interrupting the wait, the run should go on: {browser_run}")
    print(f"interrupted wait: {note[0].strip()!r}; the run goes on")
    lab.shot(wait, "interrupted-wait")

    stop = lab.new_cell("%ddp stop latest")
    wait_for("the stop cell to finish", lambda: re.fullmatch(r"\[\d+\]:", lab.prompt(stop)), RUN_S)
    wait_for("the run card to say stopped", lambda: "stopped" in lab.text(cell.find_element(By.CSS_SELECTOR, ".ddp-card")), 30)
    lab.shot(cell, "stopped-card")


def rust_error(lab: Lab) -> None:
    cell = lab.new_cell("let x = 1;\nlet y: String = x;")
    error = wait_for(
        "the Rust cell's compile error",
        lambda: [lab.text(o) for o in cell.find_elements(By.CSS_SELECTOR, "[data-mime-type='application/vnd.jupyter.stderr']") if o.text.strip()],
        RUST_S,
        every=0.5,
    )[0]
    if "let y: String = x;" not in error:
        fail(f"the error does not show the cell's code:\n{error}")
    if not re.search(r"\b(cell|line)\D{0,3}2\b", error):
        fail(f"the error does not name the cell's line 2:\n{error}")
    if "src/lib.rs" in error:
        fail(f"the error points into evcxr's generated file:\n{error}")
    print("rust error: names line 2 and shows the cell's code")
    lab.shot(cell, "rust-error")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--screenshots", type=Path, default=repo() / "target" / "browser-screenshots")
    parser.add_argument(
        "--only", default="saved,live,rust",
        help="the parts to check, comma-separated (saved: the committed outputs; live: a run, wait, stop; rust: an error)",
    )
    args = parser.parse_args()
    parts = set(args.only.split(","))
    shots = args.screenshots.resolve()
    shots.mkdir(parents=True, exist_ok=True)
    scratch = workspace().parent / "browser"
    scratch.mkdir(parents=True, exist_ok=True)
    notebook = prepare_root(scratch / "examples")
    check_untrusted(notebook)

    server, url, log = start_lab(scratch / "examples", scratch)
    driver = None
    try:
        driver = chrome(shots, scratch)
        lab = Lab(driver, shots)
        driver.get(f"{url}/lab/tree/{NOTEBOOK}?reset")
        wait_for("the notebook's cells", lambda: len(lab.cells()) >= 7, PAGE_S)
        wait_for("the notebook's kernel (ddp) to start and be idle", lambda: kernel_state(url) == "idle", PAGE_S)
        time.sleep(1)
        driver.save_screenshot(str(shots / "notebook.png"))
        if "saved" in parts:
            check_saved_outputs(lab)
        for n, card in enumerate(driver.find_elements(By.CSS_SELECTOR, ".ddp-card")):
            lab.shot(card.find_element(By.XPATH, "ancestor::div[contains(@class,'jp-OutputArea-output')]"), f"card-{n}")
        for cell in lab.cells():
            source = lab.text(cell.find_element(By.CSS_SELECTOR, ".cm-content"))
            for word in ("plot", "compare"):
                if source.startswith(f"%ddp {word}"):
                    lab.shot(cell.find_element(By.CSS_SELECTOR, ".jp-OutputArea"), word)
        if "live" in parts:
            live_run(lab)
        if "rust" in parts:
            rust_error(lab)
        print(f"screenshots in {shots}")
    except BaseException:
        if driver is not None:
            try:
                driver.save_screenshot(str(shots / "failure.png"))
                print(f"the page at the failure: {shots / 'failure.png'}", file=sys.stderr)
            except WebDriverException:
                pass
        print(f"jupyter lab's log ({log}):\n{log.read_text()[-4000:]}", file=sys.stderr)
        raise
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
