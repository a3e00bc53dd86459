//! The kernel through real Jupyter clients: the Python scripts in `tests/python/` (jupyter_client,
//! jupyter_kernel_test, nbclient), one `#[test]` each, plus `jupyter kernelspec list` after
//! `ddp-kernel install` and `uninstall`.
//!
//! Python comes from `$DDP_TEST_PYTHON`, else `<repo>/.venv-test/bin/python`: the venv that
//! `scripts/python-venv.sh` makes (and `scripts/test.sh` runs first). Without it these tests fail,
//! saying so; they never skip.
//!
//! Each test gets a scratch folder: the kernelspec is installed under `<tmp>/jupyter-prefix` and
//! found through `JUPYTER_PATH`; Jupyter's data, runtime and config folders, `TMPDIR` and the ddp
//! workspace (`DDP_WORKSPACE`) are inside it too, so nothing of the user's Jupyter setup is read
//! or written.
//! Every process left behind (the kernel, run supervisors, replicas) is stopped afterwards.
//!
//! - `DDP_JUPYTER_TIMEOUT_S=N`: time limit of each script (default 600 s, 900 s for the runs);
//! - `DDP_JUPYTER_KEEP=1`: keep the scratch folder of a failed test (its path is printed);
//! - `DDP_NOTEBOOK_WRITE=PATH`: save the notebook executed by `notebook` there (with outputs).

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The scripts, each run by the test of the same name (`every_script_has_a_test` checks the list).
const SCRIPTS: &[&str] = &[
    "test_kernel_conformance.py",
    "test_signatures.py",
    "test_runs.py",
    "test_notebook.py",
];

/// Marks every process started for a test (inherited through the environment), so the ones left
/// behind can be found and stopped.
const SANDBOX_VAR: &str = "DDP_JUPYTER_TEST_SANDBOX";

const KERNEL_NAME: &str = "ddp";

const VENV_HINT: &str = "run `scripts/python-venv.sh` (scripts/test.sh does) to create \
     <repo>/.venv-test, or set DDP_TEST_PYTHON to a Python with the packages it pins";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the kernel crate is in the workspace")
        .to_path_buf()
}

fn kernel_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ddp-kernel"))
}

/// One test at a time: kernels compiling Rust cells and 2-replica trainings side by side would
/// make each other miss their time limits on a 2-core machine.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The test Python: `$DDP_TEST_PYTHON`, else the repository's `.venv-test`, checked to import
/// the Jupyter clients. Fails (never skips) when neither works.
fn python() -> PathBuf {
    const IMPORTS: &str =
        "import jupyter_client, jupyter_core, jupyter_kernel_test, nbclient, nbformat, jsonschema";
    let mut candidates = Vec::new();
    if let Some(p) = std::env::var_os("DDP_TEST_PYTHON").filter(|p| !p.is_empty()) {
        candidates.push(("$DDP_TEST_PYTHON", PathBuf::from(p)));
    }
    candidates.push((
        "the repository's venv",
        repo().join(".venv-test/bin/python"),
    ));
    let mut tried = Vec::new();
    for (what, path) in candidates {
        match Command::new(&path).args(["-c", IMPORTS]).output() {
            Ok(o) if o.status.success() => return path,
            Ok(o) => tried.push(format!(
                "{what} {}: {}",
                path.display(),
                text(&o.stderr).trim().lines().last().unwrap_or_default()
            )),
            Err(e) => tried.push(format!("{what} {}: {e}", path.display())),
        }
    }
    panic!(
        "no Python with the Jupyter test clients: {VENV_HINT}.\ntried:\n  {}",
        tried.join("\n  ")
    );
}

fn limit(default_s: u64) -> Duration {
    let s = std::env::var("DDP_JUPYTER_TIMEOUT_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default_s);
    Duration::from_secs(s)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A scratch folder with the `ddp` kernelspec installed under `<tmp>/jupyter-prefix`.
struct Sandbox {
    tmp: Option<tempfile::TempDir>,
    root: PathBuf,
    prefix: PathBuf,
}

impl Sandbox {
    fn new() -> Sandbox {
        let tmp = tempfile::Builder::new()
            .prefix("ddp-jupyter-")
            .tempdir()
            .expect("a temporary folder");
        let root = tmp.path().canonicalize().expect("the temporary folder");
        let prefix = root.join("jupyter-prefix");
        for dir in [
            "jupyter-data",
            "jupyter-runtime",
            "jupyter-config",
            "evcxr-config",
            "tmp",
        ] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        let sandbox = Sandbox {
            tmp: Some(tmp),
            root,
            prefix,
        };
        sandbox.install();
        sandbox
    }

    fn kernelspec_dir(&self) -> PathBuf {
        self.prefix.join("share/jupyter/kernels").join(KERNEL_NAME)
    }

    fn install(&self) {
        let o = self
            .command(kernel_bin())
            .arg("install")
            .arg("--prefix")
            .arg(&self.prefix)
            .output()
            .expect("ddp-kernel runs");
        assert!(
            o.status.success(),
            "ddp-kernel install --prefix {} failed ({}):\n{}{}",
            self.prefix.display(),
            o.status,
            text(&o.stdout),
            text(&o.stderr)
        );
        let json = self.kernelspec_dir().join("kernel.json");
        assert!(
            json.is_file(),
            "ddp-kernel install --prefix {} wrote no {}",
            self.prefix.display(),
            json.display()
        );
    }

    /// A command run in the sandbox: isolated Jupyter folders, the sandbox's workspace.
    fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(&self.root)
            .env("JUPYTER_PATH", self.prefix.join("share/jupyter"))
            .env("JUPYTER_DATA_DIR", self.root.join("jupyter-data"))
            .env("JUPYTER_RUNTIME_DIR", self.root.join("jupyter-runtime"))
            .env("JUPYTER_CONFIG_DIR", self.root.join("jupyter-config"))
            .env("EVCXR_CONFIG_DIR", self.root.join("evcxr-config"))
            .env("DDP_WORKSPACE", self.root.join("ws"))
            .env("DDP_REPO", repo())
            // connection files, evcxr's build folders: removed with the sandbox
            .env("TMPDIR", self.root.join("tmp"))
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONUNBUFFERED", "1")
            .env(SANDBOX_VAR, &self.root)
            .env_remove("JUPYTER_PREFER_ENV_PATH")
            .env_remove("PYTHONPATH")
            .stdin(Stdio::null());
        cmd
    }

    /// The processes started for this sandbox that are still there (the kernel, run supervisors
    /// and replicas, evcxr's child): their environment carries the sandbox marker.
    #[cfg(target_os = "linux")]
    fn leftovers(&self) -> Vec<(i32, String)> {
        let marker = format!("{SANDBOX_VAR}={}", self.root.display());
        let me = std::process::id() as i32;
        let mut found = Vec::new();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return found;
        };
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            if pid == me {
                continue;
            }
            let dir = entry.path();
            let environ = std::fs::read(dir.join("environ")).unwrap_or_default();
            let cmdline =
                text(&std::fs::read(dir.join("cmdline")).unwrap_or_default()).replace('\0', " ");
            // the marker, or (for a process started with a cleared environment) an argument in
            // the sandbox (a run folder, a connection file)
            if !environ
                .split(|&b| b == 0)
                .any(|var| var == marker.as_bytes())
                && !cmdline.contains(&*self.root.to_string_lossy())
            {
                continue;
            }
            // a zombie is gone already (only its parent's wait is missing)
            let state = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
            if state
                .rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z'))
            {
                continue;
            }
            found.push((pid, cmdline.trim().to_string()));
        }
        found
    }

    #[cfg(not(target_os = "linux"))]
    fn leftovers(&self) -> Vec<(i32, String)> {
        Vec::new()
    }

    /// Stops what was left running (SIGTERM, then SIGKILL after 30 s); returns what it found.
    fn stop_leftovers(&self) -> Vec<(i32, String)> {
        let found = self.leftovers();
        if found.is_empty() {
            return found;
        }
        for (pid, _) in &found {
            // SAFETY: plain kill(2) on a pid that carries this sandbox's marker.
            unsafe { libc::kill(*pid, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline && !self.leftovers().is_empty() {
            std::thread::sleep(Duration::from_millis(200));
        }
        for (pid, _) in self.leftovers() {
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        found
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.stop_leftovers();
        if let Some(mut tmp) = self.tmp.take()
            && std::thread::panicking()
            && std::env::var_os("DDP_JUPYTER_KEEP").is_some()
        {
            tmp.disable_cleanup(true);
            eprintln!("kept the scratch folder {}", self.root.display());
        }
    }
}

/// What a script did: its exit status (None: killed at the time limit), its output, how long it
/// took, and the processes it left running (stopped).
struct Outcome {
    status: Option<ExitStatus>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
    leftovers: Vec<(i32, String)>,
}

/// Runs `cmd` with a time limit, then stops what it left running in `sandbox`.
fn run_limited(sandbox: &Sandbox, mut cmd: Command, limit: Duration) -> Outcome {
    let started = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the test Python starts");
    let reader = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            buf
        })
    };
    let out = reader(Box::new(child.stdout.take().unwrap()));
    let err = reader(Box::new(child.stderr.take().unwrap()));
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the test Python") {
            break Some(status);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let elapsed = started.elapsed();
    // The pipes close when the script and everything that inherited them (a kernel it started)
    // are gone.
    let leftovers = sandbox.stop_leftovers();
    let wait_pipe = |h: std::thread::JoinHandle<Vec<u8>>| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !h.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if h.is_finished() {
            text(&h.join().unwrap_or_default())
        } else {
            "(output still open: a process the script started is still running)".to_string()
        }
    };
    Outcome {
        status,
        stdout: wait_pipe(out),
        stderr: wait_pipe(err),
        elapsed,
        leftovers,
    }
}

/// Runs one script of `tests/python/` in a fresh sandbox and fails (naming it) unless it exits 0.
fn run_script(script: &str, args: &[&OsStr], default_limit_s: u64) {
    let _serial = serial();
    let python = python();
    let sandbox = Sandbox::new();
    let path = repo().join("kernel/tests/python").join(script);
    assert!(path.is_file(), "no {}", path.display());
    let limit = limit(default_limit_s);

    let mut cmd = sandbox.command(&python);
    cmd.arg(&path).args(args);
    let Outcome {
        status,
        stdout,
        stderr,
        elapsed,
        leftovers,
    } = run_limited(&sandbox, cmd, limit);
    let report = format!(
        "--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}\n--- processes left running (stopped) ---\n{}",
        leftovers
            .iter()
            .map(|(pid, cmd)| format!("{pid} {cmd}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    match status {
        None => panic!(
            "{script} timed out after {} s and was killed (DDP_JUPYTER_TIMEOUT_S changes the limit; \
             DDP_JUPYTER_KEEP=1 keeps {})\n{report}",
            limit.as_secs(),
            sandbox.root.display()
        ),
        Some(s) if !s.success() => panic!(
            "{script} failed ({s}) after {:.0} s (DDP_JUPYTER_KEEP=1 keeps {})\n{report}",
            elapsed.as_secs_f64(),
            sandbox.root.display()
        ),
        Some(_) => println!(
            "{script} passed in {:.0} s\n{report}",
            elapsed.as_secs_f64()
        ),
    }
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
}

/// `jupyter kernelspec list` finds the installed kernel; `ddp-kernel uninstall` removes it.
#[test]
fn kernelspec_install_list_uninstall() {
    let _serial = serial();
    let python = python();
    let sandbox = Sandbox::new();
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
