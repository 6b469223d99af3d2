//! A crafted log file cannot make the reader allocate more than a bounded multiple of its size
//! (issue 10, point 7): an LZ4 change set whose header claims a 4 GiB raw length — behind a
//! re-computed checksum — is refused before anything is allocated. A global allocator records
//! the largest single allocation of this test binary.

use statekit_changelog::file::CHANGE_SET_HEADER_LEN;
use statekit_changelog::{Change, ChangeSetBuffer, LogCompression, LogFileReader, LogFileWriter, LogId, Op};
use statekit_core::storage::{MemoryStorage, Storage};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

struct Recording;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only records sizes.
unsafe impl GlobalAlloc for Recording {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: same layout, forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: same layout, forwarded.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: allocated by `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Recording = Recording;

#[test]
fn a_forged_lz4_raw_length_is_refused_before_allocating() {
    let storage = MemoryStorage::new();
    let mut w = LogFileWriter::create(&storage, "f.skcl", [7; 16], 1, LogCompression::Lz4).expect("create");
    let mut b = ChangeSetBuffer::new();
    for i in 0..200u32 {
        let key = format!("key-{i}").into_bytes();
        b.push_change(
            i % 4,
            &Change {
                state: 0,
                time: None,
                key: &key,
                namespace: b"",
                op: Op::Put(b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
            },
        );
    }
    w.append(&b.seal(LogId([1; 16]), 0)).expect("append");
    w.finish().expect("finish");
    let mut bytes = storage.open("f.skcl").expect("open").bytes().to_vec();
    let reader = LogFileReader::from_blob(Arc::new(bytes.clone()), "f.skcl", None).expect("reader");
    let e = reader.index()[0].clone();
    let at = e.offset as usize;
    assert_eq!(bytes[at + 32], 1, "the change set is LZ4-compressed");
    // Claim 4 GiB - 1 raw bytes, and forge the change set's checksum to match.
    bytes[at + 36..at + 40].copy_from_slice(&u32::MAX.to_le_bytes());
    let end = at + e.length as usize;
    let mut h = crc32fast::Hasher::new();
    h.update(&bytes[at..at + 44]);
    h.update(&bytes[at + CHANGE_SET_HEADER_LEN..end]);
    let crc = h.finalize();
    bytes[at + 44..at + 48].copy_from_slice(&crc.to_le_bytes());
    assert!(bytes.len() < 4096, "{} bytes", bytes.len());

    let reader = LogFileReader::from_blob(Arc::new(bytes), "f.skcl", None).expect("the index is intact");
    LARGEST.store(0, Ordering::Relaxed);
    let err = reader.read(&e).expect_err("refused").to_string();
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(err.contains("change_set.raw_len"), "{err}");
    assert!(largest < 1 << 20, "largest allocation while reading: {largest} bytes");
}
