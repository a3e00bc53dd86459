//! The kernel through real Jupyter clients: the Python scripts in `tests/python/` (jupyter_client,
//! jupyter_kernel_test, nbclient), one `#[test]` each, plus `jupyter kernelspec list` after
//! `ddp-kernel install` and `uninstall`. The harness (sandbox, test Python, time limits) is
//! `ddp-e2e`'s (tests/src/lib.rs).
//!
//! Each test gets a scratch folder: the kernelspec is installed under `<tmp>/jupyter-prefix` and
//! found through `JUPYTER_PATH`; Jupyter's data, runtime and config folders, `TMPDIR` and the ddp
//! workspace (`DDP_WORKSPACE`) are inside it too, so nothing of the user's Jupyter setup is read
//! or written.
//! Every process left behind (the kernel, run supervisors, replicas) is stopped afterwards.
//!
//! - `DDP_JUPYTER_TIMEOUT_S=N`: time limit of each script (default 600 s, 900 s for the runs,
//!   1800 s for `%%ddp train`, whose first build may compile candle);
//! - `DDP_JUPYTER_KEEP=1`: keep the scratch folder of a failed test (its path is printed);
//! - `DDP_NOTEBOOK_WRITE=PATH`: save the notebook executed by `notebook` there (with outputs);
//! - `DDP_BROWSER_SCREENSHOTS=DIR`: where `browser` saves its screenshots (default
//!   `target/browser-screenshots`); `DDP_BROWSER_REQUIRED=1`: fail instead of skipping `browser`
//!   when Chromium or chromedriver is missing; `DDP_BROWSER_ONLY=saved,live,rust`: the parts of
//!   `browser` to run.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use ddp_e2e::{KERNEL_NAME, Sandbox, python, repo, text};
use ddp_workspaces::commands::SampleOptions;
use ddp_workspaces::present::sample::Sampler;
use ddp_workspaces::test_util::{MLP_SPEC, completed_run, gpt_run};

/// The scripts, each run by the test of the same name (`every_script_has_a_test` checks the list).
const SCRIPTS: &[&str] = &[
    "test_kernel_conformance.py",
    "test_signatures.py",
    "test_runs.py",
    "test_notebook.py",
    "test_train.py",
    "test_train_spark.py",
    "test_browser.py",
    "test_sample.py",
];

fn kernel_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ddp-kernel"))
}

/// Runs `kernel/tests/python/SCRIPT` in a fresh sandbox; fails unless it exits 0.
fn run_script(script: &str, args: &[&OsStr], default_limit_s: u64) {
    run_script_with(script, args, &[], default_limit_s);
}

/// [`run_script`] with `env` added to the script's environment.
fn run_script_with(script: &str, args: &[&OsStr], env: &[(&str, &OsStr)], default_limit_s: u64) {
    let path = repo().join("kernel/tests/python").join(script);
    ddp_e2e::run_script(&kernel_bin(), &path, args, env, default_limit_s);
}

#[test]
fn kernel_conformance() {
    run_script("test_kernel_conformance.py", &[], 600);
}

#[test]
fn signatures() {
    run_script("test_signatures.py", &[], 600);
}

#[test]
fn runs() {
    run_script("test_runs.py", &[], 900);
}

#[test]
fn notebook() {
    match std::env::var_os("DDP_NOTEBOOK_WRITE") {
        Some(path) => {
            let path = std::path::absolute(PathBuf::from(path)).unwrap();
            run_script(
                "test_notebook.py",
                &[OsStr::new("--write"), path.as_os_str()],
                600,
            );
        }
        None => run_script("test_notebook.py", &[], 600),
    }
}

/// `examples/notebooks/gpt-shakespeare.ipynb`: trains a GPT for 500 steps and builds a cell's own
/// language model, minutes on two cores, so it runs when asked for (`-- --ignored`, and
/// `scripts/refresh-notebook.sh gpt-shakespeare` to save its outputs).
#[test]
#[ignore = "minutes: trains a GPT and builds a cell (scripts/refresh-notebook.sh gpt-shakespeare)"]
fn gpt_notebook() {
    committed_notebook("gpt-shakespeare.ipynb");
}

/// `examples/notebooks/own-data.ipynb`: trains on an image folder, a CSV table and a tensors file
/// and builds a cell with its own data set, loss and metrics; minutes (a cell's build), so it runs
/// when asked for (`scripts/refresh-notebook.sh own-data` saves its outputs).
#[test]
#[ignore = "minutes: three runs and a cell's build (scripts/refresh-notebook.sh own-data)"]
fn own_data_notebook() {
    committed_notebook("own-data.ipynb");
}

/// Executes `examples/notebooks/NAME` and checks it (`test_notebook.py --notebook`); with
/// `DDP_NOTEBOOK_WRITE`, saves it with its outputs there.
fn committed_notebook(name: &str) {
    let notebook = repo().join("examples/notebooks").join(name);
    let mut args = vec![
        OsStr::new("--notebook").to_owned(),
        notebook.into_os_string(),
    ];
    if let Some(path) = std::env::var_os("DDP_NOTEBOOK_WRITE") {
        args.push(OsStr::new("--write").to_owned());
        args.push(
            std::path::absolute(PathBuf::from(path))
                .unwrap()
                .into_os_string(),
        );
    }
    let args: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    run_script("test_notebook.py", &args, 1800);
}

/// `%%ddp train` cells (`test_train.py`): refused before building, compile errors on the cell's
/// lines, a build interrupted, a cell trained with DDP, a second cell reusing the dependencies.
#[test]
fn train() {
    // A cold build cache compiles candle in release mode first (minutes on 2 cores).
    run_script("test_train.py", &[], 1800);
}

/// A `%%ddp train --on spark` cell (`test_train_spark.py`) on the Spark test cluster
/// (`ddp_e2e::SparkCluster`; skipped without one, a failure in CI).
#[test]
fn train_on_spark() {
    let Some(cluster) = ddp_e2e::SparkCluster::or_skip() else {
        return;
    };
    let master = std::ffi::OsString::from(&cluster.master);
    let spark_python = python().into_os_string();
    let env = [
        ("DDP_TEST_SPARK_MASTER", master.as_os_str()),
        ("DDP_SPARK_PYTHON", spark_python.as_os_str()),
    ];
    run_script_with("test_train_spark.py", &[], &env, 1800);
}

/// `%ddp sample` (`test_sample.py`) on the shared fixture runs of `ddp_workspaces::test_util`
/// (a tiny GPT with its tokenizer and weights, an MLP run) in a workspace of their own, which
/// the script switches to: `fixture.json` names it and the runs, and holds the pieces of text the
/// library generates for the options the script uses, which the kernel must stream exactly.
#[test]
fn sample() {
    let fixtures = tempfile::tempdir().unwrap();
    let ws = fixtures.path().join("ws");
    let gpt = gpt_run(&ws);
    let mlp = completed_run(&ws, MLP_SPEC);
    let options = SampleOptions {
        prompt: "First".into(),
        tokens: 40,
        seed: 7,
        ..SampleOptions::default()
    };
    let (pieces, _) = Sampler::new(gpt.clone(), &options.request())
        .unwrap()
        .collect()
        .unwrap();
    let fixture = serde_json::json!({
        "workspace": ws,
        "gpt": gpt.record.id,
        "mlp": mlp.record.id,
        "options": "--prompt First --tokens 40 --seed 7",
        "pieces": pieces,
    });
    let file = fixtures.path().join("fixture.json");
    std::fs::write(&file, fixture.to_string()).unwrap();
    run_script_with(
        "test_sample.py",
        &[],
        &[("DDP_SAMPLE_FIXTURE", file.as_os_str())],
        600,
    );
}

/// The tutorial in JupyterLab in headless Chromium (`test_browser.py`). Without Chromium and
/// chromedriver it says what it skipped and passes, unless `DDP_BROWSER_REQUIRED=1` (set by
/// scripts/test.sh once it has installed them), where their absence fails it.
#[test]
fn browser() {
    let found = |var: &str, name: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_file())
            .or_else(|| which(name))
    };
    let missing: Vec<&str> = [
        ("DDP_CHROMIUM", "chromium"),
        ("DDP_CHROMEDRIVER", "chromedriver"),
    ]
    .into_iter()
    .filter(|(var, name)| found(var, name).is_none())
    .map(|(_, name)| name)
    .collect();
    if !missing.is_empty() {
        let msg = format!(
            "the browser test needs {} (Debian: apt-get install chromium chromium-driver; \
             or set $DDP_CHROMIUM / $DDP_CHROMEDRIVER)",
            missing.join(" and ")
        );
        assert!(
            std::env::var("DDP_BROWSER_REQUIRED").as_deref() != Ok("1"),
            "{msg}"
        );
        eprintln!("SKIPPED: {msg}");
        return;
    }
    let mut args: Vec<std::ffi::OsString> = Vec::new();
    if let Some(dir) = std::env::var_os("DDP_BROWSER_SCREENSHOTS") {
        args.push("--screenshots".into());
        args.push(std::path::absolute(PathBuf::from(dir)).unwrap().into());
    }
    if let Some(parts) = std::env::var_os("DDP_BROWSER_ONLY") {
        args.push("--only".into());
        args.push(parts);
    }
    let args: Vec<&OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    run_script("test_browser.py", &args, 900);
}

/// `name` on the `PATH`.
fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

#[test]
fn every_script_has_a_test() {
    let dir = repo().join("kernel/tests/python");
    let mut found: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("test_") && n.ends_with(".py"))
        .collect();
    found.sort();
    let mut known: Vec<String> = SCRIPTS.iter().map(|s| s.to_string()).collect();
    known.sort();
    assert_eq!(
        found, known,
        "every tests/python/test_*.py needs its #[test] in tests/jupyter.rs (and SCRIPTS entry)"
    );
    // And each is run by a test here, not only listed.
    let source: String = std::fs::read_to_string(repo().join("kernel/tests/jupyter.rs"))
        .unwrap()
        .split_whitespace()
        .collect();
    for script in SCRIPTS {
        assert!(
            source.contains(&format!("run_script(\"{script}\""))
                || source.contains(&format!("run_script_with(\"{script}\"")),
            "{script} is listed in SCRIPTS but no test here runs it"
        );
    }
}

/// `jupyter kernelspec list` finds the installed kernel; `ddp-kernel uninstall` removes it.
#[test]
fn kernelspec_install_list_uninstall() {
    let _serial = ddp_e2e::serial();
    let python = python();
    let sandbox = Sandbox::new(&kernel_bin());
    let dir = sandbox.kernelspec_dir();

    let list_json = || -> serde_json::Value {
        let o = sandbox
            .command(&python)
            .args(["-m", "jupyter_client.kernelspecapp", "list", "--json"])
            .output()
            .expect("python runs");
        assert!(
            o.status.success(),
            "jupyter kernelspec list --json failed:\n{}{}",
            text(&o.stdout),
            text(&o.stderr)
        );
        serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("kernelspec list --json: {e}:\n{}", text(&o.stdout)))
    };

    // listed, with the spec ddp-kernel wrote
    let listed = list_json();
    let spec = &listed["kernelspecs"][KERNEL_NAME];
    assert!(
        spec.is_object(),
        "`{KERNEL_NAME}` is not listed: {listed:#}"
    );
    let resource_dir = PathBuf::from(spec["resource_dir"].as_str().unwrap_or_default());
    assert_eq!(
        resource_dir.canonicalize().ok(),
        dir.canonicalize().ok(),
        "{listed:#}"
    );
    let argv: Vec<&str> = spec["spec"]["argv"]
        .as_array()
        .unwrap_or_else(|| panic!("no argv: {spec:#}"))
        .iter()
        .map(|a| a.as_str().unwrap_or_default())
        .collect();
    assert!(
        Path::new(argv[0]).is_absolute(),
        "argv[0] is not absolute: {argv:?}"
    );
    assert_eq!(
        Path::new(argv[0]).canonicalize().ok(),
        kernel_bin().canonicalize().ok(),
        "argv[0] is not this ddp-kernel: {argv:?}"
    );
    assert!(argv.contains(&"{connection_file}"), "{argv:?}");
    assert_eq!(spec["spec"]["language"], "rust", "{spec:#}");
    assert_eq!(spec["spec"]["interrupt_mode"], "message", "{spec:#}");
    assert!(
        spec["spec"]["display_name"]
            .as_str()
            .is_some_and(|s| !s.is_empty()),
        "{spec:#}"
    );

    // the human listing, through the `jupyter` command as users run it
    let jupyter = python.with_file_name("jupyter");
    let mut human = sandbox.command(&python);
    human.args(["-m", "jupyter_client.kernelspecapp", "list"]);
    let mut commands = vec![("python -m jupyter_client.kernelspecapp list", human)];
    if jupyter.is_file() {
        let mut cmd = sandbox.command(&jupyter);
        cmd.args(["kernelspec", "list"]);
        commands.push(("jupyter kernelspec list", cmd));
    }
    for (what, mut cmd) in commands {
        let o = cmd.output().expect("runs");
        let out = text(&o.stdout);
        assert!(
            o.status.success(),
            "{what} failed:\n{out}{}",
            text(&o.stderr)
        );
        assert!(
            out.lines().any(|l| {
                let mut words = l.split_whitespace();
                words.next() == Some(KERNEL_NAME)
                    && words.next().is_some_and(|p| {
                        Path::new(p).canonicalize().ok() == dir.canonicalize().ok()
                    })
            }),
            "{what} does not show `{KERNEL_NAME} {}`:\n{out}",
            dir.display()
        );
    }

    // uninstalled
    let o = sandbox
        .command(kernel_bin())
        .arg("uninstall")
        .arg("--prefix")
        .arg(&sandbox.prefix)
        .output()
        .expect("ddp-kernel runs");
    assert!(
        o.status.success(),
        "ddp-kernel uninstall failed ({}):\n{}{}",
        o.status,
        text(&o.stdout),
        text(&o.stderr)
    );
    assert!(
        !dir.exists(),
        "{} is still there after uninstall",
        dir.display()
    );
    let listed = list_json();
    assert!(
        listed["kernelspecs"].get(KERNEL_NAME).is_none(),
        "`{KERNEL_NAME}` is still listed after uninstall: {listed:#}"
    );
}
