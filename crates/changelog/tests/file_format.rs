//! The log file format: round trips (with and without compression), key-group range reads
//! through the index, and damage — every single-bit flip and every truncation of a small file
//! is detected, random bytes never panic, a future version is reported as such; padded files
//! (written into a prepared file) read up to their trailer, with or without a reference.

use proptest::prelude::*;
use statekit_changelog::file::mark_padded;
use statekit_changelog::{
    Change, ChangeSetBuffer, LogCompression, LogFileReader, LogFileWriter, LogId, Op, Record, META_KEY_GROUP,
};
use statekit_core::storage::{MemoryStorage, Storage};
use statekit_core::{KeyGroupRange, StateDescriptor, TypeSchema};
use statekit_format::FormatError;
use std::sync::Arc;

/// (key group, key, value) changes of one change set.
type Changes = Vec<(u32, Vec<u8>, Vec<u8>)>;

fn descriptor() -> StateDescriptor {
    StateDescriptor::value("count", TypeSchema::Bytes, TypeSchema::Bytes)
}

/// Writes one file of change sets `sets` (log, sqn, with metadata?, changes) and returns
/// its bytes.
fn write(storage: &dyn Storage, sets: &[(LogId, u64, bool, Changes)], compression: LogCompression) -> Vec<u8> {
    let mut w = LogFileWriter::create(storage, "f.skcl", [7; 16], 1234, compression).expect("create");
    for (log, sqn, meta, changes) in sets {
        let mut b = ChangeSetBuffer::new();
        if *meta {
            b.push_metadata(0, &descriptor());
        }
        for (kg, k, v) in changes {
            b.push_change(
                *kg,
                &Change {
                    state: 0,
                    time: None,
                    key: k,
                    namespace: b"",
                    op: Op::Put(v),
                },
            );
        }
        w.append(&b.seal(*log, *sqn)).expect("append");
    }
    w.finish().expect("finish");
    storage.open("f.skcl").expect("open").bytes().to_vec()
}

/// Every (key group, key, value) of `range` (None: all), per change set in file order.
fn read_all(r: &LogFileReader, range: Option<&KeyGroupRange>) -> Vec<(u64, u32, Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    for e in r.index() {
        if range.is_some_and(|rg| !e.concerns(rg)) {
            continue;
        }
        let cs = r.read(e).expect("read");
        cs.for_each_record(range, &mut |kg, rec| {
            if let Record::Change(Change {
                key, op: Op::Put(v), ..
            }) = rec
            {
                out.push((e.sqn, kg, key.to_vec(), v.to_vec()));
            } else {
                assert_eq!(kg, META_KEY_GROUP);
            }
            Ok(())
        })
        .expect("records");
    }
    out
}

fn sample_sets() -> Vec<(LogId, u64, bool, Changes)> {
    let a = LogId([1; 16]);
    let b = LogId([2; 16]);
    vec![
        (
            a,
            0,
            true,
            vec![
                (5, b"k1".to_vec(), b"v1".to_vec()),
                (2, b"k2".to_vec(), b"v2".to_vec()),
                (5, b"k3".to_vec(), b"v3".to_vec()),
            ],
        ),
        (b, 7, true, vec![(9, b"x".to_vec(), vec![0; 300])]),
        (a, 1, false, vec![(2, b"k2".to_vec(), b"v2'".to_vec())]),
    ]
}

#[test]
fn round_trip_with_and_without_compression() {
    for compression in [LogCompression::None, LogCompression::Lz4] {
        let s = MemoryStorage::new();
        let bytes = write(&s, &sample_sets(), compression);
        let r = LogFileReader::open(&s, "f.skcl", Some(bytes.len() as u64)).expect("open");
        assert_eq!(r.header().created_ms, 1234);
        assert_eq!(r.index().len(), 3);
        assert_eq!(r.index()[0].key_groups, vec![2, 5]);
        assert!(r.index()[0].has_meta && !r.index()[2].has_meta);
        // Grouped by key group, operation order kept inside a key group.
        let all = read_all(&r, None);
        assert_eq!(
            all,
            vec![
                (0, 2, b"k2".to_vec(), b"v2".to_vec()),
                (0, 5, b"k1".to_vec(), b"v1".to_vec()),
                (0, 5, b"k3".to_vec(), b"v3".to_vec()),
                (7, 9, b"x".to_vec(), vec![0; 300]),
                (1, 2, b"k2".to_vec(), b"v2'".to_vec()),
            ]
        );
        assert_eq!(r.verify().expect("verify"), (3, 7));
    }
}

#[test]
fn range_reads_use_the_index() {
    let s = MemoryStorage::new();
    write(&s, &sample_sets(), LogCompression::Lz4);
    let r = LogFileReader::open(&s, "f.skcl", None).expect("open");
    let range = KeyGroupRange::new(4, 9);
    let concerned: Vec<u64> = r.index().iter().filter(|e| e.concerns(&range)).map(|e| e.sqn).collect();
    assert_eq!(concerned, vec![0, 7], "the change set of key group 2 only is skipped");
    let got = read_all(&r, Some(&range));
    assert_eq!(got.iter().map(|g| g.1).collect::<Vec<_>>(), vec![5, 5, 9]);
}

#[test]
fn every_bit_flip_and_truncation_is_detected() {
    let s = MemoryStorage::new();
    let bytes = write(&s, &sample_sets(), LogCompression::Lz4);
    let check = |b: &[u8]| -> Result<(), FormatError> {
        let r = LogFileReader::from_blob(Arc::new(b.to_vec()), "damaged", Some(bytes.len() as u64))?;
        r.verify().map(|_| ())
    };
    check(&bytes).expect("pristine");
    for i in 0..bytes.len() {
        for bit in 0..8 {
            let mut b = bytes.clone();
            b[i] ^= 1 << bit;
            assert!(check(&b).is_err(), "flip of bit {bit} of byte {i} went unnoticed");
        }
    }
    for n in 0..bytes.len() {
        let r = LogFileReader::from_blob(Arc::new(bytes[..n].to_vec()), "cut", None);
        assert!(
            r.is_err() || r.is_ok_and(|r| r.verify().is_err()),
            "truncation to {n} bytes went unnoticed"
        );
    }
}

#[test]
fn a_future_version_is_reported_as_such() {
    let s = MemoryStorage::new();
    let mut bytes = write(&s, &sample_sets(), LogCompression::None);
    bytes[4] = 9;
    match LogFileReader::from_blob(Arc::new(bytes), "future", None) {
        Err(FormatError::UnsupportedVersion { found: 9, .. }) => {}
        other => panic!("{other:?}"),
    }
}

/// The sample file marked padded, and `pad` zeros after it.
fn padded(pad: usize) -> (Vec<u8>, u64) {
    let s = MemoryStorage::new();
    let mut bytes = write(&s, &sample_sets(), LogCompression::Lz4);
    let logical = bytes.len() as u64;
    mark_padded(&mut bytes);
    bytes.resize(bytes.len() + pad, 0);
    (bytes, logical)
}

#[test]
fn padded_files_read_up_to_their_trailer_with_or_without_a_reference() {
    let s = MemoryStorage::new();
    let plain = write(&s, &sample_sets(), LogCompression::Lz4);
    let want = read_all(
        &LogFileReader::from_blob(Arc::new(plain), "plain", None).expect("plain"),
        None,
    );
    let (bytes, logical) = padded(1000);
    for reference in [Some(logical), None] {
        let r = LogFileReader::from_blob(Arc::new(bytes.clone()), "padded", reference).expect("open");
        assert!(r.padded());
        assert_eq!(r.size(), logical, "the padding is not part of the file's size");
        assert_eq!(read_all(&r, None), want);
        assert_eq!(r.verify().expect("verify"), (3, 7));
    }
    // The padding may be cut away (nothing of the file is lost), the file may not.
    let r = LogFileReader::from_blob(Arc::new(bytes[..logical as usize].to_vec()), "cut", Some(logical));
    assert!(r.is_ok(), "{r:?}");
    for n in [logical - 1, logical / 2] {
        let r = LogFileReader::from_blob(Arc::new(bytes[..n as usize].to_vec()), "cut", Some(logical));
        assert!(r.is_err(), "cut to {n} of {logical} bytes went unnoticed");
    }
    // A reference that does not end at the trailer, or beyond the file, is refused.
    for wrong in [logical + 1, logical - 1, bytes.len() as u64 + 1] {
        assert!(
            LogFileReader::from_blob(Arc::new(bytes.clone()), "padded", Some(wrong)).is_err(),
            "reference of {wrong} bytes accepted"
        );
    }
}

#[test]
fn every_bit_flip_of_a_padded_file_is_detected() {
    let (bytes, logical) = padded(64);
    let check = |b: &[u8], reference: Option<u64>| -> Result<(), FormatError> {
        LogFileReader::from_blob(Arc::new(b.to_vec()), "damaged", reference)?
            .verify()
            .map(|_| ())
    };
    check(&bytes, Some(logical)).expect("pristine");
    for i in 0..bytes.len() {
        for bit in 0..8 {
            let mut b = bytes.clone();
            b[i] ^= 1 << bit;
            // Within the file: with its reference or without. In the padding: without one (a
            // reader with a reference does not read the padding; `verify` of the checkpoint
            // checks it is zeros).
            if (i as u64) < logical {
                assert!(
                    check(&b, Some(logical)).is_err(),
                    "flip of bit {bit} of byte {i} went unnoticed"
                );
            }
            assert!(
                check(&b, None).is_err(),
                "flip of bit {bit} of byte {i} went unnoticed (no reference)"
            );
        }
    }
}

#[test]
fn zeros_after_an_unpadded_file_and_an_unwritten_prepared_file_are_errors() {
    let s = MemoryStorage::new();
    let mut bytes = write(&s, &sample_sets(), LogCompression::None);
    let n = bytes.len() as u64;
    bytes.resize(bytes.len() + 100, 0);
    assert!(LogFileReader::from_blob(Arc::new(bytes.clone()), "f", Some(n)).is_err());
    assert!(LogFileReader::from_blob(Arc::new(bytes), "f", None).is_err());
    let e = LogFileReader::from_blob(Arc::new(vec![0u8; 4096]), "spare.skcl", None).expect_err("zeros");
    assert!(
        e.to_string().contains("prepared log file that was never written"),
        "{e}"
    );
}

proptest! {
    #[test]
    fn random_bytes_never_panic(raw in proptest::collection::vec(any::<u8>(), 0..400)) {
        if let Ok(r) = LogFileReader::from_blob(Arc::new(raw), "random", None) {
            let _ = r.verify();
        }
    }

    #[test]
    fn damaged_real_files_never_panic(pos in any::<usize>(), byte in any::<u8>(), cut in any::<bool>()) {
        let s = MemoryStorage::new();
        let mut bytes = write(&s, &sample_sets(), LogCompression::Lz4);
        let i = pos % bytes.len();
        if cut {
            bytes.truncate(i);
        } else {
            bytes[i] = byte;
        }
        if let Ok(r) = LogFileReader::from_blob(Arc::new(bytes), "damaged", None) {
            let _ = r.verify();
            for e in r.index() {
                let _ = r.read(e).map(|cs| cs.for_each_record(None, &mut |_, _| Ok(())));
            }
        }
    }
}
