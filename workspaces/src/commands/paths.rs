//! Completing a path being typed, for every front end that offers it (the kernel's magics, the
//! TUI's new-run dialog).

use std::path::{Path, PathBuf};

/// The completions of `typed` (a path, relative to `cwd` unless absolute or starting with
/// `~/`): the entries of its folder whose names start with its last part, as `typed`'s folder
/// part followed by the name; folders end with `/`; hidden entries only when the last part
/// starts with `.`. Sorted; empty when the folder cannot be read.
pub fn path_candidates(cwd: &Path, typed: &str) -> Vec<String> {
    let (dir_part, name_part) = match typed.rfind('/') {
        Some(i) => (&typed[..=i], &typed[i + 1..]),
        None => ("", typed),
    };
    let dir = if dir_part.is_empty() {
        cwd.to_path_buf()
    } else if let Some(rest) = dir_part.strip_prefix("~/") {
        std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default()
            .join(rest)
    } else {
        // An absolute `dir_part` replaces `cwd`.
        cwd.join(dir_part)
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return vec![];
    };
    let mut out: Vec<String> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with(name_part)
                || (name.starts_with('.') && !name_part.starts_with('.'))
            {
                return None;
            }
            let slash = if e.path().is_dir() { "/" } else { "" };
            Some(format!("{dir_part}{name}{slash}"))
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_of_the_typed_folder_with_slashes_on_folders() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("specs")).unwrap();
        std::fs::write(d.path().join("specs/mnist.toml"), "").unwrap();
        std::fs::write(d.path().join("specs/mlp.toml"), "").unwrap();
        std::fs::write(d.path().join(".hidden"), "").unwrap();
        std::fs::write(d.path().join("spec.toml"), "").unwrap();
        assert_eq!(path_candidates(d.path(), "spec"), ["spec.toml", "specs/"]);
        assert_eq!(
            path_candidates(d.path(), "specs/m"),
            ["specs/mlp.toml", "specs/mnist.toml"]
        );
        assert_eq!(path_candidates(d.path(), ""), ["spec.toml", "specs/"]);
        assert_eq!(path_candidates(d.path(), "."), [".hidden"]);
        let abs = format!("{}/specs/mn", d.path().display());
        assert_eq!(
            path_candidates(Path::new("/nonexistent"), &abs),
            [format!("{}/specs/mnist.toml", d.path().display())]
        );
        assert!(path_candidates(d.path(), "nowhere/x").is_empty());
    }
}
