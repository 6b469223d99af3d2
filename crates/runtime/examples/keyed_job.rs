//! A keyed job on statekit-runtime (`cargo run -p statekit-runtime --example keyed_job`):
//! counts words with a keyed ValueState `count` at parallelism 2, a checkpoint every 4 words,
//! `(word,count)` lines into an exactly-once file sink. The first run fails after word 8 (a
//! checkpoint in flight); the second restores the latest completed one: every count once.

use statekit_runtime::statekit_checkpoint::{new_job_id, CheckpointStore, RestoreMode, SnapshotWriter};
use statekit_runtime::statekit_core::storage::LocalStorage;
use statekit_runtime::statekit_core::{key_group_for_key, keygroup, BackendConfig, Codec};
use statekit_runtime::statekit_core::{StateDescriptor, StateFunctions, StateHandle, TypeSchema};
use statekit_runtime::statekit_snapshot::{open_keyed, BackendChoice, KeyedBackend, RestoreFrom};
use statekit_runtime::*;
use std::{path::Path, sync::Arc};

const P: u32 = 2;
const MAX_P: u32 = 128;
/// The input.
pub const TEXT: &str = "the quick brown fox jumps over the lazy dog the fox and the dog sleep";

/// The job's operators: source offsets, a counter backend per subtask, a sink per subtask.
struct Job {
    offsets: SourceOffsets,
    counters: Vec<(KeyedBackend, StateHandle)>,
    sinks: Vec<FileSink>,
}

impl Job {
    /// One word through counter and sink (the subtask owning its key group).
    fn count(&mut self, word: &str) -> Result<(), RuntimeError> {
        let key = word.as_bytes();
        let o = keygroup::subtask_for_key_group(MAX_P, P, key_group_for_key(key, MAX_P)) as usize;
        let (backend, count) = &mut self.counters[o];
        let mut buf = Vec::new();
        let seen = backend.as_dyn().get(*count, key, &[], &mut buf)?;
        let n = if seen { i64::decode(&buf)? + 1 } else { 1 };
        backend.as_dyn().put(*count, key, &[], &n.to_bytes())?;
        self.sinks[o].write_line(&format!("({word},{n})"))
    }
}

impl Checkpointed for Job {
    fn snapshot(&mut self, w: &SnapshotWriter, finished: bool) -> Result<AsyncSnapshot, RuntimeError> {
        for (uid, p) in [("source", 1), ("counter", P), ("sink", P)] {
            w.register_operator(uid, p, MAX_P)?;
        }
        let mut part = AsyncSnapshot::new();
        for (i, ((backend, _), sink)) in self.counters.iter_mut().zip(&mut self.sinks).enumerate() {
            let cut = KeyedCut::take(backend, w, KeyedFormat::Canonical)?;
            part.push(SubtaskSnapshot::new("counter", i as u32).keyed(cut));
            let pending = sink.snapshot_state(w.checkpoint_id())?;
            part.push(SubtaskSnapshot::new("sink", i as u32).operator_state(pending));
        }
        let offsets = SubtaskSnapshot::new("source", 0).operator_state(self.offsets.snapshot());
        part.push(offsets.finished(finished));
        Ok(part)
    }

    fn checkpoint_complete(&mut self, id: u64, subsumed: &[u64]) -> Result<(), RuntimeError> {
        for (backend, _) in &mut self.counters {
            let b = backend.as_dyn();
            b.notify_checkpoint_complete(id)?;
            subsumed.iter().try_for_each(|s| b.notify_checkpoint_subsumed(*s))?;
        }
        self.sinks.iter_mut().try_for_each(|s| s.commit_up_to(id).map(drop))
    }

    fn checkpoint_aborted(&mut self, id: u64) -> Result<(), RuntimeError> {
        let abort = |(b, _): &mut (KeyedBackend, StateHandle)| b.as_dyn().notify_checkpoint_aborted(id);
        Ok(self.counters.iter_mut().try_for_each(abort)?)
    }
}

/// Runs the job on `text` in `dir` (`ck/`, `out/`) from the latest checkpoint; fails after word `fail_at`.
pub fn run(dir: &Path, text: &str, every: u64, guarantee: Guarantee, fail_at: Option<u64>) -> Result<(), RuntimeError> {
    let restored = open_latest_checkpoint(&dir.join("ck"))?;
    let store = CheckpointStore::open(Arc::new(LocalStorage::new(dir.join("ck"))), &new_job_id(), 2)?;
    let first = restored.as_ref().map_or(0, |r| r.metadata().checkpoint_id) + 1;
    let mut coordinator = CheckpointCoordinator::new(store, first).with_max_concurrent(2);
    let (out, mode, mut pending, mut offsets) = (dir.join("out"), RestoreMode::NoClaim, vec![], SourceOffsets::new()?);
    if let Some(reader) = &restored {
        coordinator.restored(reader, mode)?;
        offsets = SourceOffsets::restore(reader, "source", 1, 0)?;
        pending = restore_pending_commits(reader, "sink", P)?;
    }
    FileSink::recover(&out, &pending)?; // commit what the checkpoint pre-committed, abort the rest
    let (mut counters, mut sinks, run_id) = (Vec::new(), Vec::new(), new_job_id());
    for i in 0..P {
        let (config, uid) = (BackendConfig::for_subtask(MAX_P, P, i)?, "counter");
        let from = restored.as_ref().map(|reader| RestoreFrom {
            snapshot: reader,
            uid,
            mode,
        });
        let mut backend = open_keyed(&BackendChoice::HashMap, config, None, from)?;
        let state = StateDescriptor::value("count", TypeSchema::Utf8, TypeSchema::I64);
        let count = backend.as_dyn().register(state, StateFunctions::None)?;
        counters.push((backend, count));
        sinks.push(FileSink::new(&out, i, &run_id[..6], guarantee, first)?);
    }
    let mut job = Job {
        offsets,
        counters,
        sinks,
    };
    let mut source = WordSource::text("input", text);
    source.seek(job.offsets.get("input")?.unwrap_or(0));
    for n in 1.. {
        let Some(word) = source.next_word() else { break };
        job.count(&word)?;
        job.offsets.set("input", source.offset())?;
        if n % every == 0 {
            coordinator.trigger(&mut job)?;
        }
        if fail_at == Some(n) {
            return Err(RuntimeError::job(format!("injected failure after word {n}")));
        }
        coordinator.poll(&mut job)?;
    }
    coordinator.trigger_final(&mut job)?;
    Ok(())
}

/// The committed output lines (part files of `out/`, `.pending/` left out).
pub fn committed(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut lines = Vec::new();
    for e in std::fs::read_dir(dir.join("out"))? {
        let path = e?.path();
        if path.is_file() {
            lines.extend(std::fs::read_to_string(path)?.lines().map(String::from));
        }
    }
    lines.sort();
    Ok(lines)
}

#[allow(dead_code)] // the tests include this file for `run`
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let failed = run(dir.path(), TEXT, 4, Guarantee::ExactlyOnce, Some(8)).err();
    println!("first run: {}", failed.ok_or("the first run should have failed")?);
    run(dir.path(), TEXT, 4, Guarantee::ExactlyOnce, None)?;
    let lines = committed(dir.path())?;
    // The i-th word's line: (word, how often it occurred up to i).
    let words: Vec<&str> = TEXT.split(' ').collect();
    let mut want = Vec::new();
    for (i, w) in words.iter().enumerate() {
        want.push(format!("({w},{})", words[..=i].iter().filter(|x| *x == w).count()));
    }
    want.sort();
    assert_eq!(lines, want, "every count committed exactly once");
    println!("restored and finished: {} lines committed exactly once", lines.len());
    Ok(())
}
