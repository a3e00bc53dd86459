//! Reading a spec: TOML syntax, unknown keys (with line and suggestion), `--set` overrides, types.

use std::path::Path;

use toml::{Table, Value};

use super::Spec;
use crate::{Error, Result};

/// Every key a spec may contain, dotted. `--set` accepts exactly these; anything else in a file is
/// rejected with the closest match. (A unit test keeps this list and [`Spec`] in step.)
pub const KEYS: &[&str] = &[
    "name",
    "model.name",
    "model.layers",
    "model.heads",
    "model.embd",
    "model.block",
    "model.dropout",
    "model.hidden",
    "data.name",
    "data.path",
    "data.val_fraction",
    "data.augment",
    "data.limit_train",
    "data.limit_test",
    "data.task",
    "data.shape",
    "data.classes",
    "data.train_size",
    "data.test_size",
    "data.noise",
    "data.tokenizer",
    "data.dtype",
    "data.vocab_size",
    "data.test_fraction",
    "data.channels",
    "data.size",
    "data.mean",
    "data.std",
    "data.normalize",
    "data.workers",
    "data.cache",
    "data.skip_bad",
    "data.target",
    "data.features",
    "data.x_key",
    "data.y_key",
    "train.epochs",
    "train.steps",
    "train.batch_size",
    "train.optimizer",
    "train.lr",
    "train.lr_scaling",
    "train.momentum",
    "train.nesterov",
    "train.weight_decay",
    "train.decay_all",
    "train.grad_clip",
    "train.betas",
    "train.eps",
    "train.scheduler.kind",
    "train.scheduler.step_size",
    "train.scheduler.gamma",
    "train.scheduler.min_lr",
    "train.scheduler.warmup_epochs",
    "train.scheduler.warmup_steps",
    "train.seed",
    "train.grad_accum",
    "train.max_steps",
    "train.log_every",
    "train.eval_every",
    "train.precision",
    "train.loss_scale",
    "train.loss_scale_growth_every",
    "ddp.replicas",
    "ddp.backend",
    "ddp.devices",
    "ddp.bucket_mb",
    "ddp.timeout_s",
    "ddp.sync_batchnorm",
    "ddp.broadcast_buffers",
    "ddp.threads",
    "ddp.shared_memory",
    "ddp.overlap",
    "ddp.compression",
    "ddp.powersgd_rank",
    "ddp.elastic.min_replicas",
    "ddp.sync.method",
    "ddp.sync.every",
    "ddp.sync.warmup_steps",
    "ddp.sync.outer_lr",
    "ddp.sync.outer_momentum",
    "ddp.sync.fragments",
    "ddp.sync.delay",
    "ddp.sync.mixing",
    "ddp.sync.encoding",
    "ddp.sync.error_feedback",
    "checkpoint.every_epochs",
    "checkpoint.keep_last",
    "checkpoint.every_steps",
    "restart.max_restarts",
    "restart.backoff_s",
    "slurm.nodes",
    "slurm.gpus_per_node",
    "slurm.partition",
    "slurm.time",
    "slurm.account",
    "slurm.qos",
    "slurm.constraint",
    "slurm.sbatch_args",
    "slurm.warn_s",
    "spark.master",
    "spark.tasks",
    "spark.gpus_per_task",
    "spark.wait_s",
    "spark.conf",
];

impl Spec {
    /// Reads, overrides and validates a spec file.
    pub fn load(path: &Path, overrides: &[String]) -> Result<Spec> {
        load(path, overrides)
    }

    /// Parses and validates spec text as if it were the file `path` (named in messages; relative
    /// data paths are resolved against its folder, as [`Spec::load`] does), e.g. a spec written
    /// in a notebook cell. The file need not exist.
    pub fn parse_at(text: &str, path: &Path, overrides: &[String]) -> Result<Spec> {
        parse_at(text, path, overrides)
    }

    /// Parses and validates spec text; `file` is only used in messages.
    pub fn parse(text: &str, file: &Path, overrides: &[String]) -> Result<Spec> {
        parse(text, file, overrides)
    }
}

fn load(path: &Path, overrides: &[String]) -> Result<Spec> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    parse_at(&text, path, overrides)
}

/// [`parse`], then relative data paths resolved as for a spec file at `path` (which need not
/// exist: a spec written in a notebook cell is resolved against the notebook's folder).
fn parse_at(text: &str, path: &Path, overrides: &[String]) -> Result<Spec> {
    let mut spec = parse(text, path, overrides)?;
    if let Some(p) = &spec.data.path {
        spec.data.path = Some(resolve_data_path(path, p));
    }
    Ok(spec)
}

/// Relative data paths are tried against the spec's folder, then taken as given (cwd-relative).
fn resolve_data_path(spec_path: &Path, data: &Path) -> std::path::PathBuf {
    if data.is_absolute() {
        return data.to_path_buf();
    }
    if let Some(dir) = spec_path.parent() {
        let beside = dir.join(data);
        if beside.exists() {
            return beside;
        }
    }
    data.to_path_buf()
}

fn parse(text: &str, file: &Path, overrides: &[String]) -> Result<Spec> {
    let spec_err = |line: Option<usize>, key: &str, msg: String| Error::Spec {
        file: file.to_path_buf(),
        line,
        key: key.to_string(),
        msg,
    };
    let mut table: Table = text.parse().map_err(|e: toml::de::Error| {
        spec_err(e.span().map(|s| line_of(text, s.start)), "", clean(&e))
    })?;
    check_keys(&table, "", text, file)?;
    for o in overrides {
        let (key, value) =
            parse_override(o).map_err(|msg| spec_err(None, o, format!("--set {o}: {msg}")))?;
        if !KEYS.contains(&key.as_str()) {
            return Err(spec_err(
                None,
                &key,
                format!(
                    "--set {key}: no such key{}",
                    suggestion(&key, KEYS.iter().copied())
                ),
            ));
        }
        set_path(&mut table, &key, value)
            .map_err(|msg| spec_err(None, &key, format!("--set {key}: {msg}")))?;
    }
    let spec: Spec = if overrides.is_empty() {
        toml::from_str(text)
            .map_err(|e| spec_err(e.span().map(|s| line_of(text, s.start)), "", clean(&e)))?
    } else {
        // Re-render so a type error can be traced to its key: an override's is reported as
        // `--set KEY=VALUE: ...`, one of the file's own keys at its line in the file.
        let rendered = toml::to_string(&table).expect("a toml Table always renders");
        toml::from_str(&rendered).map_err(|e| {
            let key = e
                .span()
                .and_then(|s| key_at(&rendered, s.start))
                .unwrap_or_default();
            let culprit = overrides.iter().rev().find(|o| {
                let k = o.split_once('=').map_or(o.as_str(), |(k, _)| k).trim();
                !key.is_empty() && (k == key || k.starts_with(&format!("{key}.")))
            });
            match (culprit, toml::from_str::<Spec>(text)) {
                (Some(o), _) => spec_err(None, &key, format!("--set {o}: {}", clean(&e))),
                // The file alone fails the same way: the problem is the file's, at its line.
                (None, Err(fe)) if clean(&fe) == clean(&e) => {
                    spec_err(fe.span().map(|s| line_of(text, s.start)), &key, clean(&fe))
                }
                _ => spec_err(None, &key, format!("after --set overrides: {}", clean(&e))),
            }
        })?
    };
    let mut spec = spec;
    spec.source = file.to_path_buf();
    spec.check()?;
    Ok(spec)
}

/// `key=value` → (key, TOML value). The value is read as TOML (`3`, `0.1`, `true`, `[0, 1]`,
/// `"adam"`), and a bare word that is not TOML is taken as a string (`train.optimizer=adam`).
pub fn parse_override(o: &str) -> std::result::Result<(String, Value), String> {
    let (key, raw) = o
        .split_once('=')
        .ok_or("expected key=value, e.g. train.lr=0.01")?;
    let key = key.trim().to_string();
    if key.is_empty() {
        return Err("empty key".into());
    }
    let raw = raw.trim();
    let value = match format!("v = {raw}").parse::<Table>() {
        Ok(mut t) => t.remove("v").expect("parsed v"),
        Err(_) => Value::String(raw.to_string()),
    };
    Ok((key, value))
}

fn set_path(table: &mut Table, key: &str, value: Value) -> std::result::Result<(), String> {
    let mut parts: Vec<&str> = key.split('.').collect();
    let last = parts.pop().expect("split yields one part");
    let mut cur = table;
    for p in parts {
        let entry = cur
            .entry(p.to_string())
            .or_insert_with(|| Value::Table(Table::new()));
        cur = entry
            .as_table_mut()
            .ok_or_else(|| format!("`{p}` is not a table in the spec"))?;
    }
    cur.insert(last.to_string(), value);
    Ok(())
}

/// Rejects keys that are not in [`KEYS`], naming the line and the closest known key.
fn check_keys(table: &Table, prefix: &str, text: &str, file: &Path) -> Result<()> {
    for (k, v) in table {
        let full = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        let is_section = KEYS
            .iter()
            .any(|known| known.starts_with(&format!("{full}.")));
        if is_section {
            if let Value::Table(t) = v {
                check_keys(t, &full, text, file)?;
                continue;
            }
            return Err(Error::Spec {
                file: file.to_path_buf(),
                line: find_key_line(text, k),
                key: full.clone(),
                msg: format!("`{full}` must be a table (e.g. [{full}])"),
            });
        }
        if !KEYS.contains(&full.as_str()) {
            let depth = full.split('.').count();
            let mut siblings: Vec<String> = KEYS
                .iter()
                .filter(|known| known.starts_with(prefix))
                .map(|known| known.split('.').take(depth).collect::<Vec<_>>().join("."))
                .collect();
            siblings.dedup();
            return Err(Error::Spec {
                file: file.to_path_buf(),
                line: find_key_line(text, k),
                key: full.clone(),
                msg: format!(
                    "unknown key `{full}`{}",
                    suggestion(&full, siblings.iter().map(String::as_str))
                ),
            });
        }
    }
    Ok(())
}

fn suggestion<'a>(key: &str, candidates: impl Iterator<Item = &'a str>) -> String {
    let best = candidates
        .map(|c| (edit_distance(key, c), c))
        .min_by_key(|(d, _)| *d)
        .filter(|(d, c)| *d <= (c.len() / 3).max(2));
    match best {
        Some((_, c)) => format!("; did you mean `{c}`?"),
        None => "; see docs/spec.md for the keys".to_string(),
    }
}

/// Levenshtein distance, for "did you mean" suggestions.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The dotted key (`train.epochs`) on the line holding byte `offset` of a rendered document
/// (`key = value` lines under `[section]` headers); None when that line holds no `=`.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let before = &text[..offset.min(text.len())];
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    let (key, _) = text[start..].lines().next()?.split_once('=')?;
    let key = key.trim().trim_matches('"');
    let section = before[..start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('[') && l.ends_with(']'));
    Some(
        match section.map(|s| s.trim_matches(|c| c == '[' || c == ']').trim()) {
            Some(s) if !s.is_empty() => format!("{s}.{key}"),
            _ => key.to_string(),
        },
    )
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// First line whose key (before `=`, or a `[table]` header) is `key`.
fn find_key_line(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            let l = l.trim();
            let head = l.split('=').next().unwrap_or("").trim().trim_matches('"');
            let header = l.trim_start_matches('[').trim_end_matches(']').trim();
            head == key || header.rsplit('.').next() == Some(key) && l.starts_with('[')
        })
        .map(|i| i + 1)
}

/// toml's message without its multi-line source excerpt (we print file:line ourselves).
fn clean(e: &toml::de::Error) -> String {
    e.message().trim().to_string()
}

#[cfg(test)]
mod tests;
