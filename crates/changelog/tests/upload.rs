//! The upload service under injected faults: failed attempts are retried, a slow attempt gets a
//! second one beside it (and the loser's file is deleted), an upload that fails every attempt
//! fails one persist only — the next persist uploads the same change sets again — and the
//! bytes queued or in flight stay within the bound. On local files a checkpoint's upload goes
//! into a prepared file, padded, and unused prepared files do not outlive the service.

use statekit_changelog::{Change, ChangelogStorage, LogFileReader, Op, UploadConfig};
use statekit_core::storage::{join, HookedStorage, MemoryStorage, Storage, StorageError, StorageHooks, StorageWriter};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Hooks: the next `fail` file creations fail and the next `slow` commits sleep.
#[derive(Debug, Default)]
struct Faulty {
    fail: AtomicU32,
    slow: AtomicU32,
    slow_ms: AtomicU64,
    creates: AtomicU32,
    /// Slowed commits that have returned.
    slow_done: Arc<AtomicU32>,
}

struct SlowWriter {
    inner: Box<dyn StorageWriter>,
    delay: Option<Duration>,
    done: Arc<AtomicU32>,
}

impl std::io::Write for SlowWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.inner.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl StorageWriter for SlowWriter {
    fn commit(self: Box<Self>) -> Result<u64, StorageError> {
        let Some(d) = self.delay else {
            return self.inner.commit();
        };
        std::thread::sleep(d);
        let r = self.inner.commit();
        self.done.fetch_add(1, Ordering::SeqCst);
        r
    }
}

fn take(c: &AtomicU32) -> bool {
    c.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1))
        .is_ok()
}

impl StorageHooks for Faulty {
    fn create(&self, inner: &dyn Storage, path: &str) -> Result<Box<dyn StorageWriter>, StorageError> {
        self.creates.fetch_add(1, Ordering::SeqCst);
        if take(&self.fail) {
            return Err(StorageError::Io {
                path: path.to_string(),
                source: std::io::Error::other("injected failure"),
            });
        }
        let delay = take(&self.slow).then(|| Duration::from_millis(self.slow_ms.load(Ordering::SeqCst)));
        Ok(Box::new(SlowWriter {
            inner: inner.create(path)?,
            delay,
            done: self.slow_done.clone(),
        }))
    }
}

/// Memory storage through [`Faulty`] hooks.
fn faulty() -> Arc<HookedStorage<Faulty>> {
    Arc::new(HookedStorage::new(Arc::new(MemoryStorage::new()), Faulty::default()))
}

fn put(v: &[u8]) -> Change<'_> {
    Change {
        state: 0,
        time: None,
        key: b"key",
        namespace: b"",
        op: Op::Put(v),
    }
}

fn config() -> UploadConfig {
    UploadConfig {
        persist_delay: Duration::from_millis(1),
        retry_delay: Duration::from_millis(1),
        timeout: Duration::from_millis(300),
        ..UploadConfig::default()
    }
}

fn files(s: &HookedStorage<Faulty>) -> usize {
    s.list("dstl").expect("list").len()
}

#[test]
fn failed_attempts_are_retried() {
    let f = faulty();
    f.hooks().fail.store(2, Ordering::SeqCst);
    let st = ChangelogStorage::new(f.clone(), "dstl", config()).expect("storage");
    let mut w = st.writer();
    w.append(3, &put(b"v"));
    let segs = w.persist(0).expect("persist").wait().expect("third attempt succeeds");
    assert_eq!(segs.len(), 1);
    assert_eq!(st.stats().failed_attempts, 2);
    assert_eq!(files(&f), 1);
}

#[test]
fn an_upload_failing_every_attempt_fails_one_persist_only() {
    let f = faulty();
    f.hooks().fail.store(3, Ordering::SeqCst);
    let st = ChangelogStorage::new(f.clone(), "dstl", config()).expect("storage");
    let mut w = st.writer();
    w.append(3, &put(b"first"));
    let err = w.persist(0).expect("persist").wait().expect_err("all attempts fail");
    assert!(err.to_string().contains("injected failure"), "{err}");
    assert_eq!(st.stats().failed_uploads, 1);
    // The next persist (the next checkpoint) uploads the failed change set again, plus new ones.
    w.append(4, &put(b"second"));
    let segs = w.persist(0).expect("persist").wait().expect("recovered");
    assert_eq!(segs.iter().map(|s| s.sqn).collect::<Vec<_>>(), vec![0, 1]);
    let r = LogFileReader::open(f.as_ref(), &join("dstl", &segs[0].path), None).expect("open");
    assert_eq!(r.verify().expect("verify"), (2, 2));
}

#[test]
fn a_slow_attempt_gets_a_second_one_and_the_loser_is_deleted() {
    let f = faulty();
    f.hooks().slow.store(1, Ordering::SeqCst);
    f.hooks().slow_ms.store(5_000, Ordering::SeqCst);
    let st = ChangelogStorage::new(f.clone(), "dstl", config()).expect("storage");
    let mut w = st.writer();
    w.append(1, &put(b"v"));
    let t = std::time::Instant::now();
    let segs = w.persist(0).expect("persist").wait().expect("hedged attempt wins");
    // Well before the slow attempt's 5 s (the second starts after the 300 ms timeout; the
    // margin is for a loaded machine).
    assert!(
        t.elapsed() < Duration::from_millis(4_000),
        "waited for the slow attempt: {:?}",
        t.elapsed()
    );
    assert_eq!(f.hooks().creates.load(Ordering::SeqCst), 2);
    // The slow attempt commits later; then its file is deleted and the winner's stays.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while f.hooks().slow_done.load(Ordering::SeqCst) == 0 {
        assert!(std::time::Instant::now() < deadline, "the slow attempt never committed");
        std::thread::sleep(Duration::from_millis(20));
    }
    loop {
        let names: Vec<String> = f.list("dstl").expect("list").into_iter().map(|e| e.name).collect();
        if names.len() == 1 || std::time::Instant::now() > deadline {
            assert_eq!(names, vec![segs[0].path.clone()]);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn in_flight_bytes_stay_bounded_and_appends_wait() {
    let f = faulty();
    // Every upload is slow: appends outrun the uploader and must wait.
    f.hooks().slow.store(u32::MAX, Ordering::SeqCst);
    f.hooks().slow_ms.store(30, Ordering::SeqCst);
    let cfg = UploadConfig {
        max_in_flight: 64 << 10,
        persist_size_threshold: 16 << 10,
        preemptive_persist_threshold: 8 << 10,
        timeout: Duration::from_secs(5),
        ..config()
    };
    let st = ChangelogStorage::new(f.clone(), "dstl", cfg).expect("storage");
    let mut w = st.writer();
    let value = vec![7u8; 1000];
    let t = std::time::Instant::now();
    for _ in 0..400 {
        w.append(1, &put(&value));
    }
    let segs = w.persist(0).expect("persist").wait().expect("durable");
    // 400 KB through a 64 KB window of 30 ms uploads: the appends were held back.
    assert!(
        t.elapsed() >= Duration::from_millis(120),
        "no back-pressure: {:?}",
        t.elapsed()
    );
    let peak = st.stats().peak_pending_bytes;
    assert!(peak <= (64 << 10) + 9_000, "{peak} bytes pending at once");
    let records: u32 = segs.iter().map(|s| s.records).sum();
    assert_eq!(records, 400, "nothing lost");
    assert!(st.stats().files >= 4);
}

/// Names in `dstl` of a local storage.
fn local_files(s: &dyn Storage) -> Vec<(String, u64)> {
    s.list("dstl")
        .expect("list")
        .into_iter()
        .map(|e| (e.name, e.size))
        .collect()
}

/// Waits (bounded) until `cond` holds.
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..500 {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{what}: not within 5 s");
}

#[test]
fn checkpoint_uploads_go_into_prepared_files_and_unused_ones_are_deleted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let local: Arc<dyn Storage> = Arc::new(statekit_core::storage::LocalStorage::new(dir.path()));
    let cfg = UploadConfig {
        preemptive_persist_threshold: 64 << 10,
        ..config()
    };
    let st = ChangelogStorage::new(local.clone(), "dstl", cfg).expect("storage");
    // Spares are prepared in the background: zeros, under final names.
    eventually("two spares", || {
        let f = local_files(local.as_ref());
        f.len() == 2 && f.iter().all(|(n, _)| n.ends_with(".skcl"))
    });
    for (name, size) in local_files(local.as_ref()) {
        assert!(name.ends_with(".skcl"), "{name}");
        assert!(size >= 64 << 10, "{size}");
    }
    let mut w = st.writer();
    // Past the pre-emptive threshold: an upload of its own, not a checkpoint's; a new file.
    for i in 0..100u32 {
        w.append(i % 8, &put(&[i as u8; 1000]));
    }
    w.append(3, &put(b"tail"));
    let segs = w.persist(0).expect("persist").wait().expect("durable");
    assert_eq!(st.stats().prepared_files_used, 1, "the checkpoint's upload only");
    let tail = segs.last().expect("tail");
    let physical = local
        .list("dstl")
        .expect("list")
        .into_iter()
        .find(|e| e.name == tail.path)
        .expect("tail file");
    assert!(
        physical.size > tail.file_size,
        "padded: {} > {}",
        physical.size,
        tail.file_size
    );
    for s in &segs {
        let r = LogFileReader::open(local.as_ref(), &join("dstl", &s.path), Some(s.file_size)).expect("open");
        assert_eq!(r.padded(), s.path == tail.path);
        assert_eq!(r.size(), s.file_size);
        r.verify().expect("verify");
    }
    let mut want: Vec<String> = segs.iter().map(|s| s.path.clone()).collect();
    want.sort();
    want.dedup();
    // Used spares are replaced; when the service goes, the unused ones go too.
    eventually("replaced", || {
        let f = local_files(local.as_ref());
        f.len() == want.len() + 2 && f.iter().all(|(n, _)| n.ends_with(".skcl"))
    });
    drop(w);
    drop(st);
    eventually("spares deleted", || {
        let mut now: Vec<String> = local_files(local.as_ref()).into_iter().map(|f| f.0).collect();
        now.sort();
        now == want
    });
}

#[test]
fn prepared_files_can_be_turned_off() {
    let dir = tempfile::tempdir().expect("tempdir");
    let local: Arc<dyn Storage> = Arc::new(statekit_core::storage::LocalStorage::new(dir.path()));
    let cfg = UploadConfig {
        prepared_files: false,
        ..config()
    };
    let st = ChangelogStorage::new(local.clone(), "dstl", cfg).expect("storage");
    let mut w = st.writer();
    w.append(1, &put(b"v"));
    let segs = w.persist(0).expect("persist").wait().expect("durable");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(st.stats().prepared_files_used, 0);
    assert_eq!(
        local_files(local.as_ref()),
        vec![(segs[0].path.clone(), segs[0].file_size)]
    );
}
