//! The word source: one input file, replayable — its position is a byte offset, kept as
//! operator state so a restored job continues exactly where its snapshot was taken — or a
//! stream (standard input, a TCP socket as Flink's `socketTextStream`), whose lines are
//! processed as they arrive and which a restore cannot replay.

use anyhow::{bail, Context, Result};
use std::path::Path;

/// Words of a text read from a byte offset, or of a stream (standard input, a TCP socket)
/// as its lines arrive.
pub struct WordSource {
    /// The input's name as recorded in the offset state.
    pub name: String,
    inner: Inner,
    /// The offset of the next unread byte (of a stream: bytes received so far).
    pos: usize,
    /// Words of the current stream line not yet handed out, and the offset after each.
    pending: std::collections::VecDeque<(String, usize)>,
}

enum Inner {
    /// A whole text (a file, the built-in one): replayable from any offset.
    Text(String),
    /// Lines as they arrive (`None`: the stream ended, or failed with the error in `Err`).
    Stream {
        rx: std::sync::mpsc::Receiver<std::result::Result<String, String>>,
        ended: bool,
    },
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

/// The text used when no `--input` is given.
pub const BUILTIN_INPUT: &str = include_str!("../../data/words.txt");

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '\''
}

impl WordSource {
    /// Reads `path` (`-`: standard input, as a stream), or the built-in text.
    pub fn open(path: Option<&Path>) -> Result<Self> {
        Ok(match path {
            Some(p) if p.as_os_str() == "-" => Self::stream("<stdin>", std::io::BufReader::new(std::io::stdin())),
            Some(p) => WordSource {
                name: p.display().to_string(),
                inner: Inner::Text(
                    std::fs::read_to_string(p).with_context(|| format!("cannot read input {}", p.display()))?,
                ),
                pos: 0,
                pending: Default::default(),
            },
            None => WordSource {
                name: "<built-in>".to_string(),
                inner: Inner::Text(BUILTIN_INPUT.to_string()),
                pos: 0,
                pending: Default::default(),
            },
        })
    }

    /// Lines from a TCP socket: connects to `addr` (`HOST:PORT`) as Flink's
    /// `socketTextStream` does (the server, e.g. `nc -lk 9999`, is the other side).
    pub fn socket(addr: &str) -> Result<Self> {
        let stream = std::net::TcpStream::connect(addr).with_context(|| {
            format!("--socket {addr}: cannot connect (is a server listening there? e.g. `nc -lk PORT`)")
        })?;
        Ok(Self::stream(&format!("socket:{addr}"), std::io::BufReader::new(stream)))
    }

    /// A stream of lines read on a thread of their own, so the job can checkpoint and stop
    /// while no line comes.
    fn stream(name: &str, reader: impl std::io::BufRead + Send + 'static) -> Self {
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
        WordSource {
            name: name.to_string(),
            inner: Inner::Stream { rx, ended },
            pos: 0,
            pending: Default::default(),
        }
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
    pub fn next(&mut self, wait: std::time::Duration) -> Result<Next> {
        loop {
            if let Some((w, after)) = self.pending.pop_front() {
                self.pos = after;
                return Ok(Next::Word(w));
            }
            match &mut self.inner {
                Inner::Text(text) => {
                    let rest = &text[self.pos..];
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
                            // Every word of the line, each with the offset after it (the
                            // line's end after its last word, newline included).
                            let base = self.pos;
                            let mut at = 0;
                            let mut words = Vec::new();
                            while let Some(start) = line[at..].find(is_word_char) {
                                let tail = &line[at + start..];
                                let len = tail.find(|c: char| !is_word_char(c)).unwrap_or(tail.len());
                                at += start + len;
                                words.push((tail[..len].to_lowercase(), base + at));
                            }
                            let end = base + line.len() + 1;
                            if let Some(last) = words.last_mut() {
                                last.1 = end;
                            } else {
                                self.pos = end;
                            }
                            self.pending.extend(words);
                        }
                        Ok(Err(e)) => bail!("{}: reading failed: {e}", self.name),
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => return Ok(Next::Idle),
                        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                            *ended = true;
                            return Ok(Next::End);
                        }
                    }
                }
            }
        }
    }

    /// The next word, waiting for it; `None` at the end.
    pub fn next_word(&mut self) -> Option<String> {
        loop {
            match self.next(std::time::Duration::from_secs(3600)) {
                Ok(Next::Word(w)) => return Some(w),
                Ok(Next::Idle) => continue,
                Ok(Next::End) | Err(_) => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_and_offsets() {
        let mut s = WordSource::open(None).expect("builtin");
        assert_eq!(s.next_word().as_deref(), Some("to"));
        let off = s.offset();
        let second = s.next_word();
        let mut t = WordSource::open(None).expect("builtin");
        t.seek(off);
        assert_eq!(t.next_word(), second);
        let mut n = 2;
        while s.next_word().is_some() {
            n += 1;
        }
        assert_eq!(n, 85);
    }
}

#[cfg(test)]
mod stream_tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn stream_words_arrive_with_their_offsets_and_idle_between() {
        let (mut w, tx) = {
            let (tx, rx) = std::sync::mpsc::channel();
            (
                WordSource {
                    name: "t".into(),
                    inner: Inner::Stream { rx, ended: false },
                    pos: 0,
                    pending: Default::default(),
                },
                tx,
            )
        };
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
}
