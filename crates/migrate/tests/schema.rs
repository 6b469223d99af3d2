//! `check`: every kind of incompatibility and note, found from schemas alone; a snapshot is
//! compatible with its own schema, and the schema file round-trips through JSON.

use statekit_checkpoint::SnapshotReader;
use statekit_migrate::{check, Finding, JobSchema};
use std::path::Path;

fn snapshot_schema() -> JobSchema {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/v1/savepoint-basic");
    JobSchema::of(SnapshotReader::open(dir).expect("open").metadata())
}

/// An operator the snapshot does not have, with no state.
fn new_operator() -> statekit_migrate::schema::OperatorSchema {
    statekit_migrate::schema::OperatorSchema {
        uid: "new-one".into(),
        operator_id: None,
        max_parallelism: 8,
        parallelism: None,
        keyed_states: vec![],
        operator_states: vec![],
        key_group_scheme: Default::default(),
    }
}

#[test]
fn a_snapshot_is_compatible_with_its_own_schema_and_the_file_round_trips() {
    let s = snapshot_schema();
    let r = check(&s, &s);
    assert!(r.is_compatible() && r.findings.is_empty(), "{:?}", r.findings);
    let text = serde_json::to_string_pretty(&s).expect("json");
    let back: JobSchema = serde_json::from_str(&text).expect("parse");
    assert_eq!(back, s);
    // Optional fields may be left out of a hand-written file.
    let minimal: JobSchema =
        serde_json::from_str(r#"{"operators":[{"uid":"x","max_parallelism":8}]}"#).expect("minimal");
    assert!(minimal.operators[0].keyed_states.is_empty());
}

#[test]
fn every_incompatibility_is_found_and_notes_are_not_incompatible() {
    let snap = snapshot_schema();
    let mut job = snap.clone();
    let wc = job.operators.iter_mut().find(|o| o.uid == "word-counter").expect("op");
    wc.max_parallelism = 16;
    let by_name = |o: &mut statekit_migrate::schema::OperatorSchema, n: &str| {
        o.keyed_states.iter().position(|k| k.name == n).expect("state")
    };
    let i = by_name(wc, "count");
    wc.keyed_states[i].kind = "list".into();
    let i = by_name(wc, "total");
    wc.keyed_states[i].value = "string".into();
    let i = by_name(wc, "recent");
    wc.keyed_states[i].ttl_ms = None;
    let i = by_name(wc, "per-window");
    wc.keyed_states[i].ttl_ms = Some(1);
    let i = by_name(wc, "avg");
    wc.keyed_states.remove(i);
    wc.keyed_states.push(statekit_migrate::schema::KeyedStateSchema {
        name: "fresh".into(),
        kind: "value".into(),
        key: "string".into(),
        namespace: "unit".into(),
        user_key: None,
        value: "i64".into(),
        ttl_ms: None,
        ttl_update: None,
        opaque: Vec::new(),
    });
    let w = wc
        .operator_states
        .iter()
        .position(|o| o.name == "watermarks")
        .expect("w");
    wc.operator_states[w].mode = "list".into();
    job.operators.retain(|o| o.uid != "enricher");
    job.operators.push(new_operator());
    let r = check(&snap, &job);
    assert!(!r.is_compatible());
    let has = |f: &dyn Fn(&Finding) -> bool| r.findings.iter().any(f);
    assert!(has(&|f| matches!(
        f,
        Finding::MaxParallelism {
            snapshot: 8,
            job: 16,
            ..
        }
    )));
    assert!(has(
        &|f| matches!(f, Finding::KindChanged { state, .. } if state == "count")
    ));
    assert!(has(
        &|f| matches!(f, Finding::TypeChanged { state, field, .. } if state == "total" && field == "value")
    ));
    assert!(has(
        &|f| matches!(f, Finding::TtlSwitched { state, snapshot: true, .. } if state == "recent")
    ));
    assert!(has(
        &|f| matches!(f, Finding::TtlChanged { state, job: 1, .. } if state == "per-window")
    ));
    assert!(has(
        &|f| matches!(f, Finding::StateNotDeclared { state, .. } if state == "avg")
    ));
    assert!(has(
        &|f| matches!(f, Finding::NewState { state, .. } if state == "fresh")
    ));
    assert!(has(
        &|f| matches!(f, Finding::KindChanged { state, .. } if state == "watermarks")
    ));
    assert!(has(&|f| matches!(f, Finding::NotRestored { uid } if uid == "enricher")));
    assert!(has(&|f| matches!(f, Finding::NewOperator { uid } if uid == "new-one")));
    let incompatible: Vec<String> = r
        .findings
        .iter()
        .filter(|f| f.is_incompatible())
        .map(ToString::to_string)
        .collect();
    assert_eq!(incompatible.len(), 6, "{incompatible:#?}");
    // Notes alone keep it compatible.
    let mut job = snap.clone();
    job.operators.push(new_operator());
    let r = check(&snap, &job);
    assert!(r.is_compatible(), "{:?}", r.findings);
    assert_eq!(r.findings.len(), 1);
    assert!(r.findings[0].fix().is_none());
}

/// The other directions and fields: TTL switched on, the key, namespace and user-key types
/// changed; and each finding a `rewrite` resolves names the command that does.
#[test]
fn ttl_switched_on_and_every_type_field_are_incompatible_and_fixes_name_the_rewrite() {
    let snap = snapshot_schema();
    let mut job = snap.clone();
    let wc = job.operators.iter_mut().find(|o| o.uid == "word-counter").expect("op");
    wc.max_parallelism = 128;
    let state = |o: &mut statekit_migrate::schema::OperatorSchema, n: &str| {
        o.keyed_states.iter().position(|k| k.name == n).expect("state")
    };
    let i = state(wc, "count");
    wc.keyed_states[i].ttl_ms = Some(5_000);
    wc.keyed_states[i].key = "i64".into();
    let i = state(wc, "total");
    wc.keyed_states[i].namespace = "i64".into();
    let i = state(wc, "per-window");
    wc.keyed_states[i].user_key = Some("i64".into());
    job.operators.retain(|o| o.uid != "enricher");
    let r = check(&snap, &job);
    assert!(!r.is_compatible());
    let has = |f: &dyn Fn(&Finding) -> bool| r.findings.iter().any(f);
    assert!(has(
        &|f| matches!(f, Finding::TtlSwitched { state, snapshot: false, .. } if state == "count")
    ));
    for (s, field) in [("count", "key"), ("total", "namespace"), ("per-window", "user_key")] {
        assert!(
            has(&|f| matches!(f, Finding::TypeChanged { state, field: x, .. } if state == s && x == field)),
            "{s}/{field}: {:#?}",
            r.findings
        );
    }
    let fix = |pick: &dyn Fn(&Finding) -> bool| r.findings.iter().find(|f| pick(f)).and_then(Finding::fix);
    assert_eq!(
        fix(&|f| matches!(f, Finding::MaxParallelism { .. })).as_deref(),
        Some("statekit rewrite IN OUT --max-parallelism word-counter=128")
    );
    assert_eq!(
        fix(&|f| matches!(f, Finding::NotRestored { .. })).as_deref(),
        Some("statekit rewrite IN OUT --drop-operator enricher")
    );
    // Each incompatible finding is printed on a line of its own, naming its operator.
    for f in r.findings.iter().filter(|f| f.is_incompatible()) {
        let line = f.to_string();
        assert!(!line.contains('\n'), "{line}");
        assert!(line.contains("word-counter") || line.contains("enricher"), "{line}");
    }
}

/// Every state of the fixture's schema turns back into the descriptor it was printed from;
/// a bad kind, mode or type is refused naming the state and field.
#[test]
fn schema_files_turn_back_into_descriptors() {
    let reader = statekit_checkpoint::SnapshotReader::open(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/v1/savepoint-basic"),
    )
    .expect("open");
    let schema = statekit_migrate::JobSchema::of(reader.metadata());
    for (op, meta) in schema.operators.iter().zip(&reader.metadata().operators) {
        for (s, d) in op.keyed_states.iter().zip(&meta.keyed_states) {
            assert_eq!(&s.to_descriptor().expect("descriptor"), d);
        }
        for (s, d) in op.operator_states.iter().zip(&meta.operator_states) {
            assert_eq!(&s.to_descriptor().expect("descriptor"), d);
        }
    }
    let mut bad = schema.operators[0].keyed_states[0].clone();
    bad.value = "int".into();
    let e = bad.to_descriptor().expect_err("bad type");
    assert!(e.to_string().contains("value"), "{e}");
    assert_eq!(e.kind(), statekit_core::ErrorKind::Caller);
    bad.value = "i64".into();
    bad.kind = "counter".into();
    assert!(bad.to_descriptor().is_err());
}
