//! Writes the golden changelog fixtures under `<dir>` (normally `fixtures/v1`):
//!
//! ```text
//! cargo run -p statekit-changelog --example gen_changelog_fixtures -- fixtures/v1
//! ```
//!
//! * `changelog-log/golden.skcl`: a standalone log file, byte for byte deterministic
//!   (`tests/golden.rs` regenerates it and compares);
//! * `changelog-log/golden-padded.skcl`: the same file as written into a prepared file of
//!   4 KiB (header flag `PADDED`, zeros after the trailer);
//! * `changelog-checkpoint/`: a job directory holding a changelog checkpoint (a materialization
//!   per subtask plus a tail); its log and materialization ids are random, so it is written
//!   once and checked by content;
//! * corrupted copies: `corrupt-changelog-log-version/`, `corrupt-changelog-tail-bitflip/`,
//!   `corrupt-changelog-tail-truncated/`.
//!
//! Never regenerate a fixture to make a failing test pass.

#[path = "../tests/fixture/mod.rs"]
mod fixture;

use statekit_core::storage::{LocalStorage, Storage};
use std::path::Path;
use std::sync::Arc;

fn main() {
    let dir = std::env::args().nth(1).expect("usage: gen_changelog_fixtures <dir>");
    let dir = Path::new(&dir);
    // The standalone log file.
    let log_dir = dir.join("changelog-log");
    std::fs::create_dir_all(&log_dir).expect("mkdir");
    fixture::write_log(&LocalStorage::new(&log_dir), "golden.skcl");
    let golden = std::fs::read(log_dir.join("golden.skcl")).expect("read");
    let mut padded = golden.clone();
    statekit_changelog::file::mark_padded(&mut padded);
    padded.resize(4096, 0);
    std::fs::write(log_dir.join("golden-padded.skcl"), padded).expect("write");
    // ... claiming a version this build does not know.
    let mut v2 = golden.clone();
    v2[4] = 2;
    let d = dir.join("corrupt-changelog-log-version");
    std::fs::create_dir_all(&d).expect("mkdir");
    std::fs::write(d.join("golden.skcl"), v2).expect("write");

    // The checkpoint.
    let ck = dir.join("changelog-checkpoint");
    std::fs::create_dir_all(&ck).expect("mkdir");
    let root: Arc<dyn Storage> = Arc::new(LocalStorage::new(&ck));
    fixture::write_checkpoint(root);
    // Damaged copies: a bit flipped inside the payload of the first change set subtask 0's
    // tail replays, and that change set's file truncated.
    let reader =
        statekit_checkpoint::SnapshotReader::open(ck.join(fixture::JOB).join(format!("chk-{}", fixture::CHECKPOINT)))
            .expect("reader");
    let op = reader.operator(fixture::UID).expect("operator");
    let seg = op.subtasks[0]
        .keyed
        .changelog()
        .and_then(|h| h.tail.first())
        .expect("a tail segment")
        .clone();
    for (sub, flip) in [
        ("corrupt-changelog-tail-bitflip", true),
        ("corrupt-changelog-tail-truncated", false),
    ] {
        let d = dir.join(sub);
        copy_tree(&ck, &d);
        let p = d.join(fixture::JOB).join(&seg.file.path);
        let mut bytes = std::fs::read(&p).expect("read");
        if flip {
            bytes[seg.offset as usize + 48 + 5] ^= 0x10;
        } else {
            bytes.truncate(bytes.len() - 9);
        }
        std::fs::write(&p, bytes).expect("write");
    }
    println!("wrote {}", dir.display());
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("entry");
        let dst = to.join(e.file_name());
        if e.file_type().expect("type").is_dir() {
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).expect("copy");
        }
    }
}
