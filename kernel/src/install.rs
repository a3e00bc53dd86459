//! Installing the kernelspec `ddp` where Jupyter looks for kernels, as
//! `jupyter kernelspec install` would place it: `--user` (the default),
//! `--sys-prefix` (the active Python environment), `--prefix DIR`; with `--warm`, then building
//! a small cell into the cells' build cache (`crate::train::warm`), so that the first
//! `%%ddp train` cell of any workspace compiles only its own crate.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::error::{Error, Result};
use crate::train;

/// The kernelspec's name (the folder under `kernels/`).
pub const KERNEL_NAME: &str = "ddp";
/// What notebooks show as the kernel's name.
pub const DISPLAY_NAME: &str = "Rust (ddp)";

const LOGO_32: &[u8] = include_bytes!("../assets/logo-32x32.png");
const LOGO_64: &[u8] = include_bytes!("../assets/logo-64x64.png");

/// The options of `ddp-kernel install`.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct InstallArgs {
    #[command(flatten)]
    pub place: Where,
    /// Then warm the `%%ddp train` cells' build cache: build a small cell into it (candle and
    /// ddp-trainer in release mode: minutes the first time, seconds once warm), so that the first
    /// cell of any workspace compiles only its own crate. The cache is $DDP_BUILD_CACHE, else
    /// $XDG_CACHE_HOME/ddp/cells, else ~/.cache/ddp/cells.
    #[arg(long)]
    pub warm: bool,
}

/// Where `install` and `uninstall` put the kernelspec (one of them; `--user` by default).
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
#[group(multiple = false)]
pub struct Where {
    /// Into the user's Jupyter data folder (the default).
    #[arg(long)]
    pub user: bool,
    /// Into the active Python environment (virtualenv, conda).
    #[arg(long)]
    pub sys_prefix: bool,
    /// Into DIR/share/jupyter/kernels.
    #[arg(long, value_name = "DIR")]
    pub prefix: Option<PathBuf>,
}

impl Where {
    pub fn destination(&self) -> Destination {
        match (&self.prefix, self.sys_prefix) {
            (Some(p), _) => Destination::Prefix(p.clone()),
            (None, true) => Destination::SysPrefix,
            _ => Destination::User,
        }
    }
}

/// `ddp-kernel install`: the kernelspec for `exe`, then (`--warm`) the warm cache; says what it
/// did on stdout (the warm-up's progress on stderr).
pub fn run(args: &InstallArgs, exe: &Path) -> Result<()> {
    let dir = install(&args.place.destination(), exe)?;
    println!("installed kernelspec {KERNEL_NAME} in {}", dir.display());
    if args.warm {
        warm()?;
    }
    Ok(())
}

/// Builds the built-in cell into the cells' build cache, showing its progress, then says how
/// long it took and where the cache is.
pub fn warm() -> Result<()> {
    let cache = train::shared_cache().ok_or_else(|| {
        Error::Build(format!(
            "--warm: no folder for the cells' build cache ({0}, XDG_CACHE_HOME and HOME are \
             unset): set {0} to one",
            train::CACHE_ENV
        ))
    })?;
    println!(
        "warming the cell build cache {} (compiles candle and ddp-trainer in release mode the \
         first time: 10 to 20 minutes on 2 cores; seconds when it is warm)",
        cache.display()
    );
    train::warm::stop_on_signals();
    let started = Instant::now();
    let stderr = std::io::stderr();
    let tty = stderr.is_terminal();
    let mut progress = train::warm::Progress::new(stderr.lock(), tty);
    let built = train::warm::warm(&cache, &mut progress);
    progress.finish();
    let built = built.map_err(|e| {
        let hint = train::warm::error_hint(&e);
        Error::Build(format!("--warm: {e}\n{hint}"))
    })?;
    println!(
        "the cell build cache is warm: {:.1} s ({}); it is {}\n\
         a `%%ddp train` cell now compiles only its own crate, in any workspace",
        started.elapsed().as_secs_f64(),
        built.summary(),
        cache.display()
    );
    Ok(())
}

/// Where the kernelspec goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// The user's Jupyter data folder (`$JUPYTER_DATA_DIR`, else the platform's).
    User,
    /// The active Python environment's `share/jupyter` (`$VIRTUAL_ENV`, `$CONDA_PREFIX`, else
    /// `sys.prefix` of `python3`).
    SysPrefix,
    /// `DIR/share/jupyter`.
    Prefix(PathBuf),
}

/// The `kernels` folder of `dest`.
pub fn kernels_dir(dest: &Destination) -> Result<PathBuf> {
    Ok(match dest {
        Destination::User => user_data_dir()?.join("kernels"),
        Destination::SysPrefix => sys_prefix()?.join("share/jupyter/kernels"),
        Destination::Prefix(p) => p.join("share/jupyter/kernels"),
    })
}

/// `kernel.json` for the executable `exe`.
pub fn kernel_json(exe: &Path) -> serde_json::Value {
    serde_json::json!({
        "argv": [exe.to_string_lossy(), "-f", "{connection_file}"],
        "display_name": DISPLAY_NAME,
        "language": "rust",
        "interrupt_mode": "message",
        "metadata": { "debugger": false },
    })
}

/// Writes the kernelspec for `exe` into `dest`; returns its folder.
pub fn install(dest: &Destination, exe: &Path) -> Result<PathBuf> {
    let dir = kernels_dir(dest)?.join(KERNEL_NAME);
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let json = serde_json::to_string_pretty(&kernel_json(exe)).expect("JSON renders");
    for (name, bytes) in [
        ("kernel.json", json.as_bytes()),
        ("logo-32x32.png", LOGO_32),
        ("logo-64x64.png", LOGO_64),
    ] {
        ddp_workspaces::files::fsutil::write_atomic(&dir.join(name), bytes)?;
    }
    Ok(dir)
}

/// Removes the kernelspec from `dest`; returns its folder, or `None` when it was not there.
pub fn uninstall(dest: &Destination) -> Result<Option<PathBuf>> {
    let dir = kernels_dir(dest)?.join(KERNEL_NAME);
    if !dir.join("kernel.json").exists() {
        return Ok(None);
    }
    std::fs::remove_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    Ok(Some(dir))
}

/// Jupyter's user data folder (`jupyter --data-dir`).
fn user_data_dir() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("JUPYTER_DATA_DIR") {
        return Ok(PathBuf::from(d));
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .ok_or_else(|| Error::Install("HOME is not set: use --prefix DIR".into()))?;
    if cfg!(target_os = "macos") {
        return Ok(home.join("Library/Jupyter"));
    }
    Ok(match std::env::var_os("XDG_DATA_HOME") {
        Some(x) if !x.is_empty() => PathBuf::from(x).join("jupyter"),
        _ => home.join(".local/share/jupyter"),
    })
}

/// The active Python environment's prefix.
fn sys_prefix() -> Result<PathBuf> {
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(p) = std::env::var_os(var).filter(|p| !p.is_empty()) {
            return Ok(PathBuf::from(p));
        }
    }
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.prefix)"])
        .output()
        .map_err(|e| {
            Error::Install(format!(
                "--sys-prefix: no VIRTUAL_ENV or CONDA_PREFIX, and python3 could not be run ({e}): use --prefix DIR"
            ))
        })?;
    let prefix = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || prefix.is_empty() {
        return Err(Error::Install(
            "--sys-prefix: python3 did not print sys.prefix: use --prefix DIR".into(),
        ));
    }
    Ok(PathBuf::from(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// `ddp-kernel install ...` as main.rs parses it.
    #[derive(Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }

    #[derive(clap::Subcommand, Debug)]
    enum Command {
        Install(InstallArgs),
    }

    fn parse(args: &[&str]) -> std::result::Result<InstallArgs, clap::Error> {
        let argv = ["ddp-kernel", "install"].iter().chain(args);
        Cli::try_parse_from(argv).map(|cli| match cli.command {
            Command::Install(a) => a,
        })
    }

    #[test]
    fn warm_goes_with_any_destination() {
        let a = parse(&[]).unwrap();
        assert!(!a.warm);
        assert_eq!(a.place.destination(), Destination::User);
        let a = parse(&["--warm"]).unwrap();
        assert!(a.warm);
        assert_eq!(a.place.destination(), Destination::User);
        let a = parse(&["--prefix", "/p", "--warm"]).unwrap();
        assert!(a.warm);
        assert_eq!(a.place.destination(), Destination::Prefix("/p".into()));
        let a = parse(&["--warm", "--sys-prefix"]).unwrap();
        assert_eq!(a.place.destination(), Destination::SysPrefix);
        // One destination at most; --warm takes no value.
        assert!(parse(&["--user", "--sys-prefix", "--warm"]).is_err());
        assert!(parse(&["--warm=yes"]).is_err());
    }

    #[test]
    fn installs_and_uninstalls_under_a_prefix() {
        let d = tempfile::tempdir().unwrap();
        let dest = Destination::Prefix(d.path().to_path_buf());
        let dir = install(&dest, Path::new("/opt/bin/ddp-kernel")).unwrap();
        assert_eq!(dir, d.path().join("share/jupyter/kernels/ddp"));
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("kernel.json")).unwrap())
                .unwrap();
        assert_eq!(json["argv"][0], "/opt/bin/ddp-kernel");
        assert_eq!(json["argv"][2], "{connection_file}");
        assert_eq!(json["display_name"], "Rust (ddp)");
        assert_eq!(json["language"], "rust");
        assert_eq!(json["interrupt_mode"], "message");
        assert!(
            std::fs::read(dir.join("logo-64x64.png"))
                .unwrap()
                .starts_with(b"\x89PNG")
        );
        assert_eq!(uninstall(&dest).unwrap(), Some(dir.clone()));
        assert!(!dir.exists());
        assert_eq!(uninstall(&dest).unwrap(), None);
    }
}
