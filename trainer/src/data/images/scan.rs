//! The folder walk of an image folder: its classes and its image files, in torchvision's order.
//!
//! `DIR/train/<class>/…` (and `DIR/test/<class>/…` when present). The classes are the sorted names
//! of `train/`'s sub-folders (torchvision's `find_classes`: every directory, symbolic links
//! followed, sorted by name). A class's images are the files under its folder, sub-folders
//! included, whose extension is `png`, `jpg`, `jpeg`, `bmp` or `webp` (any case), hidden files
//! and hidden sub-folders (a name starting with `.`) left out, in torchvision's `make_dataset`
//! order: class by class, and within a class by folder path, then by file name. `test/`'s
//! classes take `train/`'s indices.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::data::parts::listing;
use crate::{Error, Result};

/// The image file extensions read (compared without regard to case).
pub const EXTENSIONS: [&str; 5] = ["png", "jpg", "jpeg", "bmp", "webp"];

/// One image file and its class index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageFile {
    pub path: PathBuf,
    pub class: u32,
}

/// What the walk found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Folder {
    /// Class names, index = position (the sorted folder names of `train/`).
    pub classes: Vec<String>,
    /// `train/`'s images, class by class.
    pub train: Vec<ImageFile>,
    /// `test/`'s images, when the folder has a `test/`.
    pub test: Option<Vec<ImageFile>>,
}

/// True when `name` is an image file name the folder reads: not hidden, with a known extension.
pub fn is_image_name(name: &OsStr) -> bool {
    let name = name.to_string_lossy();
    if name.starts_with('.') {
        return false;
    }
    let Some((_, ext)) = name.rsplit_once('.') else {
        return false;
    };
    EXTENSIONS.iter().any(|e| ext.eq_ignore_ascii_case(e))
}

/// Walks `dir` (see the module docs).
pub fn scan(dir: &Path) -> Result<Folder> {
    if !dir.is_dir() {
        let what = if dir.exists() {
            "is not a folder"
        } else {
            "does not exist"
        };
        return Err(Error::data(
            dir,
            format!(
                "{what}: data.path of an image folder names a folder holding train/<class>/<image> (and optionally test/<class>/<image>)"
            ),
        ));
    }
    let train_dir = dir.join("train");
    if !train_dir.is_dir() {
        let found = listing(dir);
        return Err(Error::data(
            dir,
            format!(
                "has no train/ folder ({found}): an image folder holds train/<class>/<image>, one sub-folder per class, and optionally test/<class>/<image>"
            ),
        ));
    }
    let names = class_dirs(&train_dir)?;
    if names.is_empty() {
        return Err(no_classes(&train_dir, "train")?);
    }
    let classes: Vec<String> = names
        .iter()
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    let mut train = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let files = class_files(&train_dir.join(name))?;
        train.extend(files.into_iter().map(|path| ImageFile {
            path,
            class: i as u32,
        }));
    }
    let test_dir = dir.join("test");
    let test = if test_dir.is_dir() {
        let test_names = class_dirs(&test_dir)?;
        if test_names.is_empty() {
            return Err(no_classes(&test_dir, "test")?);
        }
        let mut test = Vec::new();
        for name in &test_names {
            let Some(i) = names.iter().position(|n| n == name) else {
                return Err(Error::data(
                    test_dir.join(name),
                    format!(
                        "class {:?} is not in train/, whose classes are {}: rename the folder to one of them, or remove it (a model cannot learn a class it never trains on)",
                        name.to_string_lossy(),
                        quoted(&classes)
                    ),
                ));
            };
            let files = class_files(&test_dir.join(name))?;
            test.extend(files.into_iter().map(|path| ImageFile {
                path,
                class: i as u32,
            }));
        }
        Some(test)
    } else {
        None
    };
    Ok(Folder {
        classes,
        train,
        test,
    })
}

/// The error of a `train/` or `test/` folder without class folders.
fn no_classes(dir: &Path, part: &str) -> Result<Error> {
    let loose = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok())
        .filter(|e| is_image_name(&e.file_name()))
        .count();
    let what = if loose > 0 {
        format!("holds {loose} images but no class folders")
    } else {
        "has no class folders".to_string()
    };
    let hint = if part == "test" {
        "; or remove test/ to hold out data.test_fraction of train/ instead"
    } else {
        ""
    };
    Ok(Error::data(
        dir,
        format!(
            "{what}: put each class's images in a folder of its own, {part}/<class>/<image> (the folder's name is the class){hint}"
        ),
    ))
}

/// The sorted names of the folders in `dir` (symbolic links followed), hidden ones included as
/// torchvision does.
fn class_dirs(dir: &Path) -> Result<Vec<OsString>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        if entry.path().is_dir() {
            names.push(entry.file_name());
        }
    }
    names.sort();
    Ok(names)
}

/// The images of one class folder, in `make_dataset` order; an error when it has none.
fn class_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut found: Vec<(OsString, OsString)> = Vec::new();
    let mut others = 0usize;
    let mut seen = HashSet::new();
    walk(dir, &mut found, &mut others, &mut seen)?;
    if found.is_empty() {
        let ignored = if others > 0 {
            format!(
                " ({others} other file{} ignored)",
                if others == 1 { "" } else { "s" }
            )
        } else {
            String::new()
        };
        return Err(Error::data(
            dir,
            format!(
                "class folder has no images{ignored}: add .png, .jpg, .jpeg, .bmp or .webp files to it, or remove the folder"
            ),
        ));
    }
    // os.walk's roots sorted as strings, then each root's file names sorted.
    found.sort();
    Ok(found
        .into_iter()
        .map(|(root, name)| Path::new(&root).join(name))
        .collect())
}

/// Collects `(folder, file name)` of the images under `dir`, following symbolic links once.
fn walk(
    dir: &Path,
    found: &mut Vec<(OsString, OsString)>,
    others: &mut usize,
    seen: &mut HashSet<PathBuf>,
) -> Result<()> {
    let real = dir.canonicalize().map_err(|e| Error::io(dir, e))?;
    if !seen.insert(real) {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name();
        let path = entry.path();
        if path.is_dir() {
            if !name.to_string_lossy().starts_with('.') {
                walk(&path, found, others, seen)?;
            }
        } else if is_image_name(&name) {
            found.push((dir.as_os_str().to_owned(), name));
        } else {
            *others += 1;
        }
    }
    Ok(())
}

/// `"a", "b", "c"` (up to 20 names).
fn quoted(names: &[String]) -> String {
    let mut s: Vec<String> = names.iter().take(20).map(|n| format!("{n:?}")).collect();
    if names.len() > 20 {
        s.push(format!("… ({} in all)", names.len()));
    }
    s.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(p: &Path) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b"x").unwrap();
    }

    fn rel(dir: &Path, files: &[ImageFile]) -> Vec<(String, u32)> {
        files
            .iter()
            .map(|f| {
                let p = f.path.strip_prefix(dir).unwrap();
                (p.to_string_lossy().into_owned(), f.class)
            })
            .collect()
    }

    #[test]
    fn classes_and_files_in_torchvisions_order() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        for f in [
            "train/dog/b.png",
            "train/dog/a.JPG",
            "train/dog/sub2/z.png",
            "train/dog/sub/y.webp",
            "train/dog/sub-x/w.bmp",
            "train/dog/.hidden.png",
            "train/dog/.cache/q.png",
            "train/dog/notes.txt",
            "train/dog/c.jpeg",
            "train/Cat/1.png",
            "train/ant/x.Png",
            "train/ant/x.gif",
            "test/dog/t.png",
            "test/ant/u.png",
            "test/ant/v.jpg",
            "train/readme.md",
        ] {
            touch(&r.join(f));
        }
        let f = scan(r).unwrap();
        // Byte order: upper case before lower case, as Python's sorted().
        assert_eq!(f.classes, ["Cat", "ant", "dog"]);
        assert_eq!(
            rel(r, &f.train),
            [
                ("train/Cat/1.png".into(), 0),
                ("train/ant/x.Png".into(), 1),
                ("train/dog/a.JPG".into(), 2),
                ("train/dog/b.png".into(), 2),
                ("train/dog/c.jpeg".into(), 2),
                ("train/dog/sub/y.webp".into(), 2),
                ("train/dog/sub-x/w.bmp".into(), 2),
                ("train/dog/sub2/z.png".into(), 2),
            ]
        );
        assert_eq!(
            rel(r, f.test.as_ref().unwrap()),
            [
                ("test/ant/u.png".into(), 1),
                ("test/ant/v.jpg".into(), 1),
                ("test/dog/t.png".into(), 2),
            ]
        );
    }

    #[test]
    fn image_names() {
        for (n, want) in [
            ("a.png", true),
            ("a.PNG", true),
            ("a.b.JpEg", true),
            ("x.webp", true),
            ("x.bmp", true),
            ("x.jpg", true),
            (".a.png", false),
            ("png", false),
            ("a.png.txt", false),
            ("a.tif", false),
            ("a.", false),
        ] {
            assert_eq!(is_image_name(OsStr::new(n)), want, "{n}");
        }
    }

    fn err(r: &Path) -> String {
        scan(r).unwrap_err().to_string()
    }

    #[test]
    fn bad_layouts_are_named() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        let e = err(&r.join("nope"));
        assert!(
            e.contains("nope: does not exist: data.path of an image folder"),
            "{e}"
        );
        touch(&r.join("a.png"));
        let e = err(&r.join("a.png"));
        assert!(e.contains("a.png: is not a folder"), "{e}");
        std::fs::create_dir(r.join("pics")).unwrap();
        let e = err(r);
        assert!(
            e.contains("has no train/ folder (it holds a.png, pics/)"),
            "{e}"
        );
        touch(&r.join("train/1.png"));
        touch(&r.join("train/2.png"));
        let e = err(r);
        assert!(
            e.contains("train: holds 2 images but no class folders: put each class's images in a folder of its own, train/<class>/<image>"),
            "{e}"
        );
        touch(&r.join("train/cat/1.png"));
        std::fs::create_dir_all(r.join("train/dog")).unwrap();
        touch(&r.join("train/dog/notes.txt"));
        let e = err(r);
        assert!(
            e.contains("train/dog: class folder has no images (1 other file ignored): add .png, .jpg, .jpeg, .bmp or .webp files to it, or remove the folder"),
            "{e}"
        );
        touch(&r.join("train/dog/1.bmp"));
        std::fs::create_dir_all(r.join("test")).unwrap();
        let e = err(r);
        assert!(
            e.contains("test: has no class folders: put each class's images in a folder of its own, test/<class>/<image> (the folder's name is the class); or remove test/"),
            "{e}"
        );
        touch(&r.join("test/zebra/1.png"));
        let e = err(r);
        assert!(
            e.contains("test/zebra: class \"zebra\" is not in train/, whose classes are \"cat\", \"dog\": rename"),
            "{e}"
        );
        std::fs::remove_dir_all(r.join("test/zebra")).unwrap();
        std::fs::create_dir_all(r.join("test/cat")).unwrap();
        let e = err(r);
        assert!(
            e.contains("test/cat: class folder has no images: add"),
            "{e}"
        );
        touch(&r.join("test/cat/9.webp"));
        let f = scan(r).unwrap();
        assert_eq!((f.train.len(), f.test.unwrap().len()), (2, 1));
    }

    #[test]
    fn linked_folders_are_followed_once() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        touch(&r.join("elsewhere/1.png"));
        touch(&r.join("train/a/2.png"));
        std::os::unix::fs::symlink(r.join("elsewhere"), r.join("train/b")).unwrap();
        std::os::unix::fs::symlink(r.join("train/a"), r.join("train/a/loop")).unwrap();
        let f = scan(r).unwrap();
        assert_eq!(f.classes, ["a", "b"]);
        assert_eq!(
            rel(r, &f.train),
            [("train/a/2.png".into(), 0), ("train/b/1.png".into(), 1)]
        );
    }
}
