//! `gc` on hostile and unusual trees (issue 10, points 1 and 2): it never deletes outside the
//! base directory it was given (symlinked `chk-N/`, `shared/`, `taskowned/`, `dstl/` or job
//! directories are skipped, never followed), never deletes a file a complete checkpoint
//! references however the paths are spelled (the base through a symlink, `base/../base`, an
//! absolute reference written through a symlink), refuses a whole plan that would touch
//! something outside the base, and holds shared files back while a snapshot is unreadable.

use statekit_checkpoint::{apply_gc, plan_gc, GcPlan, SnapshotWriter};
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::{key_group_for_key, KeyGroupRange, MemoryView, OwnedEntry, StateDescriptor, TypeSchema};
use statekit_format::{decode_metadata, encode_metadata, FileRef, FileScope, SnapshotKind, METADATA_FILE_NAME};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const MAX_P: u32 = 8;

fn view(words: &[&str]) -> MemoryView {
    let states = vec![StateDescriptor::value("count", TypeSchema::Utf8, TypeSchema::I64)];
    let entries = words
        .iter()
        .enumerate()
        .map(|(i, w)| OwnedEntry {
            key_group: key_group_for_key(w.as_bytes(), MAX_P),
            state: 0,
            key: w.as_bytes().to_vec(),
            namespace: vec![],
            user_key: None,
            value: (i as i64).to_be_bytes().to_vec(),
            timestamp: None,
        })
        .collect();
    MemoryView::new(MAX_P, KeyGroupRange::all(MAX_P), states, entries)
}

/// A complete canonical checkpoint `<job_dir>/chk-<id>/` with one keyed file.
fn checkpoint(job_dir: &Path, id: u64) -> PathBuf {
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(job_dir));
    let dir = format!("chk-{id}");
    let w = SnapshotWriter::new(storage, &dir, SnapshotKind::Checkpoint, id, "job").expect("writer");
    w.register_operator("op", 1, MAX_P).expect("register");
    w.write_subtask("op", 0, Some(&view(&["a", "b", "c"])), None, false)
        .expect("write");
    w.finish().expect("finish");
    job_dir.join(dir)
}

/// Makes the keyed file of `chk`'s only subtask an absolute reference to `target` (spelled
/// exactly as given), as a LEGACY restore writes for files of the snapshot it came from; the
/// file itself is moved to `target`.
fn point_keyed_file_at(chk: &Path, target: &Path) {
    let md_path = chk.join(METADATA_FILE_NAME);
    let mut meta = decode_metadata(&std::fs::read(&md_path).expect("read"), "_metadata").expect("decode");
    let sub = &mut meta.operators[0].subtasks[0];
    let keyed = sub.keyed.canonical().cloned().expect("keyed file");
    std::fs::create_dir_all(target.parent().expect("parent")).expect("mkdir");
    std::fs::rename(chk.join(&keyed.path), target).expect("move keyed file");
    sub.keyed = statekit_format::KeyedHandle::Canonical(FileRef {
        scope: FileScope::Absolute,
        path: target.display().to_string(),
        size: keyed.size,
    });
    std::fs::write(&md_path, encode_metadata(&meta)).expect("write metadata");
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, bytes).expect("write");
}

fn plan(base: &Path) -> GcPlan {
    plan_gc(base, Duration::ZERO).expect("plan")
}

fn orphan_names(plan: &GcPlan) -> Vec<String> {
    plan.orphans
        .iter()
        .map(|o| {
            o.path
                .strip_prefix(&plan.base)
                .expect("below base")
                .display()
                .to_string()
        })
        .collect()
}

#[test]
fn symlinks_in_the_base_are_never_followed_or_deleted() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = tmp.path().join("base");
    let outside = tmp.path().join("outside");
    let job = base.join("job-a");
    checkpoint(&job, 1);
    write(&job.join("shared/orphan"), b"garbage");
    // Victims outside the base, each reachable through a symlink named as gc looks for.
    for v in ["chk-dir", "taskowned", "dstl", "shared", "job/shared", "job/chk-5"] {
        write(&outside.join(v).join("precious"), b"keep me");
    }
    symlink(outside.join("chk-dir"), job.join("chk-999")).expect("symlink");
    symlink(outside.join("taskowned"), job.join("taskowned")).expect("symlink");
    symlink(outside.join("dstl"), job.join("dstl")).expect("symlink");
    std::fs::create_dir_all(base.join("job-b")).expect("mkdir");
    symlink(outside.join("shared"), base.join("job-b/shared")).expect("symlink");
    symlink(outside.join("job"), base.join("job-c")).expect("symlink");
    // A symlinked file inside shared/ and a FIFO: left alone too.
    symlink(outside.join("shared/precious"), job.join("shared/link")).expect("symlink");
    let fifo = job.join("shared/fifo");
    let c = std::ffi::CString::new(fifo.to_str().expect("utf8")).expect("cstring");
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo");

    let p = plan(&base);
    assert_eq!(orphan_names(&p), vec!["job-a/shared/orphan".to_string()]);
    let skipped: Vec<String> = p
        .skipped
        .iter()
        .map(|(path, _)| path.strip_prefix(&p.base).expect("below").display().to_string())
        .collect();
    for s in [
        "job-a/chk-999",
        "job-a/dstl",
        "job-a/shared/fifo",
        "job-a/shared/link",
        "job-a/taskowned",
        "job-b/shared",
        "job-c",
    ] {
        assert!(skipped.contains(&s.to_string()), "{s} not skipped: {skipped:?}");
    }
    assert_eq!(apply_gc(&p).expect("apply"), (1, 7));
    for v in ["chk-dir", "taskowned", "dstl", "shared", "job/shared", "job/chk-5"] {
        assert_eq!(
            std::fs::read(outside.join(v).join("precious")).expect("victim survives"),
            b"keep me"
        );
    }
    assert!(job.join("shared/link").symlink_metadata().is_ok(), "symlink kept");
    assert!(job.join("chk-1").join(METADATA_FILE_NAME).is_file());
}

#[test]
fn references_are_compared_by_identity_however_the_base_is_spelled() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let real = tmp.path().join("real");
    let link = tmp.path().join("link");
    std::fs::create_dir_all(&real).expect("mkdir");
    symlink(&real, &link).expect("symlink");
    // Job B was restored (LEGACY) from job A and references A's shared files absolutely:
    // one through the symlinked base, one through the real path.
    let via_link = checkpoint(&real.join("job-b"), 2);
    point_keyed_file_at(&via_link, &link.join("job-a/shared/f1"));
    let via_real = checkpoint(&real.join("job-b"), 3);
    point_keyed_file_at(&via_real, &real.join("job-a/shared/f2"));
    write(&real.join("job-a/shared/garbage"), b"x");
    let dotdot = real.join("..").join("real");
    for spelled in [&real, &link, &dotdot] {
        let p = plan(spelled);
        assert_eq!(
            orphan_names(&p),
            vec!["job-a/shared/garbage".to_string()],
            "gc {}",
            spelled.display()
        );
    }
    let p = plan(&dotdot);
    apply_gc(&p).expect("apply");
    for chk in [&via_link, &via_real] {
        let r = statekit_checkpoint::SnapshotReader::open(chk).expect("open");
        let report = r.verify().expect("verify");
        assert!(report.is_ok(), "{}: {:?}", chk.display(), report.problems);
        let backend_range = KeyGroupRange::all(MAX_P);
        let readers = r.keyed_readers("op", backend_range).expect("readers");
        assert_eq!(readers.len(), 1);
    }
    assert!(!real.join("job-a/shared/garbage").exists());
}

#[test]
fn a_plan_touching_anything_outside_the_base_is_refused_whole() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = tmp.path().join("base");
    let job = base.join("job");
    checkpoint(&job, 1);
    write(&job.join("shared/one"), b"1");
    write(&job.join("shared/two"), b"2");
    let outside = tmp.path().join("outside");
    write(&outside.join("precious"), b"keep");

    // A plan edited to point outside the base.
    let mut p = plan(&base);
    assert_eq!(p.orphans.len(), 2);
    p.orphans[1].path = p.base.join("job/shared/../../../outside/precious");
    let e = apply_gc(&p).expect_err("refused");
    assert!(e.to_string().contains("refusing the whole gc plan"), "{e}");
    assert!(job.join("shared/one").exists(), "nothing deleted");
    assert!(outside.join("precious").exists());

    // The directory swapped for a symlink between plan and apply.
    let p = plan(&base);
    std::fs::rename(job.join("shared"), tmp.path().join("moved")).expect("move");
    write(&outside.join("one"), b"keep");
    write(&outside.join("two"), b"keep");
    symlink(&outside, job.join("shared")).expect("symlink");
    let e = apply_gc(&p).expect_err("refused");
    assert!(e.to_string().contains("not a real directory"), "{e}");
    assert_eq!(std::fs::read(outside.join("one")).expect("kept"), b"keep");

    // A file replaced by another since the plan.
    std::fs::remove_file(job.join("shared")).expect("unlink");
    std::fs::rename(tmp.path().join("moved"), job.join("shared")).expect("move back");
    let p = plan(&base);
    write(&job.join("shared/two.new"), b"new file, same name");
    std::fs::rename(job.join("shared/two.new"), job.join("shared/two")).expect("replace");
    let e = apply_gc(&p).expect_err("refused");
    assert!(e.to_string().contains("no longer the file"), "{e}");
    assert!(job.join("shared/one").exists(), "nothing deleted");
}

#[test]
fn shared_files_are_held_back_while_a_snapshot_is_unreadable() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = tmp.path().join("base");
    let job = base.join("job");
    let chk = checkpoint(&job, 1);
    checkpoint(&job, 2);
    write(&job.join("shared/maybe-referenced"), b"?");
    // A checkpoint of a newer format version this build cannot read.
    let md = chk.join(METADATA_FILE_NAME);
    let mut bytes = std::fs::read(&md).expect("read");
    bytes[4] = 99;
    std::fs::write(&md, bytes).expect("write");
    let p = plan(&base);
    assert_eq!(p.unreadable.len(), 1);
    assert!(p.orphans.is_empty(), "{:?}", p.orphans);
    assert_eq!(p.held_back.len(), 1);
    assert_eq!(apply_gc(&p).expect("apply"), (0, 0));
    assert!(job.join("shared/maybe-referenced").exists());
}
