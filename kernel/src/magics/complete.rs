//! Completion of magic words: magic names, subcommands, options, run addresses (ids, `latest`,
//! `EXPERIMENT@latest`), spec paths, `--x` and `--checkpoint` values. Pure apart from listing the workspace and
//! the folder a path is being typed in.

use std::path::Path;

use ddp_workspaces::Workspace;
use ddp_workspaces::commands::path_candidates;

use super::{MAGIC, cell_options, cell_subcommands, options, subcommands, takes_value};

/// Matches for the word before `cursor` (a char index into `line`, the cell's line the cursor is
/// on) and the char range they replace; `None` when the line is not a magic.
pub fn complete(
    line: &str,
    cursor: usize,
    ws_root: &Path,
    notebook_dir: &Path,
) -> Option<(Vec<String>, usize, usize)> {
    let before: String = line.chars().take(cursor).collect();
    let trimmed = before.trim_start();
    if !trimmed.starts_with('%') {
        return None;
    }
    let word_start = before
        .char_indices()
        .rev()
        .find(|(_, c)| c.is_whitespace())
        .map_or(0, |(i, c)| i + c.len_utf8());
    let word = &before[word_start..];
    let start = before[..word_start].chars().count();
    let words: Vec<&str> = before[..word_start].split_whitespace().collect();
    let prefixed = |all: Vec<String>| -> Vec<String> {
        all.into_iter().filter(|c| c.starts_with(word)).collect()
    };
    let matches = match words.as_slice() {
        // As IPython: `%na` offers the line and the cell magic, `%%na` only the cell magic.
        [] => [format!("%{MAGIC}"), format!("%%{MAGIC}")]
            .into_iter()
            .filter(|c| {
                c.trim_start_matches('%')
                    .starts_with(word.trim_start_matches('%'))
                    && (!word.starts_with("%%") || c.starts_with("%%"))
            })
            .collect(),
        [magic] if magic.trim_start_matches('%') == MAGIC => {
            if magic.starts_with("%%") {
                prefixed(cell_subcommands())
            } else {
                prefixed(subcommands())
            }
        }
        [magic, sub, rest @ ..] if magic.trim_start_matches('%') == MAGIC => {
            let sub = *sub;
            let previous = rest.last().copied();
            let cell = magic.starts_with("%%");
            if word.starts_with('-') {
                prefixed(if cell {
                    cell_options(sub)
                } else {
                    options(sub)
                })
            } else if previous == Some("--x") {
                prefixed(vec!["step".into(), "epoch".into(), "time".into()])
            } else if previous == Some("--checkpoint") {
                // Or a path: typed as it is.
                prefixed(vec!["latest".into(), "best".into()])
            } else if previous.is_some_and(|p| p.starts_with("--") && takes_value(cell, sub, p)) {
                // An option's value: nothing to offer.
                Vec::new()
            } else if cell {
                // `%%ddp train SPEC`; `%%ddp run` takes no positional word.
                match sub {
                    "train" if rest.is_empty() => spec_paths(word, notebook_dir),
                    _ => Vec::new(),
                }
            } else {
                match sub {
                    "run" if rest.is_empty() => spec_paths(word, notebook_dir),
                    "watch" | "wait" | "show" | "logs" | "stop" | "resume" | "compare" | "plot"
                    | "sample"
                        if rest.is_empty() || matches!(sub, "compare" | "plot") =>
                    {
                        prefixed(run_addresses(ws_root))
                    }
                    "help" if rest.is_empty() => prefixed(subcommands()),
                    "workspace" if rest.is_empty() => spec_paths(word, notebook_dir)
                        .into_iter()
                        .filter(|p| p.ends_with('/'))
                        .collect(),
                    _ => Vec::new(),
                }
            }
        }
        _ => Vec::new(),
    };
    Some((matches, start, cursor))
}

/// `latest`, every `EXPERIMENT@latest`, then the run ids, newest first.
fn run_addresses(ws_root: &Path) -> Vec<String> {
    let Ok(ws) = Workspace::open(ws_root) else {
        return Vec::new();
    };
    // From the run index (a workspace of thousands of runs completes at once).
    let mut index = ddp_workspaces::index::Index::open_or_memory(&ws.root);
    let Ok(runs) = index.refresh(&ws).and_then(|_| index.all()) else {
        return Vec::new();
    };
    let runs: Vec<_> = runs.into_iter().map(|r| r.run).collect();
    let mut out = vec!["latest".to_string()];
    for r in &runs {
        let e = format!("{}@latest", r.record.experiment);
        if !out.contains(&e) {
            out.push(e);
        }
    }
    out.extend(runs.iter().map(|r| r.record.id.clone()));
    out
}

/// Folders (with a trailing `/`) and `.toml` files completing `word`, relative to the notebook.
fn spec_paths(word: &str, notebook_dir: &Path) -> Vec<String> {
    path_candidates(notebook_dir, word)
        .into_iter()
        .filter(|p| p.ends_with('/') || p.ends_with(".toml"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(line: &str, dir: &Path) -> (Vec<String>, usize, usize) {
        complete(line, line.chars().count(), &dir.join("ws"), dir).unwrap()
    }

    #[test]
    fn magic_names_subcommands_and_options() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(
            c("%dd", d.path()),
            (vec!["%ddp".into(), "%%ddp".into()], 0, 3)
        );
        assert_eq!(c("%%d", d.path()).0, vec!["%%ddp".to_string()]);
        assert_eq!(
            c("%ddp l", d.path()),
            (vec!["ls".into(), "logs".into()], 5, 6)
        );
        assert_eq!(
            c("%ddp run x.toml --w", d.path()).0,
            vec!["--wait".to_string()]
        );
        assert_eq!(
            c("%ddp plot latest --x e", d.path()).0,
            vec!["epoch".to_string()]
        );
        assert_eq!(
            c("%ddp sample latest --checkpoint b", d.path()).0,
            vec!["best".to_string()]
        );
        assert_eq!(
            c("%ddp sample latest --top", d.path()).0,
            vec!["--top-k".to_string()]
        );
        assert_eq!(c("%%ddp r", d.path()).0, vec!["run".to_string()]);
        assert_eq!(c("%%ddp t", d.path()).0, vec!["train".to_string()]);
        assert_eq!(
            c("%%ddp train x.toml --fe", d.path()).0,
            vec!["--features".to_string()]
        );
        assert!(c("%%ddp run --set ", d.path()).0.is_empty());
        assert!(complete("let x = 1", 9, d.path(), d.path()).is_none());
    }

    #[test]
    fn spec_paths_are_toml_files_and_folders() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("specs")).unwrap();
        std::fs::write(d.path().join("specs/mnist.toml"), "").unwrap();
        std::fs::write(d.path().join("specs/notes.txt"), "").unwrap();
        std::fs::write(d.path().join("mlp.toml"), "").unwrap();
        assert_eq!(
            c("%ddp run ", d.path()).0,
            vec!["mlp.toml".to_string(), "specs/".into()]
        );
        assert_eq!(
            c("%ddp run specs/m", d.path()),
            (vec!["specs/mnist.toml".into()], 9, 16)
        );
    }
}
