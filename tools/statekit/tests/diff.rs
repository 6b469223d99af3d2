//! `statekit diff` on real snapshots written by the libraries (SnapshotWriter over heap
//! backends) and by the word-count demo (canonical, changelog, native RocksDB): identical
//! snapshots, the same state at another parallelism and in another format (exit 0), known
//! changes reported exactly (exit 1), --keys-only, --uid, --state, --limit, --json shapes, and
//! a corrupted input (exit 2, naming the file).

mod common;

use common::run;
use serde_json::{json, Value as Json};
use statekit_checkpoint::SnapshotWriter;
use statekit_core::keygroup::subtask_for_key_group;
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::OperatorStateData;
use statekit_core::{
    encode_value, key_group_for_key, BackendConfig, KeyedStateBackend, OperatorStateDescriptor, OperatorStateMode,
    OperatorStateSnapshot, StateDescriptor, StateFunctions, TypeSchema, Value,
};
use statekit_hashmap::HashMapBackend;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const MAX_P: u32 = 32;
const JOB: &str = "0123456789abcdef0123456789abcdef";

/// The state of a small two-operator job.
#[derive(Clone, Debug)]
struct Model {
    /// ValueState<string, i64> "count".
    count: BTreeMap<String, i64>,
    /// ListState<string, i64> "recent".
    recent: BTreeMap<String, Vec<i64>>,
    /// MapState<string, string, i64> "next".
    next: BTreeMap<String, BTreeMap<String, i64>>,
    /// ValueState<string, i64> "window" in namespace (window start, i64).
    window: BTreeMap<(String, i64), i64>,
    /// A ValueState<string, i64> "seen" (present when Some).
    seen: Option<BTreeMap<String, i64>>,
    /// "flag" is a ValueState<string, i64> (false) or a ListState<string, i64> (true).
    flag_is_list: bool,
    /// Operator "source" with list operator state "offsets" (present when Some).
    offsets: Option<Vec<i64>>,
}

fn i64v(x: i64) -> Vec<u8> {
    encode_value(&TypeSchema::I64, &Value::I64(x)).expect("i64")
}

fn strv(s: &str) -> Vec<u8> {
    encode_value(&TypeSchema::Utf8, &Value::Str(s.to_string())).expect("utf8")
}

fn base_model() -> Model {
    let words = [
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
    ];
    let mut m = Model {
        count: BTreeMap::new(),
        recent: BTreeMap::new(),
        next: BTreeMap::new(),
        window: BTreeMap::new(),
        seen: None,
        flag_is_list: false,
        offsets: Some(vec![10, 20, 30]),
    };
    for (i, w) in words.iter().enumerate() {
        let i = i as i64;
        m.count.insert(w.to_string(), i + 1);
        m.recent
            .insert(w.to_string(), (0..=i % 3).map(|j| i * 10 + j).collect());
        let mut next = BTreeMap::new();
        next.insert(words[(i as usize + 1) % words.len()].to_string(), i);
        next.insert(words[(i as usize + 2) % words.len()].to_string(), i + 100);
        m.next.insert(w.to_string(), next);
        m.window.insert((w.to_string(), 1000), i);
        m.window.insert((w.to_string(), 2000), i * 2);
    }
    m
}

fn descriptors(m: &Model) -> Vec<StateDescriptor> {
    let mut d = vec![
        StateDescriptor::value("count", TypeSchema::Utf8, TypeSchema::I64),
        StateDescriptor::list("recent", TypeSchema::Utf8, TypeSchema::I64),
        StateDescriptor::map("next", TypeSchema::Utf8, TypeSchema::Utf8, TypeSchema::I64),
        StateDescriptor::value("window", TypeSchema::Utf8, TypeSchema::I64).with_namespace(TypeSchema::I64),
        if m.flag_is_list {
            StateDescriptor::list("flag", TypeSchema::Utf8, TypeSchema::I64)
        } else {
            StateDescriptor::value("flag", TypeSchema::Utf8, TypeSchema::I64)
        },
    ];
    if m.seen.is_some() {
        d.push(StateDescriptor::value("seen", TypeSchema::Utf8, TypeSchema::I64));
    }
    d
}

/// Writes `m` as a canonical savepoint at parallelism `p` under `dir`; returns its path.
fn write(dir: &Path, m: &Model, p: u32) -> PathBuf {
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir));
    let writer = SnapshotWriter::new_savepoint(storage, "", JOB, 1).expect("writer");
    if let Some(offsets) = &m.offsets {
        writer.register_operator("source", 1, MAX_P).expect("register source");
        let desc = OperatorStateDescriptor {
            name: "offsets".into(),
            mode: OperatorStateMode::List,
            value_schema: TypeSchema::I64,
            key_schema: None,
        };
        let snap = OperatorStateSnapshot {
            states: vec![(
                desc,
                OperatorStateData::List(offsets.iter().map(|&o| i64v(o)).collect()),
            )],
        };
        writer
            .write_subtask("source", 0, None, Some(&snap), false)
            .expect("write source");
    }
    writer.register_operator("counter", p, MAX_P).expect("register counter");
    let descs = descriptors(m);
    let owner = |k: &str| subtask_for_key_group(MAX_P, p, key_group_for_key(&strv(k), MAX_P)) as usize;
    let mut backends: Vec<HashMapBackend> = (0..p)
        .map(|i| HashMapBackend::new(BackendConfig::for_subtask(MAX_P, p, i).expect("config")).expect("backend"))
        .collect();
    let handles: Vec<Vec<_>> = backends
        .iter_mut()
        .map(|b| {
            descs
                .iter()
                .map(|d| b.register(d.clone(), StateFunctions::None).expect("register state"))
                .collect()
        })
        .collect();
    for (k, v) in &m.count {
        let o = owner(k);
        backends[o].put(handles[o][0], &strv(k), &[], &i64v(*v)).expect("put");
        // "flag": one value, or a one-element list, per word.
        let flag = i64v(v % 2);
        if m.flag_is_list {
            backends[o]
                .list_update(handles[o][4], &strv(k), &[], &[&flag])
                .expect("flag");
        } else {
            backends[o].put(handles[o][4], &strv(k), &[], &flag).expect("flag");
        }
    }
    for (k, l) in &m.recent {
        let o = owner(k);
        let els: Vec<Vec<u8>> = l.iter().map(|&x| i64v(x)).collect();
        let refs: Vec<&[u8]> = els.iter().map(|e| e.as_slice()).collect();
        backends[o]
            .list_update(handles[o][1], &strv(k), &[], &refs)
            .expect("list");
    }
    for (k, map) in &m.next {
        let o = owner(k);
        for (uk, v) in map {
            backends[o]
                .map_put(handles[o][2], &strv(k), &[], &strv(uk), &i64v(*v))
                .expect("map");
        }
    }
    for ((k, ns), v) in &m.window {
        let o = owner(k);
        backends[o]
            .put(handles[o][3], &strv(k), &i64v(*ns), &i64v(*v))
            .expect("window");
    }
    if let Some(seen) = &m.seen {
        for (k, v) in seen {
            let o = owner(k);
            backends[o].put(handles[o][5], &strv(k), &[], &i64v(*v)).expect("seen");
        }
    }
    for (i, b) in backends.iter_mut().enumerate() {
        let view = b.snapshot(1).expect("snapshot");
        writer
            .write_subtask("counter", i as u32, Some(view.as_ref()), None, false)
            .expect("write counter");
    }
    let name = writer.dir().to_string();
    writer.finish().expect("finish");
    dir.join(name)
}

fn diff(dir: &Path, a: &Path, b: &Path, extra: &[&str]) -> (i32, String, String) {
    let (a, b) = (a.display().to_string(), b.display().to_string());
    let mut args = vec!["diff", a.as_str(), b.as_str()];
    args.extend_from_slice(extra);
    let out = run(dir, &args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

fn json_lines(stdout: &str) -> Vec<Json> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// The JSON lines without the summary, and the summary.
/// The differences and the summary of `diff --json` (one document), checked against
/// `--jsonl` of the same output where the caller has it (see [`jsonl_records`]).
fn records(stdout: &str) -> (Vec<Json>, Json) {
    let doc: Json = serde_json::from_str(stdout).expect("--json prints one JSON document");
    let diffs = doc["differences"].as_array().cloned().expect("differences");
    let summary = doc["summary"].clone();
    assert_eq!(summary["type"], "summary", "the summary: {summary}");
    (diffs, summary)
}

/// The records of `diff --jsonl`: one object per line, the summary last.
fn jsonl_records(stdout: &str) -> (Vec<Json>, Json) {
    let mut lines = json_lines(stdout);
    let summary = lines.pop().expect("a summary line");
    assert_eq!(summary["type"], "summary", "last line is the summary: {summary}");
    (lines, summary)
}

/// `--json` is one document holding exactly what `--jsonl` streams, line for line.
#[test]
fn json_is_one_document_and_jsonl_streams_the_same() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = base_model();
    let a = write(dir.path(), &m, 2);
    let mut changed = base_model();
    changed.count.insert("zulu".to_string(), 7);
    changed.count.remove("alpha");
    changed.count.insert("bravo".to_string(), 99);
    let b = write(dir.path(), &changed, 3);
    let (code, doc, _) = diff(dir.path(), &a, &b, &["--json"]);
    assert_eq!(code, 1);
    let (code, lines, _) = diff(dir.path(), &a, &b, &["--jsonl"]);
    assert_eq!(code, 1);
    let (d1, s1) = records(&doc);
    let (d2, s2) = jsonl_records(&lines);
    assert!(!d1.is_empty());
    assert_eq!(d1, d2);
    assert_eq!(s1, s2);
    // Empty: still one document.
    let (code, doc, _) = diff(dir.path(), &a, &a, &["--json"]);
    assert_eq!(code, 0);
    let (d, _) = records(&doc);
    assert!(d.is_empty());
    let (code, _, err) = diff(dir.path(), &a, &b, &["--json", "--jsonl"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn identical_savepoints_have_no_differences() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = base_model();
    let a = write(dir.path(), &m, 2);
    let b = write(dir.path(), &m, 2);
    let (code, out, err) = diff(dir.path(), &a, &b, &[]);
    assert_eq!(code, 0, "stdout {out} stderr {err}");
    assert_eq!(out, "");
    assert!(err.contains("no differences"), "{err}");
    let (code, out, _) = diff(dir.path(), &a, &a, &["--json"]);
    assert_eq!(code, 0);
    let (recs, summary) = records(&out);
    assert!(recs.is_empty(), "{recs:?}");
    assert_eq!(summary["identical"], true);
    assert_eq!(summary["keys"], 0);
    assert_eq!(summary["entries"]["a"], summary["entries"]["b"]);
    assert!(summary["entries"]["a"].as_u64().expect("entries") > 50, "{summary}");
}

#[test]
fn other_parallelism_is_layout_not_a_difference() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = base_model();
    let a = write(dir.path(), &m, 2);
    for p in [1, 3, 7] {
        let b = write(dir.path(), &m, p);
        let (code, out, err) = diff(dir.path(), &a, &b, &[]);
        assert_eq!(code, 0, "p={p}: stdout {out} stderr {err}");
        assert_eq!(
            out.trim(),
            format!("~ operator \"counter\": parallelism 2 -> {p} (layout only) — not a state difference")
        );
        let (code, out, _) = diff(dir.path(), &a, &b, &["--json"]);
        assert_eq!(code, 0);
        let (recs, summary) = records(&out);
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0]["type"], "operator");
        assert_eq!(recs[0]["layout_only"], true);
        assert_eq!(summary["identical"], true);
        assert_eq!(summary["layout_only_operators"], 1);
    }
}

/// Canonical savepoint vs changelog checkpoint vs native RocksDB savepoint of the word count
/// on one input, at parallelisms 2, 3 and 4: equal keyed and source state.
#[test]
fn other_formats_of_the_same_state_are_equal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(
        d.join("in.txt"),
        "the quick brown fox jumps over the lazy dog\nthe dog sleeps and the fox runs\n",
    )
    .expect("input");
    let wc = |tag: &str, extra: &[&str]| {
        let mut args = vec!["demo", "wordcount", "--input", "in.txt", "--checkpoint-every", "5"];
        let (out, cp, sp) = (format!("out-{tag}"), format!("cp-{tag}"), format!("sp-{tag}"));
        args.extend_from_slice(&["--output", &out, "--checkpoint-dir", &cp, "--savepoint-dir", &sp]);
        args.extend_from_slice(extra);
        let o = run(d, &args);
        assert!(o.status.success(), "{tag}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let canonical = d.join(wc("canonical", &["--stop-with-savepoint"]));
    wc("changelog", &["--parallelism", "3", "--changelog"]);
    let changelog = latest_checkpoint(&d.join("cp-changelog"));
    let native = d.join(wc(
        "native",
        &[
            "--parallelism",
            "4",
            "--backend",
            "rocksdb",
            "--savepoint-format",
            "native",
            "--stop-with-savepoint",
        ],
    ));
    for other in [&changelog, &native] {
        for uid in ["counter", "source"] {
            let (code, out, err) = diff(d, &canonical, other, &["--uid", uid]);
            assert_eq!(code, 0, "{} --uid {uid}: stdout {out} stderr {err}", other.display());
            assert!(out.lines().all(|l| l.contains("layout only")), "{out}");
        }
        // The sink's pending commits name the job, so whole snapshots differ there only.
        let (code, out, _) = diff(d, &canonical, other, &["--json"]);
        assert_eq!(code, 1);
        let (recs, summary) = records(&out);
        assert!(
            recs.iter()
                .all(|r| r["layout_only"] == true || (r["type"] == "operator_state" && r["uid"] == "sink")),
            "{recs:?}"
        );
        assert_eq!(summary["keys"], 0);
    }
    // And a changed input is seen through the formats: one more word.
    std::fs::write(
        d.join("in.txt"),
        "the quick brown fox jumps over the lazy dog\nthe dog sleeps and the fox runs\nzebra\n",
    )
    .expect("input");
    wc("changelog2", &["--parallelism", "3", "--changelog"]);
    let changelog2 = latest_checkpoint(&d.join("cp-changelog2"));
    let (code, out, err) = diff(d, &canonical, &changelog2, &["--uid", "counter", "--keys-only"]);
    assert_eq!(code, 1, "{err}");
    let has = |prefix: &str| {
        out.lines()
            .any(|l| l.starts_with(prefix) && l.ends_with(" key=\"zebra\""))
    };
    assert!(has("+ counter/count kg="), "{out}");
    assert!(has("+ counter/recent-positions kg="), "{out}");
}

/// The newest `chk-*` directory under a checkpoint base directory (one job).
fn latest_checkpoint(base: &Path) -> PathBuf {
    let job = std::fs::read_dir(base)
        .expect("checkpoint dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .expect("a job directory");
    let mut chks: Vec<(u64, PathBuf)> = std::fs::read_dir(&job)
        .expect("job dir")
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().to_string();
            n.strip_prefix("chk-")
                .and_then(|x| x.parse().ok())
                .map(|id| (id, e.path()))
        })
        .collect();
    chks.sort();
    chks.pop().expect("a checkpoint").1
}

/// Model b: a with one of each change.
fn changed_model() -> (Model, Model) {
    let a = base_model();
    let mut b = a.clone();
    b.count.insert("juliett".into(), 5); // key added
    b.count.remove("alpha"); // key removed
    b.count.insert("bravo".into(), 42); // value modified
    b.recent.get_mut("charlie").expect("charlie").push(999); // list element added
    b.next.get_mut("delta").expect("delta").insert("echo".into(), 7); // map entry changed
    b.window.insert(("echo".into(), 2000), -1); // one namespace of a key modified
    b.seen = Some([("kilo".to_string(), 1)].into_iter().collect()); // state added
    b.flag_is_list = true; // state kind changed
    b.offsets = None; // operator removed
    (a, b)
}

#[test]
fn known_changes_are_reported_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ma, mb) = changed_model();
    let a = write(dir.path(), &ma, 2);
    let b = write(dir.path(), &mb, 3);
    let (code, out, err) = diff(dir.path(), &a, &b, &["--json"]);
    assert_eq!(code, 1, "{err}");
    let (recs, summary) = records(&out);
    // Compact each record to what identifies it.
    let mut got: Vec<Json> = recs
        .iter()
        .map(|r| match r["type"].as_str().expect("type") {
            "operator" => json!(["operator", r["change"], r["uid"], r["layout_only"]]),
            "state" => json!(["state", r["change"], r["state"], r["entries_compared"]]),
            "key" => json!([
                "key",
                r["change"],
                r["state"],
                r["key"],
                r["namespace"],
                r["old"],
                r["new"],
                r["entries"]
            ]),
            other => json!([other, r]),
        })
        .collect();
    // The model changes an existing entry of delta's map.
    assert_eq!(ma.next["delta"].get("echo"), Some(&3));
    let mut want = vec![
        json!(["operator", "removed", "source", false]),
        json!(["operator", "modified", "counter", true]),
        json!(["state", "modified", "flag", false]),
        json!(["state", "added", "seen", false]),
        json!(["key", "added", "count", "juliett", null, null, 5, null]),
        json!(["key", "removed", "count", "alpha", null, 1, null, null]),
        json!(["key", "modified", "count", "bravo", null, 2, 42, null]),
        json!([
            "key",
            "modified",
            "recent",
            "charlie",
            null,
            [20, 21, 22],
            [20, 21, 22, 999],
            null
        ]),
        json!(["key", "modified", "next", "delta", null, null, null,
            [{"user_key": "echo", "change": "modified", "old": 3, "new": 7}]]),
        json!(["key", "modified", "window", "echo", 2000, 8, -1, null]),
    ];
    let key = |j: &Json| j.to_string();
    got.sort_by_key(key);
    want.sort_by_key(key);
    assert_eq!(got, want, "all records: {recs:#?}");
    assert_eq!(summary["operators"], 1);
    assert_eq!(summary["states"], 2);
    assert_eq!(summary["keys"], 6);
    assert_eq!(summary["identical"], false);
    // The record order: operators first, then each operator's states, then keys by key group.
    assert_eq!(recs[0]["uid"], "source");
    let kgs: Vec<u64> = recs
        .iter()
        .filter(|r| r["type"] == "key")
        .map(|r| r["key_group"].as_u64().expect("kg"))
        .collect();
    assert!(kgs.windows(2).all(|w| w[0] <= w[1]), "{kgs:?}");

    // The text form of the same diff.
    let (code, text, err) = diff(dir.path(), &a, &b, &[]);
    assert_eq!(code, 1);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "- operator \"source\"");
    assert!(
        lines.contains(&"~ state counter/flag: kind value -> list (entries not compared)"),
        "{text}"
    );
    assert!(
        lines.contains(&"+ state counter/seen: value key string ns unit value i64"),
        "{text}"
    );
    let has = |prefix: &str, suffix: &str| lines.iter().any(|l| l.starts_with(prefix) && l.ends_with(suffix));
    assert!(has("+ counter/count kg=", " key=\"juliett\" value=5"), "{text}");
    assert!(has("- counter/count kg=", " key=\"alpha\" value=1"), "{text}");
    assert!(has("~ counter/count kg=", " key=\"bravo\" value=2 -> 42"), "{text}");
    assert!(
        has(
            "~ counter/recent kg=",
            " key=\"charlie\" list=[20, 21, 22] -> [20, 21, 22, 999]"
        ),
        "{text}"
    );
    assert!(
        has("~ counter/next kg=", " key=\"delta\" user_key=\"echo\" value=3 -> 7"),
        "{text}"
    );
    assert!(
        has("~ counter/window kg=", " key=\"echo\" ns=2000 value=8 -> -1"),
        "{text}"
    );
    assert_eq!(lines.len(), 10, "{text}");
    assert!(
        err.contains("differences: 1 operators, 2 keyed states, 0 operator states, 6 keys"),
        "{err}"
    );
}

#[test]
fn map_value_change_and_operator_state_elements() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a_model = base_model();
    let mut b_model = a_model.clone();
    *b_model
        .next
        .get_mut("golf")
        .expect("golf")
        .values_mut()
        .next()
        .expect("entry") += 1;
    b_model.offsets = Some(vec![10, 30, 40]);
    let a = write(dir.path(), &a_model, 2);
    let b = write(dir.path(), &b_model, 2);
    let (code, out, _) = diff(dir.path(), &a, &b, &[]);
    assert_eq!(code, 1);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..3],
        [
            "~ operator-state source/offsets: 1 elements removed, 1 added",
            "    - element 20",
            "    + element 40"
        ],
        "{out}"
    );
    assert_eq!(lines.len(), 4, "{out}");
    assert!(
        lines[3].starts_with("~ counter/next kg=")
            && lines[3].ends_with(" key=\"golf\" user_key=\"hotel\" value=6 -> 7"),
        "{out}"
    );
    let (_, out, _) = diff(dir.path(), &a, &b, &["--json", "--state", "offsets"]);
    let (recs, _) = records(&out);
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0]["type"], "operator_state");
    assert_eq!(recs[0]["removed_elements"], json!([20]));
    assert_eq!(recs[0]["added_elements"], json!([40]));
}

#[test]
fn keys_only_uid_state_and_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ma, mb) = changed_model();
    let a = write(dir.path(), &ma, 2);
    let b = write(dir.path(), &mb, 2);

    // --keys-only: the keys and how they changed, no values.
    let (code, out, _) = diff(dir.path(), &a, &b, &["--uid", "counter", "--keys-only"]);
    assert_eq!(code, 1);
    let mut keys: Vec<String> = out
        .lines()
        .filter(|l| l.contains(" kg="))
        .map(|l| {
            // "~ counter/count kg=N key=…" without the key group.
            let (head, rest) = l.split_once(" kg=").expect("kg");
            let rest = rest.split_once(' ').expect("after kg").1;
            format!("{head} {rest}")
        })
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "+ counter/count key=\"juliett\"",
            "- counter/count key=\"alpha\"",
            "~ counter/count key=\"bravo\"",
            "~ counter/next key=\"delta\"",
            "~ counter/recent key=\"charlie\"",
            "~ counter/window key=\"echo\" ns=2000",
        ],
        "{out}"
    );
    assert!(!out.contains("value="), "{out}");
    // --uid: the other operator is not compared.
    assert!(!out.contains("source"), "{out}");

    // --state with --json --keys-only: only that state's keys, no values.
    let (code, out, _) = diff(dir.path(), &a, &b, &["--state", "count", "--json", "--keys-only"]);
    assert_eq!(code, 1);
    let (recs, summary) = records(&out);
    assert_eq!(recs.len(), 3, "{recs:?}");
    for r in &recs {
        assert_eq!(r["type"], "key");
        assert_eq!(r["state"], "count");
        assert!(r.get("old").is_none() && r.get("new").is_none(), "{r}");
        for f in ["change", "uid", "kind", "key_group", "key", "namespace"] {
            assert!(r.get(f).is_some(), "{f} missing in {r}");
        }
    }
    assert_eq!(summary["keys"], 3);
    assert_eq!(summary["truncated"], false);

    // --limit: stops, says so, still exit 1.
    let (code, out, err) = diff(dir.path(), &a, &b, &["--limit", "2"]);
    assert_eq!(code, 1);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(err.contains("stopped at --limit 2"), "{err}");
    let (_, out, _) = diff(dir.path(), &a, &b, &["--limit", "2", "--json"]);
    let (recs, summary) = records(&out);
    assert_eq!(recs.len(), 2);
    assert_eq!(summary["truncated"], true);
    assert_eq!(summary["identical"], false);

    // Unknown names are errors.
    let (code, _, err) = diff(dir.path(), &a, &b, &["--uid", "nope"]);
    assert_eq!(code, 2);
    assert!(err.contains("\"nope\""), "{err}");
    let (code, _, err) = diff(dir.path(), &a, &b, &["--state", "nope"]);
    assert_eq!(code, 2);
    assert!(err.contains("\"nope\""), "{err}");
}

#[test]
fn corrupted_input_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = base_model();
    let a = write(dir.path(), &m, 2);
    let b = write(dir.path(), &m, 2);
    // Flip bytes in the middle of b's second keyed data file.
    let mut files: Vec<PathBuf> = std::fs::read_dir(&b)
        .expect("read b")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with("-keyed.skd"))
        .collect();
    files.sort();
    let victim = files.last().expect("a keyed data file").clone();
    let mut bytes = std::fs::read(&victim).expect("read victim");
    let mid = bytes.len() / 2;
    for x in &mut bytes[mid..mid + 8] {
        *x ^= 0x5a;
    }
    std::fs::write(&victim, &bytes).expect("write victim");
    let (code, out, err) = diff(dir.path(), &a, &b, &[]);
    assert_eq!(code, 2, "stdout {out} stderr {err}");
    let name = victim.file_name().expect("name").to_string_lossy().to_string();
    assert!(err.contains(&name), "the message names {name}: {err}");
    assert!(err.contains(&b.display().to_string()), "and the side: {err}");

    // A truncated _metadata: exit 2, naming it.
    let md = a.join("_metadata");
    let bytes = std::fs::read(&md).expect("metadata");
    std::fs::write(&md, &bytes[..bytes.len() / 2]).expect("truncate");
    let (code, _, err) = diff(dir.path(), &a, &b, &[]);
    assert_eq!(code, 2);
    assert!(err.contains("_metadata"), "{err}");
    // A missing snapshot.
    let (code, _, err) = diff(dir.path(), &dir.path().join("nowhere"), &b, &[]);
    assert_eq!(code, 2);
    assert!(err.contains("nowhere"), "{err}");
}

#[test]
fn help_describes_the_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run(dir.path(), &["diff", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for s in ["--keys-only", "--uid", "--state", "--json", "--limit", "Exit status: 0"] {
        assert!(help.contains(s), "{s} missing from help: {help}");
    }
}
