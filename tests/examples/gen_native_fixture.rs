//! Writes the golden native fixtures into `fixtures/v1/`:
//!
//! ```text
//! cargo run -p statekit-tests --example gen_native_fixture -- fixtures/v1
//! ```
//!
//! * `native-savepoint/`: a native RocksDB savepoint of `word-counter` (parallelism 2, max
//!   parallelism 8; a value state, a list state with TTL, a windowed map state), every file
//!   exclusive;
//! * `corrupt-native-sst/`: the same with one byte of a table file flipped;
//! * `corrupt-native-manifest/`: the same with a truncated `MANIFEST`.
//!
//! RocksDB's files are not byte-reproducible (they embed session ids), so unlike the canonical
//! fixtures these are written once and kept: `tests/native_fixture.rs` checks that every later
//! build still reads them, with exactly the content `statekit_tests::native_fixture` describes.

use statekit_checkpoint::SnapshotWriter;
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::KeyedStateBackend;
use statekit_format::SnapshotKind;
use statekit_tests::native_fixture::{filled_backend, MAX_P, P, UID};
use std::path::Path;
use std::sync::Arc;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir").flatten() {
        let dest = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).expect("copy");
        }
    }
}

/// The first file under `dir` whose name satisfies `pred`.
fn find(dir: &Path, pred: &dyn Fn(&str) -> bool) -> Option<std::path::PathBuf> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read_dir")
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            if let Some(found) = find(&p, pred) {
                return Some(found);
            }
        } else if p.file_name().is_some_and(|n| pred(&n.to_string_lossy())) {
            return Some(p);
        }
    }
    None
}

fn main() {
    let out = std::env::args().nth(1).unwrap_or_else(|| "fixtures/v1".into());
    let out = Path::new(&out);
    let sp = out.join("native-savepoint");
    if sp.exists() {
        eprintln!(
            "{} exists: golden fixtures are written once; delete it by hand if the format really changed",
            sp.display()
        );
        std::process::exit(1);
    }
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(out));
    let writer = SnapshotWriter::new(
        storage,
        "native-savepoint",
        SnapshotKind::Savepoint,
        7,
        "0123456789abcdef0123456789abcdef",
    )
    .expect("writer");
    writer.register_operator(UID, P, MAX_P).expect("register");
    for i in 0..P {
        let mut b = filled_backend(i);
        let cut = b.native_snapshot(7).expect("cut");
        let handle = cut
            .upload(&writer.native_target(UID, i).expect("target"))
            .expect("upload");
        writer
            .add_native_subtask(UID, i, handle, b.descriptors(), None, false)
            .expect("add");
    }
    writer.finish().expect("finish");

    let flipped = out.join("corrupt-native-sst");
    copy_dir(&sp, &flipped);
    let sst = find(&flipped, &|n| n.ends_with(".sst")).expect("a table file");
    let mut bytes = std::fs::read(&sst).expect("read");
    let i = bytes.len() / 2;
    bytes[i] ^= 0x08;
    std::fs::write(&sst, bytes).expect("write");

    let truncated = out.join("corrupt-native-manifest");
    copy_dir(&sp, &truncated);
    let manifest = find(&truncated, &|n| n.starts_with("MANIFEST-")).expect("a MANIFEST");
    let bytes = std::fs::read(&manifest).expect("read");
    std::fs::write(&manifest, &bytes[..bytes.len() - 7]).expect("write");
    println!("wrote {}, {}, {}", sp.display(), flipped.display(), truncated.display());
}
