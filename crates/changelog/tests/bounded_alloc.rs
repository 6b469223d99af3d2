//! A crafted log file cannot make the reader allocate more than a bounded multiple of its size
//! (issue 10, point 7): an LZ4 change set whose header claims a 4 GiB raw length — behind a
//! re-computed checksum — is refused before anything is allocated; every input the fuzzer once
//! crashed on (`fuzz/regressions/changelog_*`) decodes without a panic and within the fuzz
//! targets' allocation cap. A global allocator records each thread's largest allocation.

use statekit_changelog::file::CHANGE_SET_HEADER_LEN;
use statekit_changelog::{Change, ChangeSetBuffer, LogCompression, LogFileReader, LogFileWriter, LogId, Op};
use statekit_core::storage::{MemoryStorage, Storage};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

struct Recording;

thread_local! {
    /// The largest allocation of this thread since the last [`reset`].
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn record(size: usize) {
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
}

fn reset() {
    LARGEST.with(|l| l.set(0));
}

fn largest() -> usize {
    LARGEST.with(Cell::get)
}

// SAFETY: forwards to the system allocator; only records sizes.
unsafe impl GlobalAlloc for Recording {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: same layout, forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: same layout, forwarded.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: allocated by `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size);
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
    reset();
    let err = reader.read(&e).expect_err("refused").to_string();
    let largest = largest();
    assert!(err.contains("change_set.raw_len"), "{err}");
    assert!(largest < 1 << 20, "largest allocation while reading: {largest} bytes");
}

#[path = "../../format/tests/common/regressions.rs"]
mod regressions;
use regressions::regression_inputs;

#[test]
fn fuzz_regressions_decode_within_the_allocation_cap() {
    for (name, data) in regression_inputs("changelog_log_file") {
        let cap = (64usize << 20).max(512 * data.len());
        reset();
        if let Ok(reader) = LogFileReader::from_blob(Arc::new(data), &name, None) {
            let _ = reader.verify();
            for e in reader.index() {
                if let Ok(cs) = reader.read(e) {
                    let _ = cs.for_each_record(None, &mut |_, _| Ok(()));
                }
            }
        }
        assert!(largest() <= cap, "{name}: an allocation of {} bytes", largest());
    }
    for (name, data) in regression_inputs("changelog_record") {
        reset();
        let _ = statekit_changelog::record::decode_record(&data);
        assert!(largest() <= (64 << 20).max(512 * data.len()), "{name}");
    }
}
