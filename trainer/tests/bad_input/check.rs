//! Running one bad-input case: its files, its processes, and the checks of their exit codes,
//! messages and run folder.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use super::cases::*;
use crate::common::*;

/// Deadline for every process of a case (they should all fail well before it).
const QUICK: Duration = Duration::from_secs(30);

/// The files of one case, for its placeholders.
struct Files {
    spec: PathBuf,
    /// The data directory (the shipped sample's for [`Input::Sample`]).
    data: PathBuf,
    port: u16,
}

impl Case {
    /// Runs the case in a fresh directory and checks everything it says (panics naming it).
    pub fn check(&self) {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let spec = self.input.write(dir.path());
        let data = match &self.input {
            Input::Sample { .. } => mnist_dir(),
            Input::Data { data, .. } => dir.path().join(data.dir_name()),
            Input::Text { .. } => dir.path().join("text"),
        };
        let holder = matches!(self.launch, Launch::BusyPort)
            .then(|| std::net::TcpListener::bind("127.0.0.1:0").unwrap());
        let port = match &holder {
            Some(h) => h.local_addr().unwrap().port(),
            None => free_port(),
        };
        let files = Files { spec, data, port };
        let start = Instant::now();
        let mut children = self.spawn(&files, &out);
        let outputs: Vec<(Output, Duration)> = children
            .iter_mut()
            .map(|c| (wait_output(c.take(), QUICK), start.elapsed()))
            .collect();
        drop(holder);
        assert_eq!(outputs.len(), self.says.len(), "[{}] processes", self.name);
        for (p, ((o, took), says)) in outputs.iter().zip(self.says).enumerate() {
            let name = format!("{} (process {p})", self.name);
            assert_exit(&name, o, self.exit);
            assert!(
                self.took.contains(took),
                "[{name}] took {took:?}, expected {:?}\n{}",
                self.took,
                text(o)
            );
            let e = stderr(o);
            for needle in *says {
                assert_says(&name, o, &e, &files.expand(needle));
            }
        }
        assert_nothing_half_written(self.name, &out);
    }

    /// Starts the trainer processes of the case, in launch order.
    fn spawn(&self, files: &Files, out: &Path) -> Vec<ChildGuard> {
        let single = |extra: &[&str]| {
            let mut c = trainer();
            c.arg(&files.spec).arg("--out").arg(out).args(extra);
            for s in self.sets {
                c.arg("--set").arg(s);
            }
            let child = c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn();
            vec![child.unwrap()]
        };
        let ranks = |ranks: &[Rank]| {
            let ranks = ranks.iter().map(|r| {
                let env: Vec<(&str, &str)> =
                    r.token.map(|t| ("DDP_TOKEN", t)).into_iter().collect();
                spawn_rank(
                    &files.spec,
                    out,
                    r.rank,
                    r.world,
                    files.port,
                    &env,
                    self.sets,
                )
            });
            ranks.collect()
        };
        let children = match self.launch {
            Launch::Single => single(&[]),
            Launch::Standalone(n) => single(&["--standalone", "--nproc", &n.to_string()]),
            Launch::Ranks(r) => ranks(r),
            Launch::BusyPort => ranks(&[rank(0, 2, None)]),
        };
        children.into_iter().map(ChildGuard::new).collect()
    }
}

impl Files {
    /// `template` with its placeholders filled in.
    fn expand(&self, template: &str) -> String {
        let mut out = String::new();
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let close = open + rest[open..].find('}').expect("placeholder without `}`");
            let key = &rest[open + 1..close];
            let value = match key {
                "spec" => self.spec.display().to_string(),
                "data" => self.data.display().to_string(),
                "images" => self.data.join(IMAGES).display().to_string(),
                "labels" => self.data.join(LABELS).display().to_string(),
                "images.gz" => self.data.join(IMAGES_GZ).display().to_string(),
                "port" => self.port.to_string(),
                _ => match key.strip_prefix("line:") {
                    Some(prefix) => line_of(&self.spec, prefix).to_string(),
                    None => panic!("unknown placeholder {{{key}}} in {template:?}"),
                },
            };
            out.push_str(&value);
            rest = &rest[close + 1..];
        }
        out.push_str(rest);
        out
    }
}

impl Input {
    /// Writes the spec (and its data) into `dir`; returns the spec's path.
    fn write(&self, dir: &Path) -> PathBuf {
        match self {
            Input::Sample { model, body } => write_spec(dir, model, body),
            Input::Data { data, body } => {
                let path = dir.join(data.dir_name());
                data.make(&path);
                write_spec_reading(dir, "mnist-cnn", &path, body)
            }
            Input::Text { data, files } => {
                let path = dir.join("text");
                std::fs::create_dir(&path).unwrap();
                for (name, file) in *files {
                    std::fs::write(path.join(name), file.bytes()).unwrap();
                }
                let spec = dir.join("spec.toml");
                let text = format!(
                    "name = \"t\"\n[model]\nname = \"gpt\"\nlayers = 1\nheads = 2\nembd = 16\nblock = 8\n[data]\n{data}[train]\nsteps = 2\nbatch_size = 2\n"
                );
                std::fs::write(&spec, text).unwrap();
                spec
            }
        }
    }
}

impl TextFile {
    fn bytes(&self) -> Vec<u8> {
        match *self {
            TextFile::Bytes(b) => b.to_vec(),
            TextFile::U16 { n, bad } => (0..n)
                .flat_map(|i| match bad {
                    Some((at, v)) if at == i => v.to_le_bytes(),
                    _ => 1u16.to_le_bytes(),
                })
                .collect(),
        }
    }
}

impl DataDir {
    fn dir_name(&self) -> &'static str {
        match self {
            DataDir::Empty => "empty",
            DataDir::Missing => "no-such-dir",
            DataDir::TruncatedGzip | DataDir::Edited { .. } => "data",
        }
    }

    fn make(&self, data: &Path) {
        match self {
            DataDir::Empty => std::fs::create_dir(data).unwrap(),
            DataDir::Missing => {}
            DataDir::TruncatedGzip => {
                copy_mnist(data, &[]);
                let images = data.join(IMAGES_GZ);
                let len = std::fs::metadata(&images).unwrap().len();
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&images)
                    .unwrap()
                    .set_len(len / 2)
                    .unwrap();
            }
            DataDir::Edited { skip, files } => {
                copy_mnist(data, skip);
                for (name, idx) in *files {
                    std::fs::write(data.join(name), idx.bytes()).unwrap();
                }
            }
        }
    }
}

impl Idx {
    fn bytes(&self) -> Vec<u8> {
        match *self {
            Idx::Images {
                magic,
                n,
                h,
                w,
                cut,
            } => {
                let mut b = idx_images(magic, n, h, w);
                b.truncate(b.len() - cut);
                b
            }
            Idx::Labels { n, bad } => {
                let mut b = idx_labels(n);
                if let Some((i, v)) = bad {
                    b[8 + i] = v;
                }
                b
            }
        }
    }
}

/// 1-based line of the first line of `file` that starts with `prefix`.
pub fn line_of(file: &Path, prefix: &str) -> usize {
    let text = std::fs::read_to_string(file).unwrap();
    text.lines()
        .position(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` in {text}"))
        + 1
}

/// Copies the shipped MNIST sample's files into `dst` (created), except those named in `skip`.
pub fn copy_mnist(dst: &Path, skip: &[&str]) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(mnist_dir()).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".gz") && !skip.contains(&name.as_str()) {
            std::fs::copy(e.path(), dst.join(&name)).unwrap();
        }
    }
}

/// A plain (not gzipped) IDX images file: `magic`, then n × h × w, then n·h·w pixel bytes.
pub fn idx_images(magic: u32, n: u32, h: u32, w: u32) -> Vec<u8> {
    let mut b = Vec::new();
    for v in [magic, n, h, w] {
        b.extend_from_slice(&v.to_be_bytes());
    }
    b.extend((0..(n * h * w) as usize).map(|i| (i % 251) as u8));
    b
}

/// A plain IDX labels file with `n` labels 0..=9.
pub fn idx_labels(n: u32) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&0x0000_0801u32.to_be_bytes());
    b.extend_from_slice(&n.to_be_bytes());
    b.extend((0..n).map(|i| (i % 10) as u8));
    b
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn assert_exit(case: &str, o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "[{case}] expected exit code {code}, got {:?}\n{}",
        o.status,
        text(o)
    );
}

/// `needle` occurs in `haystack` (the process output), with the whole output on failure.
pub fn assert_says(case: &str, o: &Output, haystack: &str, needle: &str) {
    assert!(
        haystack.contains(needle),
        "[{case}] expected the message to contain {needle:?}\n{}",
        text(o)
    );
}

/// Nothing half-written in the run folder: no final model, no checkpoint, no temporary file.
/// (Metrics, TensorBoard events and logs are append-only records and may exist.)
pub fn assert_nothing_half_written(case: &str, out: &Path) {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, found);
            }
            found.push(p);
        }
    }
    let mut files = Vec::new();
    walk(out, &mut files);
    let bad: Vec<&PathBuf> = files
        .iter()
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name == "model.safetensors"
                || name.contains(".tmp")
                || p.starts_with(out.join("checkpoints")) && p.is_file()
        })
        .collect();
    assert!(
        bad.is_empty(),
        "[{case}] half-written output left in {}: {bad:?}",
        out.display()
    );
}
