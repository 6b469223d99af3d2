//! Every library error says what kind of failure it is (`kind()`), also when it travels boxed
//! inside `StateError::Other`: damaged data, a newer format, a caller mistake, a missing file,
//! a transient I/O failure.

use statekit_checkpoint::RestoreMode;
use statekit_core::storage::{LocalStorage, Storage, StorageError};
use statekit_core::{BackendConfig, ErrorKind, KeyGroupRange, StateError};
use statekit_snapshot::Snapshot;
use statekit_snapshot::{open_keyed, BackendChoice, RestoreFrom};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/v1")
        .join(name)
}

#[test]
fn opening_snapshots_reports_the_kind() {
    let kind = |p: &Path| Snapshot::open(p).expect_err("fails").kind();
    assert_eq!(kind(&fixture("corrupt-metadata-crc")), ErrorKind::Corrupt);
    assert_eq!(kind(&fixture("no-such-snapshot")), ErrorKind::Caller);
    let tmp = tempfile::tempdir().expect("tempdir");
    let future = tmp.path().join("future");
    std::fs::create_dir_all(&future).expect("mkdir");
    let mut md = std::fs::read(fixture("savepoint-basic").join("_metadata")).expect("read");
    md[4..8].copy_from_slice(&99u32.to_le_bytes());
    std::fs::write(future.join("_metadata"), md).expect("write");
    assert_eq!(kind(&future), ErrorKind::Unsupported);
}

#[test]
fn reading_and_restoring_report_the_kind() {
    // A bit flip in a keyed file, met while streaming its entries: the FormatError travels
    // inside StateError::Other and still says Corrupt.
    let reader = Snapshot::open(fixture("corrupt-bitflip")).expect("open");
    let mut failure: Option<StateError> = None;
    for v in reader
        .keyed_views("word-counter", KeyGroupRange::all(8))
        .expect("views")
    {
        for kg in v.key_group_range() {
            if let Err(e) = v.visit_key_group(kg, &mut |_| Ok(std::ops::ControlFlow::Continue(()))) {
                failure = Some(e);
            }
        }
    }
    let e = failure.expect("the flipped block fails");
    assert!(matches!(e, StateError::Other(_)), "{e:?}");
    assert_eq!(e.kind(), ErrorKind::Corrupt, "{e}");

    // Native files into the heap backend: a caller mistake.
    let reader = Snapshot::open(fixture("native-savepoint")).expect("open");
    let from = RestoreFrom {
        snapshot: &reader,
        uid: "word-counter",
        mode: RestoreMode::NoClaim,
    };
    let config = BackendConfig::for_subtask(8, 1, 0).expect("config");
    let e = open_keyed(&BackendChoice::HashMap, config, None, Some(from)).expect_err("refused");
    assert_eq!(e.kind(), ErrorKind::Caller);
    assert_eq!(StateError::from(e).kind(), ErrorKind::Caller);
}

#[test]
fn storage_errors_report_the_kind() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let s = LocalStorage::new(tmp.path());
    let missing = s.open("nope").err().expect("missing");
    assert!(matches!(missing, StorageError::NotFound(_)));
    assert_eq!(missing.kind(), ErrorKind::NotFound);
    std::fs::create_dir(tmp.path().join("dir")).expect("mkdir");
    assert_eq!(s.open("dir").err().expect("a directory").kind(), ErrorKind::Caller);
    let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "slow disk");
    assert_eq!(ErrorKind::of_io(&io), ErrorKind::Transient);
}
