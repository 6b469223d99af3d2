//! Source-offset bookkeeping, and a replayable word source.
//!
//! A replayable source's position (here: a byte offset per input) is operator state
//! ([`SourceOffsets`], list state `offsets` of (input, offset) tuples) updated after every
//! record, so a snapshot taken between two records holds exactly where the source was; a
//! restored job seeks there and replays what the failed run read after it. A job without
//! checkpoints (at-most-once) keeps a position committed ahead of processing in a file
//! instead ([`CommittedOffsetFile`]).
//!
//! [`WordSource`] is the reference source: the words of a text, replayable from any byte
//! offset, or of a stream of lines (standard input, a socket), which cannot be replayed.

use crate::RuntimeError;
use statekit_core::storage::{LocalStorage, Storage};
use statekit_core::{
    decode_value, encode_value, OperatorId, OperatorStateDescriptor, OperatorStateHandle, OperatorStateMode,
    OperatorStateSnapshot, OperatorStateStore, TypeSchema, Value,
};
use statekit_snapshot::Snapshot;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

/// The operator state of a source's offsets: `offsets`, a list of (input name, offset).
pub fn offsets_descriptor() -> OperatorStateDescriptor {
    OperatorStateDescriptor {
        name: "offsets".into(),
        mode: OperatorStateMode::List,
        value_schema: TypeSchema::Tuple(vec![TypeSchema::Utf8, TypeSchema::U64]),
        key_schema: None,
    }
}

/// A source subtask's offsets, kept as operator state ([`offsets_descriptor`]).
#[derive(Debug)]
pub struct SourceOffsets {
    store: OperatorStateStore,
    handle: OperatorStateHandle,
}

impl SourceOffsets {
    /// No offsets yet (a fresh start).
    pub fn new() -> Result<Self, RuntimeError> {
        Self::from_snapshot(OperatorStateSnapshot::default())
    }

    /// The offsets held by this operator state (as restored).
    pub fn from_snapshot(snapshot: OperatorStateSnapshot) -> Result<Self, RuntimeError> {
        let mut store = OperatorStateStore::from_snapshot(snapshot);
        let handle = store.register(offsets_descriptor())?;
        Ok(SourceOffsets { store, handle })
    }

    /// The offsets subtask `index` of `parallelism` of source operator `uid` gets from the
    /// `snapshot`.
    pub fn restore(snapshot: &Snapshot, uid: &str, parallelism: u32, index: u32) -> Result<Self, RuntimeError> {
        Self::from_snapshot(snapshot.operator_state(uid, parallelism, index)?)
    }

    /// The offset recorded for input `name` (the last one, when several are).
    pub fn get(&mut self, name: &str) -> Result<Option<u64>, RuntimeError> {
        let mut found = None;
        for e in self.store.list(self.handle)? {
            let (input, offset) = decode_offset(e)?;
            if input == name {
                found = Some(offset);
            }
        }
        Ok(found)
    }

    /// Records that input `name` continues at `offset` (the subtask reads this one input).
    pub fn set(&mut self, name: &str, offset: u64) -> Result<(), RuntimeError> {
        self.store
            .list_update(self.handle, vec![encode_offset(name, offset)?])?;
        Ok(())
    }

    /// A copy of the state for a snapshot's synchronous part.
    pub fn snapshot(&self) -> OperatorStateSnapshot {
        self.store.snapshot()
    }
}

fn encode_offset(input: &str, offset: u64) -> Result<Vec<u8>, RuntimeError> {
    let v = Value::Tuple(vec![Value::Str(input.to_string()), Value::U64(offset)]);
    Ok(encode_value(&offsets_descriptor().value_schema, &v)?)
}

fn decode_offset(bytes: &[u8]) -> Result<(String, u64), RuntimeError> {
    match decode_value(&offsets_descriptor().value_schema, bytes)? {
        Value::Tuple(v) => match v.as_slice() {
            [Value::Str(s), Value::U64(o)] => Ok((s.clone(), *o)),
            _ => Err(RuntimeError::OffsetShape),
        },
        _ => Err(RuntimeError::OffsetShape),
    }
}

/// The position of an at-most-once source, committed ahead of processing (as a consumer
/// with auto-commit does): `<base>/at-most-once/<operator id of the input name>.offset`, one
/// big-endian u64, replaced atomically.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommittedOffsetFile {
    path: PathBuf,
}

impl CommittedOffsetFile {
    /// The file of input `input` under `base`.
    pub fn new(base: &Path, input: &str) -> Self {
        let id = OperatorId::from_uid(input);
        CommittedOffsetFile {
            path: base.join("at-most-once").join(format!("{id}.offset")),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The committed offset; `None` when none was committed yet.
    pub fn read(&self) -> Result<Option<u64>, RuntimeError> {
        match std::fs::read(&self.path) {
            Ok(b) => {
                let arr: [u8; 8] = b.as_slice().try_into().map_err(|_| RuntimeError::OffsetFile {
                    path: self.path.display().to_string(),
                })?;
                Ok(Some(u64::from_be_bytes(arr)))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(RuntimeError::io(format!("cannot read {}", self.path.display()))(e)),
        }
    }

    /// Commits `offset` (atomically replacing the file).
    pub fn write(&self, offset: u64) -> Result<(), RuntimeError> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        LocalStorage::new(dir).put_atomic(&name, &offset.to_be_bytes())?;
        Ok(())
    }
}

/// What [`WordSource::next`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// A word, lower-cased.
    Word(String),
    /// No word within the wait (a stream with nothing new): the job may checkpoint, stop…
    Idle,
    /// The input ended.
    End,
}

enum Inner {
    /// A whole text (a file, a built-in one): replayable from any offset.
    Text(String),
    /// Lines as they arrive (`ended`: the stream ended, or failed with the error sent).
    Stream {
        rx: Receiver<Result<String, String>>,
        ended: bool,
    },
}

/// Words (runs of alphanumeric characters and `'`, lower-cased) of a text read from a byte
/// offset, or of a stream of lines as they arrive. Its position is [`WordSource::offset`]:
/// keep it in [`SourceOffsets`] after every word, and [`WordSource::seek`] there on restore.
pub struct WordSource {
    name: String,
    inner: Inner,
    /// The offset of the next unread byte (of a stream: bytes received so far).
    pos: usize,
    /// Words of the current stream line not yet handed out, and the offset after each.
    pending: VecDeque<(String, usize)>,
}

impl std::fmt::Debug for WordSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WordSource")
            .field("name", &self.name)
            .field("stream", &self.is_stream())
            .field("pos", &self.pos)
            .finish()
    }
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '\''
}

impl WordSource {
    fn with(name: &str, inner: Inner) -> Self {
        WordSource {
            name: name.to_string(),
            inner,
            pos: 0,
            pending: VecDeque::new(),
        }
    }

    /// The words of `text`, an input named `name` (the name its offsets are recorded under).
    pub fn text(name: &str, text: impl Into<String>) -> Self {
        Self::with(name, Inner::Text(text.into()))
    }

    /// The words of the file `path` (named by its path).
    pub fn file(path: &Path) -> Result<Self, RuntimeError> {
        let text =
            std::fs::read_to_string(path).map_err(RuntimeError::io(format!("cannot read input {}", path.display())))?;
        Ok(Self::text(&path.display().to_string(), text))
    }

    /// The words of a stream of lines named `name`, read on a thread of their own so the job
    /// can checkpoint and stop while no line comes.
    pub fn lines(name: &str, reader: impl std::io::BufRead + Send + 'static) -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        let thread_name = format!("statekit-input-{name}");
        let spawned = std::thread::Builder::new().name(thread_name).spawn(move || {
            for line in reader.lines() {
                let item = line.map_err(|e| e.to_string());
                let failed = item.is_err();
                if tx.send(item).is_err() || failed {
                    return;
                }
            }
        });
        let ended = spawned.is_err();
        Self::with(name, Inner::Stream { rx, ended })
    }

    /// The input's name, as recorded in the offset state.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the input is a stream (not replayable: a restore continues with new input).
    pub fn is_stream(&self) -> bool {
        matches!(self.inner, Inner::Stream { .. })
    }

    /// The input's size in bytes, when it is a whole text.
    pub fn len(&self) -> Option<u64> {
        match &self.inner {
            Inner::Text(t) => Some(t.len() as u64),
            Inner::Stream { .. } => None,
        }
    }

    /// Whether the input is a whole text without a byte.
    pub fn is_empty(&self) -> bool {
        self.len() == Some(0)
    }

    /// Continues from byte `offset` (clamped to the text, moved to a char boundary); a
    /// stream cannot go back, and only counts from there.
    pub fn seek(&mut self, offset: u64) {
        match &self.inner {
            Inner::Text(text) => {
                let mut pos = usize::try_from(offset).unwrap_or(usize::MAX).min(text.len());
                while !text.is_char_boundary(pos) {
                    pos += 1;
                }
                self.pos = pos;
            }
            Inner::Stream { .. } => self.pos = usize::try_from(offset).unwrap_or(usize::MAX),
        }
    }

    /// The offset of the next unread byte.
    pub fn offset(&self) -> u64 {
        self.pos as u64
    }

    /// The next word, waiting at most `wait` for a stream's next line.
    pub fn next(&mut self, wait: Duration) -> Result<Next, RuntimeError> {
        loop {
            if let Some((w, after)) = self.pending.pop_front() {
                self.pos = after;
                return Ok(Next::Word(w));
            }
            match &mut self.inner {
                Inner::Text(text) => {
                    let rest = text.get(self.pos..).unwrap_or_default();
                    let Some(start) = rest.find(is_word_char) else {
                        return Ok(Next::End);
                    };
                    let tail = &rest[start..];
                    let len = tail.find(|c: char| !is_word_char(c)).unwrap_or(tail.len());
                    let word = tail[..len].to_lowercase();
                    self.pos += start + len;
                    return Ok(Next::Word(word));
                }
                Inner::Stream { rx, ended } => {
                    if *ended {
                        return Ok(Next::End);
                    }
                    match rx.recv_timeout(wait) {
                        Ok(Ok(line)) => {
                            let words = line_words(&line, self.pos);
                            let end = self.pos + line.len() + 1;
                            if words.is_empty() {
                                self.pos = end;
                            }
                            self.pending.extend(words);
                        }
                        Ok(Err(message)) => {
                            return Err(RuntimeError::SourceRead {
                                name: self.name.clone(),
                                message,
                            })
                        }
                        Err(RecvTimeoutError::Timeout) => return Ok(Next::Idle),
                        Err(RecvTimeoutError::Disconnected) => {
                            *ended = true;
                            return Ok(Next::End);
                        }
                    }
                }
            }
        }
    }

    /// The next word, waiting for it; `None` at the end (or when the stream failed).
    pub fn next_word(&mut self) -> Option<String> {
        loop {
            match self.next(Duration::from_secs(3600)) {
                Ok(Next::Word(w)) => return Some(w),
                Ok(Next::Idle) => continue,
                Ok(Next::End) | Err(_) => return None,
            }
        }
    }
}

/// Every word of a stream's `line` that starts at offset `base`, each with the offset after
/// it (the line's end, newline included, after its last word).
fn line_words(line: &str, base: usize) -> Vec<(String, usize)> {
    let mut at = 0;
    let mut words = Vec::new();
    while let Some(start) = line[at..].find(is_word_char) {
        let tail = &line[at + start..];
        let len = tail.find(|c: char| !is_word_char(c)).unwrap_or(tail.len());
        at += start + len;
        words.push((tail[..len].to_lowercase(), base + at));
    }
    if let Some(last) = words.last_mut() {
        last.1 = base + line.len() + 1;
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_words_and_offsets() {
        let mut s = WordSource::text("t", "To be, or not to be");
        assert_eq!(s.next_word().as_deref(), Some("to"));
        let off = s.offset();
        let second = s.next_word();
        let mut t = WordSource::text("t", "To be, or not to be");
        t.seek(off);
        assert_eq!(t.next_word(), second);
        let mut n = 2;
        while s.next_word().is_some() {
            n += 1;
        }
        assert_eq!(n, 6);
    }

    #[test]
    fn stream_words_arrive_with_their_offsets_and_idle_between() {
        let (tx, rx) = std::sync::mpsc::channel();
        let mut w = WordSource::with("t", Inner::Stream { rx, ended: false });
        assert_eq!(w.next(Duration::from_millis(10)).expect("next"), Next::Idle);
        tx.send(Ok("A b".to_string())).expect("send");
        assert_eq!(w.next(Duration::from_millis(10)).expect("next"), Next::Word("a".into()));
        assert_eq!(w.offset(), 1);
        assert_eq!(w.next(Duration::from_millis(10)).expect("next"), Next::Word("b".into()));
        assert_eq!(w.offset(), 4, "past the newline after the line's last word");
        tx.send(Ok(String::new())).expect("send");
        assert_eq!(w.next(Duration::from_millis(10)).expect("next"), Next::Idle);
        assert_eq!(w.offset(), 5);
        drop(tx);
        assert_eq!(w.next(Duration::from_millis(10)).expect("next"), Next::End);
    }

    #[test]
    fn offsets_round_trip_through_operator_state() {
        let mut o = SourceOffsets::new().expect("offsets");
        assert_eq!(o.get("in").expect("get"), None);
        o.set("in", 42).expect("set");
        let mut restored = SourceOffsets::from_snapshot(o.snapshot()).expect("restore");
        assert_eq!(restored.get("in").expect("get"), Some(42));
        assert_eq!(restored.get("other").expect("get"), None);
    }

    #[test]
    fn committed_offset_file() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let f = CommittedOffsetFile::new(tmp.path(), "in");
        assert_eq!(f.read().expect("read"), None);
        f.write(7).expect("write");
        assert_eq!(f.read().expect("read"), Some(7));
        std::fs::write(f.path(), b"xx").expect("damage");
        assert!(f.read().is_err());
    }
}
