//! Flink `_metadata` decoding (`statekit_flink::decode_metadata`, versions 3 to 7): never
//! panics, hangs or allocates past the cap; every error names the file and an offset; what
//! decodes is structurally sound (subtask indices below the parallelism, each once; key-group
//! offsets one per key group) and decodes the same way twice.
#![no_main]

use libfuzzer_sys::fuzz_target;
use statekit_flink::{decode_metadata, KeyedHandle};

fuzz_target!(|data: &[u8]| {
    statekit_fuzz::begin(data);
    match decode_metadata(data, "_metadata") {
        Ok(md) => {
            for op in &md.operators {
                assert!(op.parallelism >= 1 && op.parallelism <= op.max_parallelism);
                let mut seen = std::collections::BTreeSet::new();
                for s in &op.subtasks {
                    assert!(s.index < op.parallelism && seen.insert(s.index));
                    for k in s.managed_keyed.iter().chain(&s.raw_keyed) {
                        if let KeyedHandle::KeyGroups(g) = k {
                            assert_eq!(g.offsets.len(), g.range.count as usize);
                        }
                        std::hint::black_box(k.streams());
                    }
                }
            }
            assert_eq!(decode_metadata(data, "_metadata").ok(), Some(md));
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.starts_with("_metadata: offset "), "{msg}");
        }
    }
});
