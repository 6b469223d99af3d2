//! The RocksDB backend's byte layout (`statekit_rocksdb::layout`, `docs/rocksdb-layout.md`):
//! what it reads back from RocksDB is untrusted (a damaged or foreign database). Byte 0 of
//! the input selects the key-group prefix width (bit 0), TTL stamps (bit 1) and whether the
//! merge starts from a stored list (bit 2); bytes 1 and 2 are split points: the rest is
//! `a ‖ b` with `a` of byte 1's length, and `b` is `op_a ‖ op_b` with `op_a` of byte 2's
//! length. The whole rest is used as a stored value, a stored list and list merge operands;
//! `a` and `b` as two stored keys; `a` as the stored list and `op_a`, `op_b` as two merge
//! operands. Checks:
//!
//! * `KeyLayout::decode` / `decode_into` never panic; a decoded key re-encodes
//!   (`encode_map_key`) to the same bytes; `decode_into` into a used `DecodedKey` gives the
//!   same parts; two keys that decode compare as bytes exactly as their
//!   `(key group, key, namespace, user key)` tuples do (the order snapshots rely on);
//! * `split_value` never panics and re-encodes (`encode_value`) to the same bytes;
//! * the list element iterator (`ListElements`) never panics and stops after an error; a
//!   list that reads cleanly re-encodes (`push_element`) to itself (or shorter, where a
//!   LEB128 length was overlong);
//! * `list_operands` never panics; operands that read cleanly re-encode
//!   (`push_list_operand`) to themselves (or shorter);
//! * `apply_list_operands` (the merge operator's full merge) never panics, and gives the same
//!   result however RocksDB groups well-formed operands: `[a, b]`, the partial merge `[a‖b]`,
//!   or a full merge of `a` followed by one of `b`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use statekit_rocksdb::layout::{
    apply_list_operands, encode_value, list_operands, push_element, push_list_operand, split_value, DecodedKey,
    KeyLayout, ListElements,
};

fn keys(layout: KeyLayout, a: &[u8], b: &[u8]) {
    let mut reused = DecodedKey {
        key_group: 7,
        key: b"stale".to_vec(),
        namespace: b"stale".to_vec(),
        user_key: b"stale".to_vec(),
    };
    let mut decoded = Vec::new();
    for raw in [a, b] {
        let Ok(k) = layout.decode(raw) else {
            assert!(layout.decode_into(raw, &mut reused).is_err());
            continue;
        };
        layout
            .decode_into(raw, &mut reused)
            .expect("decode_into agrees with decode");
        assert_eq!(reused, k);
        let mut again = Vec::new();
        layout.encode_map_key(&mut again, k.key_group, &k.key, &k.namespace, &k.user_key);
        assert_eq!(again, raw, "decoded key {k:?} re-encodes differently");
        decoded.push((raw, k));
    }
    if let [(ra, ka), (rb, kb)] = &decoded[..] {
        let tuple = |k: &DecodedKey| (k.key_group, k.key.clone(), k.namespace.clone(), k.user_key.clone());
        assert_eq!(
            ra.cmp(rb),
            tuple(ka).cmp(&tuple(kb)),
            "byte order != tuple order: {ka:?} {kb:?}"
        );
    }
}

fn values(raw: &[u8], stamped: bool) {
    if let Ok((ts, v)) = split_value(raw, stamped) {
        let mut again = Vec::new();
        encode_value(&mut again, stamped.then_some(ts), v);
        assert_eq!(again, raw);
    } else {
        assert!(stamped && raw.len() < 8);
    }
}

/// The elements of a stored list, `None` if it does not read cleanly.
fn list(raw: &[u8], stamped: bool) -> Option<Vec<(i64, &[u8])>> {
    let mut out = Vec::new();
    let mut it = ListElements::new(raw, stamped);
    for e in it.by_ref() {
        match e {
            Ok(e) => out.push(e),
            Err(e) => {
                std::hint::black_box(e.to_string());
                assert!(it.next().is_none(), "the iterator stops after an error");
                return None;
            }
        }
    }
    let mut again = Vec::new();
    for &(ts, e) in &out {
        push_element(&mut again, stamped.then_some(ts), e);
    }
    assert!(again == raw || again.len() < raw.len(), "list re-encodes differently");
    Some(out)
}

/// Whether `raw` is a clean concatenation of operands (checking their re-encoding).
fn operands(raw: &[u8]) -> bool {
    let mut again = Vec::new();
    for op in list_operands(raw) {
        let Ok(op) = op else { return false };
        push_list_operand(&mut again, op.stamped, op.expire, op.elements);
    }
    assert!(
        again == raw || again.len() < raw.len(),
        "operands re-encode differently"
    );
    true
}

fn merges(existing: Option<&[u8]>, a: &[u8], b: &[u8]) {
    let pair = apply_list_operands(existing, [a, b].into_iter());
    if !(operands(a) && operands(b)) {
        return;
    }
    let joined = [a, b].concat();
    let partial = apply_list_operands(existing, std::iter::once(&joined[..]));
    let stepwise = apply_list_operands(existing, std::iter::once(a))
        .and_then(|first| apply_list_operands(Some(&first), std::iter::once(b)));
    let ok = |r: &Result<Vec<u8>, _>| r.as_ref().ok().cloned();
    assert_eq!(ok(&pair), ok(&partial), "[a, b] and [a‖b] merge differently");
    assert_eq!(ok(&pair), ok(&stepwise), "one merge and two merges differ");
}

fuzz_target!(|data: &[u8]| {
    statekit_fuzz::begin(data);
    let (flags, split, split2, rest) = match data {
        [f, s, s2, rest @ ..] => (*f, usize::from(*s), usize::from(*s2), rest),
        _ => return,
    };
    let layout = KeyLayout::for_max_parallelism(if flags & 1 == 0 { 128 } else { 32768 });
    let stamped = flags & 2 != 0;
    let (a, b) = rest.split_at(split.min(rest.len()));
    keys(layout, a, b);
    values(rest, stamped);
    list(rest, stamped);
    operands(rest);
    let existing = (flags & 4 != 0).then_some(a);
    let (op_a, op_b) = b.split_at(split2.min(b.len()));
    merges(existing, op_a, op_b);
});
