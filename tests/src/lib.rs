//! Running real clients against real `ddp` processes, for the end-to-end tests of the whole
//! workspace (this crate's `tests/`) and of the kernel (`kernel/tests/jupyter.rs`).
//!
//! Layout: [`Sandbox`] (a scratch folder with isolated Jupyter folders, the `ddp` kernelspec
//! installed, a workspace, and every process started in it stopped at the end), [`python`] (the
//! test venv with the Jupyter clients), [`run_script`] (a Python test script in a sandbox, with a
//! time limit), [`run_limited`] / [`run_limited_with`] (any command with a time limit),
//! [`binaries`] and [`trainer`] (the front ends' and the trainer's executables, as
//! `cargo test --workspace` builds them), [`slurm`] (`slurm.rs`: [`SlurmCluster`], the real two-node test Slurm that
//! `scripts/test.sh` brings up, one test at a time), [`spark`] (`spark.rs`: [`SparkCluster`],
//! the standalone test Spark it brings up, one test at a time).
//!
//! Python comes from `$DDP_TEST_PYTHON`, else `<repo>/.venv-test/bin/python`: the venv that
//! `scripts/python-venv.sh` makes (and `scripts/test.sh` runs first). Without it the tests fail,
//! saying so; they never skip.
//!
//! - `DDP_JUPYTER_TIMEOUT_S=N`: the time limit of each script (each test has its default);
//! - `DDP_JUPYTER_KEEP=1`: keep the scratch folder of a failed test (its path is printed).

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ddp_trainer::test_util::fixtures::workspace_binaries;

pub mod slurm;
pub mod spark;
pub use slurm::SlurmCluster;
pub use spark::SparkCluster;

/// Marks every process started for a test (inherited through the environment), so the ones left
/// behind can be found and stopped.
const SANDBOX_VAR: &str = "DDP_JUPYTER_TEST_SANDBOX";

/// The kernelspec's name.
pub const KERNEL_NAME: &str = "ddp";

const VENV_HINT: &str = "run `scripts/python-venv.sh` (scripts/test.sh does) to create \
     <repo>/.venv-test, or set DDP_TEST_PYTHON to a Python with the packages it pins";

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the repository")
        .to_path_buf()
}

/// The build cache of `%%ddp train` cells in tests: `<target>/ddp-cell-cache`, beside the
/// binaries (`<target>/<profile>/`), so candle is compiled once for every test run.
pub fn cell_build_cache(kernel: &Path) -> PathBuf {
    kernel
        .parent()
        .and_then(Path::parent)
        .expect("the kernel binary is in <target>/<profile>/")
        .join("ddp-cell-cache")
}

/// One script at a time (in this process; hold it for any test that starts a kernel): kernels compiling Rust and 2-replica trainings side
/// by side would make each other miss their time limits on a 2-core machine.
pub fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The executables of the front ends, in `<target>/<profile>/`.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub ddp: PathBuf,
    pub tui: PathBuf,
    pub kernel: PathBuf,
}

/// The front ends' executables beside this test's executable (`<target>/<profile>/`), as
/// `cargo test --workspace` built them ([`workspace_binaries`]).
pub fn binaries() -> Binaries {
    let [ddp, tui, kernel] = workspace_binaries(["ddp", "ddp-tui", "ddp-kernel"]);
    Binaries { ddp, tui, kernel }
}

/// The `ddp-trainer` executable (one replica), found as [`binaries`] are.
pub fn trainer() -> PathBuf {
    let [trainer] = workspace_binaries(["ddp-trainer"]);
    trainer
}

/// The test Python: `$DDP_TEST_PYTHON`, else the repository's `.venv-test`, checked to import
/// the Jupyter clients. Fails (never skips) when neither works.
pub fn python() -> PathBuf {
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

/// The time limit of a script: `$DDP_JUPYTER_TIMEOUT_S`, else `default_s`.
pub fn limit(default_s: u64) -> Duration {
    let s = std::env::var("DDP_JUPYTER_TIMEOUT_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default_s);
    Duration::from_secs(s)
}

/// Bytes as text (lossy).
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A scratch folder with the `ddp` kernelspec installed under `<tmp>/jupyter-prefix`.
pub struct Sandbox {
    tmp: Option<tempfile::TempDir>,
    /// The scratch folder (the workspace is `ws/` in it).
    pub root: PathBuf,
    /// The Jupyter prefix the kernelspec is installed under.
    pub prefix: PathBuf,
    /// The `ddp-kernel` the kernelspec runs.
    pub kernel: PathBuf,
}

impl Sandbox {
    /// A scratch folder with `kernel`'s kernelspec installed.
    pub fn new(kernel: &Path) -> Sandbox {
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
            kernel: kernel.to_path_buf(),
        };
        sandbox.install();
        sandbox
    }

    pub fn kernelspec_dir(&self) -> PathBuf {
        self.prefix.join("share/jupyter/kernels").join(KERNEL_NAME)
    }

    fn install(&self) {
        let o = self
            .command(&self.kernel)
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
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(&self.root)
            .env("JUPYTER_PATH", self.prefix.join("share/jupyter"))
            .env("JUPYTER_DATA_DIR", self.root.join("jupyter-data"))
            .env("JUPYTER_RUNTIME_DIR", self.root.join("jupyter-runtime"))
            .env("JUPYTER_CONFIG_DIR", self.root.join("jupyter-config"))
            .env("EVCXR_CONFIG_DIR", self.root.join("evcxr-config"))
            .env("DDP_WORKSPACE", self.root.join("ws"))
            .env("DDP_REPO", repo())
            // `%%ddp train` cells: candle compiled once for every test run, beside the kernel
            .env("DDP_BUILD_CACHE", cell_build_cache(&self.kernel))
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
    pub fn stop_leftovers(&self) -> Vec<(i32, String)> {
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

/// What a command did: its exit status (None: killed at the time limit), its output, how long it
/// took, and the processes it left running (stopped).
pub struct Outcome {
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
    pub leftovers: Vec<(i32, String)>,
}

/// Runs `cmd` with a time limit, then stops what it left running in `sandbox`.
pub fn run_limited(sandbox: &Sandbox, cmd: Command, limit: Duration) -> Outcome {
    run_limited_with(cmd, limit, || sandbox.stop_leftovers())
}

/// Runs `cmd` with its output captured and a time limit (killed when it passes), then
/// `stop_leftovers`: it stops what the command left running (whatever still holds its output
/// open) and returns what it found ([`Outcome::leftovers`]; `Vec::new` where nothing is left).
pub fn run_limited_with(
    mut cmd: Command,
    limit: Duration,
    stop_leftovers: impl FnOnce() -> Vec<(i32, String)>,
) -> Outcome {
    let started = Instant::now();
    let program = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program} does not start: {e}"));
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
        if let Some(status) = child
            .try_wait()
            .unwrap_or_else(|e| panic!("waiting for {program}: {e}"))
        {
            break Some(status);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let elapsed = started.elapsed();
    // The pipes close when the command and everything that inherited them (a kernel it started)
    // are gone.
    let leftovers = stop_leftovers();
    let wait_pipe = |h: std::thread::JoinHandle<Vec<u8>>| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !h.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if h.is_finished() {
            text(&h.join().unwrap_or_default())
        } else {
            "(output still open: a process the command started is still running)".to_string()
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

/// Runs the Python script `path` in a fresh sandbox of `kernel` (with `env` added) and fails,
/// naming it, unless it exits 0 within the limit.
pub fn run_script(
    kernel: &Path,
    path: &Path,
    args: &[&OsStr],
    env: &[(&str, &OsStr)],
    default_limit_s: u64,
) {
    let _serial = serial();
    let python = python();
    let sandbox = Sandbox::new(kernel);
    let script = path.file_name().unwrap_or_default().to_string_lossy();
    assert!(path.is_file(), "no {}", path.display());
    let limit = limit(default_limit_s);

    let mut cmd = sandbox.command(&python);
    cmd.arg(path).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
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
