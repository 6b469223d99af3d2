//! Fuzz-style robustness in plain `cargo test`: damaged metadata, keyed files and operator
//! files must never make a decoder panic, and damage inside checksummed areas must be
//! reported as an error.

mod common;

use common::*;
use proptest::prelude::*;
use statekit_core::storage::{Blob, MemoryStorage, Storage};
use statekit_core::{KeyGroupRange, KeyedStateView, MemoryView};
use statekit_format::*;
use std::sync::Arc;

#[derive(Clone, Debug)]
enum Damage {
    /// Flip one bit.
    Flip(usize),
    /// Keep only the first n bytes (n taken modulo the length).
    Truncate(usize),
    /// Overwrite bytes at a position with these.
    Overwrite(usize, Vec<u8>),
    /// Insert bytes at a position.
    Insert(usize, Vec<u8>),
}

fn arb_damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        4 => any::<usize>().prop_map(Damage::Flip),
        1 => any::<usize>().prop_map(Damage::Truncate),
        2 => (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..16)).prop_map(|(p, b)| Damage::Overwrite(p, b)),
        1 => (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..8)).prop_map(|(p, b)| Damage::Insert(p, b)),
    ]
}

/// Applies the damage; returns the damaged bytes, or `None` when they equal the original.
fn damage(bytes: &[u8], d: &Damage) -> Option<Vec<u8>> {
    let mut b = bytes.to_vec();
    let n = b.len().max(1);
    match d {
        Damage::Flip(bit) => {
            let bit = bit % (n * 8);
            b[bit / 8] ^= 1 << (bit % 8);
        }
        Damage::Truncate(k) => b.truncate(k % n),
        Damage::Overwrite(p, new) => {
            let p = p % n;
            for (i, x) in new.iter().enumerate() {
                if let Some(slot) = b.get_mut(p + i) {
                    *slot = *x;
                }
            }
        }
        Damage::Insert(p, new) => {
            let p = p % (n + 1);
            b.splice(p..p, new.iter().copied());
        }
    }
    (b != bytes).then_some(b)
}

/// Opens, verifies and visits every key group; returns whether any step failed.
fn exercise_keyed(bytes: Vec<u8>, expected_size: Option<u64>) -> bool {
    let storage = MemoryStorage::new();
    storage.put_atomic("k", &bytes).expect("put");
    let r = match KeyedFileReader::open(&storage, "k", expected_size) {
        Ok(r) => r,
        Err(e) => {
            let _ = e.to_string();
            return true;
        }
    };
    let mut failed = r.verify().is_err();
    let range = KeyGroupRange::all(r.max_parallelism());
    for kg in range {
        if let Err(e) = r.visit_key_group(kg, &mut |_| Ok(std::ops::ControlFlow::Continue(()))) {
            let _ = e.to_string();
            failed = true;
        }
    }
    failed
}

fn exercise_operator(bytes: Vec<u8>, expected_size: Option<u64>) -> bool {
    let blob: Arc<dyn Blob> = Arc::new(bytes);
    decode_operator_file(blob.as_ref(), "o", expected_size).is_err()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn damaged_keyed_files(view in arb_view(), opts in arb_options(), d in arb_damage(), with_size in any::<bool>()) {
        let storage = MemoryStorage::new();
        let info = write_keyed_file(&view, KeyGroupRange::all(view.max_parallelism()), &storage, "k", &opts).expect("write");
        let bytes = storage.open("k").expect("open").bytes().to_vec();
        let Some(bad) = damage(&bytes, &d) else { return Ok(()) };
        let size_changed = bad.len() != bytes.len();
        let failed = exercise_keyed(bad, with_size.then_some(info.file.size));
        // Every byte of a data file is covered by a checksum, a magic or the version: any
        // flip or overwrite is detected; so is truncation and insertion.
        prop_assert!(failed, "damage {:?} went unnoticed (size changed: {})", d, size_changed);
    }

    #[test]
    fn damaged_operator_files(snap in arb_operator_snapshot(), opts in arb_options(), d in arb_damage(), with_size in any::<bool>()) {
        let storage = MemoryStorage::new();
        let f = write_operator_file(&snap, &storage, "o", &opts).expect("write");
        let bytes = storage.open("o").expect("open").bytes().to_vec();
        let Some(bad) = damage(&bytes, &d) else { return Ok(()) };
        prop_assert!(exercise_operator(bad, with_size.then_some(f.size)), "damage {:?} went unnoticed", d);
    }

    #[test]
    fn damaged_metadata(meta in arb_metadata(), d in arb_damage()) {
        let bytes = encode_metadata(&meta);
        let Some(bad) = damage(&bytes, &d) else { return Ok(()) };
        match decode_metadata(&bad, "_metadata") {
            Ok(m) => prop_assert!(false, "damage {:?} went unnoticed: {:?}", d, m.job_id),
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(msg.starts_with("_metadata: "), "{}", msg);
            }
        }
    }

    /// Arbitrary bytes, and arbitrary bytes behind a valid magic and version, never panic.
    #[test]
    fn garbage_never_panics(mut junk in proptest::collection::vec(any::<u8>(), 0..600), which in 0u8..3) {
        let magic: &[u8; 4] = match which { 0 => b"SKMD", 1 => b"SKKD", _ => b"SKOP" };
        for prefixed in [false, true] {
            if prefixed && junk.len() >= 8 {
                junk[..4].copy_from_slice(magic);
                junk[4..8].copy_from_slice(&1u32.to_le_bytes());
            }
            prop_assert!(decode_metadata(&junk, "m").is_err());
            exercise_keyed(junk.clone(), None);
            exercise_operator(junk.clone(), None);
        }
    }
}

/// Re-checksums a damaged file so the damage reaches the decoders behind the CRCs: every
/// section and block CRC is recomputed. Decoders must still not panic.
#[test]
fn damage_behind_valid_checksums_never_panics() {
    use proptest::test_runner::{Config, TestRunner};
    let mut runner = TestRunner::new(Config {
        cases: 256,
        ..Config::default()
    });
    runner
        .run(
            &(arb_view(), arb_options(), any::<usize>(), any::<u8>()),
            |(view, opts, pos, byte)| {
                let storage = MemoryStorage::new();
                write_keyed_file(&view, KeyGroupRange::all(view.max_parallelism()), &storage, "k", &opts)
                    .expect("write");
                let mut bytes = storage.open("k").expect("open").bytes().to_vec();
                let n = bytes.len();
                bytes[pos % n] = byte;
                refresh_checksums(&mut bytes);
                exercise_keyed(bytes, None);
                Ok(())
            },
        )
        .expect("no panic");
}

/// Recomputes the header, block, index and trailer CRCs of a data file (best effort: stops
/// at the first structure that no longer parses).
fn refresh_checksums(b: &mut [u8]) {
    let rd = |b: &[u8], p: usize| -> Option<u32> { Some(u32::from_le_bytes(b.get(p..p + 4)?.try_into().ok()?)) };
    let rd8 = |b: &[u8], p: usize| -> Option<u64> { Some(u64::from_le_bytes(b.get(p..p + 8)?.try_into().ok()?)) };
    let n = b.len();
    if n < 44 {
        return;
    }
    let Some(body) = rd(b, 12) else { return };
    let crc_pos = 16 + body as usize;
    if crc_pos + 4 > n {
        return;
    }
    let c = crc32fast::hash(&b[..crc_pos]);
    b[crc_pos..crc_pos + 4].copy_from_slice(&c.to_le_bytes());
    let t = n - 24;
    let (Some(io), Some(il)) = (rd8(b, t), rd8(b, t + 8)) else {
        return;
    };
    let io = io as usize;
    // Blocks between the header and the index.
    let mut p = crc_pos + 4;
    while p + 24 <= io.min(t) {
        let Some(stored) = rd(b, p) else { break };
        let end = p + 24 + stored as usize;
        if end > io.min(t) {
            break;
        }
        let mut h = crc32fast::Hasher::new();
        h.update(&b[p..p + 20]);
        h.update(&b[p + 24..end]);
        let c = h.finalize();
        b[p + 20..p + 24].copy_from_slice(&c.to_le_bytes());
        p = end;
    }
    if io.checked_add(il as usize) == Some(t) && il >= 4 {
        let c = crc32fast::hash(&b[io..t - 4]);
        b[t - 4..t].copy_from_slice(&c.to_le_bytes());
    }
    let c = crc32fast::hash(&b[t..t + 16]);
    b[t + 16..t + 20].copy_from_slice(&c.to_le_bytes());
}

#[test]
fn every_single_bit_flip_of_a_small_file_is_caught() {
    let view = {
        use statekit_core::{OwnedEntry, StateDescriptor, TtlConfig, TypeSchema};
        let states = vec![
            StateDescriptor::map("m", TypeSchema::Utf8, TypeSchema::Utf8, TypeSchema::Bytes)
                .with_ttl(TtlConfig::new(5)),
            StateDescriptor::list("l", TypeSchema::Utf8, TypeSchema::Bytes),
        ];
        let mut entries = Vec::new();
        for i in 0..6u8 {
            for s in 0..2u32 {
                entries.push(OwnedEntry {
                    key_group: u32::from(i % 3),
                    state: s,
                    key: vec![b'k', i],
                    namespace: vec![],
                    user_key: (s == 0).then(|| vec![i]),
                    value: vec![i; 5],
                    timestamp: (s == 0).then_some(i64::from(i)),
                });
            }
        }
        MemoryView::new(4, KeyGroupRange::all(4), states, entries)
    };
    for compression in [Compression::None, Compression::Lz4, Compression::Zstd { level: 1 }] {
        let storage = MemoryStorage::new();
        let opts = WriteOptions {
            compression,
            block_size: 20,
        };
        write_keyed_file(&view, KeyGroupRange::all(4), &storage, "k", &opts).expect("write");
        let bytes = storage.open("k").expect("open").bytes().to_vec();
        for bit in 0..bytes.len() * 8 {
            let mut bad = bytes.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(
                exercise_keyed(bad, None),
                "{compression:?}: flip of bit {bit} went unnoticed"
            );
        }
        let got = MemoryView::collect(
            &KeyedFileReader::open(&storage, "k", None).expect("open"),
            KeyGroupRange::all(4),
        )
        .expect("collect");
        assert_eq!(got.entries(), view.entries());
    }
}
