//! The façade over every snapshot family: `Snapshot::open` opens statekit's own fixtures and
//! real Apache Flink savepoints and checkpoints alike, addresses operators the same way in
//! both (uid, id, a uid whose hash is the id), and yields the same entries and operator state
//! as the family-specific readers do.

use statekit_checkpoint::SnapshotReader;
use statekit_core::{KeyGroupRange, MemoryView, OwnedEntry};
use statekit_snapshot::{keyed_views, Family, OpenOptions, Snapshot};
use std::path::{Path, PathBuf};

fn root(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)
}

fn entries(views: Vec<Box<dyn statekit_core::KeyedStateView>>) -> Vec<OwnedEntry> {
    let mut out = Vec::new();
    for v in &views {
        out.extend(
            MemoryView::collect(v.as_ref(), v.key_group_range())
                .expect("collect")
                .entries()
                .iter()
                .cloned(),
        );
    }
    out
}

/// Every operator's entries and operator state through the façade equal what the family's
/// own reader gives: statekit's checkpoint reader, or `statekit-flink`'s snapshot.
fn same_as_reader(path: &Path, options: &OpenOptions) -> Snapshot {
    let snap = Snapshot::open_with(path, options).expect("open through the façade");
    let flink = match snap.family() {
        Family::Flink => {
            let md = if path.is_dir() {
                path.join("_metadata")
            } else {
                path.to_path_buf()
            };
            let f = statekit_flink::FlinkOpenOptions {
                uids: options.uids.clone(),
                roots: options.roots.clone(),
            };
            Some(statekit_flink::FlinkSnapshot::open(&md, &f).expect("open Flink's reader"))
        }
        Family::Statekit => None,
    };
    let reader = SnapshotReader::open(path);
    for op in &snap.metadata().operators {
        let all = KeyGroupRange::all(op.max_parallelism);
        let theirs = match &flink {
            Some(f) => {
                let fop = f.metadata().operator(&op.operator_id).expect("Flink's operator");
                f.keyed_views(fop, all).map_err(|e| e.to_string())
            }
            None => keyed_views(reader.as_ref().expect("the reader"), &op.uid, all).map_err(|e| e.to_string()),
        };
        // The same entries, or the same refusal (native files in a build without RocksDB).
        match (snap.keyed_views(&op.uid, all), theirs) {
            (Ok(ours), Ok(theirs)) => {
                assert_eq!(
                    entries(ours),
                    entries(theirs),
                    "{}: operator {}",
                    path.display(),
                    op.uid
                )
            }
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b),
            (a, b) => panic!(
                "{}: operator {}: the façade says {:?}, the reader {:?}",
                path.display(),
                op.uid,
                a.map(|v| v.len()),
                b.map(|v| v.len())
            ),
        }
        for i in 0..op.subtasks.len() as u32 {
            let theirs = match &flink {
                Some(f) => {
                    let fop = f.metadata().operator(&op.operator_id).expect("Flink's operator");
                    f.operator_state(fop, i).expect("Flink's operator state")
                }
                None => reader
                    .as_ref()
                    .expect("the reader")
                    .stored_operator_state(&op.uid, i)
                    .expect("reader operator state"),
            };
            assert_eq!(
                snap.stored_operator_state(&op.uid, i).expect("operator state"),
                theirs,
                "{}: operator {}, subtask {i}",
                path.display(),
                op.uid
            );
        }
    }
    snap
}

#[test]
fn statekit_snapshots_open_through_the_facade() {
    for rel in ["fixtures/v1/savepoint-basic", "fixtures/v1/native-savepoint"] {
        let snap = same_as_reader(&root(rel), &OpenOptions::default());
        assert_eq!(snap.family(), Family::Statekit, "{rel}");
        assert!(snap.statekit_files().is_some(), "{rel}");
        for op in &snap.metadata().operators {
            // By uid and by id alike.
            assert_eq!(snap.operator(&op.uid).expect("by uid").uid, op.uid);
            assert_eq!(snap.operator(&op.operator_id.to_string()).expect("by id").uid, op.uid);
        }
    }
}

#[test]
fn flink_snapshots_open_through_the_facade() {
    let options = OpenOptions {
        state_schema: true,
        ..OpenOptions::default()
    };
    for rel in [
        "fixtures/flink/flink-1.20.5/savepoint-hashmap-canonical/savepoint",
        "fixtures/flink/flink-1.20.5/savepoint-rocksdb-native/savepoint",
        "fixtures/flink/flink-1.20.5/checkpoint-rocksdb-incremental/checkpoints",
    ] {
        let path = root(rel);
        let path = if rel.ends_with("checkpoints") {
            let job = std::fs::read_dir(&path)
                .expect("job dir")
                .filter_map(Result::ok)
                .find(|e| e.path().join("chk-2").is_dir())
                .expect("a job with chk-2");
            job.path().join("chk-2")
        } else {
            path
        };
        let snap = same_as_reader(&path, &options);
        assert_eq!(snap.family(), Family::Flink, "{rel}");
        assert!(snap.statekit_files().is_none(), "{rel}");
        // Flink 1.20 stores operator ids only: the word count's operator is named by its id,
        // found by the uid whose hash it is, and keeps Flink's key groups.
        let op = snap.operator("word-count").expect("by the uid's hash");
        assert_eq!(op.operator_id.to_string(), "fdae8dad403fd2441defe2c3680362f5");
        assert_eq!(op.key_group_scheme, statekit_core::KeyGroupScheme::Flink);
        assert_eq!(
            snap.operator("fdae8dad403fd2441defe2c3680362f5").expect("by id").uid,
            op.uid
        );
    }
}

#[test]
fn declared_uids_name_flink_operators_once_at_open() {
    let options = OpenOptions {
        uids: vec!["word-count".into()],
        ..OpenOptions::default()
    };
    let path = root("fixtures/flink/flink-1.20.5/savepoint-hashmap-canonical/savepoint");
    let snap = Snapshot::open_with(&path, &options).expect("open");
    let op = snap.operator("word-count").expect("by uid");
    assert_eq!(op.uid, "word-count");
    assert!(snap.metadata().operators.iter().any(|o| o.uid == "word-count"));
}

#[test]
fn an_unknown_operator_names_the_known_ones() {
    let snap = Snapshot::open(root("fixtures/v1/savepoint-basic")).expect("open");
    let e = snap.operator("no-such-operator").expect_err("unknown");
    let text = e.to_string();
    assert!(text.contains("no-such-operator"), "{text}");
    assert_eq!(e.kind(), statekit_core::ErrorKind::Caller);
}

/// statekit's own file reader reads statekit's files only: an Apache Flink `_metadata` is
/// refused with a clear error naming the file (the façade is what opens every family).
#[test]
fn the_statekit_reader_refuses_a_flink_snapshot_by_its_magic() {
    let path = root("fixtures/flink/flink-1.20.5/savepoint-hashmap-canonical/savepoint");
    let e = SnapshotReader::open(&path).expect_err("not statekit's");
    let text = e.to_string();
    assert!(text.contains("_metadata"), "{text}");
    assert_eq!(e.kind(), statekit_core::ErrorKind::Corrupt, "{text}");
    assert_eq!(
        Snapshot::open(&path).expect("the façade opens it").family(),
        Family::Flink
    );
}
