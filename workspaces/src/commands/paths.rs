//! Paths as typed: completing one being typed, for every front end that offers it (the kernel's
//! magics, the TUI's new-run dialog), and saying where a missing one is ([`missing_path`]: the
//! CLI relative to the shell's folder, the kernel relative to the notebook's).

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

/// The message for `typed`, a path that does not exist, taken relative to `base` unless
/// absolute; `base_is` names that folder ("the current folder", "the notebook's folder"). When
/// the path exists from one of `base`'s ancestors, the message suggests it relative to `base`
/// ([`found_in_ancestors`]); `exists` says whether a path exists.
pub fn missing_path(
    typed: &Path,
    base: &Path,
    base_is: &str,
    exists: impl Fn(&Path) -> bool,
) -> String {
    if typed.is_absolute() {
        return format!("{}: no such file", typed.display());
    }
    let mut msg = format!(
        "{}: no such file (paths are relative to {base_is}, {})",
        typed.display(),
        base.display()
    );
    if let Some(found) = found_in_ancestors(typed, base, exists) {
        msg.push_str(&format!("; did you mean {}?", found.display()));
    }
    msg
}

/// Where the relative path `typed`, missing from `base`, exists when taken from the nearest of
/// `base`'s ancestors that has it, as a path relative to `base`: `examples/mnist.toml` typed in
/// `REPO/examples/notebooks` is `../../examples/mnist.toml` when `REPO/examples/mnist.toml`
/// exists. `exists` says whether a path exists.
pub fn found_in_ancestors(
    typed: &Path,
    base: &Path,
    exists: impl Fn(&Path) -> bool,
) -> Option<PathBuf> {
    if typed.is_absolute() || typed.as_os_str().is_empty() {
        return None;
    }
    let mut up = PathBuf::new();
    for ancestor in base.ancestors().skip(1) {
        up.push("..");
        if exists(&ancestor.join(typed)) {
            return Some(up.join(typed));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_path_is_found_from_the_nearest_ancestor() {
        let exists =
            |p: &Path| p == Path::new("/repo/examples/mnist.toml") || p == Path::new("/top.toml");
        let base = Path::new("/repo/examples/notebooks");
        assert_eq!(
            found_in_ancestors(Path::new("examples/mnist.toml"), base, exists),
            Some(PathBuf::from("../../examples/mnist.toml"))
        );
        assert_eq!(
            found_in_ancestors(Path::new("mnist.toml"), base, exists),
            Some(PathBuf::from("../mnist.toml"))
        );
        assert_eq!(
            found_in_ancestors(Path::new("top.toml"), base, exists),
            Some(PathBuf::from("../../../top.toml"))
        );
        assert_eq!(
            found_in_ancestors(Path::new("other.toml"), base, exists),
            None
        );
        assert_eq!(
            found_in_ancestors(Path::new("/repo/examples/mnist.toml"), base, |_| true),
            None
        );
    }

    #[test]
    fn the_missing_path_message_names_the_base_and_the_suggestion() {
        let exists = |p: &Path| p == Path::new("/repo/examples/mnist.toml");
        let base = Path::new("/repo/examples/notebooks");
        assert_eq!(
            missing_path(
                Path::new("examples/mnist.toml"),
                base,
                "the notebook's folder",
                exists
            ),
            "examples/mnist.toml: no such file (paths are relative to the notebook's folder, \
             /repo/examples/notebooks); did you mean ../../examples/mnist.toml?"
        );
        assert_eq!(
            missing_path(Path::new("nope.toml"), base, "the current folder", exists),
            "nope.toml: no such file (paths are relative to the current folder, \
             /repo/examples/notebooks)"
        );
        assert_eq!(
            missing_path(
                Path::new("/x/nope.toml"),
                base,
                "the current folder",
                exists
            ),
            "/x/nope.toml: no such file"
        );
    }

    #[test]
    fn a_missing_path_is_found_on_disk() {
        let d = tempfile::tempdir().unwrap();
        let notebooks = d.path().join("examples/notebooks");
        std::fs::create_dir_all(&notebooks).unwrap();
        std::fs::write(d.path().join("examples/mnist.toml"), "").unwrap();
        assert_eq!(
            found_in_ancestors(Path::new("examples/mnist.toml"), &notebooks, Path::exists),
            Some(PathBuf::from("../../examples/mnist.toml"))
        );
        assert_eq!(
            found_in_ancestors(Path::new("examples/nope.toml"), &notebooks, Path::exists),
            None
        );
    }

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
