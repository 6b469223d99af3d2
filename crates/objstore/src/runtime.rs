//! The one tokio runtime the blocking [`Storage`](statekit_core::storage::Storage) calls run
//! their requests on.

use std::future::Future;
use std::sync::OnceLock;

static RUNTIME: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();

/// The shared runtime (two worker threads: requests are I/O, not CPU), or `None` when it
/// could not be started (the error is logged; callers report it).
pub(crate) fn runtime() -> Option<&'static tokio::runtime::Runtime> {
    RUNTIME
        .get_or_init(|| {
            match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("statekit-objstore")
                .enable_all()
                .build()
            {
                Ok(rt) => Some(rt),
                Err(e) => {
                    tracing::error!(error = %e, "cannot start the object store runtime");
                    None
                }
            }
        })
        .as_ref()
}

/// Why a request could not run to its end on the object store runtime.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BlockOnError {
    /// The runtime did not start (its error was logged).
    #[error("the object store runtime could not be started")]
    NoRuntime,
    /// The request panicked.
    #[error("an object store request panicked")]
    Panicked,
}

/// Runs `f` to completion from synchronous code. Called from inside a tokio runtime (an
/// engine's async task), it runs on a scoped thread so the runtime is not blocked re-entrantly.
pub(crate) fn block_on<F>(f: F) -> Result<F::Output, BlockOnError>
where
    F: Future + Send,
    F::Output: Send,
{
    let rt = runtime().ok_or(BlockOnError::NoRuntime)?;
    if tokio::runtime::Handle::try_current().is_ok() {
        std::thread::scope(|s| s.spawn(|| rt.block_on(f)).join().map_err(|_| BlockOnError::Panicked))
    } else {
        Ok(rt.block_on(f))
    }
}
