//! The word count's inputs, as the runtime's [`WordSource`]: one text file or the built-in
//! text (replayable: its position is a byte offset, kept as operator state so a restored job
//! continues exactly where its snapshot was taken), or a stream (standard input, a TCP socket
//! as Flink's `socketTextStream`) whose lines are processed as they arrive and which a
//! restore cannot replay.

use crate::WordcountError;
pub use statekit_runtime::WordSource;
use std::path::Path;

/// The text used when no `--input` is given.
pub const BUILTIN_INPUT: &str = include_str!("../data/words.txt");

/// Reads `path` (`-`: standard input, as a stream), or the built-in text.
pub fn open(path: Option<&Path>) -> Result<WordSource, WordcountError> {
    Ok(match path {
        Some(p) if p.as_os_str() == "-" => WordSource::lines("<stdin>", std::io::BufReader::new(std::io::stdin())),
        Some(p) => WordSource::file(p)?,
        None => WordSource::text("<built-in>", BUILTIN_INPUT),
    })
}

/// Lines from a TCP socket: connects to `addr` (`HOST:PORT`) as Flink's `socketTextStream`
/// does (the server, e.g. `nc -lk 9999`, is the other side).
pub fn socket(addr: &str) -> Result<WordSource, WordcountError> {
    let stream = std::net::TcpStream::connect(addr).map_err(|source| WordcountError::SocketConnect {
        addr: addr.to_string(),
        source,
    })?;
    Ok(WordSource::lines(
        &format!("socket:{addr}"),
        std::io::BufReader::new(stream),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_and_offsets() {
        let mut s = open(None).expect("builtin");
        assert_eq!(s.next_word().as_deref(), Some("to"));
        let off = s.offset();
        let second = s.next_word();
        let mut t = open(None).expect("builtin");
        t.seek(off);
        assert_eq!(t.next_word(), second);
        let mut n = 2;
        while s.next_word().is_some() {
            n += 1;
        }
        assert_eq!(n, 85);
    }
}
