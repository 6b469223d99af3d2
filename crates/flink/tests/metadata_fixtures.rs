//! Every `_metadata` of the real Flink fixtures (`fixtures/flink/`) decodes to what Flink's
//! own `Checkpoints.loadCheckpointMetadata` printed for it (`metadata-dump*.txt`): the same
//! operators, parallelism, subtasks, handle kinds, key-group ranges and offsets, files and
//! sizes, operator-state names, modes and offsets, changelog parts and snapshot type. And
//! damaged copies of them fail with an error, never a panic.

use statekit_flink::{decode_metadata, FlinkMetadata, KeyedHandle, OperatorStateHandle, StreamHandle};
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/flink")
}

/// Every (`_metadata`, dump) pair under `fixtures/flink`.
fn pairs() -> Vec<(PathBuf, PathBuf)> {
    let mut out = Vec::new();
    for version in std::fs::read_dir(fixtures()).expect("fixtures/flink") {
        let version = version.expect("entry").path();
        if !version.is_dir() {
            continue;
        }
        for fixture in std::fs::read_dir(&version).expect("version dir") {
            let fixture = fixture.expect("entry").path();
            if !fixture.is_dir() {
                continue;
            }
            for dump in std::fs::read_dir(&fixture).expect("fixture dir") {
                let dump = dump.expect("entry").path();
                let name = dump
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or_default()
                    .to_string();
                if !name.starts_with("metadata-dump") {
                    continue;
                }
                let text = std::fs::read_to_string(&dump).expect("dump");
                let first = text.lines().next().unwrap_or_default();
                let rel = first
                    .rsplit(" for ")
                    .next()
                    .expect("'for <path>' in the dump's first line");
                out.push((fixture.join(rel.trim()), dump));
            }
        }
    }
    out.sort();
    out
}

/// `…/name` → `name` (Flink prints absolute paths of the generating machine).
fn base(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn stream(h: &StreamHandle) -> String {
    match h {
        StreamHandle::Bytes { data, .. } => format!("inline {}", data.len()),
        StreamHandle::Relative { path, size } => format!("relative {path} {size}"),
        StreamHandle::File { path, size } => format!("file {} {size}", base(path)),
        other => format!("{other:?}"),
    }
}

/// The same facts from Flink's text.
fn dump_stream(s: &str) -> String {
    let s = s.trim().trim_end_matches(',');
    if let Some(rest) = s.strip_prefix("RelativeFileStateHandle(") {
        let (name, size) = rest.trim_end_matches(')').split_once(", size=").expect("relative");
        format!("relative {name} {size}")
    } else if let Some(rest) = s.strip_prefix("FileStateHandle(") {
        let (path, size) = rest.trim_end_matches(')').split_once(", size=").expect("file");
        format!("file {} {size}", base(path))
    } else if let Some(rest) = s.strip_prefix("ByteStreamStateHandle(") {
        let n = rest
            .rsplit("inline bytes=")
            .next()
            .expect("inline")
            .trim_end_matches(')');
        format!("inline {n}")
    } else {
        panic!("unknown stream in dump: {s}")
    }
}

fn ours(md: &FlinkMetadata) -> Vec<String> {
    let mut f = vec![format!("checkpoint_id {}", md.checkpoint_id)];
    if let Some(p) = &md.properties {
        f.push(format!("type savepoint={} format={:?}", p.savepoint, p.format));
    }
    f.push(format!("master_states {}", md.master_states.len()));
    // Flink's dump lists operators by id.
    let mut ops: Vec<_> = md.operators.iter().collect();
    ops.sort_by_key(|o| o.id.to_string());
    for op in ops {
        f.push(format!(
            "operator {} p={} m={}",
            op.id, op.parallelism, op.max_parallelism
        ));
        for s in &op.subtasks {
            f.push(format!("subtask {} finished={}", s.index, s.finished));
            for h in &s.managed_operator {
                operator_facts(&mut f, "managed_operator", h);
            }
            for h in &s.raw_operator {
                operator_facts(&mut f, "raw_operator", h);
            }
            if let Some(k) = &s.managed_keyed {
                keyed_facts(&mut f, "managed_keyed", k);
            }
            if let Some(k) = &s.raw_keyed {
                keyed_facts(&mut f, "raw_keyed", k);
            }
        }
    }
    f
}

fn operator_facts(f: &mut Vec<String>, what: &str, h: &OperatorStateHandle) {
    f.push(format!("{what} {}", stream(&h.stream)));
    // The dump lists a stream's states by name.
    let mut states: Vec<_> = h.states.iter().collect();
    states.sort_by(|a, b| a.name.cmp(&b.name));
    for s in states {
        f.push(format!("state {} {} {:?}", s.name, s.mode.name(), s.offsets));
    }
}

fn keyed_facts(f: &mut Vec<String>, what: &str, k: &KeyedHandle) {
    let r = k.range();
    let range = format!("{}..{}", r.start, r.end().map_or(-1, i64::from));
    match k {
        KeyedHandle::KeyGroups(g) => {
            f.push(format!("{what} {} {range} {}", k.type_name(), stream(&g.stream)));
            f.push(format!("offsets {:?}", g.offsets));
        }
        KeyedHandle::Incremental(i) => {
            f.push(format!(
                "{what} incremental {range} backend={} checkpoint={} checkpointed={:?}",
                i.backend_id, i.checkpoint_id, i.checkpointed_size
            ));
            f.push(format!("meta {}", stream(&i.meta)));
            for s in &i.shared {
                f.push(format!("shared {} {}", s.local_name, stream(&s.handle)));
            }
            for s in &i.private {
                f.push(format!("private {} {}", s.local_name, stream(&s.handle)));
            }
        }
        KeyedHandle::Changelog {
            materialized,
            non_materialized,
            materialization_id,
            ..
        } => {
            f.push(format!("{what} changelog {range} materialization={materialization_id}"));
            for m in materialized {
                keyed_facts(f, "materialized", m);
            }
            for m in non_materialized {
                keyed_facts(f, "non_materialized", m);
            }
        }
        KeyedHandle::ChangelogFiles {
            parts, size, storage, ..
        } => {
            f.push(format!(
                "{what} changelog-files {range} storage={storage:?} size={size}"
            ));
            for p in parts {
                f.push(format!("part {} {}", p.offset, stream(&p.handle)));
            }
        }
        KeyedHandle::ChangelogBytes { changes, .. } => {
            f.push(format!("{what} changelog-bytes {range} changes={}", changes.len()));
        }
    }
}

fn theirs(dump: &str) -> Vec<String> {
    let mut f = Vec::new();
    let field = |line: &str, key: &str| -> String {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .unwrap_or_else(|| panic!("{key} in {line}"))
            .to_string()
    };
    for line in dump.lines() {
        let t = line.trim();
        if t.starts_with('#') || t.is_empty() || t.starts_with("magic+version") {
            continue;
        }
        if let Some(v) = t.strip_prefix("checkpoint_id: ") {
            f.push(format!("checkpoint_id {v}"));
        } else if let Some(v) = t.strip_prefix("master_states: ") {
            f.push(format!("master_states {v}"));
        } else if t.starts_with("properties: ") {
            let savepoint = t.contains("checkpointType=SavepointType");
            let format = t.split("formatType=").nth(1).map(|s| {
                s.split(|c: char| !c.is_ascii_alphabetic())
                    .next()
                    .unwrap_or_default()
                    .to_string()
            });
            f.push(format!("type savepoint={savepoint} format={format:?}"));
        } else if let Some(rest) = t.strip_prefix("operator ") {
            let id = rest.split_whitespace().next().expect("id");
            f.push(format!(
                "operator {id} p={} m={}",
                field(t, "parallelism="),
                field(t, "max_parallelism=")
            ));
        } else if let Some(rest) = t.strip_prefix("subtask ") {
            let (i, fin) = rest.split_once(" finished=").expect("subtask");
            f.push(format!("subtask {i} finished={fin}"));
        } else if let Some(rest) = t.strip_prefix("managed_operator: OperatorStreamStateHandle stream=") {
            f.push(format!("managed_operator {}", dump_stream(rest)));
        } else if let Some(rest) = t.strip_prefix("raw_operator: OperatorStreamStateHandle stream=") {
            f.push(format!("raw_operator {}", dump_stream(rest)));
        } else if let Some(rest) = t.strip_prefix("state '") {
            let (name, rest) = rest.split_once("' mode=").expect("state");
            let (mode, offsets) = rest.split_once(" offsets=").expect("offsets");
            f.push(format!("state {name} {mode} {offsets}"));
        } else if let Some(rest) = t.strip_prefix("key_group_offsets: ") {
            let offs: Vec<u64> = rest
                .split_whitespace()
                .map(|p| p.split_once(':').expect("kg:offset").1.parse().expect("offset"))
                .collect();
            f.push(format!("offsets {offs:?}"));
        } else if let Some((what, rest)) = t
            .split_once(": ")
            .filter(|(w, _)| ["managed_keyed", "raw_keyed", "materialized", "non_materialized"].contains(w))
        {
            let ty = rest.split_whitespace().next().expect("type");
            let range = field(t, "key_groups=[").trim_end_matches(']').to_string();
            match ty {
                "KeyGroupsSavepointStateHandle" | "KeyGroupsStateHandle" => {
                    let s = rest.split_once(" stream=").expect("stream").1;
                    f.push(format!("{what} {ty} {range} {}", dump_stream(s)));
                }
                "IncrementalRemoteKeyedStateHandle" => f.push(format!(
                    "{what} incremental {range} backend={} checkpoint={} checkpointed=Some({})",
                    field(t, "backend_id="),
                    field(t, "checkpoint_id="),
                    field(t, "checkpointed_size=")
                )),
                "ChangelogStateBackendHandleImpl" => f.push(format!(
                    "{what} changelog {range} materialization={}",
                    field(t, "materialization_id=")
                )),
                "ChangelogStateHandleStreamImpl" => f.push(format!(
                    "{what} changelog-files {range} storage=Some({:?}) size={}",
                    field(t, "storage="),
                    field(t, "size=")
                )),
                other => panic!("unknown keyed handle in dump: {other}"),
            }
        } else if let Some(rest) = t.strip_prefix("meta: ") {
            f.push(format!("meta {}", dump_stream(rest)));
        } else if let Some(rest) = t.strip_prefix("shared ").or_else(|| t.strip_prefix("private ")) {
            let kind = if t.starts_with("shared") { "shared" } else { "private" };
            let (name, s) = rest.split_once(" -> ").expect("->");
            f.push(format!("{kind} {name} {}", dump_stream(s)));
        } else if let Some(rest) = t.strip_prefix("offset ") {
            let (off, s) = rest.split_once(" in ").expect("offset in");
            f.push(format!("part {off} {}", dump_stream(s)));
        } else {
            panic!("a dump line this test does not understand: {t}");
        }
    }
    f
}

#[test]
fn every_fixture_metadata_matches_flinks_own_dump() {
    let pairs = pairs();
    assert!(pairs.len() >= 11, "fixtures found: {}", pairs.len());
    for (md_path, dump_path) in pairs {
        let bytes = std::fs::read(&md_path).expect("read _metadata");
        let md = decode_metadata(&bytes, &md_path.display().to_string())
            .unwrap_or_else(|e| panic!("{}: {e}", md_path.display()));
        assert_eq!(md.version, 4, "Flink 1.20 writes version 4");
        let dump = std::fs::read_to_string(&dump_path).expect("dump");
        let (a, b) = (ours(&md), theirs(&dump));
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert_eq!(x, y, "{}: fact {i}", dump_path.display());
        }
        assert_eq!(a.len(), b.len(), "{}: number of facts", dump_path.display());
    }
}

#[test]
fn uid_hashes_match_the_operator_ids_flink_wrote() {
    let expected = fixtures().join("flink-1.20.5/savepoint-rocksdb-canonical/expected.json");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(expected).expect("read")).expect("json");
    let mut checked = 0;
    for op in v["operators"].as_array().expect("operators") {
        let Some(uid) = op["uid"].as_str() else { continue };
        let id = op["operator_id"].as_str().expect("id");
        assert_eq!(statekit_core::OperatorId::from_uid(uid).to_string(), id, "uid {uid}");
        checked += 1;
    }
    assert!(checked >= 6);
}

#[test]
fn truncated_and_bit_flipped_metadata_fail_cleanly() {
    for (md_path, _) in pairs() {
        let bytes = std::fs::read(&md_path).expect("read");
        let name = md_path.display().to_string();
        let full = decode_metadata(&bytes, &name).expect("intact");
        // Every truncation inside the operators is an error naming the file and an offset.
        let body_end = bytes.len() - trailer_len(&bytes);
        for cut in (0..body_end).step_by(7) {
            let e = decode_metadata(&bytes[..cut], &name).expect_err("truncated");
            let msg = e.to_string();
            assert!(msg.contains(&name) && msg.contains("offset"), "{msg}");
        }
        // Flipped bits decode to something or fail; never panic, hang or allocate wildly.
        let mut flipped = bytes.clone();
        for pos in (0..body_end).step_by(13) {
            for bit in [0u8, 3, 7] {
                flipped[pos] ^= 1 << bit;
                let _ = decode_metadata(&flipped, &name);
                flipped[pos] ^= 1 << bit;
            }
        }
        assert_eq!(decode_metadata(&flipped, &name).expect("restored"), full);
    }
}

/// Bytes of the Java-serialized trailer: from the `0xACED` stream magic on.
fn trailer_len(bytes: &[u8]) -> usize {
    bytes
        .windows(2)
        .rposition(|w| w == [0xAC, 0xED])
        .map_or(0, |p| bytes.len() - p)
}
