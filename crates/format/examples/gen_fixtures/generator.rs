//! Deterministic generator of the golden fixtures under `fixtures/v1/`.
//!
//! Shared by the `gen_fixtures` example (which writes them) and `tests/golden.rs` (which
//! regenerates them in memory and in a temporary directory and compares).
#![allow(dead_code)]

use statekit_core::storage::LocalStorage;
use statekit_core::{
    encode_value, key_group_for_key, KeyGroupRange, MemoryView, OperatorId, OperatorStateData, OperatorStateDescriptor,
    OperatorStateMode, OperatorStateSnapshot, OwnedEntry, StateDescriptor, TtlConfig, TtlUpdateType, TypeSchema, Value,
};
use statekit_format::{
    write_keyed_file, write_metadata, write_operator_file, Compression, FileRef, FormatError, KeyedStats,
    OperatorMetadata, SnapshotFormat, SnapshotKind, SnapshotMetadata, SubtaskMetadata, WriteOptions,
    METADATA_FILE_NAME,
};
use std::collections::BTreeMap;
use std::path::Path;

/// Max parallelism of both operators.
pub const MAX_PARALLELISM: u32 = 8;
/// The savepoint directory name.
pub const BASIC: &str = "savepoint-basic";
/// Corrupted copies: (directory, file damaged, what was done).
pub const CORRUPT: [(&str, &str, &str); 4] = [
    (
        "corrupt-bitflip",
        "word-counter/0.keyed",
        "one bit flipped inside the first block of key group data",
    ),
    ("corrupt-truncated", "word-counter/1.keyed", "last 10 bytes cut off"),
    ("corrupt-version", "enricher/0.keyed", "format version field set to 2"),
    (
        "corrupt-metadata-crc",
        METADATA_FILE_NAME,
        "one bit flipped inside the metadata body",
    ),
];

/// What the basic savepoint holds.
pub struct Fixture {
    /// Its `_metadata`.
    pub metadata: SnapshotMetadata,
    /// Keyed files: path and the view written to it.
    pub keyed: Vec<(String, MemoryView)>,
    /// Operator files: path and the snapshot written to it.
    pub operator: Vec<(String, OperatorStateSnapshot)>,
}

const WORDS: [&str; 8] = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"];

fn i64b(v: i64) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

fn window(start: i64, end: i64) -> Vec<u8> {
    encode_value(
        &window_schema(),
        &Value::Tuple(vec![Value::I64(start), Value::I64(end)]),
    )
    .unwrap_or_default()
}

fn window_schema() -> TypeSchema {
    TypeSchema::Tuple(vec![TypeSchema::I64, TypeSchema::I64])
}

/// The keyed states of `word-counter`: every kind, TTL on a list and a map, a windowed map.
pub fn counter_states() -> Vec<StateDescriptor> {
    vec![
        StateDescriptor::value("count", TypeSchema::Utf8, TypeSchema::I64),
        StateDescriptor::list("recent", TypeSchema::Utf8, TypeSchema::Utf8).with_ttl(TtlConfig::new(60_000)),
        StateDescriptor::map("per-window", TypeSchema::Utf8, TypeSchema::Utf8, TypeSchema::I64)
            .with_namespace(window_schema())
            .with_ttl(TtlConfig {
                ttl_ms: 3_600_000,
                update_type: TtlUpdateType::OnReadAndWrite,
            }),
        StateDescriptor::reducing("total", TypeSchema::Utf8, TypeSchema::I64),
        StateDescriptor::aggregating(
            "avg",
            TypeSchema::Utf8,
            TypeSchema::Tuple(vec![TypeSchema::I64, TypeSchema::I64]),
        ),
    ]
}

fn counter_entries() -> Vec<OwnedEntry> {
    let mut out = Vec::new();
    for (i, w) in WORDS.iter().enumerate() {
        let i = i as i64;
        let key = w.as_bytes().to_vec();
        let kg = key_group_for_key(&key, MAX_PARALLELISM);
        let e =
            |state: u32, namespace: Vec<u8>, user_key: Option<Vec<u8>>, value: Vec<u8>, ts: Option<i64>| OwnedEntry {
                key_group: kg,
                state,
                key: key.clone(),
                namespace,
                user_key,
                value,
                timestamp: ts,
            };
        out.push(e(0, vec![], None, i64b(i + 1), None));
        for j in 0..=(i % 3) {
            out.push(e(
                1,
                vec![],
                None,
                format!("{w}-event-{j}").into_bytes(),
                Some(1_700_000_000_000 + i * 10 + j),
            ));
        }
        for win in 0..2 {
            let ns = window(win * 60_000, (win + 1) * 60_000);
            for uk in ["a", "b"] {
                out.push(e(
                    2,
                    ns.clone(),
                    Some(uk.as_bytes().to_vec()),
                    i64b(i * 100 + win),
                    Some(1_700_000_000_500 + win),
                ));
            }
        }
        if i % 2 == 0 {
            out.push(e(3, vec![], None, i64b(i * 1000), None));
        }
        let acc = encode_value(
            &TypeSchema::Tuple(vec![TypeSchema::I64, TypeSchema::I64]),
            &Value::Tuple(vec![Value::I64(i * 7), Value::I64(i + 2)]),
        )
        .unwrap_or_default();
        out.push(e(4, vec![], None, acc, None));
    }
    out
}

fn enricher_states() -> Vec<StateDescriptor> {
    vec![StateDescriptor::value("last-seen", TypeSchema::I64, TypeSchema::Utf8)]
}

fn op_desc(name: &str, mode: OperatorStateMode) -> OperatorStateDescriptor {
    OperatorStateDescriptor {
        name: name.into(),
        mode,
        value_schema: if mode == OperatorStateMode::Broadcast {
            TypeSchema::Utf8
        } else {
            TypeSchema::I64
        },
        key_schema: (mode == OperatorStateMode::Broadcast).then_some(TypeSchema::Utf8),
    }
}

fn counter_operator_states() -> Vec<OperatorStateDescriptor> {
    vec![
        op_desc("offsets", OperatorStateMode::List),
        op_desc("watermarks", OperatorStateMode::Union),
        op_desc("rules", OperatorStateMode::Broadcast),
    ]
}

fn counter_operator_snapshot(subtask: u32) -> OperatorStateSnapshot {
    let s = i64::from(subtask);
    let rules: BTreeMap<Vec<u8>, Vec<u8>> = [("min-length", "3"), ("stop-word", "the")]
        .into_iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect();
    let d = counter_operator_states();
    OperatorStateSnapshot {
        states: vec![
            (
                d[0].clone(),
                OperatorStateData::List((0..3).map(|p| i64b(s * 100 + p)).collect()),
            ),
            (d[1].clone(), OperatorStateData::List(vec![i64b(1_700_000_000_000 + s)])),
            (d[2].clone(), OperatorStateData::Broadcast(rules)),
        ],
    }
}

/// Writes `savepoint-basic` into `dir` (which should be empty) and returns what it holds.
pub fn write_savepoint(dir: &Path) -> Result<Fixture, FormatError> {
    let storage = LocalStorage::new(dir);
    let mut keyed = Vec::new();
    let mut operator = Vec::new();

    // word-counter: parallelism 2; a zstd and an lz4 keyed file with small blocks (key groups
    // span several blocks); an uncompressed and an lz4 operator file.
    let all = MemoryView::new(
        MAX_PARALLELISM,
        KeyGroupRange::all(MAX_PARALLELISM),
        counter_states(),
        counter_entries(),
    );
    let mut counter_subtasks = Vec::new();
    for (i, compression) in [(0u32, Compression::Zstd { level: 3 }), (1, Compression::Lz4)] {
        let range = KeyGroupRange::for_subtask(MAX_PARALLELISM, 2, i);
        let view = MemoryView::collect(&all, range)?;
        let path = format!("word-counter/{i}.keyed");
        let info = write_keyed_file(
            &view,
            range,
            &storage,
            &path,
            &WriteOptions {
                compression,
                block_size: 96,
            },
        )?;
        keyed.push((path, view));
        let snap = counter_operator_snapshot(i);
        let opath = format!("word-counter/{i}.operator");
        let ocomp = if i == 0 { Compression::None } else { Compression::Lz4 };
        let oref = write_operator_file(
            &snap,
            &storage,
            &opath,
            &WriteOptions {
                compression: ocomp,
                block_size: 64,
            },
        )?;
        operator.push((opath, snap));
        counter_subtasks.push(SubtaskMetadata {
            index: i,
            key_groups: range,
            finished: false,
            keyed: statekit_format::KeyedHandle::Canonical(info.file.clone()),
            keyed_stats: Some(KeyedStats::from_info(&info)),
            operator: Some(oref),
        });
    }

    // enricher: parallelism 3, finished. Subtask 0 has keyed state, subtask 1 an empty keyed
    // file, subtask 2 none; only subtask 0 has operator state.
    let mut enricher_subtasks = Vec::new();
    for i in 0..3u32 {
        let range = KeyGroupRange::for_subtask(MAX_PARALLELISM, 3, i);
        let mut keyed_ref: Option<FileRef> = None;
        let mut keyed_stats: Option<KeyedStats> = None;
        if i < 2 {
            let entries: Vec<OwnedEntry> = if i == 0 {
                (0..4i64)
                    .map(|k| OwnedEntry::value(0, i64b(k * 11), format!("seen {k}").into_bytes(), MAX_PARALLELISM))
                    .collect()
            } else {
                Vec::new()
            };
            let view = MemoryView::new(MAX_PARALLELISM, range, enricher_states(), entries);
            let path = format!("enricher/{i}.keyed");
            let opts = WriteOptions {
                compression: Compression::None,
                block_size: 64 * 1024,
            };
            let info = write_keyed_file(&view, range, &storage, &path, &opts)?;
            keyed_stats = Some(KeyedStats::from_info(&info));
            keyed_ref = Some(info.file);
            keyed.push((path, view));
        }
        let mut operator_ref = None;
        if i == 0 {
            let snap = OperatorStateSnapshot {
                states: vec![(
                    op_desc("pending", OperatorStateMode::List),
                    OperatorStateData::List(vec![]),
                )],
            };
            let path = "enricher/0.operator".to_string();
            operator_ref = Some(write_operator_file(&snap, &storage, &path, &WriteOptions::default())?);
            operator.push((path, snap));
        }
        enricher_subtasks.push(SubtaskMetadata {
            index: i,
            key_groups: range,
            finished: true,
            keyed: keyed_ref.map_or(
                statekit_format::KeyedHandle::None,
                statekit_format::KeyedHandle::Canonical,
            ),
            keyed_stats,
            operator: operator_ref,
        });
    }

    let metadata = SnapshotMetadata {
        kind: SnapshotKind::Savepoint,
        format: SnapshotFormat::Canonical,
        checkpoint_id: 42,
        job_id: "0123456789abcdef0123456789abcdef".into(),
        timestamp_ms: 1_700_000_123_456,
        properties: [("generator", "gen_fixtures"), ("note", "golden fixture, format v1")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        operators: vec![
            OperatorMetadata {
                uid: "word-counter".into(),
                operator_id: OperatorId::from_uid("word-counter"),
                parallelism: 2,
                max_parallelism: MAX_PARALLELISM,
                finished: false,
                key_group_scheme: Default::default(),
                keyed_states: counter_states(),
                operator_states: counter_operator_states(),
                subtasks: counter_subtasks,
            },
            OperatorMetadata {
                uid: "enricher".into(),
                operator_id: OperatorId::from_uid("enricher"),
                parallelism: 3,
                max_parallelism: MAX_PARALLELISM,
                finished: true,
                key_group_scheme: Default::default(),
                keyed_states: enricher_states(),
                operator_states: vec![op_desc("pending", OperatorStateMode::List)],
                subtasks: enricher_subtasks,
            },
        ],
    };
    write_metadata(&storage, METADATA_FILE_NAME, &metadata)?;
    Ok(Fixture {
        metadata,
        keyed,
        operator,
    })
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let target = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &target)?;
        } else {
            std::fs::copy(e.path(), target)?;
        }
    }
    Ok(())
}

/// Writes `savepoint-basic` and its corrupted copies under `root` (replacing them).
pub fn write_all(root: &Path) -> Result<Fixture, Box<dyn std::error::Error>> {
    let basic = root.join(BASIC);
    if basic.exists() {
        std::fs::remove_dir_all(&basic)?;
    }
    let fixture = write_savepoint(&basic)?;
    for (name, file, _) in CORRUPT {
        let dir = root.join(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        copy_dir(&basic, &dir)?;
        let path = dir.join(file);
        let mut bytes = std::fs::read(&path)?;
        match name {
            "corrupt-bitflip" => {
                // The first block's payload starts 24 bytes after the first section.
                let reader = statekit_format::KeyedFileReader::open(&LocalStorage::new(&basic), file, None)?;
                let first = reader.key_groups().first().ok_or("no key group")?;
                let at = first.offset as usize + 24 + 3;
                bytes[at] ^= 0x10;
            }
            "corrupt-truncated" => {
                let n = bytes.len() - 10;
                bytes.truncate(n);
            }
            "corrupt-version" => bytes[4..8].copy_from_slice(&2u32.to_le_bytes()),
            _ => {
                let mid = bytes.len() / 2;
                bytes[mid] ^= 0x01;
            }
        }
        std::fs::write(&path, &bytes)?;
    }
    Ok(fixture)
}
