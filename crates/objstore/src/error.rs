//! `object_store` errors as [`StorageError`]s: not found, or remote with the object's URL,
//! the HTTP status when there was one, and whether retrying later may help.

use statekit_core::storage::StorageError;
use std::error::Error as _;

/// The HTTP status in an `object_store` error's text (`… non-2xx status code: 503 …`).
fn status_of(text: &str) -> Option<u16> {
    let (_, after) = text.split_once("status code: ")?;
    after.get(..3)?.parse().ok()
}

/// The whole error chain as one line.
fn chain(e: &object_store::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

/// `e`, raised by a request for `url`, as a [`StorageError`].
pub(crate) fn storage_error(url: &str, e: object_store::Error) -> StorageError {
    if matches!(e, object_store::Error::NotFound { .. }) {
        return StorageError::NotFound(url.to_string());
    }
    let message = chain(&e);
    let status = status_of(&message);
    let lower = message.to_ascii_lowercase();
    let transient = match status {
        Some(s) => s >= 500 || s == 429 || s == 408,
        None => {
            lower.contains("error sending request")
                || lower.contains("connect")
                || lower.contains("timed out")
                || lower.contains("timeout")
                || lower.contains("connection")
                || lower.contains("retry")
        }
    };
    let message = match status {
        Some(s) => format!("the object store answered HTTP {s}: {message}"),
        None => format!("request failed: {message}"),
    };
    StorageError::Remote {
        path: url.to_string(),
        status,
        transient,
        message,
    }
}

/// The store sent `got` bytes for `range` of `url`: a short (or long) read, retryable (the
/// object may have changed under the reader).
pub(crate) fn check_len(url: &str, got: usize, range: &std::ops::Range<u64>) -> Result<(), StorageError> {
    if got as u64 == range.end.saturating_sub(range.start) {
        return Ok(());
    }
    Err(StorageError::Remote {
        path: url.to_string(),
        status: None,
        transient: true,
        message: format!(
            "the store sent {got} bytes for the range {}..{} (did the object change?)",
            range.start, range.end
        ),
    })
}

/// A failure of the client itself (its runtime, a spawned task), for `url`.
pub(crate) fn client_error(url: &str, message: impl std::fmt::Display) -> StorageError {
    StorageError::Remote {
        path: url.to_string(),
        status: None,
        transient: false,
        message: message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_found_in_the_text() {
        assert_eq!(
            status_of("Server returned non-2xx status code: 503 Service Unavailable: slow down"),
            Some(503)
        );
        assert_eq!(status_of("error sending request"), None);
    }
}
