//! The golden native fixtures (`fixtures/v1/native-savepoint` and its corrupted copies,
//! written once by `examples/gen_native_fixture.rs`) still read, verify and restore, with
//! exactly the content they were written with; the damaged copies are reported, never read.

use statekit_checkpoint::SnapshotReader;
use statekit_core::{BackendConfig, KeyGroupRange, KeyedStateBackend, KeyedStateView, ManualClock, MemoryView};
use statekit_format::{FileScope, SnapshotFormat, SnapshotKind};
use statekit_rocksdb::{verify_native, NativeSnapshotView, RocksDbBackend};
use statekit_tests::native_fixture::{expected_entries, MAX_P, NOW_MS, P, UID};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/v1").join(name)
}

#[test]
fn native_savepoint_fixture_reads_verifies_and_restores() {
    let reader = SnapshotReader::open(fixture("native-savepoint")).expect("open");
    let m = reader.metadata();
    assert_eq!(
        (m.kind, m.format, m.checkpoint_id),
        (SnapshotKind::Savepoint, SnapshotFormat::Native, 7)
    );
    let op = reader.operator(UID).expect("operator");
    assert_eq!((op.parallelism, op.max_parallelism), (P, MAX_P));
    assert!(op
        .subtasks
        .iter()
        .all(|s| s.keyed.native().is_some_and(|n| n.backend == "rocksdb"
            && n.layout == "statekit-rocksdb-v1"
            && n.files.iter().all(|f| f.file.scope == FileScope::Exclusive))));
    let report = reader.verify().expect("verify");
    assert!(report.is_ok(), "{:?}", report.problems);
    let options = statekit_tests::test_rocksdb_options();
    let handles = reader.native_handles(UID, KeyGroupRange::all(MAX_P)).expect("handles");
    let mut got = Vec::new();
    for h in &handles {
        verify_native(h, &options).expect("verify native");
        let view = NativeSnapshotView::open(h, &options).expect("view");
        got.extend_from_slice(
            MemoryView::collect(&view, view.key_group_range())
                .expect("collect")
                .entries(),
        );
    }
    let want = expected_entries();
    assert!(want.len() > 100, "{} entries", want.len());
    assert_eq!(got, want, "the fixture's content");
    // Restores at other parallelisms hold the same entries.
    for p in [1, 3] {
        let mut all = Vec::new();
        for i in 0..p {
            // The job's clock as when it was written (its TTL'd list elements expire a day later).
            let cfg = BackendConfig::for_subtask(MAX_P, p, i)
                .expect("cfg")
                .with_clock(ManualClock::new(NOW_MS + 1));
            let mut b = RocksDbBackend::new(cfg, options.clone()).expect("backend");
            let hs = reader.native_handles(UID, b.key_group_range()).expect("handles");
            b.restore_native(&hs, false).expect("restore");
            let view = b.snapshot(1).expect("snapshot");
            let mv = MemoryView::collect(view.as_ref(), view.key_group_range()).expect("collect");
            all.extend_from_slice(mv.entries());
        }
        assert_eq!(all, want, "restored at parallelism {p}");
    }
}

#[test]
fn corrupted_native_fixtures_are_reported() {
    for (dir, needle) in [
        ("corrupt-native-sst", "checksum mismatch"),
        ("corrupt-native-manifest", "truncated"),
    ] {
        let reader = SnapshotReader::open(fixture(dir)).expect("metadata intact");
        let report = reader.verify().expect("verify");
        assert!(
            report.problems.iter().any(|p| p.to_string().contains(needle)),
            "{dir}: {:?}",
            report.problems
        );
        let options = statekit_tests::test_rocksdb_options();
        let handles = reader.native_handles(UID, KeyGroupRange::all(MAX_P)).expect("handles");
        let mut failed = 0;
        for h in &handles {
            let mut b = RocksDbBackend::new(
                BackendConfig::for_subtask(MAX_P, P, h.subtask).expect("cfg"),
                options.clone(),
            )
            .expect("backend");
            let hs = reader.native_handles(UID, b.key_group_range()).expect("handles");
            failed += usize::from(b.restore_native(&hs, false).is_err());
        }
        assert_eq!(failed, 1, "{dir}: exactly the damaged subtask's restore fails");
    }
}
