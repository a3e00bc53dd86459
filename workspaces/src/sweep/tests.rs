//! Tests of sweeps: grid parsing, plans, slots, manifests.
use super::grid::short_keys;
use super::*;

fn axis(s: &str) -> GridAxis {
    s.parse().unwrap()
}

fn err(s: &str) -> String {
    s.parse::<GridAxis>().unwrap_err().to_string()
}

#[test]
fn parses_grid_axes() {
    assert_eq!(
        axis("train.lr=0.001, 0.01"),
        GridAxis {
            key: "train.lr".into(),
            values: vec!["0.001".into(), "0.01".into()]
        }
    );
    assert_eq!(
        axis("ddp.devices=[0,1],[2, 3],\"cpu\"").values,
        ["[0,1]", "[2, 3]", "\"cpu\""]
    );
    assert_eq!(axis("train.optimizer=adam").values, ["adam"]);
    assert!(err("train.lr").contains("--grid train.lr: no values"));
    assert!(err("train.lr=").contains("no values"));
    assert!(err("train.lr= ").contains("no values"));
    assert!(err("=1,2").contains("empty key"));
    assert!(err("train.lr=1,,2").contains("value 2 is empty"));
    assert!(err("train.lr=1,2,1").contains("value `1` is given twice"));
    assert!(err("train.lr=[1,2").contains("unbalanced brackets"));
    assert!(err("train.optimizer=\"adam,sgd").contains("unclosed quote"));
    let e = err("train.lrr=1,2");
    assert!(
        e.contains("no such spec key `train.lrr`; did you mean `train.lr`?"),
        "{e}"
    );
}

#[test]
fn cartesian_product_in_order_with_labels() {
    let c = combinations(&[
        axis("train.lr=0.001,0.01"),
        axis("train.batch_size=32,64,128"),
    ])
    .unwrap();
    assert_eq!(c.len(), 6);
    assert_eq!(c[0].overrides, ["train.lr=0.001", "train.batch_size=32"]);
    assert_eq!(c[1].overrides, ["train.lr=0.001", "train.batch_size=64"]);
    assert_eq!(c[3].overrides, ["train.lr=0.01", "train.batch_size=32"]);
    assert_eq!(c[5].label, "lr=0.01,batch_size=128");
    let e = combinations(&[axis("train.lr=1"), axis("train.lr=2")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("--grid train.lr is given twice"), "{e}");
    assert!(
        combinations(&[])
            .unwrap_err()
            .to_string()
            .contains("at least one --grid")
    );
    let many: Vec<String> = (0..40).map(|i| i.to_string()).collect();
    let big = format!("train.seed={}", many.join(","));
    let e = combinations(&[axis(&big), axis(&big.replace("seed", "epochs"))])
        .unwrap_err()
        .to_string();
    assert!(e.contains("40 x 40 combinations"), "{e}");
}

#[test]
fn short_keys_stay_unique() {
    assert_eq!(
        short_keys(&["train.lr", "train.batch_size"]),
        ["lr", "batch_size"]
    );
    assert_eq!(
        short_keys(&["train.scheduler.gamma", "x.gamma", "name"]),
        ["scheduler.gamma", "x.gamma", "name"]
    );
    assert_eq!(short_keys(&["model.name", "name"]), ["model.name", "name"]);
}

const SPEC: &str =
    "name = 'sw'\n[model]\nname = 'mlp'\n[data]\nname = 'synthetic'\n[train]\nlr = 0.1\n";

#[test]
fn plan_validates_every_combination() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("s.toml");
    std::fs::write(&spec, SPEC).unwrap();
    let plan = SweepPlan::new(
        &spec,
        vec!["train.epochs=2".into()],
        vec![axis("train.lr=0.5,0.25"), axis("train.seed=1,2")],
    )
    .unwrap();
    assert_eq!(plan.runs.len(), 4);
    assert_eq!(plan.runs[3].spec.train.lr, 0.25);
    assert_eq!(plan.runs[3].spec.train.seed, 2);
    assert_eq!(plan.runs[3].spec.train.epochs, 2);
    let e = SweepPlan::new(&spec, vec![], vec![axis("train.lr=0.5,fast")])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("sweep combination 2 of 2 (train.lr=fast)") && e.contains("train.lr=fast"),
        "{e}"
    );
    // A bad --set fails as it would for `ddp run`.
    let e = SweepPlan::new(
        &spec,
        vec!["train.lrr=1".into()],
        vec![axis("train.seed=1")],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("did you mean `train.lr`"), "{e}");
}

#[test]
fn create_resolve_and_members() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("s.toml");
    std::fs::write(&spec, SPEC).unwrap();
    let ws = Workspace::open_or_create(&dir.path().join("ws")).unwrap();
    let plan = SweepPlan::new(&spec, vec![], vec![axis("train.seed=1,2,3")]).unwrap();
    let (rec, runs) = create(
        &ws,
        &plan,
        Some("seeds".into()),
        Some(2),
        vec!["ddp".into()],
        None,
    )
    .unwrap();
    assert_eq!(runs.len(), 3);
    assert!(
        runs.iter()
            .all(|r| r.record.sweep.as_deref() == Some(&rec.id[..]))
    );
    assert_eq!(runs[1].record.name.as_deref(), Some("seeds/seed=2"));
    assert_eq!(SweepRecord::load(&ws.root, &rec.id).unwrap(), rec);
    assert_eq!(rec.member(&runs[2].record.id).unwrap().label, "seed=3");
    let (all, _) = ws.runs().unwrap();
    assert_eq!(resolve(&ws.root, sweeps_of(&all), &rec.id).unwrap(), rec.id);
    assert_eq!(resolve(&ws.root, sweeps_of(&all), "seeds").unwrap(), rec.id);
    assert_eq!(
        resolve(&ws.root, sweeps_of(&all), "latest").unwrap(),
        rec.id
    );
    assert_eq!(
        resolve(&ws.root, sweeps_of(&all), &rec.id[..10]).unwrap(),
        rec.id
    );
    let e = resolve(&ws.root, sweeps_of(&all), "seedz")
        .unwrap_err()
        .to_string();
    assert!(e.contains("did you mean `seeds`"), "{e}");
    let ids: Vec<&str> = members(&ws.root, &all, &rec.id)
        .iter()
        .map(|r| r.record.id.as_str())
        .collect();
    let want: Vec<&str> = runs.iter().map(|r| r.record.id.as_str()).collect();
    assert_eq!(ids, want);
    let e = create(&ws, &plan, None, Some(0), vec![], None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--max-parallel must be at least 1"), "{e}");
    assert!(SweepRecord::load(&ws.root, "../x").is_err());
}

#[test]
fn slots_limit_holders_and_free_on_drop() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let a = try_slot(ws, "s1", 2, "run-a").unwrap().unwrap();
    let b = try_slot(ws, "s1", 2, "run-b").unwrap().unwrap();
    assert_eq!((a.index(), b.index()), (0, 1));
    assert!(try_slot(ws, "s1", 2, "run-c").unwrap().is_none());
    // Another sweep's slots are its own.
    assert!(try_slot(ws, "s2", 1, "run-d").unwrap().is_some());
    let holders = slot_holders(ws, "s1", 2).unwrap();
    assert_eq!(holders.len(), 2);
    assert_eq!(holders[1].1.run, "run-b");
    assert_eq!(
        waiting_message("s1", 2, &holders),
        "waiting for a sweep slot: sweep s1 runs 2 at a time (held by runs run-a, run-b)"
    );
    drop(a);
    assert_eq!(slot_holders(ws, "s1", 2).unwrap().len(), 1);
    let c = try_slot(ws, "s1", 2, "run-c").unwrap().unwrap();
    assert_eq!(c.index(), 0);
    assert!(slot_path(ws, "s1", 0).ends_with("locks/sweep-s1-slot-0.lock"));
}

#[test]
fn waiting_for_a_slot() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::open_or_create(&dir.path().join("ws")).unwrap();
    let spec = dir.path().join("s.toml");
    std::fs::write(&spec, SPEC).unwrap();
    let plan = SweepPlan::new(&spec, vec![], vec![axis("train.seed=1,2")]).unwrap();
    let (_, runs) = create(&ws, &plan, None, Some(1), vec![], None).unwrap();
    let first = wait_for_slot(
        &ws.root,
        &runs[0].record,
        Duration::from_millis(5),
        |_| {},
        || false,
    )
    .unwrap();
    assert!(matches!(first, SlotWait::Held(_)));
    // The second waits (reported once) until cancelled.
    let mut heard = Vec::new();
    let mut polls = 0;
    let second = wait_for_slot(
        &ws.root,
        &runs[1].record,
        Duration::from_millis(5),
        |w| heard.push(w.to_string()),
        || {
            polls += 1;
            polls > 20
        },
    )
    .unwrap();
    assert!(matches!(second, SlotWait::Cancelled));
    assert_eq!(heard.len(), 1, "{heard:?}");
    assert!(heard[0].contains(&format!("held by run {}", runs[0].record.id)));
    drop(first);
    let second = wait_for_slot(
        &ws.root,
        &runs[1].record,
        Duration::from_millis(5),
        |_| {},
        || false,
    )
    .unwrap();
    assert!(matches!(second, SlotWait::Held(_)));
    // Not in a sweep, or no manifest: no limit.
    let mut lone = runs[0].record.clone();
    lone.sweep = None;
    assert!(matches!(
        wait_for_slot(&ws.root, &lone, Duration::ZERO, |_| {}, || false).unwrap(),
        SlotWait::NoLimit
    ));
    lone.sweep = Some("20990101-000000-ffffff".into());
    assert!(matches!(
        wait_for_slot(&ws.root, &lone, Duration::ZERO, |_| {}, || false).unwrap(),
        SlotWait::NoLimit
    ));
}
