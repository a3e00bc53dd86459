//! The spec rules of users' own data (`image-folder`, `csv`, `parquet`, `tensors`, `custom`):
//! which keys belong to which format, and the ranges of their values. A key that a format does
//! not read is refused by name, so a typo'd intent never trains silently without it.

use super::{DataName, ModelName, Normalize, NormalizeKeyword, Spec, SyntheticTask};
use crate::Result;

impl Spec {
    /// The rules of own data; see the module docs.
    pub(super) fn check_own_data(&self) -> Result<()> {
        let d = &self.data;
        let name = d.name;
        let bad = |key: &str, msg: String| Err(self.error(key, msg));
        let only = |key: &str, set: bool, fits: bool, formats: &str| -> Result<()> {
            if set && !fits {
                return bad(
                    key,
                    format!(
                        "applies to data.name = {formats} only, not {:?}: remove it",
                        label(name)
                    ),
                );
            }
            Ok(())
        };
        let image = name == DataName::ImageFolder;
        only(
            "data.channels",
            d.channels.is_some(),
            image,
            "\"image-folder\"",
        )?;
        only("data.size", d.size.is_some(), image, "\"image-folder\"")?;
        only("data.mean", d.mean.is_some(), image, "\"image-folder\"")?;
        only("data.std", d.std.is_some(), image, "\"image-folder\"")?;
        only("data.cache", d.cache.is_some(), image, "\"image-folder\"")?;
        only("data.skip_bad", d.skip_bad, image, "\"image-folder\"")?;
        let table = name.is_table();
        only(
            "data.target",
            d.target.is_some(),
            table,
            "\"csv\" or \"parquet\"",
        )?;
        only(
            "data.features",
            d.features.is_some(),
            table,
            "\"csv\" or \"parquet\"",
        )?;
        let tensors = name == DataName::Tensors;
        only("data.x_key", d.x_key.is_some(), tensors, "\"tensors\"")?;
        only("data.y_key", d.y_key.is_some(), tensors, "\"tensors\"")?;
        only(
            "data.test_fraction",
            d.test_fraction.is_some(),
            name.is_own_files(),
            "\"image-folder\", \"csv\", \"parquet\" or \"tensors\"",
        )?;
        only(
            "data.workers",
            d.workers.is_some(),
            image || tensors || name == DataName::Custom,
            "\"image-folder\", \"tensors\" or \"custom\"",
        )?;
        only(
            "data.normalize",
            d.normalize.is_some(),
            image || table,
            "\"image-folder\", \"csv\" or \"parquet\"",
        )?;
        only(
            "data.augment",
            d.augment == Some(true),
            !(table || tensors),
            "images (\"cifar10\", \"image-folder\", ...)",
        )?;
        if self.model.hidden.is_some() && self.model.name != ModelName::Mlp {
            return bad(
                "model.hidden",
                "applies to model.name = \"mlp\" only (its hidden layers' widths): remove it"
                    .into(),
            );
        }
        if let Some(h) = &self.model.hidden
            && h.contains(&0)
        {
            return bad(
                "model.hidden",
                format!("{h:?} has a layer of width 0: every hidden layer needs at least 1 unit"),
            );
        }
        if let Some(f) = d.test_fraction
            && !(f > 0.0 && f < 1.0)
        {
            return bad(
                "data.test_fraction",
                format!("must be in (0, 1) (the share of samples held out for testing), got {f}"),
            );
        }
        if let Some(c) = d.channels
            && c != 1
            && c != 3
        {
            return bad(
                "data.channels",
                format!("must be 1 (grayscale) or 3 (RGB), got {c}"),
            );
        }
        if let Some([h, w]) = d.size
            && (h == 0 || w == 0)
        {
            return bad(
                "data.size",
                format!(
                    "[{h}, {w}] has a zero side: give [height, width] in pixels, e.g. [28, 28]"
                ),
            );
        }
        self.check_mean_std()?;
        match d.normalize {
            Some(Normalize::Keyword(NormalizeKeyword::Auto)) if table => {
                return bad(
                    "data.normalize",
                    "\"auto\" is for image folders: a table's features are standardised with normalize = true".into(),
                );
            }
            _ => {}
        }
        if image && d.task == SyntheticTask::Regression {
            return bad(
                "data.task",
                "an image folder's targets are its class folders: data.task = \"regression\" does not apply; remove it".into(),
            );
        }
        if table && d.target.as_deref().is_none_or(str::is_empty) {
            return bad(
                "data.target",
                format!(
                    "is required for data.name = {:?}: the name of the label column, e.g. target = \"label\"",
                    label(name)
                ),
            );
        }
        if let Some(f) = &d.features {
            if f.is_empty() {
                return bad(
                    "data.features",
                    "is empty: list the input columns, or leave it out to use every numeric column but the target".into(),
                );
            }
            if let Some(t) = &d.target
                && f.contains(t)
            {
                return bad(
                    "data.features",
                    format!("contains the target column {t:?}: a model may not see its label"),
                );
            }
        }
        Ok(())
    }

    /// `data.mean` and `data.std`: both or neither, one value per channel, std positive, not
    /// with `normalize = "auto"`.
    fn check_mean_std(&self) -> Result<()> {
        let d = &self.data;
        let bad = |key: &str, msg: String| Err(self.error(key, msg));
        match (&d.mean, &d.std) {
            (None, None) => Ok(()),
            (Some(_), None) => bad(
                "data.std",
                "is missing: data.mean needs data.std (one value per channel)".into(),
            ),
            (None, Some(_)) => bad(
                "data.mean",
                "is missing: data.std needs data.mean (one value per channel)".into(),
            ),
            (Some(m), Some(s)) => {
                if matches!(
                    d.normalize,
                    Some(Normalize::Keyword(_) | Normalize::Flag(true))
                ) {
                    return bad(
                        "data.normalize",
                        "and data.mean/data.std are both set: give the figures, or let normalize = \"auto\" compute them, not both".into(),
                    );
                }
                if m.len() != s.len() {
                    return bad(
                        "data.std",
                        format!(
                            "has {} values but data.mean has {}: give one per channel",
                            s.len(),
                            m.len()
                        ),
                    );
                }
                if let Some(c) = d.channels
                    && m.len() != c
                {
                    return bad(
                        "data.mean",
                        format!(
                            "has {} values for data.channels = {c}: give one per channel",
                            m.len()
                        ),
                    );
                }
                if let Some(v) = s.iter().find(|v| !(**v > 0.0 && v.is_finite())) {
                    return bad(
                        "data.std",
                        format!("contains {v}: every standard deviation must be positive"),
                    );
                }
                Ok(())
            }
        }
    }
}

/// A data name as the spec spells it.
fn label(name: DataName) -> String {
    serde_json::to_value(name)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{name:?}"))
}

#[cfg(test)]
mod tests {
    use crate::spec::Spec;

    const IMAGES: &str = r#"
name = "own"
[model]
name = "mnist-cnn"
[data]
name = "image-folder"
path = "pngs"
"#;

    const TABLE: &str = r#"
name = "own"
[model]
name = "mlp"
[data]
name = "csv"
path = "t.csv"
target = "label"
"#;

    fn check(text: &str, sets: &[&str]) -> Result<Spec, String> {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        Spec::parse_at(text, std::path::Path::new("o.toml"), &sets).map_err(|e| e.to_string())
    }

    #[test]
    fn every_format_reads_its_keys() {
        let s = check(
            IMAGES,
            &[
                "data.channels=3",
                "data.size=[32, 32]",
                "data.mean=[0.5, 0.5, 0.5]",
                "data.std=[0.25, 0.25, 0.25]",
                "data.cache=\"none\"",
                "data.skip_bad=true",
                "data.workers=2",
                "data.test_fraction=0.25",
                "data.augment=true",
            ],
        )
        .unwrap();
        assert_eq!(s.data.size, Some([32, 32]));
        assert_eq!(s.data.cache, Some(crate::spec::CacheMode::None));
        let s = check(IMAGES, &["data.normalize=\"auto\""]).unwrap();
        assert_eq!(
            s.data.normalize,
            Some(crate::spec::Normalize::Keyword(
                crate::spec::NormalizeKeyword::Auto
            ))
        );
        let s = check(
            TABLE,
            &[
                "data.features=[\"a\", \"b\"]",
                "data.normalize=true",
                "data.task=\"regression\"",
                "model.hidden=[64, 32]",
            ],
        )
        .unwrap();
        assert_eq!(s.model.hidden, Some(vec![64, 32]));
        let t = TABLE
            .replace("csv", "tensors")
            .replace("target = \"label\"\n", "");
        let s = check(&t, &["data.x_key=\"images\"", "data.y_key=\"labels\""]).unwrap();
        assert_eq!(s.data.x_key.as_deref(), Some("images"));
    }

    #[test]
    fn keys_of_other_formats_and_bad_values_are_refused_by_name() {
        let cases: &[(&str, &[&str], &str)] = &[
            (
                TABLE,
                &["data.channels=1"],
                "data.channels: applies to data.name = \"image-folder\" only, not \"csv\": remove it",
            ),
            (
                IMAGES,
                &["data.target=\"y\""],
                "data.target: applies to data.name = \"csv\" or \"parquet\" only, not \"image-folder\"",
            ),
            (
                IMAGES,
                &["data.x_key=\"x\""],
                "data.x_key: applies to data.name = \"tensors\" only",
            ),
            (
                TABLE,
                &["data.augment=true"],
                "data.augment: applies to data.name = images",
            ),
            (
                IMAGES,
                &["model.hidden=[8]"],
                "model.hidden: applies to model.name = \"mlp\" only",
            ),
            (
                TABLE,
                &["model.hidden=[8, 0]"],
                "model.hidden: [8, 0] has a layer of width 0",
            ),
            (
                IMAGES,
                &["data.test_fraction=1.0"],
                "data.test_fraction: must be in (0, 1)",
            ),
            (
                IMAGES,
                &["data.channels=2"],
                "data.channels: must be 1 (grayscale) or 3 (RGB), got 2",
            ),
            (
                IMAGES,
                &["data.size=[0, 28]"],
                "data.size: [0, 28] has a zero side",
            ),
            (IMAGES, &["data.mean=[0.5]"], "data.std: is missing"),
            (
                IMAGES,
                &["data.mean=[0.5]", "data.std=[0.2, 0.2]"],
                "data.std: has 2 values but data.mean has 1",
            ),
            (
                IMAGES,
                &["data.channels=3", "data.mean=[0.5]", "data.std=[0.2]"],
                "data.mean: has 1 values for data.channels = 3",
            ),
            (
                IMAGES,
                &["data.mean=[0.5]", "data.std=[0]"],
                "data.std: contains 0: every standard deviation must be positive",
            ),
            (
                IMAGES,
                &[
                    "data.mean=[0.5]",
                    "data.std=[0.2]",
                    "data.normalize=\"auto\"",
                ],
                "data.normalize: and data.mean/data.std are both set",
            ),
            (
                TABLE,
                &["data.normalize=\"auto\""],
                "data.normalize: \"auto\" is for image folders",
            ),
            (
                IMAGES,
                &["data.task=\"regression\""],
                "data.task: an image folder's targets are its class folders",
            ),
            (
                TABLE,
                &["data.target=\"\""],
                "data.target: is required for data.name = \"csv\"",
            ),
            (
                TABLE,
                &["data.features=[\"a\", \"label\"]"],
                "data.features: contains the target column \"label\"",
            ),
            (TABLE, &["data.features=[]"], "data.features: is empty"),
            (
                TABLE,
                &["data.workers=2"],
                "data.workers: applies to data.name = \"image-folder\", \"tensors\" or \"custom\" only",
            ),
        ];
        for (text, sets, want) in cases {
            let err = check(text, sets).unwrap_err();
            assert!(err.contains(want), "{sets:?}: {err}");
            assert!(err.starts_with("o.toml"), "{err}");
        }
        let no_target = TABLE.replace("target = \"label\"\n", "");
        let err = check(&no_target, &[]).unwrap_err();
        assert!(
            err.contains("data.target: is required for data.name = \"csv\""),
            "{err}"
        );
    }
}
