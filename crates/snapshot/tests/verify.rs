//! Library-level tests of whole-snapshot verification: sound fixtures of every kind verify
//! clean with what they hold counted; every damaged fixture yields typed problems naming file,
//! offset and field; and restore and verify walk a changelog tail the same way (a tail entry
//! that disagrees with its file is refused by both, with the same words).

use statekit_checkpoint::RestoreMode;
use statekit_core::storage::LocalStorage;
use statekit_core::{BackendConfig, ErrorKind};
use statekit_format::{read_metadata, write_metadata, Problem};
use statekit_snapshot::Snapshot;
use statekit_snapshot::{open_keyed, verify_path, BackendChoice, RestoreFrom};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/v1")
        .join(name)
}

const JOB: &str = "c4a9e10f0c4a9e10f0c4a9e10f0c4a9e";

fn changelog_checkpoint(root: &Path) -> PathBuf {
    root.join(JOB).join("chk-3")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        let dst = to.join(e.file_name());
        if e.file_type().expect("type").is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).expect("copy");
        }
    }
}

fn problems(path: &Path) -> Vec<Problem> {
    let (_, v) = verify_path(path).expect("_metadata reads");
    for p in &v.problems {
        eprintln!("{}: {p}", path.display());
    }
    v.problems
}

#[test]
fn sound_snapshots_of_every_kind_verify_clean() {
    let (_, v) = verify_path(&fixture("savepoint-basic")).expect("verify");
    assert!(v.is_ok(), "{:?}", v.problems);
    assert!(v.metadata_sound);
    assert_eq!((v.files, v.entries), (7, 67 + 2 + 12));
    assert!(v.changelog.is_none());

    let (_, v) = verify_path(&changelog_checkpoint(&fixture("changelog-checkpoint"))).expect("verify");
    assert!(v.is_ok(), "{:?}", v.problems);
    let log = v.changelog.expect("a changelog checkpoint");
    assert_eq!(log.log_files, 2);
    assert!(log.change_sets > 0 && log.records > 0 && log.replayed > 0, "{log:?}");

    #[cfg(feature = "rocksdb")]
    {
        let (_, v) = verify_path(&fixture("native-savepoint")).expect("verify");
        assert!(v.is_ok(), "{:?}", v.problems);
        assert!(v.entries > 0);
    }
}

#[test]
fn damaged_snapshots_name_file_offset_and_field() {
    // A flipped bit in a keyed file's block.
    let p = problems(&fixture("corrupt-bitflip"));
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].file.ends_with("word-counter/0.keyed"), "{:?}", p[0]);
    assert_eq!(p[0].field.as_deref(), Some("block.crc32"));
    assert!(p[0].offset.is_some());
    assert_eq!(p[0].kind, ErrorKind::Corrupt);

    // A version this build does not read: the header's version field, at offset 4.
    let p = problems(&fixture("corrupt-version"));
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!((p[0].offset, p[0].field.as_deref()), (Some(4), Some("header.version")));
    assert_eq!(p[0].kind, ErrorKind::Unsupported);

    // A flipped bit in a change set of a tail: the log file, at the change set.
    let p = problems(&changelog_checkpoint(&fixture("corrupt-changelog-tail-bitflip")));
    assert!(!p.is_empty());
    assert!(
        p.iter()
            .all(|p| p.file.ends_with(".skcl") && p.offset.is_some() && p.field.is_some()),
        "{p:?}"
    );

    // Every problem of every damaged fixture names its file.
    let mut damaged = vec![
        "corrupt-truncated",
        "corrupt-metadata-crc",
        "corrupt-changelog-tail-truncated",
    ];
    if cfg!(feature = "rocksdb") {
        damaged.extend(["corrupt-native-sst", "corrupt-native-manifest"]);
    }
    for name in damaged {
        let path = fixture(name);
        let path = if path.join(JOB).exists() {
            changelog_checkpoint(&path)
        } else {
            path
        };
        match verify_path(&path) {
            Ok((_, v)) => {
                assert!(!v.is_ok(), "{name}");
                assert!(
                    v.problems.iter().all(|p| !p.file.is_empty()),
                    "{name}: {:?}",
                    v.problems
                );
            }
            // `_metadata` itself does not decode: an error, not a report.
            Err(e) => assert_eq!(e.kind(), ErrorKind::Corrupt, "{name}: {e}"),
        }
    }
}

#[test]
fn restore_and_verify_agree_on_a_tail_that_disagrees_with_its_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(&fixture("changelog-checkpoint"), dir.path());
    let chk = changelog_checkpoint(dir.path());
    // Claim one record more for the first tail segment than its change set holds (the log,
    // sequence number and length still match): only the record count gives it away.
    let storage = LocalStorage::new(&chk);
    let mut meta = read_metadata(&storage, "_metadata").expect("read");
    let (uid, subtask) = {
        let op = meta
            .operators
            .iter_mut()
            .find(|o| {
                o.subtasks
                    .iter()
                    .any(|s| s.keyed.changelog().is_some_and(|c| !c.tail.is_empty()))
            })
            .expect("an operator with a changelog tail");
        let st = op
            .subtasks
            .iter_mut()
            .find(|s| s.keyed.changelog().is_some_and(|c| !c.tail.is_empty()))
            .expect("a subtask with a tail");
        let seg = st
            .keyed
            .changelog_mut()
            .and_then(|c| c.tail.first_mut())
            .expect("a tail segment");
        seg.records += 1;
        (op.uid.clone(), st.index)
    };
    write_metadata(&storage, "_metadata", &meta).expect("write");

    let p = problems(&chk);
    let mismatch: Vec<&Problem> = p
        .iter()
        .filter(|p| p.field.as_deref() == Some("change_set.records"))
        .collect();
    assert_eq!(mismatch.len(), 1, "{p:?}");
    assert_eq!(mismatch[0].kind, ErrorKind::Corrupt);
    assert!(
        mismatch[0]
            .context
            .as_deref()
            .is_some_and(|c| c.contains(&format!("subtask {subtask}, tail[0]"))),
        "{:?}",
        mismatch[0]
    );

    // The restore walks the same tail and refuses it, naming the same change set and field.
    let reader = Snapshot::open(&chk).expect("open");
    let op = reader.operator(&uid).expect("operator");
    let config = BackendConfig::for_subtask(op.max_parallelism, op.parallelism, subtask).expect("config");
    let from = RestoreFrom {
        snapshot: &reader,
        uid: &uid,
        mode: RestoreMode::NoClaim,
    };
    let err = open_keyed(&BackendChoice::HashMap, config, None, Some(from)).expect_err("the tail disagrees");
    let text = err.to_string();
    let expected = format!(
        "{}: offset {}: change_set.records: {}",
        mismatch[0].file,
        mismatch[0].offset.expect("offset"),
        mismatch[0].reason
    );
    assert!(text.contains(&expected), "{text}\nexpected: {expected}");
}
