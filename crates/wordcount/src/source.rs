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
    fn the_built_in_text_and_its_offsets() {
        let mut all = open(None).expect("builtin");
        let words: Vec<String> = std::iter::from_fn(|| all.next_word()).collect();
        assert_eq!(words.len(), 85);
        assert_eq!(words.first().map(String::as_str), Some("to"));
        // A restored run resumes at the offset after the words it counted.
        let mut first = open(None).expect("builtin");
        first.next_word();
        let mut resumed = open(None).expect("builtin");
        resumed.seek(first.offset());
        assert_eq!(resumed.next_word().as_ref(), words.get(1));
    }
}
