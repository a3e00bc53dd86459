//! Where the arrays are: `data.path` resolved into a training part and, where the files have
//! one, a test part, and each part's `x` and `y` arrays opened (mapped).
//!
//! A part is a `.safetensors` file, an `.npz` file, or a folder holding `X.npy` and `Y.npy`
//! (`X`/`Y` being `data.x_key`/`data.y_key`). `data.path` names a part (its test samples are
//! then held out), or a folder holding a training part `train.safetensors`, `train.npz` or
//! `train/`, and optionally a test part `test.safetensors`, `test.npz` or `test/`.

use std::path::{Path, PathBuf};

use super::array::{Array, Store};
use super::{npy, npz, safetensors};
use crate::data::parts::listing;
use crate::error::{Error, Result};

/// The names of the two arrays.
#[derive(Clone, Copy, Debug)]
pub struct Keys<'a> {
    pub x: &'a str,
    pub y: &'a str,
}

/// One part of the data.
#[derive(Clone, Debug, PartialEq)]
pub enum Part {
    Safetensors(PathBuf),
    Npz(PathBuf),
    /// A folder holding `X.npy` and `Y.npy`.
    NpyFolder(PathBuf),
}

/// The parts `data.path` holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    pub train: Part,
    pub test: Option<Part>,
}

const WHAT_IS_READ: &str = "data.path names a .safetensors or .npz file, a folder holding \
     X.npy and Y.npy (X, Y = data.x_key, data.y_key), or a folder holding train.safetensors, \
     train.npz or train/ (and test.*)";

/// Resolves `path` (see the module docs).
pub fn find(path: &Path, keys: Keys) -> Result<Layout> {
    let bad = |msg: String| Err(Error::data(path, msg));
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if meta.is_file() {
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        let part = match ext.to_ascii_lowercase().as_str() {
            "safetensors" => Part::Safetensors(path.into()),
            "npz" => Part::Npz(path.into()),
            "npy" => {
                return bad(format!(
                    "an .npy file holds one array: set data.path to the folder holding {}.npy \
                     and {}.npy (data.x_key and data.y_key name them)",
                    keys.x, keys.y
                ));
            }
            _ => {
                return bad(format!(
                    "not a tensor file (.safetensors or .npz): {WHAT_IS_READ}"
                ));
            }
        };
        return Ok(Layout {
            train: part,
            test: None,
        });
    }
    if let Some(train) = part_named(path, "train")? {
        return Ok(Layout {
            train,
            test: part_named(path, "test")?,
        });
    }
    if path.join(format!("{}.npy", keys.x)).is_file() {
        return Ok(Layout {
            train: Part::NpyFolder(path.into()),
            test: None,
        });
    }
    bad(format!(
        "holds no tensor files ({}): {WHAT_IS_READ}",
        listing(path)
    ))
}

/// The part `DIR/NAME.safetensors`, `DIR/NAME.npz` or `DIR/NAME/`, if one exists; two are an
/// error.
fn part_named(dir: &Path, name: &str) -> Result<Option<Part>> {
    let found: Vec<Part> = [
        Part::Safetensors(dir.join(format!("{name}.safetensors"))),
        Part::Npz(dir.join(format!("{name}.npz"))),
        Part::NpyFolder(dir.join(name)),
    ]
    .into_iter()
    .filter(|p| match p {
        Part::NpyFolder(d) => d.is_dir(),
        Part::Safetensors(f) | Part::Npz(f) => f.is_file(),
    })
    .collect();
    match found.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one.clone())),
        [a, b, ..] => Err(Error::data(
            dir,
            format!(
                "holds two {name} parts, {} and {}: keep one",
                a.path().display(),
                b.path().display()
            ),
        )),
    }
}

impl Part {
    /// The file or folder.
    pub fn path(&self) -> &Path {
        match self {
            Part::Safetensors(p) | Part::Npz(p) | Part::NpyFolder(p) => p,
        }
    }

    /// Maps the part's file(s) and finds its `x` and `y` arrays.
    pub fn open(&self, keys: Keys) -> Result<(Array, Array)> {
        match self {
            Part::Safetensors(p) => {
                let store = Store::map(p)?;
                let h = safetensors::header(&store)?;
                let x = h.array(&store, keys.x, "data.x_key")?;
                Ok((x, h.array(&store, keys.y, "data.y_key")?))
            }
            Part::Npz(p) => {
                let store = Store::map(p)?;
                let mut m = npz::members(&store)?;
                let x = m.array(&store, keys.x, "data.x_key")?;
                Ok((x, m.array(&store, keys.y, "data.y_key")?))
            }
            Part::NpyFolder(dir) => {
                let file = |key: &str, spec_key: &str| -> Result<(PathBuf, String)> {
                    let name = format!("{key}.npy");
                    let file = dir.join(&name);
                    if !file.is_file() {
                        return Err(Error::data(
                            dir,
                            format!(
                                "no {name} ({spec_key} = {key:?}) in this folder ({}): it needs \
                                 {}.npy and {}.npy",
                                listing(dir),
                                keys.x,
                                keys.y
                            ),
                        ));
                    }
                    Ok((file, name))
                };
                let (xf, xn) = file(keys.x, "data.x_key")?;
                let (yf, yn) = file(keys.y, "data.y_key")?;
                let x = npy::array(&Store::map(&xf)?, &xn)?;
                Ok((x, npy::array(&Store::map(&yf)?, &yn)?))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEYS: Keys = Keys { x: "x", y: "y" };

    fn touch(p: &Path) {
        std::fs::write(p, b"").unwrap();
    }

    #[test]
    fn parts_are_found_by_their_names() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let file = root.join("a.safetensors");
        touch(&file);
        assert_eq!(
            find(&file, KEYS).unwrap(),
            Layout {
                train: Part::Safetensors(file.clone()),
                test: None
            }
        );
        let npz = root.join("b.NPZ");
        touch(&npz);
        assert_eq!(find(&npz, KEYS).unwrap().train, Part::Npz(npz.clone()));
        // A folder of .npy files (named by the keys).
        let arrays = root.join("arrays");
        std::fs::create_dir(&arrays).unwrap();
        touch(&arrays.join("images.npy"));
        let keys = Keys {
            x: "images",
            y: "labels",
        };
        assert_eq!(
            find(&arrays, keys).unwrap().train,
            Part::NpyFolder(arrays.clone())
        );
        // train + test.
        let split = root.join("split");
        std::fs::create_dir_all(split.join("test")).unwrap();
        touch(&split.join("train.npz"));
        assert_eq!(
            find(&split, KEYS).unwrap(),
            Layout {
                train: Part::Npz(split.join("train.npz")),
                test: Some(Part::NpyFolder(split.join("test")))
            }
        );
        touch(&split.join("train.safetensors"));
        assert_eq!(
            find(&split, KEYS).unwrap_err().to_string(),
            format!(
                "{}: holds two train parts, {} and {}: keep one",
                split.display(),
                split.join("train.safetensors").display(),
                split.join("train.npz").display()
            )
        );
    }

    #[test]
    fn other_paths_say_what_is_read() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let npy = root.join("x.npy");
        touch(&npy);
        assert_eq!(
            find(&npy, KEYS).unwrap_err().to_string(),
            format!(
                "{}: an .npy file holds one array: set data.path to the folder holding x.npy and \
                 y.npy (data.x_key and data.y_key name them)",
                npy.display()
            )
        );
        let csv = root.join("t.csv");
        touch(&csv);
        let e = find(&csv, KEYS).unwrap_err().to_string();
        assert!(
            e.contains("not a tensor file (.safetensors or .npz): data.path names"),
            "{e}"
        );
        let empty = root.join("empty");
        std::fs::create_dir(&empty).unwrap();
        assert!(
            find(&empty, KEYS)
                .unwrap_err()
                .to_string()
                .contains("holds no tensor files (it is empty): data.path names")
        );
        for i in 0..10 {
            touch(&empty.join(format!("f{i}.txt")));
        }
        std::fs::create_dir(empty.join("sub")).unwrap();
        let e = find(&empty, KEYS).unwrap_err().to_string();
        assert!(
            e.contains("(it holds f0.txt, f1.txt, f2.txt, f3.txt, f4.txt, f5.txt, f6.txt, f7.txt and 3 more)"),
            "{e}"
        );
        let missing = find(&root.join("nope"), KEYS).unwrap_err();
        assert_eq!(missing.exit_code(), crate::error::EXIT_CONFIG);
        // A folder with x.npy but no y.npy.
        let part = Part::NpyFolder(root.to_path_buf());
        let e = part.open(KEYS).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "{}: no y.npy (data.y_key = \"y\") in this folder (it holds empty/, t.csv, x.npy): \
                 it needs x.npy and y.npy",
                root.display()
            )
        );
    }
}
