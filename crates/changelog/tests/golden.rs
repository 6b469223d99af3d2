//! The golden changelog fixtures (`fixtures/v1/changelog-*`, written by
//! `examples/gen_changelog_fixtures.rs`): the standalone log file is still produced byte for byte and
//! still decodes to the same records; the checkpoint still verifies and restores to exactly
//! its content, at any parallelism; the damaged copies are reported with file and offset and
//! never restore partially.

mod fixture;

use fixture::{CHECKPOINT, JOB, MAX_P, UID};
use statekit_changelog::{
    restore_into, ChangelogBackend, ChangelogStorage, LogFileReader, MaterializationPolicy, Materializer, Op, Record,
    ReplayClock, UploadConfig,
};
use statekit_checkpoint::SnapshotReader;
use statekit_core::storage::{LocalStorage, MemoryStorage, Storage};
use statekit_core::{BackendConfig, KeyedStateBackend, ManualClock, MemoryView, OwnedEntry, StateFunctions};
use statekit_format::{FormatError, SnapshotFormat, SnapshotKind};
use statekit_hashmap::HashMapBackend;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn fixture_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/v1")
        .join(name)
}

fn checkpoint_dir(name: &str) -> PathBuf {
    fixture_dir(name).join(JOB).join(format!("chk-{CHECKPOINT}"))
}

#[test]
fn the_log_file_is_written_byte_for_byte_as_before() {
    let mem = MemoryStorage::new();
    fixture::write_log(&mem, "golden.skcl");
    let now = mem.open("golden.skcl").expect("open").bytes().to_vec();
    let golden = std::fs::read(fixture_dir("changelog-log").join("golden.skcl")).expect("fixture");
    assert_eq!(now, golden, "the log writer's output changed: that is a format change");
}

#[test]
fn the_padded_log_file_is_the_golden_one_marked_and_reads_the_same() {
    let dir = fixture_dir("changelog-log");
    let golden = std::fs::read(dir.join("golden.skcl")).expect("fixture");
    let mut want = golden.clone();
    statekit_changelog::file::mark_padded(&mut want);
    want.resize(4096, 0);
    let padded = std::fs::read(dir.join("golden-padded.skcl")).expect("fixture");
    assert_eq!(padded, want, "marking a file padded changed: that is a format change");
    let storage = LocalStorage::new(&dir);
    let plain = LogFileReader::open(&storage, "golden.skcl", None).expect("open");
    for reference in [Some(golden.len() as u64), None] {
        let r = LogFileReader::open(&storage, "golden-padded.skcl", reference).expect("open");
        assert!(r.padded() && !plain.padded());
        assert_eq!(r.size(), golden.len() as u64);
        assert_eq!(r.index(), plain.index());
        assert_eq!(r.header(), plain.header());
        assert_eq!(r.verify().expect("verify"), plain.verify().expect("verify"));
    }
}

#[test]
fn the_log_file_decodes_to_its_records() {
    let storage = LocalStorage::new(fixture_dir("changelog-log"));
    let r = LogFileReader::open(&storage, "golden.skcl", None).expect("open");
    assert_eq!(r.header().created_ms, fixture::NOW_MS);
    assert_eq!(r.index().len(), 2);
    assert!(r.index().iter().all(|e| e.log == fixture::LOG));
    assert_eq!(r.index().iter().map(|e| e.sqn).collect::<Vec<_>>(), [10, 11]);
    assert_eq!(r.index()[0].key_groups, [1, 3, 5, 7]);
    r.verify().expect("verify");
    // Every record, in file order: metadata first, then key groups ascending (operation
    // order within a key group).
    let mut got = Vec::new();
    for e in r.index() {
        r.read(e)
            .expect("read")
            .for_each_record(None, &mut |kg, rec| {
                got.push(match rec {
                    Record::Metadata { state, descriptor } => format!("{kg} meta {state} {}", descriptor.name),
                    Record::Change(c) => format!(
                        "{kg} s{} {} {:?} {}",
                        c.state,
                        String::from_utf8_lossy(c.key),
                        c.time,
                        match c.op {
                            Op::Put(v) => format!("put {}", v.len()),
                            Op::AddElement(v) => format!("add {}", v.len()),
                            Op::MapPut { user_key, value } =>
                                format!("map_put {} {}", String::from_utf8_lossy(user_key), value.len()),
                            Op::MapRemove(u) => format!("map_remove {}", String::from_utf8_lossy(u)),
                            Op::Clear => "clear".into(),
                            Op::SetList(l) => format!("set_list {}", l.len()),
                            Op::MergeList(s) => format!("merge {}", s.len()),
                            other => format!("{other:?}"),
                        }
                    ),
                });
                Ok(())
            })
            .expect("records");
    }
    let t = fixture::NOW_MS;
    let want = [
        format!("{} meta 0 count", u32::MAX),
        format!("{} meta 1 recent", u32::MAX),
        format!("{} meta 2 followers", u32::MAX),
        format!("1 s1 beta Some({t}) add 8"),
        "1 s2 beta None map_put gamma 8".to_string(),
        "3 s0 alpha None put 8".to_string(),
        "5 s2 delta None map_remove gamma".to_string(),
        "5 s0 delta None clear".to_string(),
        format!("7 s1 eps Some({t}) set_list 1"),
        "0 s0 zeta None put 4000".to_string(),
        "0 s0 zeta None merge 1".to_string(),
    ];
    assert_eq!(got, want);
    // The repetitive change set is stored compressed.
    assert!(r.index()[1].length < 1000, "{}", r.index()[1].length);
}

#[test]
fn an_unknown_log_version_is_refused() {
    let storage = LocalStorage::new(fixture_dir("corrupt-changelog-log-version"));
    match LogFileReader::open(&storage, "golden.skcl", None) {
        Err(FormatError::UnsupportedVersion { found: 2, .. }) => {}
        other => panic!("expected UnsupportedVersion, got {other:?}"),
    }
}

fn restore_all(dir: &Path, p: u32, changelog: bool) -> Result<Vec<OwnedEntry>, String> {
    let reader = SnapshotReader::open(dir).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let scratch = tempfile::tempdir().expect("tempdir");
    let job: Arc<dyn Storage> = Arc::new(LocalStorage::new(scratch.path()));
    let storage = ChangelogStorage::for_job(job.clone(), UploadConfig::default()).expect("storage");
    for i in 0..p {
        // The job's clock as when it was written, a minute later.
        let cfg = BackendConfig::for_subtask(MAX_P, p, i)
            .expect("cfg")
            .with_clock(ManualClock::new(fixture::NOW_MS + 60_000));
        let mut b: Box<dyn KeyedStateBackend> = if changelog {
            let policy = MaterializationPolicy {
                interval: None,
                ..MaterializationPolicy::default()
            };
            let mut b = ChangelogBackend::new(
                cfg,
                &storage,
                Materializer::new(job.clone(), policy, 0),
                HashMapBackend::new,
            )
            .expect("backend");
            let hs = reader
                .changelog_handles(UID, b.key_group_range())
                .map_err(|e| e.to_string())?;
            b.restore_changelog(&hs, false).map_err(|e| e.to_string())?;
            Box::new(b)
        } else {
            let rc = ReplayClock::new(cfg.clock.clone());
            let mut b = HashMapBackend::new(cfg.with_clock(rc.clone())).expect("heap");
            let range = b.key_group_range();
            let hs = reader.changelog_handles(UID, range).map_err(|e| e.to_string())?;
            restore_into(&mut b, Some(&rc), range, &hs).map_err(|e| e.to_string())?;
            rc.follow();
            Box::new(b)
        };
        for d in fixture::states() {
            b.register(d, StateFunctions::None).expect("register");
        }
        let v = b.snapshot(1).expect("snapshot");
        out.extend_from_slice(
            MemoryView::collect(v.as_ref(), v.key_group_range())
                .expect("collect")
                .entries(),
        );
        b.dispose();
    }
    Ok(out)
}

#[test]
fn the_checkpoint_verifies_and_restores_its_content_at_any_parallelism() {
    let dir = checkpoint_dir("changelog-checkpoint");
    let reader = SnapshotReader::open(&dir).expect("open");
    let m = reader.metadata();
    assert_eq!(
        (m.kind, m.format),
        (SnapshotKind::Checkpoint, SnapshotFormat::Changelog)
    );
    let op = reader.operator(UID).expect("operator");
    assert_eq!((op.parallelism, op.max_parallelism), (fixture::P, MAX_P));
    for s in &op.subtasks {
        let h = s.keyed.changelog().expect("changelog handle");
        assert_eq!(h.materialized.len(), 1, "one materialization per subtask");
        assert!(!h.tail.is_empty(), "a tail per subtask");
    }
    let report = reader.verify().expect("verify");
    assert!(report.is_ok(), "{:?}", report.problems);
    // Every log file the tails reference decodes in full.
    for h in reader
        .changelog_handles(UID, statekit_core::KeyGroupRange::all(MAX_P))
        .expect("handles")
    {
        for f in &h.tail {
            LogFileReader::open(f.storage.as_ref(), &f.path, Some(f.size))
                .expect("open log")
                .verify()
                .expect("verify log");
        }
    }
    let want = fixture::expected_entries();
    assert!(want.len() > 150, "{} entries", want.len());
    for p in [1, 2, 3] {
        for changelog in [true, false] {
            let got = restore_all(&dir, p, changelog).expect("restore");
            assert_eq!(got, want, "restored into {p} subtasks (changelog {changelog})");
        }
    }
}

#[test]
fn damaged_tails_are_reported_and_never_restore_partially() {
    for name in ["corrupt-changelog-tail-bitflip", "corrupt-changelog-tail-truncated"] {
        let dir = checkpoint_dir(name);
        let reader = SnapshotReader::open(&dir).expect("the _metadata is intact");
        // The sizes in `_metadata` catch the truncation; the bit flip needs the log decoded.
        let mut problems: Vec<String> = reader
            .verify()
            .expect("verify")
            .problems
            .iter()
            .map(|p| p.to_string())
            .collect();
        for h in reader
            .changelog_handles(UID, statekit_core::KeyGroupRange::all(MAX_P))
            .expect("handles")
        {
            for f in &h.tail {
                let r = LogFileReader::open(f.storage.as_ref(), &f.path, Some(f.size)).and_then(|r| r.verify());
                if let Err(e) = r {
                    problems.push(e.to_string());
                }
            }
        }
        assert!(
            problems.iter().any(|p| p.contains(".skcl")),
            "{name}: the damaged log file is named: {problems:?}"
        );
        for changelog in [true, false] {
            let e = restore_all(&dir, 1, changelog).expect_err("a damaged tail does not restore");
            assert!(e.contains(".skcl"), "{name}: {e}");
            assert!(
                e.contains("crc32") || e.contains("truncated") || e.contains("trailer"),
                "{name}: {e}"
            );
        }
    }
}
