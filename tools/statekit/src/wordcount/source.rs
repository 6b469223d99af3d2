//! A replayable word source over one input file: its position is a byte offset, kept as
//! operator state so a restored job continues exactly where its snapshot was taken.

use anyhow::{Context, Result};
use std::path::Path;

/// Words of a text, read from a byte offset.
pub struct WordSource {
    /// The input's name as recorded in the offset state.
    pub name: String,
    text: String,
    pos: usize,
}

/// The text used when no `--input` is given.
pub const BUILTIN_INPUT: &str = include_str!("../../data/words.txt");

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '\''
}

impl WordSource {
    /// Reads `path`, or the built-in text.
    pub fn open(path: Option<&Path>) -> Result<Self> {
        Ok(match path {
            Some(p) => WordSource {
                name: p.display().to_string(),
                text: std::fs::read_to_string(p).with_context(|| format!("cannot read input {}", p.display()))?,
                pos: 0,
            },
            None => WordSource {
                name: "<built-in>".to_string(),
                text: BUILTIN_INPUT.to_string(),
                pos: 0,
            },
        })
    }

    /// Continues from byte `offset` (clamped to the text, moved to a char boundary).
    pub fn seek(&mut self, offset: u64) {
        let mut pos = usize::try_from(offset).unwrap_or(usize::MAX).min(self.text.len());
        while !self.text.is_char_boundary(pos) {
            pos += 1;
        }
        self.pos = pos;
    }

    /// The offset of the next unread byte.
    pub fn offset(&self) -> u64 {
        self.pos as u64
    }

    /// The next word, lower-cased.
    pub fn next_word(&mut self) -> Option<String> {
        let rest = &self.text[self.pos..];
        let start = rest.find(is_word_char)?;
        let tail = &rest[start..];
        let len = tail.find(|c: char| !is_word_char(c)).unwrap_or(tail.len());
        let word = tail[..len].to_lowercase();
        self.pos += start + len;
        Some(word)
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
