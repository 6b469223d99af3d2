//! The `statekit` commands on changelog checkpoints, built through the libraries: a
//! checkpoint that is only a log tail, one with materializations plus a tail, one taken after
//! a rescaling restore (inherited, narrowed materializations and tails). `show --json` reports
//! the materialized part, the tail and the projected replay; `dump` shows the state a restore
//! sees (TTL timestamps as recorded); `dump --changes` lists the tail's records in replay
//! order, filtered, also of a lone log file; `verify` passes, and fails with file and offset
//! (exit 1) on a bit flip, a truncation or an unknown version, where `dump` fails cleanly
//! (exit 2, no output); `gc` deletes unreferenced log files and materializations only; `ls`
//! labels the format.

mod common;

use common::{copy_dir, run};
use rand::{Rng, SeedableRng};
use serde_json::Value as Json;
use statekit_changelog::{ChangelogBackend, ChangelogStorage, MaterializationPolicy, Materializer, UploadConfig};
use statekit_checkpoint::{CheckpointStore, SnapshotReader};
use statekit_core::keygroup::subtask_for_key_group;
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::{
    key_group_for_key, BackendConfig, KeyedStateBackend, ManualClock, StateDescriptor, StateFunctions, TtlConfig,
    TypeSchema,
};
use statekit_hashmap::HashMapBackend;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const UID: &str = "counter";
const MAX_P: u32 = 16;
/// Long enough that nothing written at the manual clock's times has expired by the real
/// time at which the checkpoints are taken.
const TTL_MS: u64 = 10_000_000_000_000;

type Backend = ChangelogBackend<HashMapBackend>;

/// What the state should be.
#[derive(Clone, Debug, Default, PartialEq)]
struct Model {
    count: BTreeMap<String, i64>,
    recent: BTreeMap<String, Vec<i64>>,
    next: BTreeMap<String, BTreeMap<String, i64>>,
    /// word → (value, TTL timestamp).
    seen: BTreeMap<String, (i64, i64)>,
}

struct Job {
    dir: tempfile::TempDir,
    store: CheckpointStore,
    storage: ChangelogStorage,
    job: Arc<dyn Storage>,
    clock: Arc<ManualClock>,
    backends: Vec<Backend>,
    model: Model,
    /// Data records (not metadata) written since the last materialization per backend are in
    /// the tail; counted over all.
    changes: u64,
}

fn descriptors() -> Vec<StateDescriptor> {
    vec![
        StateDescriptor::value("count", TypeSchema::Utf8, TypeSchema::I64),
        StateDescriptor::list("recent", TypeSchema::Utf8, TypeSchema::I64),
        StateDescriptor::map("next", TypeSchema::Utf8, TypeSchema::Utf8, TypeSchema::I64),
        StateDescriptor::value("seen", TypeSchema::Utf8, TypeSchema::I64).with_ttl(TtlConfig::new(TTL_MS)),
    ]
}

impl Job {
    fn new() -> Job {
        let dir = tempfile::tempdir().expect("tempdir");
        let root: Arc<dyn Storage> = Arc::new(LocalStorage::new(dir.path()));
        let store = CheckpointStore::open(root, "job", 5).expect("store");
        let job = store.job_storage().expect("job storage");
        let cfg = UploadConfig {
            persist_delay: std::time::Duration::from_millis(1),
            ..UploadConfig::default()
        };
        let storage = ChangelogStorage::for_job(job.clone(), cfg).expect("changelog storage");
        let mut j = Job {
            dir,
            store,
            storage,
            job,
            clock: ManualClock::new(1_000_000),
            backends: Vec::new(),
            model: Model::default(),
            changes: 0,
        };
        j.backends = (0..2).map(|i| j.backend(2, i)).collect();
        for b in &mut j.backends {
            register(b);
        }
        j
    }

    fn backend(&self, p: u32, i: u32) -> Backend {
        let policy = MaterializationPolicy {
            interval: None,
            ..MaterializationPolicy::default()
        };
        let config = BackendConfig::for_subtask(MAX_P, p, i)
            .expect("config")
            .with_clock(self.clock.clone());
        ChangelogBackend::new(
            config,
            &self.storage,
            Materializer::new(self.job.clone(), policy, u64::from(i)),
            HashMapBackend::new,
        )
        .expect("backend")
    }

    fn base(&self) -> &Path {
        self.dir.path()
    }

    fn owner(&mut self, word: &str) -> &mut Backend {
        let p = self.backends.len() as u32;
        let kg = key_group_for_key(word.as_bytes(), MAX_P);
        &mut self.backends[subtask_for_key_group(MAX_P, p, kg) as usize]
    }

    /// One word of input: count +1, its position appended to `recent`, `next[word][follower]`
    /// +1, `seen` set to the position (at the clock's time).
    fn word(&mut self, word: &str, follower: &str, pos: i64) {
        self.clock.advance(7);
        let now = self.clock_now();
        let w = word.as_bytes();
        let b = self.owner(word);
        let (c, r, n, s) = (
            b.handle("count").expect("count"),
            b.handle("recent").expect("recent"),
            b.handle("next").expect("next"),
            b.handle("seen").expect("seen"),
        );
        let mut out = Vec::new();
        let count = if b.get(c, w, b"", &mut out).expect("get") {
            i64::from_be_bytes(out.as_slice().try_into().expect("8 bytes"))
        } else {
            0
        } + 1;
        b.put(c, w, b"", &count.to_be_bytes()).expect("put");
        b.add(r, w, b"", &pos.to_be_bytes()).expect("add");
        let f = follower.as_bytes();
        let nf = if b.map_get(n, w, b"", f, &mut out).expect("map_get") {
            i64::from_be_bytes(out.as_slice().try_into().expect("8 bytes"))
        } else {
            0
        } + 1;
        b.map_put(n, w, b"", f, &nf.to_be_bytes()).expect("map_put");
        b.put(s, w, b"", &pos.to_be_bytes()).expect("put seen");
        self.changes += 4;
        let m = &mut self.model;
        m.count.insert(word.into(), count);
        m.recent.entry(word.into()).or_default().push(pos);
        m.next.entry(word.into()).or_default().insert(follower.into(), nf);
        m.seen.insert(word.into(), (pos, now));
    }

    /// Clears `count`, replaces `recent` by its last element, removes one `next` entry.
    fn forget(&mut self, word: &str) {
        self.clock.advance(3);
        let w = word.as_bytes();
        let last = *self.model.recent[word].last().expect("an element");
        let follower = self.model.next[word].keys().next().expect("an entry").clone();
        let b = self.owner(word);
        let (c, r, n) = (
            b.handle("count").expect("count"),
            b.handle("recent").expect("recent"),
            b.handle("next").expect("next"),
        );
        b.clear(c, w, b"").expect("clear");
        b.list_update(r, w, b"", &[&last.to_be_bytes()]).expect("list_update");
        assert!(b.map_remove(n, w, b"", follower.as_bytes()).expect("map_remove"));
        self.changes += 3;
        let m = &mut self.model;
        m.count.remove(word);
        m.recent.insert(word.into(), vec![last]);
        let e = m.next.get_mut(word).expect("next");
        e.remove(&follower);
        if e.is_empty() {
            m.next.remove(word);
        }
    }

    fn clock_now(&self) -> i64 {
        use statekit_core::Clock;
        self.clock.now_ms()
    }

    fn checkpoint(&mut self, id: u64) -> PathBuf {
        let w = self.store.begin(id).expect("begin");
        w.register_operator(UID, self.backends.len() as u32, MAX_P)
            .expect("register");
        for (i, b) in self.backends.iter_mut().enumerate() {
            let cut = b.checkpoint(id).expect("cut");
            let h = cut.finish().expect("tail durable");
            w.add_changelog_subtask(UID, i as u32, h, b.descriptors(), None, false)
                .expect("add");
        }
        let (_, subsumed) = self.store.complete(w).expect("complete");
        for b in &mut self.backends {
            b.notify_checkpoint_complete(id).expect("notify");
            for s in &subsumed {
                b.notify_checkpoint_subsumed(*s).expect("subsumed");
            }
        }
        self.base().join("job").join(format!("chk-{id}"))
    }

    /// Restores the checkpoint at parallelism `p`, sharing its files (the new backends'
    /// checkpoints inherit its materializations and tails).
    fn restore(&mut self, chk: &Path, p: u32) {
        for b in &mut self.backends {
            b.dispose();
        }
        let reader = SnapshotReader::open(chk).expect("open");
        self.backends = (0..p)
            .map(|i| {
                let mut b = self.backend(p, i);
                let hs = reader.changelog_handles(UID, b.key_group_range()).expect("handles");
                b.restore_changelog(&hs, true).expect("restore");
                register(&mut b);
                b
            })
            .collect();
    }
}

fn register(b: &mut Backend) {
    for d in descriptors() {
        b.register(d, StateFunctions::None).expect("register");
    }
}

fn words(n: usize, salt: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| {
            (
                format!("w{}", (i * 7 + salt) % 23),
                format!("w{}", (i * 5 + salt + 1) % 23),
            )
        })
        .collect()
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf8 path")
}

/// Runs the binary; asserts the exit code and no panic; returns stdout.
fn ok(args: &[&str]) -> String {
    let out = run(&std::env::temp_dir(), args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
    String::from_utf8(out.stdout).expect("utf8 stdout")
}

fn json(args: &[&str]) -> Json {
    let text = ok(args);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?}: {e}: {text}"))
}

/// The state `dump --json` shows, as a model.
fn dumped(chk: &Path) -> Model {
    // Standard error says what the entries are made of.
    let out = run(
        &std::env::temp_dir(),
        &["dump", s(chk), "--uid", UID, "--state", "count"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for part in ["changelog checkpoint", "materialized", "tail", "replay"] {
        assert!(stderr.contains(part), "dump's note lacks {part:?}: {stderr}");
    }
    let mut m = Model::default();
    let d = |state: &str| json(&["dump", s(chk), "--uid", UID, "--state", state, "--json"]);
    let text = |v: &Json| v.as_str().expect("a string").to_string();
    let int = |v: &Json| v.as_i64().expect("an integer");
    for e in d("count").as_array().expect("array") {
        m.count.insert(text(&e["key"]), int(&e["value"]));
    }
    for e in d("recent").as_array().expect("array") {
        let l = m.recent.entry(text(&e["key"])).or_default();
        assert_eq!(e["index"].as_u64(), Some(l.len() as u64), "{e}");
        l.push(int(&e["value"]));
    }
    for e in d("next").as_array().expect("array") {
        m.next
            .entry(text(&e["key"]))
            .or_default()
            .insert(text(&e["user_key"]), int(&e["value"]));
    }
    for e in d("seen").as_array().expect("array") {
        m.seen
            .insert(text(&e["key"]), (int(&e["value"]), int(&e["ttl_timestamp_ms"])));
    }
    m
}

fn subtasks(show: &Json) -> Vec<Json> {
    show["operators"][0]["subtasks"].as_array().expect("subtasks").clone()
}

/// Sum of a numeric field over the subtasks' changelog summaries.
fn sum(show: &Json, section: &str, field: &str) -> u64 {
    subtasks(show)
        .iter()
        .map(|st| st["changelog"][section][field].as_u64().expect("a number"))
        .sum()
}

fn changes(args: &[&str]) -> Vec<Json> {
    let mut a = vec!["dump", "--changes", "--json"];
    a.extend_from_slice(args);
    json(&a).as_array().expect("array").clone()
}

/// The log files and materializations the checkpoint references, relative to the job
/// directory.
fn referenced(chk: &Path) -> BTreeSet<String> {
    let show = json(&["show", s(chk), "--json"]);
    let mut out = BTreeSet::new();
    for st in subtasks(&show) {
        for f in st["changelog"]["tail"]["files_list"].as_array().expect("files") {
            out.insert(f.as_str().expect("path").to_string());
        }
        for f in st["changelog"]["materialized"]["files_list"].as_array().expect("files") {
            out.insert(f["path"].as_str().expect("path").to_string());
        }
    }
    out
}

/// Builds the three checkpoints; checks show, dump, dump --changes and verify on each.
fn build() -> (Job, [PathBuf; 3]) {
    let mut job = Job::new();
    // 1: only a tail (no materialization yet).
    for (i, (w, f)) in words(40, 0).iter().enumerate() {
        job.word(w, f, i as i64);
    }
    job.forget("w3");
    let chk1 = job.checkpoint(1);
    let want1 = job.model.clone();
    let changes1 = job.changes;

    // 2: materialized, then more changes in the tail.
    for b in &mut job.backends {
        b.materialize_now().expect("materialize");
    }
    let materialized_entries: u64 = {
        let m = &job.model;
        (m.count.len()
            + m.recent.values().map(Vec::len).sum::<usize>()
            + m.next.values().map(BTreeMap::len).sum::<usize>()
            + m.seen.len()) as u64
    };
    job.changes = 0;
    for (i, (w, f)) in words(25, 3).iter().enumerate() {
        job.word(w, f, 100 + i as i64);
    }
    job.forget("w5");
    let chk2 = job.checkpoint(2);
    let want2 = job.model.clone();
    let changes2 = job.changes;

    // 3: restored at parallelism 3 (inheriting materializations and tails), more changes.
    job.restore(&chk2, 3);
    for (i, (w, f)) in words(20, 11).iter().enumerate() {
        job.word(w, f, 200 + i as i64);
    }
    let chk3 = job.checkpoint(3);
    let want3 = job.model.clone();

    // show --json
    let show1 = json(&["show", s(&chk1), "--json"]);
    assert_eq!(show1["format"], "changelog-v1");
    assert_eq!(sum(&show1, "materialized", "parts"), 0);
    assert_eq!(sum(&show1, "materialized", "bytes"), 0);
    assert!(sum(&show1, "tail", "change_sets") >= 2, "{show1:#}");
    let meta_records = |show: &Json| -> u64 { sum(show, "tail", "records") };
    // Every change and the metadata records (4 states per backend) are in the tail, and a
    // restore at the same parallelism replays all of it.
    assert_eq!(meta_records(&show1), changes1 + 8, "{show1:#}");
    assert_eq!(sum(&show1, "replay", "records"), sum(&show1, "tail", "records"));
    assert_eq!(sum(&show1, "replay", "bytes"), sum(&show1, "tail", "log_bytes"));
    for st in subtasks(&show1) {
        assert!(st["changelog"]["space_amplification"].is_null(), "{st:#}");
        assert!(st["changelog"]["tail"]["log_file_bytes"].as_u64() >= st["changelog"]["tail"]["log_bytes"].as_u64());
        assert!(st["changelog"]["tail"]["log_files"].as_u64() >= Some(1), "{st:#}");
    }
    let total = &show1["changelog"];
    assert_eq!(total["tail"]["records"].as_u64(), Some(meta_records(&show1)));
    assert!(total["tail"]["log_files"].as_u64() <= Some(sum(&show1, "tail", "log_files")));
    assert_eq!(
        total["tail"]["log_bytes"].as_u64(),
        Some(sum(&show1, "tail", "log_bytes"))
    );

    let show2 = json(&["show", s(&chk2), "--json"]);
    assert_eq!(sum(&show2, "materialized", "parts"), 2);
    assert_eq!(
        sum(&show2, "materialized", "entries"),
        materialized_entries,
        "{show2:#}"
    );
    let tail2 = sum(&show2, "tail", "records");
    assert_eq!(
        tail2,
        changes2 + 8,
        "metadata logged again after the materialization: {show2:#}"
    );
    for st in subtasks(&show2) {
        let c = &st["changelog"];
        let amp = c["space_amplification"].as_f64().expect("an amplification");
        let want = c["tail"]["log_bytes"].as_f64().expect("f64") / c["materialized"]["bytes"].as_f64().expect("f64");
        assert!((amp - want).abs() < 1e-9, "{c:#}");
        assert_eq!(c["materialization_id"].as_u64(), Some(1));
    }
    // The states' entries are the materializations'.
    let states = show2["operators"][0]["keyed_states"].as_array().expect("states");
    let count = states.iter().find(|s| s["name"] == "count").expect("count");
    assert_eq!(count["entries"].as_u64(), Some(want1.count.len() as u64));

    let show3 = json(&["show", s(&chk3), "--json"]);
    let subs3 = subtasks(&show3);
    assert_eq!(subs3.len(), 3);
    for st in &subs3 {
        let c = &st["changelog"];
        assert!(c["materialized"]["parts"].as_u64() >= Some(1), "inherited: {c:#}");
        let logs = c["tail"]["sqns"].as_array().expect("sqns").len();
        assert!(logs >= 2, "an inherited tail and its own: {c:#}");
    }
    // Subtask 1 ([6, 10]) inherits both old materializations, narrowed to [6, 7] and [8, 10].
    let parts: Vec<serde_json::Value> = subs3[1]["changelog"]["materialized"]["files_list"]
        .as_array()
        .expect("parts")
        .iter()
        .map(|p| p["key_groups"].clone())
        .collect();
    // Key-group ranges are numbers in JSON: [first, last].
    assert_eq!(
        parts,
        [serde_json::json!([6, 7]), serde_json::json!([8, 10])],
        "{show3:#}"
    );
    // Restores at 3 replay inherited change sets over fewer key groups each.
    assert!(show3["changelog"]["replay"]["change_sets"].as_u64() > show3["changelog"]["tail"]["change_sets"].as_u64());

    // dump = the state.
    assert_eq!(dumped(&chk1), want1);
    assert_eq!(dumped(&chk2), want2);
    assert_eq!(dumped(&chk3), want3);

    // verify
    for c in [&chk1, &chk2, &chk3] {
        let out = ok(&["verify", s(c)]);
        assert!(out.contains("; OK"), "{out}");
        assert!(out.contains("log files decoded"), "{out}");
        let v = json(&["verify", s(c), "--json"]);
        assert_eq!(v["ok"], true, "{v:#}");
        assert!(v["changelog"]["replayed_records"].as_u64() > Some(0), "{v:#}");
    }
    (job, [chk1, chk2, chk3])
}

#[test]
fn changelog_checkpoints_through_every_command() {
    let (job, [chk1, chk2, chk3]) = build();

    // show (text): the materialized part, the tail, the replay per subtask.
    let text = ok(&["show", s(&chk2)]);
    assert!(text.contains("changelog-v1"), "{text}");
    assert!(text.contains("materialized yes (1 part, 1 file)"), "{text}");
    assert!(
        text.contains("tail ") && text.contains("replay ") && text.contains("space amplification"),
        "{text}"
    );
    let text1 = ok(&["show", s(&chk1), "--key-groups"]);
    assert!(text1.contains("materialized none"), "{text1}");

    // dump --changes: every replayed record, in replay order, decoded.
    let all = changes(&[s(&chk1)]);
    let show1 = json(&["show", s(&chk1), "--json"]);
    assert_eq!(all.len() as u64, sum(&show1, "replay", "records"));
    let subtask_order: Vec<u64> = all.iter().map(|r| r["subtask"].as_u64().expect("subtask")).collect();
    assert!(
        subtask_order.windows(2).all(|w| w[0] <= w[1]),
        "replay order is subtask order"
    );
    let puts: Vec<&Json> = all
        .iter()
        .filter(|r| r["state"] == "count" && r["op"] == "put")
        .collect();
    assert_eq!(puts.len(), 40, "one put per word");
    assert!(
        puts.iter().all(|r| r["key"].is_string() && r["value"].is_i64()),
        "decoded"
    );
    let ops: BTreeSet<&str> = all.iter().map(|r| r["op"].as_str().expect("op")).collect();
    for op in [
        "metadata",
        "put",
        "add-element",
        "map-put",
        "clear",
        "set-list",
        "map-remove",
    ] {
        assert!(ops.contains(op), "{op} in {ops:?}");
    }
    // TTL records carry the recorded time.
    let seen: Vec<&Json> = all
        .iter()
        .filter(|r| r["state"] == "seen" && r["op"] == "put")
        .collect();
    assert!(seen
        .iter()
        .all(|r| r["time_ms"].as_i64().is_some_and(|t| t > 1_000_000)));
    // Within a change set: metadata first, then ascending key groups; sequence numbers ascend
    // per subtask.
    for w in all.windows(2) {
        let same = |f: &str| w[0][f] == w[1][f];
        if same("subtask") && same("file") && same("offset") {
            let kg = |r: &Json| r["key_group"].as_u64().map_or(-1, |k| k as i64);
            assert!(kg(&w[0]) <= kg(&w[1]), "{} then {}", w[0], w[1]);
        }
    }
    // Filters.
    let kg = all.iter().find_map(|r| r["key_group"].as_u64()).expect("a data record");
    let kg_s = kg.to_string();
    let only = changes(&[s(&chk1), "--key-group", &kg_s]);
    assert!(!only.is_empty() && only.iter().all(|r| r["key_group"].as_u64() == Some(kg)));
    assert_eq!(
        only.len(),
        all.iter().filter(|r| r["key_group"].as_u64() == Some(kg)).count()
    );
    let (_, err) = fails(&["dump", "--changes", s(&chk1), "--key-group", "16"], 2);
    assert!(err.contains("key group 16 does not exist"), "{err}");
    let range = changes(&[s(&chk1), "--key-group", "0..8"]);
    assert!(range.iter().all(|r| r["key_group"].as_u64().is_some_and(|k| k < 8)));
    assert_eq!(
        range.len(),
        all.iter()
            .filter(|r| r["key_group"].as_u64().is_some_and(|k| k < 8))
            .count()
    );
    let next = changes(&[s(&chk1), "--state", "next"]);
    assert!(!next.is_empty() && next.iter().all(|r| r["state"] == "next"));
    assert!(next.iter().any(|r| r["op"] == "metadata"));
    let w7 = changes(&[s(&chk1), "--state", "count", "--key", "w7"]);
    let times = words(40, 0).iter().filter(|(w, _)| w == "w7").count();
    assert!(times >= 2);
    assert_eq!(w7.len(), times, "one put per occurrence: {w7:?}");
    assert_eq!(w7.last().expect("last")["value"].as_i64(), Some(times as i64));
    let limited = changes(&[s(&chk1), "--limit", "5"]);
    assert_eq!(limited.len(), 5);
    let text = ok(&["dump", "--changes", s(&chk1), "--state", "count", "--limit", "3"]);
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(
        text.contains("state=count") && text.contains("file=dstl/") && text.contains("sqn="),
        "{text}"
    );
    // After the rescale, the changes replayed cover the inherited tails too.
    let all3 = changes(&[s(&chk3)]);
    assert!(all3.iter().any(|r| r["subtask"] == 2));
    let all2 = changes(&[s(&chk2)]);
    assert!(all2.len() < all.len(), "the materialization truncated the tail");

    // dump --changes on a lone log file: the format is self-describing.
    let dstl = job.base().join("job/dstl");
    let mut logs: Vec<PathBuf> = std::fs::read_dir(&dstl)
        .expect("dstl")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "skcl"))
        .collect();
    logs.sort();
    assert!(!logs.is_empty());
    let mut lone_records = 0;
    // The running job's upload service keeps prepared files (all zeros) ready beside its logs:
    // not log files yet, and nothing wrong.
    let mut spares = 0;
    for log in &logs {
        let rows = changes(&[s(log)]);
        assert!(rows.iter().all(|r| r["subtask"].is_null() && r["file"] == s(log)));
        lone_records += rows.len();
        let out = ok(&["verify", s(log)]);
        assert!(out.contains("; OK"), "{out}");
        let v = json(&["verify", s(log), "--json"]);
        assert_eq!(v["ok"], true);
        if v["prepared_unwritten"] == true {
            assert!(out.contains("a prepared log file not yet written"), "{out}");
            assert!(rows.is_empty());
            spares += 1;
        }
    }
    assert!(lone_records > 0);
    assert!(spares <= 2, "{spares} spares");
    let logs: Vec<PathBuf> = logs
        .into_iter()
        .filter(|p| std::fs::read(p).is_ok_and(|b| b.iter().any(|&x| x != 0)))
        .collect();
    let first = changes(&[s(&logs[0]), "--state", "count"]);
    assert!(first.iter().all(|r| r["state"] == "count"));

    // ls labels the format.
    let ls = json(&["ls", s(job.base()), "--json"]);
    let items = ls.as_array().expect("array");
    assert_eq!(items.len(), 3, "{ls:#}");
    for it in items {
        assert_eq!(it["format"], "changelog-v1");
        assert_eq!(it["complete"], true);
        assert!(it["bytes"].as_u64() > it["own_bytes"].as_u64(), "{it}");
    }
    let text = ok(&["ls", s(job.base())]);
    assert!(text.contains("changelog-v1"), "{text}");

    // Commands that take snapshots say what to do with a log file.
    let out = run(&std::env::temp_dir(), &["show", s(&logs[0])]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("log file"));
    drop((chk2, chk3));
}

/// Runs a command that must fail cleanly: this exit code, no panic; returns (stdout, stderr).
fn fails(args: &[&str], code: i32) -> (String, String) {
    let out = run(&std::env::temp_dir(), args);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}: stdout {stdout} stderr {stderr}"
    );
    (stdout, stderr)
}

#[test]
fn damaged_log_files_are_reported_with_file_and_offset() {
    let (job, [_, chk2, _]) = build();
    let show = json(&["show", s(&chk2), "--json"]);
    assert_eq!(show["format"], "changelog-v1");
    // The first change set of subtask 0's tail: a restore reads it.
    let meta = SnapshotReader::open(&chk2).expect("open").metadata().clone();
    let seg = meta.operators[0].subtasks[0].keyed.changelog().expect("changelog").tail[0].clone();
    let log_rel = seg.file.path.clone();
    let name = Path::new(&log_rel).file_name().expect("name").to_owned();
    let original = std::fs::read(job.base().join("job").join(&log_rel)).expect("read log");
    let flip_at = seg.offset as usize + 48 + 3;

    type Damage = Box<dyn Fn(&mut Vec<u8>)>;
    let damages: Vec<(&str, Damage, &str)> = vec![
        (
            "bit flip",
            Box::new(move |b: &mut Vec<u8>| b[flip_at] ^= 0x10),
            "change_set.crc32",
        ),
        (
            "truncation",
            Box::new(|b: &mut Vec<u8>| b.truncate(b.len() - 10)),
            "truncated",
        ),
        (
            "version",
            Box::new(|b: &mut Vec<u8>| b[4] = 9),
            "unsupported format version 9",
        ),
    ];
    for (what, damage, needle) in &damages {
        let copy = tempfile::tempdir().expect("tempdir");
        copy_dir(job.base(), copy.path());
        let chk = copy.path().join("job/chk-2");
        let log = copy.path().join("job").join(&log_rel);
        let mut bytes = original.clone();
        damage(&mut bytes);
        std::fs::write(&log, &bytes).expect("write");

        // verify: exit 1, each problem naming the file and an offset.
        let (stdout, _) = fails(&["verify", s(&chk)], 1);
        let problems: Vec<&str> = stdout.lines().filter(|l| l.starts_with("problem: ")).collect();
        assert!(!problems.is_empty(), "{what}: {stdout}");
        assert!(
            problems
                .iter()
                .any(|p| p.contains(&*name.to_string_lossy()) && p.contains(": offset ") && p.contains(needle)),
            "{what}: {stdout}"
        );
        let v: Json = serde_json::from_str(&fails(&["verify", s(&chk), "--json"], 1).0).expect("json");
        assert_eq!(v["ok"], false);
        // The lone file too.
        let (stdout, _) = fails(&["verify", s(&log)], 1);
        assert!(
            stdout.contains(needle) && stdout.contains(": offset "),
            "{what}: {stdout}"
        );

        // dump and dump --changes: a clear error, no partial output.
        for args in [
            vec!["dump", s(&chk), "--uid", UID, "--state", "count"],
            vec!["dump", s(&chk), "--uid", UID, "--state", "count", "--json"],
            vec!["dump", "--changes", s(&chk)],
            vec!["dump", "--changes", s(&chk), "--json"],
            vec!["dump", "--changes", s(&log)],
        ] {
            let (stdout, stderr) = fails(&args, 2);
            assert!(stdout.is_empty(), "{what}: {args:?} printed {stdout}");
            let lines: Vec<&str> = stderr.lines().collect();
            assert_eq!(lines.len(), 1, "{what}: {args:?}: {stderr}");
            assert!(lines[0].starts_with("error: "), "{what}: {args:?}: {stderr}");
            assert!(
                lines[0].contains(&*name.to_string_lossy()),
                "{what}: {args:?}: {stderr}"
            );
        }
        // show reads only _metadata.
        ok(&["show", s(&chk)]);
    }

    // Random single-bit flips and truncations: always detected, never a panic.
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let copy = tempfile::tempdir().expect("tempdir");
    copy_dir(job.base(), copy.path());
    let log = copy.path().join("job").join(&log_rel);
    let chk = copy.path().join("job/chk-2");
    for i in 0..60 {
        let mut bytes = original.clone();
        if i % 4 == 3 {
            bytes.truncate(rng.gen_range(0..bytes.len()));
        } else {
            let at = rng.gen_range(0..bytes.len());
            bytes[at] ^= 1 << rng.gen_range(0..8);
        }
        std::fs::write(&log, &bytes).expect("write");
        fails(&["verify", s(&log)], 1);
        fails(&["verify", s(&chk)], 1);
        let out = run(&std::env::temp_dir(), &["dump", "--changes", s(&chk), "--json"]);
        assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    }
}

#[test]
fn gc_deletes_unreferenced_log_files_and_materializations_only() {
    let (job, chks) = build();
    let referenced: BTreeSet<String> = chks.iter().flat_map(|c| referenced(c)).collect();
    let jobdir = job.base().join("job");
    // Orphans: a log file and a materialization no checkpoint references.
    let some_log = referenced.iter().find(|p| p.starts_with("dstl/")).expect("a log file");
    let orphan_log = jobdir.join("dstl/00000000000000000000000000000000.skcl");
    std::fs::copy(jobdir.join(some_log), &orphan_log).expect("copy");
    let some_mat = referenced
        .iter()
        .find(|p| p.starts_with("taskowned/"))
        .expect("a materialization");
    let orphan_mat = jobdir.join("taskowned/mat-orphan-9.skd");
    std::fs::copy(jobdir.join(some_mat), &orphan_mat).expect("copy");

    let plan = json(&["gc", s(job.base()), "--dry-run", "--min-age", "0s", "--json"]);
    let orphans: BTreeSet<PathBuf> = plan["orphans"]
        .as_array()
        .expect("orphans")
        .iter()
        .map(|o| PathBuf::from(o["path"].as_str().expect("path")))
        .collect();
    let canon = |p: &Path| std::fs::canonicalize(p).expect("canonicalize");
    let orphans: BTreeSet<PathBuf> = orphans.iter().map(|p| canon(p)).collect();
    assert!(orphans.contains(&canon(&orphan_log)), "{plan:#}");
    assert!(orphans.contains(&canon(&orphan_mat)), "{plan:#}");
    for r in &referenced {
        assert!(
            !orphans.contains(&canon(&jobdir.join(r))),
            "{r} is referenced: {plan:#}"
        );
    }
    assert!(orphan_log.exists(), "a dry run deletes nothing");

    // Young files are left alone.
    let young = json(&["gc", s(job.base()), "--dry-run", "--json"]);
    assert!(young["orphans"].as_array().expect("orphans").is_empty(), "{young:#}");

    ok(&["gc", s(job.base()), "--yes", "--min-age", "0s"]);
    assert!(!orphan_log.exists() && !orphan_mat.exists());
    for r in &referenced {
        assert!(jobdir.join(r).exists(), "{r} deleted");
    }
    for c in &chks {
        let out = ok(&["verify", s(c)]);
        assert!(out.contains("; OK"), "{out}");
    }
    let again = json(&["gc", s(job.base()), "--dry-run", "--min-age", "0s", "--json"]);
    assert!(again["orphans"].as_array().expect("orphans").is_empty(), "{again:#}");
}
