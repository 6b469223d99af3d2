//! `statekit show` and `ls` on real Apache Flink 1.20.5 savepoints and checkpoints
//! (`fixtures/flink/`): the snapshot is named as Flink's, with its `_metadata` version and
//! format; operators come by id, or by uid when one is given (`--flink-uid`, matched by
//! Flink's hash); `--json` is one document; `dump --json` reproduces every expected value;
//! `verify` checks every fixture and names a damaged file and an offset; a damaged
//! `_metadata` is an error naming the file and an offset.

mod common;

use common::run;
use std::path::{Path, PathBuf};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/flink/flink-1.20.5")
        .join(rel)
}

fn expected(rel: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(rel)).expect("expected.json")).expect("json")
}

/// Every `_metadata` of the shipped Flink fixtures.
fn metadata_files() -> Vec<PathBuf> {
    let mut metadata = Vec::new();
    let mut stack = vec![fixture("")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n == "_metadata") {
                metadata.push(p);
            }
        }
    }
    metadata
}

/// The word count's `count` state of the snapshot at `path`, key → value, by `dump --json`.
fn word_counts(path: &str) -> serde_json::Map<String, serde_json::Value> {
    let text = stdout(&["dump", path, "--uid", "word-count", "--state", "count", "--json"]);
    let rows: Vec<serde_json::Value> = serde_json::from_str(&text).expect("one JSON document");
    rows.iter()
        .map(|r| (r["key"].as_str().expect("key").to_string(), r["value"].clone()))
        .collect()
}

fn stdout(args: &[&str]) -> String {
    let out = run(Path::new("."), args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn show_names_a_flink_savepoint_and_its_operators() {
    let sp = fixture("savepoint-rocksdb-canonical/savepoint");
    let sp = sp.to_str().expect("path");
    let text = stdout(&["show", sp]);
    assert!(
        text.starts_with("savepoint 1 of job (not stored in Flink's _metadata) (Apache Flink _metadata v4, CANONICAL"),
        "{text}"
    );
    let want = expected("savepoint-rocksdb-canonical/expected.json");
    let ops = want["operators"].as_array().expect("operators");
    // Without uids every operator is shown by its id, with a hint.
    for op in ops {
        let id = op["operator_id"].as_str().expect("id");
        assert!(
            text.contains(&format!("operator \"{id}\"  id {id}  parallelism")),
            "{id}: {text}"
        );
    }
    assert!(text.contains("name it with --flink-uid UID"));
    assert!(text.contains("operator-state seen-words       list"));
    assert!(text.contains("operator-state seen-count       union"));
    assert!(text.contains("operator-state rules            broadcast"));
    // With the job's uids, operators are shown by them (the uid-less one stays an id).
    let mut args = vec!["show".to_string(), sp.to_string()];
    for op in ops {
        if let Some(uid) = op["uid"].as_str() {
            args.extend(["--flink-uid".to_string(), uid.to_string()]);
        }
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let text = stdout(&args);
    for op in ops {
        let id = op["operator_id"].as_str().expect("id");
        let shown = op["uid"].as_str().unwrap_or(id);
        assert!(
            text.contains(&format!("operator \"{shown}\"  id {id}")),
            "{shown}: {text}"
        );
    }
}

#[test]
fn show_json_is_one_document_for_every_fixture() {
    let metadata = metadata_files();
    assert_eq!(metadata.len(), 11);
    for md in metadata {
        let text = stdout(&["show", "--json", md.to_str().expect("path")]);
        let doc: serde_json::Value = serde_json::from_str(&text).expect("one JSON document");
        assert_eq!(doc["flink"]["metadata_version"], 4, "{}", md.display());
        let dir = md.parent().expect("dir");
        let is_checkpoint = dir.file_name().is_some_and(|n| n.to_string_lossy().starts_with("chk-"));
        assert_eq!(doc["kind"], if is_checkpoint { "checkpoint" } else { "savepoint" });
        assert_eq!(doc["operators"].as_array().expect("operators").len(), 10);
        if is_checkpoint {
            assert_eq!(
                doc["job_id"],
                dir.parent()
                    .and_then(|j| j.file_name())
                    .expect("job")
                    .to_string_lossy()
                    .as_ref()
            );
        }
    }
    let native = stdout(&[
        "show",
        "--json",
        fixture("savepoint-rocksdb-native/savepoint").to_str().expect("p"),
    ]);
    let doc: serde_json::Value = serde_json::from_str(&native).expect("json");
    assert_eq!(doc["flink"]["savepoint_format"], "NATIVE");
    assert_eq!(doc["format"], "flink-native");
}

#[test]
fn ls_lists_flink_checkpoints() {
    let dir = fixture("checkpoint-rocksdb-incremental/checkpoints");
    let text = stdout(&["ls", dir.to_str().expect("path")]);
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("checkpoint")).collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(
        rows.iter()
            .all(|r| r.contains("flink-native") && r.contains("not verified")),
        "{text}"
    );
    // --verify reads them: ok.
    let text = stdout(&["ls", dir.to_str().expect("path"), "--verify"]);
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("checkpoint")).collect();
    assert!(rows.iter().all(|r| r.contains(" ok ")), "{text}");
}

#[test]
fn verify_checks_every_flink_fixture_and_names_damage() {
    let metadata = metadata_files();
    for md in &metadata {
        let text = stdout(&["verify", "--json", md.to_str().expect("path")]);
        let doc: serde_json::Value = serde_json::from_str(&text).expect("one JSON document");
        assert_eq!(doc["ok"], true, "{}: {text}", md.display());
        assert!(
            doc["entries"].as_u64().expect("entries") > 300,
            "{}: {text}",
            md.display()
        );
    }
    // A flipped byte inside a state file: verify exits 1 and names the file and an offset.
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = fixture("savepoint-hashmap-native/savepoint");
    let dst = tmp.path().join("savepoint");
    std::fs::create_dir(&dst).expect("mkdir");
    let mut biggest = (0, PathBuf::new());
    for e in std::fs::read_dir(&src).expect("read_dir") {
        let p = e.expect("entry").path();
        let to = dst.join(p.file_name().expect("name"));
        std::fs::copy(&p, &to).expect("copy");
        let n = std::fs::metadata(&to).expect("meta").len();
        if p.file_name().is_some_and(|n| n != "_metadata") && n > biggest.0 {
            biggest = (n, to);
        }
    }
    let mut b = std::fs::read(&biggest.1).expect("read");
    let at = b.len() * 2 / 3;
    b[at] ^= 0xff;
    std::fs::write(&biggest.1, &b).expect("write");
    let out = run(Path::new("."), &["verify", dst.to_str().expect("path")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let name = biggest.1.file_name().expect("name").to_string_lossy().into_owned();
    assert!(
        text.contains("problem:") && text.contains(&name) && text.contains("offset"),
        "{text}"
    );
}

#[test]
fn damaged_flink_metadata_is_a_clean_error_naming_file_and_offset() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = fixture("savepoint-hashmap-canonical/savepoint/_metadata");
    let bytes = std::fs::read(&src).expect("read");
    let md = tmp.path().join("_metadata");
    std::fs::write(&md, &bytes[..bytes.len() / 2]).expect("write");
    let out = run(Path::new("."), &["show", md.to_str().expect("path")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0));
    assert!(err.contains("_metadata: offset") && !err.contains("panicked"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn dump_reads_the_keyed_state_of_flink_canonical_savepoints() {
    for fixture_dir in ["savepoint-rocksdb-canonical", "savepoint-hashmap-canonical-inline"] {
        let want = expected(&format!("{fixture_dir}/expected.json"));
        let sp = fixture(&format!("{fixture_dir}/savepoint"));
        let sp = sp.to_str().expect("path");
        // Every value of the word count, by uid (matched by Flink's hash of it).
        let got = word_counts(sp);
        assert_eq!(
            &got,
            want["keyed_state"]["word-count"]["count"]["values"]
                .as_object()
                .expect("values")
        );
        // A point lookup finds the key in the key group Flink put it in.
        for key in ["grüße", "émoji-😀", "日本", "a"] {
            let text = stdout(&[
                "dump",
                sp,
                "--uid",
                "word-history",
                "--state",
                "history",
                "--key",
                key,
                "--json",
            ]);
            let rows: Vec<serde_json::Value> = serde_json::from_str(&text).expect("json");
            let values: Vec<&serde_json::Value> = rows.iter().map(|r| &r["value"]).collect();
            let want_values: Vec<&serde_json::Value> = want["keyed_state"]["word-history"]["history"]["values"][key]
                .as_array()
                .expect("list")
                .iter()
                .collect();
            assert_eq!(values, want_values, "{fixture_dir} {key}");
            assert!(rows
                .iter()
                .all(|r| r["key_group"] == want["key_groups"][key]["key_group"]));
        }
    }
}

/// The snapshot directory an `expected*.json` describes.
fn snapshot_of(dir: &Path, expected_name: &str) -> PathBuf {
    match expected_name
        .strip_prefix("expected-")
        .and_then(|s| s.strip_suffix(".json"))
    {
        Some(chk) => {
            let jobs = dir.join("checkpoints");
            let job = std::fs::read_dir(&jobs)
                .expect("checkpoints")
                .map(|e| e.expect("entry").path())
                .find(|p| p.is_dir())
                .expect("job dir");
            job.join(chk)
        }
        None => dir.join("savepoint"),
    }
}

/// Every value of every `expected*.json` of the shipped fixtures (canonical and heap-native
/// savepoints, RocksDB native savepoints and incremental checkpoints, changelog checkpoints
/// with and without a materialized part), reproduced by `statekit dump --json`: keyed state
/// (by uid, and by operator id for the operator without one), operator list and union state
/// per subtask as stored, broadcast state per subtask, the non-ASCII keys included.
#[test]
fn dump_json_reproduces_every_expected_value() {
    let root = fixture("");
    let mut walked = 0;
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("fixtures")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    for dir in dirs {
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("expected") && n.ends_with(".json"))
            .collect();
        names.sort();
        for name in names {
            let want = expected(&format!("{}/{name}", dir.file_name().expect("name").to_string_lossy()));
            let snap = snapshot_of(&dir, &name);
            let snap = snap.to_str().expect("path").to_string();
            let base = vec!["dump".to_string(), snap.clone()];
            let mut ids = std::collections::BTreeMap::new();
            for op in want["operators"].as_array().expect("operators") {
                let id = op["operator_id"].as_str().expect("id");
                ids.insert(op["label"].as_str().expect("label").to_string(), id.to_string());
            }
            let dump = |label: &str, state: &str| -> Result<Vec<serde_json::Value>, String> {
                let uid = match want["operators"]
                    .as_array()
                    .expect("operators")
                    .iter()
                    .find(|o| o["label"] == label)
                    .and_then(|o| o["uid"].as_str())
                {
                    Some(uid) => uid.to_string(),
                    None => ids[label].clone(),
                };
                let mut args = base.clone();
                args.extend(["--uid".into(), uid, "--state".into(), state.into(), "--json".into()]);
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let out = run(Path::new("."), &args);
                let err = String::from_utf8_lossy(&out.stderr).into_owned();
                if out.status.code() != Some(0) {
                    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
                    assert!(!err.contains("panicked"), "{err}");
                    return Err(err);
                }
                Ok(serde_json::from_slice(&out.stdout).expect("one JSON document"))
            };
            for (label, states) in want["keyed_state"].as_object().expect("keyed") {
                for (state, st) in states.as_object().expect("states") {
                    let rows = dump(label, state).unwrap_or_else(|e| panic!("{snap} {label}/{state}: {e}"));
                    let mut got = serde_json::Map::new();
                    for r in &rows {
                        let key = r["key"].as_str().expect("string key").to_string();
                        match st["kind"].as_str().expect("kind") {
                            "LIST" => got
                                .entry(key)
                                .or_insert_with(|| serde_json::json!([]))
                                .as_array_mut()
                                .expect("list")
                                .push(r["value"].clone()),
                            "MAP" => {
                                got.entry(key)
                                    .or_insert_with(|| serde_json::json!({}))
                                    .as_object_mut()
                                    .expect("map")
                                    .insert(r["user_key"].as_str().expect("user key").into(), r["value"].clone());
                            }
                            _ => {
                                assert!(got.insert(key, r["value"].clone()).is_none());
                            }
                        }
                    }
                    assert_eq!(
                        &got,
                        st["values"].as_object().expect("values"),
                        "{snap} {label}/{state}"
                    );
                    walked += got.len();
                }
            }
            for section in ["operator_state", "broadcast_state"] {
                for (label, states) in want[section].as_object().expect("section") {
                    for (state, st) in states.as_object().expect("states") {
                        let rows = dump(label, state).unwrap_or_else(|e| panic!("{snap} {label}/{state}: {e}"));
                        let mut got = serde_json::Map::new();
                        for r in &rows {
                            let sub = r["subtask"].to_string();
                            if section == "operator_state" {
                                got.entry(sub)
                                    .or_insert_with(|| serde_json::json!([]))
                                    .as_array_mut()
                                    .expect("list")
                                    .push(r["value"].clone());
                            } else {
                                got.entry(sub)
                                    .or_insert_with(|| serde_json::json!({}))
                                    .as_object_mut()
                                    .expect("map")
                                    .insert(r["key"].as_str().expect("key").into(), r["value"].clone());
                            }
                        }
                        assert_eq!(
                            &got,
                            st["subtasks"].as_object().expect("subtasks"),
                            "{snap} {label}/{state}"
                        );
                        walked += rows.len();
                    }
                }
            }
        }
    }
    assert!(walked > 3000, "{walked} values");
    eprintln!("{walked} expected values reproduced");
}

/// `diff` of the heap and RocksDB savepoints of the same job (canonical and native, and
/// across the two) reports no difference; `diff` of `chk-1` and `chk-2` of each checkpoint
/// fixture reports exactly the keys the second phase of the job added or changed (as the
/// two `expected-chk-*.json` tell them apart) and the operator states that grew, nothing else.
#[test]
fn diff_of_flink_snapshots_reports_exactly_what_changed() {
    for (a, b) in [
        ("savepoint-hashmap-canonical", "savepoint-rocksdb-canonical"),
        ("savepoint-hashmap-native", "savepoint-rocksdb-native"),
        ("savepoint-hashmap-canonical", "savepoint-rocksdb-native"),
        ("savepoint-hashmap-canonical-inline", "savepoint-hashmap-native"),
    ] {
        let (pa, pb) = (fixture(&format!("{a}/savepoint")), fixture(&format!("{b}/savepoint")));
        let out = run(
            Path::new("."),
            &["diff", pa.to_str().expect("p"), pb.to_str().expect("p")],
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "{a} vs {b}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for dir in [
        "checkpoint-rocksdb-incremental",
        "checkpoint-changelog-hashmap",
        "checkpoint-changelog-hashmap-materialized",
    ] {
        let root = fixture(dir);
        let c1 = snapshot_of(&root, "expected-chk-1.json");
        let c2 = snapshot_of(&root, "expected-chk-2.json");
        let (w1, w2) = (
            expected(&format!("{dir}/expected-chk-1.json")),
            expected(&format!("{dir}/expected-chk-2.json")),
        );
        let labels: std::collections::BTreeMap<String, String> = w1["operators"]
            .as_array()
            .expect("operators")
            .iter()
            .map(|o| {
                (
                    o["operator_id"].as_str().expect("id").to_string(),
                    o["label"].as_str().expect("label").to_string(),
                )
            })
            .collect();
        // What the second phase did, from the expected files.
        let mut want = std::collections::BTreeSet::new();
        for (label, states) in w2["keyed_state"].as_object().expect("keyed") {
            for (state, st) in states.as_object().expect("states") {
                let new = st["values"].as_object().expect("values");
                let old = w1["keyed_state"][label][state]["values"]
                    .as_object()
                    .cloned()
                    .unwrap_or_default();
                for (k, v) in new {
                    let change = match old.get(k) {
                        None => "added",
                        Some(o) if o != v => "modified",
                        Some(_) => continue,
                    };
                    want.insert((label.clone(), state.clone(), k.clone(), change.to_string()));
                }
                for k in old.keys().filter(|k| !new.contains_key(*k)) {
                    want.insert((label.clone(), state.clone(), k.clone(), "removed".to_string()));
                }
            }
        }
        let mut want_ops = std::collections::BTreeSet::new();
        for section in ["operator_state", "broadcast_state"] {
            for (label, states) in w2[section].as_object().expect("section") {
                for (state, st) in states.as_object().expect("states") {
                    if w1[section][label][state] != *st {
                        want_ops.insert((label.clone(), state.clone()));
                    }
                }
            }
        }
        let out = run(
            Path::new("."),
            &["diff", "--jsonl", c1.to_str().expect("p"), c2.to_str().expect("p")],
        );
        assert_eq!(
            out.status.code(),
            Some(1),
            "{dir}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (mut got, mut got_ops) = (std::collections::BTreeSet::new(), std::collections::BTreeSet::new());
        for line in String::from_utf8(out.stdout).expect("utf-8").lines() {
            let d: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            let label = d["uid"]
                .as_str()
                .map(|u| labels.get(u).cloned().unwrap_or_else(|| u.to_string()));
            match d["type"].as_str() {
                Some("key") => {
                    got.insert((
                        label.expect("uid"),
                        d["state"].as_str().expect("state").to_string(),
                        d["key"].as_str().expect("key").to_string(),
                        d["change"].as_str().expect("change").to_string(),
                    ));
                }
                Some("operator_state") => {
                    got_ops.insert((label.expect("uid"), d["state"].as_str().expect("state").to_string()));
                }
                Some("summary") | None => {}
                Some(other) => panic!("{dir}: a {other} difference: {line}"),
            }
        }
        assert_eq!(got, want, "{dir}: keys");
        assert!(want.len() > 100, "{dir}: {}", want.len());
        assert_eq!(got_ops, want_ops, "{dir}: operator states");
    }
}

/// `show` reads `_metadata` only: with the state files gone it shows the same text (the
/// sizes come from `_metadata`), for a canonical, a heap native and a RocksDB native
/// savepoint and a changelog checkpoint.
#[test]
fn show_reads_metadata_only() {
    for rel in [
        "savepoint-hashmap-canonical/savepoint",
        "savepoint-hashmap-native/savepoint",
        "savepoint-rocksdb-native/savepoint",
    ] {
        let src = fixture(rel);
        let full = stdout(&["show", src.to_str().expect("p")]);
        let tmp = tempfile::tempdir().expect("tempdir");
        std::fs::copy(src.join("_metadata"), tmp.path().join("_metadata")).expect("copy");
        let alone = stdout(&["show", tmp.path().to_str().expect("p")]);
        let strip = |t: &str| t.lines().skip(1).collect::<Vec<_>>().join("\n");
        assert_eq!(strip(&alone), strip(&full), "{rel}");
    }
}

/// `convert` of Flink savepoints (heap canonical, RocksDB native) and a changelog checkpoint
/// to statekit savepoints: operators named by the job's uids (`--flink-uid`), every keyed
/// value and every operator state element kept exactly, and every key in the key group
/// statekit's rule gives it (design 0013), so a point lookup of the output finds it.
#[test]
fn convert_makes_statekit_savepoints_of_flink_snapshots() {
    for (dir, name) in [
        ("savepoint-hashmap-canonical", "expected.json"),
        ("savepoint-rocksdb-native", "expected.json"),
        ("checkpoint-changelog-hashmap-materialized", "expected-chk-2.json"),
    ] {
        let want = expected(&format!("{dir}/{name}"));
        let input = snapshot_of(&fixture(dir), name);
        let tmp = tempfile::tempdir().expect("tempdir");
        let out = tmp.path().join("out");
        let mut args = vec![
            "convert".to_string(),
            input.to_str().expect("p").to_string(),
            out.to_str().expect("p").to_string(),
        ];
        for op in want["operators"].as_array().expect("operators") {
            if let Some(uid) = op["uid"].as_str() {
                args.extend(["--flink-uid".to_string(), uid.to_string()]);
            }
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        stdout(&args);
        let out = out.to_str().expect("p");
        assert!(
            !stdout(&["show", out]).contains("Apache Flink"),
            "{dir}: a statekit savepoint"
        );
        let got = word_counts(out);
        assert_eq!(
            &got,
            want["keyed_state"]["word-count"]["count"]["values"]
                .as_object()
                .expect("values"),
            "{dir}"
        );
        for key in ["grüße", "日本", "k07"] {
            let text = stdout(&[
                "dump",
                out,
                "--uid",
                "word-count",
                "--state",
                "count",
                "--key",
                key,
                "--json",
            ]);
            let rows: Vec<serde_json::Value> = serde_json::from_str(&text).expect("json");
            assert_eq!(rows.len(), 1, "{dir} {key}: {text}");
            assert_eq!(
                rows[0]["value"],
                want["keyed_state"]["word-count"]["count"]["values"][key]
            );
        }
        let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout(&[
            "dump",
            out,
            "--uid",
            "op-list-state",
            "--state",
            "seen-words",
            "--json",
        ]))
        .expect("json");
        let mut got: Vec<String> = rows
            .iter()
            .map(|r| r["value"].as_str().expect("element").to_string())
            .collect();
        let mut expect: Vec<String> = want["operator_state"]["op-list-state"]["seen-words"]["subtasks"]
            .as_object()
            .expect("subtasks")
            .values()
            .flat_map(|v| {
                v.as_array()
                    .expect("list")
                    .iter()
                    .map(|e| e.as_str().expect("s").to_string())
            })
            .collect();
        got.sort();
        expect.sort();
        assert_eq!(got, expect, "{dir}");
    }
}

/// `schema` of a Flink savepoint lists its keyed states with their types (read from the
/// heads of its state streams), and `check` of the heap savepoint against the RocksDB one of
/// the same job finds them compatible.
#[test]
fn schema_and_check_read_flink_state_types() {
    let sp = fixture("savepoint-hashmap-canonical/savepoint");
    let text = stdout(&["schema", sp.to_str().expect("p")]);
    assert!(text.contains("keyed-state") || text.contains("keyed"), "{text}");
    assert!(text.contains("count") && text.contains("i64"), "{text}");
    assert!(text.contains("history") && text.contains("prev-word-counts"), "{text}");
    let other = fixture("savepoint-rocksdb-native/savepoint");
    let out = run(
        Path::new("."),
        &[
            "check",
            sp.to_str().expect("p"),
            "--against",
            other.to_str().expect("p"),
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A Kryo value in the heap layout has no length: `dump` still reads it (the reader finds
/// where each value ends), byte for byte as the canonical savepoint of the same job holds
/// it, and `schema` names the serializer that wrote the bytes.
#[test]
fn kryo_values_of_a_heap_savepoint_are_read_and_their_serializer_named() {
    let types = |rel: &str| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures/flink/flink-1.20.5-types")
            .join(rel)
    };
    let dump = |rel: &str| {
        let p = types(rel);
        let text = stdout(&[
            "dump",
            p.to_str().expect("p"),
            "--uid",
            "types",
            "--state",
            "kryo",
            "--json",
        ]);
        serde_json::from_str::<Vec<serde_json::Value>>(&text).expect("one JSON document")
    };
    let canonical = dump("savepoint-hashmap-canonical/savepoint");
    assert_eq!(canonical.len(), 3, "{canonical:?}");
    for heap in [
        "savepoint-hashmap-native/savepoint",
        "savepoint-hashmap-native-compressed/savepoint",
    ] {
        assert_eq!(dump(heap), canonical, "{heap}");
        let p = types(heap);
        let text = stdout(&["schema", p.to_str().expect("p")]);
        assert!(
            text.contains("kept as bytes: value: KryoSerializerSnapshot (java.util.UUID)"),
            "{text}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&stdout(&["schema", p.to_str().expect("p"), "--json"])).expect("json");
        let kryo = json["operators"]
            .as_array()
            .expect("operators")
            .iter()
            .flat_map(|o| o["keyed_states"].as_array().expect("states"))
            .find(|s| s["name"] == "kryo")
            .expect("kryo state");
        assert_eq!(kryo["opaque"][0], "value: KryoSerializerSnapshot (java.util.UUID)");
    }
}
