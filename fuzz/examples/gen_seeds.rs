//! Writes seed inputs for every fuzz target: `gen_seeds <fixtures dir> <out dir>` creates
//! `<out dir>/<target>/<hash>`. Run by `fuzz/seed.sh`, which then minimizes them into
//! `fuzz/corpus/` (libFuzzer `-merge=1`).
//!
//! * file targets: the golden and corrupted fixture files (`fixtures/v1`);
//! * `decode_value`: every key, namespace, user key and value of the keyed fixtures with its
//!   schema (in the compact schema form of `statekit_fuzz::typed::schema_from`), plus small
//!   hand-made values of every type;
//! * `state_descriptor`: every keyed state descriptor of the fixtures, followed by a value;
//! * `changelog_record`: every record of the fixture log files, re-encoded;
//! * `changelog_config`: a file of every known key with a typical value, and a few more;
//! * `rocksdb_layout`: fixture entries laid out as RocksDB keys, values, lists and list merge
//!   operands (layout of `docs/rocksdb-layout.md`, encoded here so this needs no RocksDB).

use statekit_changelog::record::{encode_change, encode_metadata};
use statekit_changelog::{ChangelogConfig, LogFileReader, Record};
use statekit_core::schema::put_varint;
use statekit_core::storage::Blob;
use statekit_core::{encode_value, KeyGroupRange, KeyedStateView, MemoryView, TypeSchema, Value};
use statekit_format::{encode_state_descriptor, KeyedFileReader};
use statekit_fuzz::typed::schema_bytes;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

struct Out {
    root: PathBuf,
    seen: BTreeSet<(String, Vec<u8>)>,
}

impl Out {
    fn put(&mut self, target: &str, bytes: &[u8]) {
        if !self.seen.insert((target.to_string(), bytes.to_vec())) {
            return;
        }
        // FNV-1a 64, enough to name a few hundred seeds.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        let dir = self.root.join(target);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join(format!("seed-{h:016x}")), bytes).expect("write seed");
    }
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<_> = rd.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

fn value_seed(out: &mut Out, schema: &TypeSchema, bytes: &[u8]) {
    let mut s = Vec::new();
    schema_bytes(schema, &mut s);
    s.extend_from_slice(bytes);
    out.put("decode_value", &s);
}

fn hand_made_values(out: &mut Out) {
    use TypeSchema as T;
    let list = |t: T| T::List(Box::new(t));
    let opt = |t: T| T::Option(Box::new(t));
    let strukt = |ts: Vec<T>| T::Struct(ts.into_iter().enumerate().map(|(i, t)| (format!("f{i}"), t)).collect());
    let cases: Vec<(T, Value)> = vec![
        (T::Bytes, Value::Bytes(b"\x00\x01raw".to_vec())),
        (T::Unit, Value::Unit),
        (T::Bool, Value::Bool(true)),
        (T::I32, Value::I32(-7)),
        (T::I64, Value::I64(1 << 40)),
        (T::U64, Value::U64(u64::MAX)),
        (T::F32, Value::F32(1.5)),
        (T::F64, Value::F64(-0.25)),
        (T::Utf8, Value::Str("wörd".into())),
        (list(T::I64), Value::List(vec![Value::I64(1), Value::I64(2)])),
        (
            list(T::Utf8),
            Value::List(vec![Value::Str("a".into()), Value::Str("".into())]),
        ),
        (list(T::Unit), Value::List(vec![Value::Unit; 3])),
        (
            list(list(T::Unit)),
            Value::List(vec![Value::List(vec![Value::Unit; 2])]),
        ),
        (opt(T::Bytes), Value::Option(Some(Box::new(Value::Bytes(vec![9, 9]))))),
        (opt(T::I32), Value::Option(None)),
        (
            T::Tuple(vec![T::Utf8, T::I64, T::Bool]),
            Value::Tuple(vec![Value::Str("k".into()), Value::I64(3), Value::Bool(false)]),
        ),
        (
            strukt(vec![T::I32, opt(T::Utf8), list(T::F64)]),
            Value::Struct(vec![
                ("f0".into(), Value::I32(1)),
                ("f1".into(), Value::Option(Some(Box::new(Value::Str("x".into()))))),
                ("f2".into(), Value::List(vec![Value::F64(2.0)])),
            ]),
        ),
    ];
    for (schema, value) in cases {
        let bytes = encode_value(&schema, &value).expect("hand-made value matches its schema");
        value_seed(out, &schema, &bytes);
    }
}

// ---- RocksDB layout (docs/rocksdb-layout.md) ---------------------------------------------

fn escaped(buf: &mut Vec<u8>, bytes: &[u8]) {
    for &b in bytes {
        buf.push(b);
        if b == 0 {
            buf.push(0xFF);
        }
    }
    buf.extend_from_slice(&[0, 0]);
}

fn rocksdb_key(wide: bool, kg: u32, key: &[u8], ns: &[u8], uk: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    if wide {
        b.extend_from_slice(&(kg as u16).to_be_bytes());
    } else {
        b.push(kg as u8);
    }
    escaped(&mut b, key);
    escaped(&mut b, ns);
    b.extend_from_slice(uk);
    b
}

fn element(buf: &mut Vec<u8>, ts: Option<i64>, e: &[u8]) {
    if let Some(ts) = ts {
        buf.extend_from_slice(&ts.to_be_bytes());
    }
    put_varint(buf, e.len() as u64);
    buf.extend_from_slice(e);
}

fn operand(buf: &mut Vec<u8>, stamped: bool, expire: Option<(i64, u64)>, elements: &[u8]) {
    match expire {
        Some((now, ttl)) => {
            buf.push(2);
            put_varint(buf, 16 + elements.len() as u64);
            buf.extend_from_slice(&now.to_be_bytes());
            buf.extend_from_slice(&ttl.to_be_bytes());
        }
        None => {
            buf.push(u8::from(stamped));
            put_varint(buf, elements.len() as u64);
        }
    }
    buf.extend_from_slice(elements);
}

/// `flags ‖ len(a) ‖ split of b ‖ a ‖ b` as `rocksdb_layout` reads it.
fn layout_seed(out: &mut Out, flags: u8, a: &[u8], b: &[u8], b_split: usize) {
    let (Ok(split), Ok(split2)) = (u8::try_from(a.len()), u8::try_from(b_split)) else {
        return;
    };
    let mut s = vec![flags, split, split2];
    s.extend_from_slice(a);
    s.extend_from_slice(b);
    out.put("rocksdb_layout", &s);
}

/// `kind ‖ flags ‖ n ‖ n × u32 offset ‖ stream` seeds for `flink_state`: each key-group
/// stream and operator state stream of a Flink snapshot with its handle's offsets.
fn flink_state_seeds(out: &mut Out, md: &Path) {
    use statekit_flink::{DistributionMode, FlinkOpenOptions, FlinkSnapshot, KeyedHandle};
    let Ok(snap) = FlinkSnapshot::open(md, &FlinkOpenOptions::default()) else {
        return;
    };
    let seed = |kind: u8, flags: u8, offsets: &[u64], stream: &[u8]| -> Option<Vec<u8>> {
        if stream.len() > 64 << 10 {
            return None;
        }
        let mut s = vec![kind, flags, u8::try_from(offsets.len()).ok()?];
        for o in offsets {
            s.extend_from_slice(&u32::try_from(*o).ok()?.to_be_bytes());
        }
        s.extend_from_slice(stream);
        Some(s)
    };
    for op in &snap.metadata().operators {
        for s in &op.subtasks {
            if let Some(KeyedHandle::KeyGroups(g)) = &s.managed_keyed {
                if let Ok(b) = snap.read_stream(&g.stream) {
                    // The first key groups only (the target takes at most 32 offsets).
                    let n = g.offsets.len().min(32);
                    let flags = u8::from(g.savepoint) | if op.max_parallelism > 128 { 2 } else { 0 };
                    if let Some(x) = seed(0, flags, &g.offsets[..n], &b) {
                        out.put("flink_state", &x);
                    }
                }
            }
            for h in &s.managed_operator {
                let Ok(b) = snap.read_stream(&h.stream) else { continue };
                let list = h.states.iter().find(|p| p.mode != DistributionMode::Broadcast);
                let bcast = h.states.iter().find(|p| p.mode == DistributionMode::Broadcast);
                let mut offsets: Vec<u64> = list.map(|p| p.offsets.clone()).unwrap_or_default();
                offsets.truncate(31);
                offsets.extend(bcast.and_then(|p| p.offsets.first().copied()));
                let flags = u8::from(list.is_some_and(|p| p.mode == DistributionMode::Union));
                if let Some(x) = seed(1, flags, &offsets, &b) {
                    out.put("flink_state", &x);
                }
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, fixtures, root] = &args[..] else {
        eprintln!("usage: gen_seeds <fixtures dir> <out dir>");
        std::process::exit(2);
    };
    let mut out = Out {
        root: PathBuf::from(root),
        seen: BTreeSet::new(),
    };
    let mut all = Vec::new();
    files(Path::new(fixtures), &mut all);
    let mut entries_seen = 0usize;
    for path in &all {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let bytes = std::fs::read(path).expect("read fixture");
        if name == "_metadata" && statekit_flink::is_flink_metadata(&bytes) {
            flink_state_seeds(&mut out, path);
        }
        let target = match () {
            _ if name == "_metadata" && statekit_flink::is_flink_metadata(&bytes) => "flink_metadata",
            _ if name == "_metadata" => "decode_metadata",
            _ if name.ends_with(".keyed") || name.ends_with(".skd") => "keyed_file",
            _ if name.ends_with(".operator") => "operator_file",
            _ if name.ends_with(".skcl") => "changelog_log_file",
            // Flink's keyed and operator state streams start with their proxy's version.
            _ if path.to_string_lossy().contains("/flink/")
                && (bytes.starts_with(&[0, 0, 0, 6]) || bytes.starts_with(&[0, 0, 0, 5])) =>
            {
                out.put("flink_serializer", &bytes[..bytes.len().min(1500)]);
                continue;
            }
            _ => continue,
        };
        out.put(target, &bytes);
        let blob: Arc<dyn Blob> = Arc::new(bytes.clone());
        if target == "keyed_file" {
            let Ok(reader) = KeyedFileReader::from_blob(blob.clone(), name.into()) else {
                continue;
            };
            let Ok(view) = MemoryView::collect(&reader, KeyGroupRange::all(reader.max_parallelism())) else {
                continue;
            };
            let states = reader.states();
            let wide = reader.max_parallelism() > 128;
            for (i, d) in states.iter().enumerate() {
                let mut s = Vec::new();
                encode_state_descriptor(&mut s, d);
                out.put("state_descriptor", &s);
                if let Some(e) = view.entries().iter().find(|e| e.state as usize == i) {
                    s.extend_from_slice(&e.value);
                    out.put("state_descriptor", &s);
                }
            }
            // A few entries per state into the value and layout seeds (the corpus is
            // minimized afterwards; this keeps the raw seeds small).
            let mut per_state = vec![0usize; states.len()];
            for e in view.entries() {
                let d = &states[e.state as usize];
                let n = &mut per_state[e.state as usize];
                *n += 1;
                if *n > 4 {
                    continue;
                }
                entries_seen += 1;
                value_seed(&mut out, &d.key_schema, &e.key);
                value_seed(&mut out, &d.namespace_schema, &e.namespace);
                value_seed(&mut out, &d.value_schema, &e.value);
                if let (Some(s), Some(uk)) = (&d.user_key_schema, &e.user_key) {
                    value_seed(&mut out, s, uk);
                }
                let uk = e.user_key.as_deref().unwrap_or_default();
                let key = rocksdb_key(wide, e.key_group, &e.key, &e.namespace, uk);
                let stamped = e.timestamp.is_some();
                let flags = u8::from(wide) | (u8::from(stamped) << 1);
                // key ‖ stored value
                let mut value = Vec::new();
                if let Some(ts) = e.timestamp {
                    value.extend_from_slice(&ts.to_be_bytes());
                }
                value.extend_from_slice(&e.value);
                layout_seed(&mut out, flags, &key, &value, 0);
                // stored list ‖ operands (an append and an expire-then-append)
                let mut list = Vec::new();
                element(&mut list, e.timestamp.or(Some(1)), &e.value);
                element(&mut list, e.timestamp.or(Some(2)), &e.key);
                let mut ops = Vec::new();
                operand(&mut ops, true, None, &list);
                let first = ops.len();
                operand(&mut ops, true, Some((e.timestamp.unwrap_or(5), 3)), &list);
                layout_seed(&mut out, flags | 2 | 4, &list, &ops, first);
            }
        }
        if target == "changelog_log_file" {
            let Ok(reader) = LogFileReader::from_blob(blob, name, None) else {
                continue;
            };
            for e in reader.index() {
                let Ok(cs) = reader.read(e) else { continue };
                let _ = cs.for_each_record(None, &mut |_, rec| {
                    let mut b = Vec::new();
                    match &rec {
                        Record::Change(c) => encode_change(&mut b, c),
                        Record::Metadata { state, descriptor } => encode_metadata(&mut b, *state, descriptor),
                    }
                    out.put("changelog_record", &b);
                    Ok(())
                });
            }
        }
    }
    hand_made_values(&mut out);
    // Layout edge cases: a 2-byte key-group prefix, zero bytes in key and namespace, a map
    // user key, an unstamped append operand.
    let key = rocksdb_key(true, 300, b"k\0y", b"\0", b"user");
    let mut ops = Vec::new();
    let mut list = Vec::new();
    element(&mut list, None, b"elem");
    operand(&mut ops, false, None, &list);
    layout_seed(&mut out, 1, &key, &ops, ops.len());
    // Changelog configuration.
    let typical = |key: &str| -> &'static str {
        if key.contains("enabled") {
            "true"
        } else if key.contains("interval") || key.contains("timeout") || key.contains("delay") {
            "10 min"
        } else if key.contains("size") || key.contains("threshold") || key.contains("in-flight") {
            "10 mb"
        } else if key.contains("storage") && !key.contains("base-path") {
            "filesystem"
        } else if key.contains("path") {
            "/tmp/dstl"
        } else {
            "3"
        }
    };
    let mut cfg = String::new();
    for (key, old) in ChangelogConfig::known_keys() {
        cfg.push_str(&format!("{key}: {}\n", typical(key)));
        out.put("changelog_config", format!("{key}: {}\n", typical(key)).as_bytes());
        for o in old {
            out.put("changelog_config", format!("{o}={}\n", typical(key)).as_bytes());
        }
    }
    out.put("changelog_config", cfg.as_bytes());
    out.put(
        "changelog_config",
        b"state.changelog.enabld: true\nstate.changelog.periodic-materialize.interval: 1 d\n",
    );
    eprintln!(
        "gen_seeds: {} fixture files, {entries_seen} entries, {} seeds",
        all.len(),
        out.seen.len()
    );
}
