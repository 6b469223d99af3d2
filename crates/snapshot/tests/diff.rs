//! The diff engine as a library: identical snapshots have no differences, a sink can stop the
//! walk (`ControlFlow::Break`, the summary says truncated), a removed operator is reported, and
//! unknown filters are typed caller errors.

use statekit_core::ErrorKind;
use statekit_format::{decode_metadata, encode_metadata, METADATA_FILE_NAME};
use statekit_snapshot::diff::{diff_snapshots, Change, DiffError, DiffOptions, Difference, Side};
use statekit_snapshot::Snapshot;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/v1")
        .join(name)
}

fn side<'r>(label: &'r str, snapshot: &'r Snapshot) -> Side<'r> {
    Side { label, snapshot }
}

#[test]
fn identical_snapshots_have_no_differences() {
    let a = Snapshot::open(fixture("savepoint-basic")).expect("open");
    let b = Snapshot::open(fixture("savepoint-basic")).expect("open");
    let mut seen = Vec::new();
    let summary = diff_snapshots(side("a", &a), side("b", &b), &DiffOptions::default(), &mut |d| {
        seen.push(d);
        ControlFlow::Continue(())
    })
    .expect("diff");
    assert!(summary.identical(), "{seen:?}");
    assert!(!summary.truncated);
    assert!(summary.entries[0] > 0 && summary.entries[0] == summary.entries[1]);
}

#[test]
fn a_removed_operator_is_reported_and_a_sink_can_stop_the_walk() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let b_dir = tmp.path().join("b");
    std::fs::create_dir_all(&b_dir).expect("mkdir");
    for e in std::fs::read_dir(fixture("savepoint-basic"))
        .expect("read_dir")
        .flatten()
    {
        let to = b_dir.join(e.file_name());
        if e.path().is_dir() {
            std::fs::create_dir_all(&to).expect("mkdir");
            for f in std::fs::read_dir(e.path()).expect("read_dir").flatten() {
                std::fs::copy(f.path(), to.join(f.file_name())).expect("copy");
            }
        } else {
            std::fs::copy(e.path(), &to).expect("copy");
        }
    }
    let md = b_dir.join(METADATA_FILE_NAME);
    let mut meta = decode_metadata(&std::fs::read(&md).expect("read"), "_metadata").expect("decode");
    meta.operators.retain(|o| o.uid != "enricher");
    std::fs::write(&md, encode_metadata(&meta)).expect("write");

    let a = Snapshot::open(fixture("savepoint-basic")).expect("open");
    let b = Snapshot::open(&b_dir).expect("open");
    let mut seen = Vec::new();
    let summary = diff_snapshots(side("a", &a), side("b", &b), &DiffOptions::default(), &mut |d| {
        seen.push(d);
        ControlFlow::Continue(())
    })
    .expect("diff");
    assert_eq!(summary.operators, 1, "{seen:?}");
    assert!(seen
        .iter()
        .any(|d| matches!(d, Difference::Operator(o) if o.uid == "enricher" && o.change == Change::Removed)));

    // A sink that refuses the first difference: nothing counted, the walk stops, truncated.
    let summary = diff_snapshots(side("a", &a), side("b", &b), &DiffOptions::default(), &mut |_| {
        ControlFlow::Break(())
    })
    .expect("diff");
    assert!(summary.truncated);
    assert_eq!(summary.operators, 0);
}

#[test]
fn unknown_filters_are_caller_errors() {
    let a = Snapshot::open(fixture("savepoint-basic")).expect("open");
    let opts = DiffOptions {
        uid: Some("nope".into()),
        ..DiffOptions::default()
    };
    let e =
        diff_snapshots(side("a", &a), side("a", &a), &opts, &mut |_| ControlFlow::Continue(())).expect_err("no uid");
    assert!(matches!(e, DiffError::NoSuchOperator { .. }), "{e}");
    assert_eq!(e.kind(), ErrorKind::Caller);
    let opts = DiffOptions {
        state: Some("nope".into()),
        ..DiffOptions::default()
    };
    let e =
        diff_snapshots(side("a", &a), side("a", &a), &opts, &mut |_| ControlFlow::Continue(())).expect_err("no state");
    assert!(matches!(e, DiffError::NoSuchState(_)), "{e}");
}
