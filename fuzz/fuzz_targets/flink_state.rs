//! Flink's state streams (`statekit_flink::KeyGroupsView` over a key-group stream in the
//! canonical or heap layout, `read_operator_state` over an operator state stream), from an
//! input that is `kind ‖ flags ‖ n ‖ n × u32 offset ‖ stream`: never panic, hang or allocate
//! past the cap; every error names the input and an offset; every entry visited is in the
//! key group it was visited for.
//!
//! Keyed (`kind` even): the offsets are key groups 0..n (`flags` bit 0 = a savepoint handle,
//! bit 1 = max parallelism 256). Operator (`kind` odd): the offsets but the last are the
//! elements of the head's first list state, the last is its first broadcast state.
#![no_main]

use libfuzzer_sys::fuzz_target;
use statekit_core::KeyedStateView;
use statekit_flink::{
    decode_operator_proxy, read_operator_state, DistributionMode, FlinkKeyGroupRange, KeyGroupsHandle,
    KeyGroupsView, OperatorStateHandle, OperatorStatePart, StreamHandle,
};
use std::ops::ControlFlow;

fn check(msg: String) {
    assert!(msg.contains("in: offset") || msg.contains("in (inline)"), "{msg}");
}

fuzz_target!(|data: &[u8]| {
    statekit_fuzz::begin(data);
    let [kind, flags, n, rest @ ..] = data else { return };
    let mut rest = rest;
    let mut offsets = Vec::new();
    for _ in 0..(*n).min(32) {
        let Some((o, r)) = rest.split_first_chunk::<4>() else { return };
        offsets.push(u64::from(u32::from_be_bytes(*o)));
        rest = r;
    }
    let stream = rest.to_vec();
    let inline = StreamHandle::Bytes {
        name: "in".into(),
        data: Vec::new(),
    };
    if kind % 2 == 0 {
        let handle = KeyGroupsHandle {
            savepoint: flags & 1 != 0,
            range: FlinkKeyGroupRange {
                start: 0,
                count: offsets.len() as u32,
            },
            offsets,
            stream: inline,
            handle_id: None,
        };
        let maxp = if flags & 2 != 0 { 256 } else { 128 };
        match KeyGroupsView::new(stream, &handle, maxp, "in") {
            Ok(v) => {
                for kg in v.key_group_range() {
                    let r = v.visit_key_group(kg, &mut |e| {
                        assert!((e.state as usize) < v.states().len());
                        std::hint::black_box(e);
                        Ok(ControlFlow::Continue(()))
                    });
                    if let Err(e) = r {
                        check(e.to_string());
                    }
                }
            }
            Err(e) => check(e.to_string()),
        }
    } else {
        let Ok(proxy) = decode_operator_proxy(&stream, "in") else { return };
        let mut states = Vec::new();
        let last = offsets.pop();
        if let Some(m) = proxy.states.first() {
            states.push(OperatorStatePart {
                name: m.name.clone(),
                mode: if flags & 1 != 0 { DistributionMode::Union } else { DistributionMode::SplitDistribute },
                offsets,
            });
        }
        if let (Some(m), Some(o)) = (proxy.broadcast.first(), last) {
            states.push(OperatorStatePart {
                name: m.name.clone(),
                mode: DistributionMode::Broadcast,
                offsets: vec![o],
            });
        }
        let handle = OperatorStateHandle {
            states,
            stream: inline,
            merged_dirs: None,
        };
        match read_operator_state(&stream, &handle, "in") {
            Ok(s) => {
                std::hint::black_box(s);
            }
            Err(e) => check(e.to_string()),
        }
    }
});
