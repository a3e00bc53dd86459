//! Checks made before a run is created, by the front ends, on what the replicas would refuse
//! only later: the data they read whole. It sits above `data` and `lm`, whose reading code it
//! runs, so that the messages are the replicas' own.

use crate::Result;
use crate::data::OpenContext;
use crate::data::table;
use crate::lm::LmData;
use crate::spec::{DataName, Spec};

/// Checks the data of a new run's `spec` that the replicas read whole, as they would refuse it:
/// the same reading code, so the same errors (`PATH: MESSAGE`, exit code 2), before a run is
/// created. A front end calls it with the spec; a replica never needs to (it reads the data
/// anyway). What is checked:
///
/// - `text`: the file is read and checked (not empty, UTF-8 for the `char` tokenizer, each part
///   at least a window long), its tokens not kept ([`LmData::check`]);
/// - `tokens`: `train.bin` and `val.bin` are mapped and their lengths checked (a multiple of the
///   id size, each part at least a window); their ids are not read (the replicas check them
///   against `vocab_size`, in parallel, reading every page);
/// - `csv`, `parquet`: the table is read as a replica reads it ([`table::open`]) and dropped;
/// - anything else (IDX, CIFAR-10, image folders, tensor files, custom data): nothing here; the
///   replicas check it when they open it.
pub fn check(spec: &Spec) -> Result<()> {
    match spec.data.name {
        DataName::Text | DataName::Tokens => LmData::check(spec),
        DataName::Csv | DataName::Parquet => {
            table::open(spec, &OpenContext { workers: 1 }).map(drop)
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csv_spec(dir: &std::path::Path) -> Spec {
        let text = format!(
            "name = \"t\"\n[model]\nname = \"mlp\"\n[data]\nname = \"csv\"\npath = \"{}\"\ntarget = \"label\"\n",
            dir.join("t.csv").display()
        );
        Spec::parse_at(&text, &dir.join("t.toml"), &[]).unwrap()
    }

    #[test]
    fn a_table_is_checked_as_the_replicas_open_it() {
        let dir = tempfile::tempdir().unwrap();
        let s = csv_spec(dir.path());
        let mut csv = String::from("label,a\n");
        for i in 0..10 {
            csv.push_str(&format!("{},{i}\n", i % 2));
        }
        std::fs::write(dir.path().join("t.csv"), &csv).unwrap();
        check(&s).unwrap();
        csv.push_str("1,2,3\n");
        std::fs::write(dir.path().join("t.csv"), &csv).unwrap();
        let e = check(&s).unwrap_err();
        let opened = table::open(&s, &OpenContext { workers: 1 }).err().unwrap();
        assert_eq!(e.to_string(), opened.to_string());
        assert!(
            e.to_string().starts_with(&format!(
                "{}: line 12 has 3 fields but the header has 2 columns",
                dir.path().join("t.csv").display()
            )),
            "{e}"
        );
        assert_eq!(e.exit_code(), crate::error::EXIT_CONFIG);
        // Data read elsewhere is not checked here: a missing IDX folder passes.
        let mnist =
            "name = \"m\"\n[model]\nname = \"mlp\"\n[data]\nname = \"mnist\"\npath = \"nowhere\"\n";
        check(&Spec::parse_at(mnist, &dir.path().join("m.toml"), &[]).unwrap()).unwrap();
    }
}
