//! Parallel block encoding: the calling thread fills raw blocks, worker threads compress and
//! checksum them, and a writer thread writes them in order. The bytes written are exactly
//! those of the serial path (blocks are written in submission order), so the output stays
//! deterministic.

use crate::block::{BlockEncoder, Compression, BLOCK_HEADER_LEN};
use crate::container::ContainerWriter;
use crate::error::FormatError;
use crate::wire::Result;
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex};

/// Where full raw blocks go.
pub(crate) trait BlockSink {
    /// Opens section `id`.
    fn begin_section(&mut self, id: u32) -> Result<()>;
    /// Takes the records in `raw` as one block of `entries` records; on return `raw` is an
    /// empty buffer to fill next.
    fn submit(&mut self, raw: &mut Vec<u8>, entries: u32) -> Result<()>;
    /// Closes the open section.
    fn end_section(&mut self) -> Result<()>;
}

/// The serial sink: encode and write on the calling thread.
impl BlockSink for ContainerWriter {
    fn begin_section(&mut self, id: u32) -> Result<()> {
        ContainerWriter::begin_section(self, id);
        Ok(())
    }
    fn submit(&mut self, raw: &mut Vec<u8>, entries: u32) -> Result<()> {
        self.write_block(raw, entries)?;
        raw.clear();
        Ok(())
    }
    fn end_section(&mut self) -> Result<()> {
        ContainerWriter::end_section(self);
        Ok(())
    }
}

enum Job {
    Begin(u64, u32),
    End(u64),
    Block {
        seq: u64,
        section: u32,
        entries: u32,
        raw: Vec<u8>,
    },
}

enum Done {
    Begin(u32),
    End,
    Block {
        header: [u8; BLOCK_HEADER_LEN],
        compressed: bool,
        stored: Vec<u8>,
        raw: Vec<u8>,
        entries: u32,
    },
    Failed(FormatError),
}

struct PipelineSink {
    jobs: Option<SyncSender<Job>>,
    free: Receiver<Vec<u8>>,
    allocated: usize,
    max_buffers: usize,
    capacity: usize,
    seq: u64,
    section: u32,
    failed: Arc<AtomicBool>,
}

fn stopped() -> FormatError {
    FormatError::invalid_input("block pipeline stopped")
}

impl PipelineSink {
    fn send(&mut self, job: Job) -> Result<()> {
        if self.failed.load(Ordering::Relaxed) {
            return Err(stopped());
        }
        self.seq += 1;
        match &self.jobs {
            Some(tx) => tx.send(job).map_err(|_| stopped()),
            None => Err(stopped()),
        }
    }

    /// An empty buffer: a returned one, a new one while under the bound, else wait for one.
    fn buffer(&mut self) -> Result<Vec<u8>> {
        match self.free.try_recv() {
            Ok(b) => return Ok(b),
            Err(TryRecvError::Disconnected) => return Err(stopped()),
            Err(TryRecvError::Empty) => {}
        }
        if self.allocated < self.max_buffers {
            self.allocated += 1;
            return Ok(Vec::with_capacity(self.capacity));
        }
        self.free.recv().map_err(|_| stopped())
    }
}

impl BlockSink for PipelineSink {
    fn begin_section(&mut self, id: u32) -> Result<()> {
        self.section = id;
        let seq = self.seq;
        self.send(Job::Begin(seq, id))
    }
    fn submit(&mut self, raw: &mut Vec<u8>, entries: u32) -> Result<()> {
        let fresh = self.buffer()?;
        let full = std::mem::replace(raw, fresh);
        let (seq, section) = (self.seq, self.section);
        self.send(Job::Block {
            seq,
            section,
            entries,
            raw: full,
        })
    }
    fn end_section(&mut self) -> Result<()> {
        let seq = self.seq;
        self.send(Job::End(seq))
    }
}

fn worker(
    mut enc: BlockEncoder,
    jobs: &Mutex<Receiver<Job>>,
    done: &Sender<(u64, Done)>,
    spares: &Mutex<Vec<Vec<u8>>>,
) {
    loop {
        let job = match jobs.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok(job) = job else { return };
        let (seq, out) = match job {
            Job::Begin(seq, id) => (seq, Done::Begin(id)),
            Job::End(seq) => (seq, Done::End),
            Job::Block {
                seq,
                section,
                entries,
                raw,
            } => {
                let mut spare = spares.lock().ok().and_then(|mut s| s.pop()).unwrap_or_default();
                let r = catch_unwind(AssertUnwindSafe(|| {
                    enc.encode_detached(&raw, section, entries, &mut spare)
                }));
                match r {
                    Ok(Ok((header, compressed))) => (
                        seq,
                        Done::Block {
                            header,
                            compressed,
                            stored: spare,
                            raw,
                            entries,
                        },
                    ),
                    Ok(Err(e)) => (seq, Done::Failed(e)),
                    Err(_) => (seq, Done::Failed(FormatError::invalid_input("block encoder panicked"))),
                }
            }
        };
        if done.send((seq, out)).is_err() {
            return;
        }
    }
}

/// Runs `body` with a sink that encodes blocks on `workers` threads and writes them to `cw`
/// on a writer thread, in submission order (`workers == 0`: everything on this thread).
/// Returns `body`'s result and the writer, ready for [`ContainerWriter::finish`].
pub(crate) fn run<R>(
    mut cw: ContainerWriter,
    compression: Compression,
    block_size: usize,
    workers: usize,
    body: impl FnOnce(&mut dyn BlockSink) -> Result<R>,
) -> Result<(R, ContainerWriter)> {
    if workers == 0 {
        let r = body(&mut cw)?;
        return Ok((r, cw));
    }
    let encoders = (0..workers.max(1))
        .map(|_| BlockEncoder::new(compression))
        .collect::<Result<Vec<_>>>()?;
    let workers = encoders.len();
    let max_buffers = 2 * workers + 2;
    let failed = Arc::new(AtomicBool::new(false));
    let (job_tx, job_rx) = sync_channel::<Job>(max_buffers);
    let job_rx = Mutex::new(job_rx);
    let (done_tx, done_rx) = channel::<(u64, Done)>();
    let (free_tx, free_rx) = channel::<Vec<u8>>();
    let spares: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for enc in encoders {
            let done_tx = done_tx.clone();
            let (job_rx, spares) = (&job_rx, &spares);
            s.spawn(move || worker(enc, job_rx, &done_tx, spares));
        }
        drop(done_tx);
        let writer_failed = Arc::clone(&failed);
        let spares_ref = &spares;
        let writer = s.spawn(move || {
            let mut cw = cw;
            let mut pending: BTreeMap<u64, Done> = BTreeMap::new();
            let mut next = 0u64;
            let mut error: Option<FormatError> = None;
            for (seq, d) in done_rx {
                pending.insert(seq, d);
                while let Some(d) = pending.remove(&next) {
                    next += 1;
                    let r = match d {
                        Done::Begin(id) => {
                            cw.begin_section(id);
                            Ok(())
                        }
                        Done::End => {
                            cw.end_section();
                            Ok(())
                        }
                        Done::Block {
                            header,
                            compressed,
                            stored,
                            mut raw,
                            entries,
                        } => {
                            let r = if error.is_some() {
                                Ok(())
                            } else {
                                let payload = if compressed { &stored } else { &raw };
                                cw.write_encoded(&header, payload, raw.len(), entries)
                            };
                            raw.clear();
                            let _ = free_tx.send(raw);
                            if let Ok(mut sp) = spares_ref.lock() {
                                sp.push(stored);
                            }
                            r
                        }
                        Done::Failed(e) => Err(e),
                    };
                    if let Err(e) = r {
                        if error.is_none() {
                            error = Some(e);
                        }
                        writer_failed.store(true, Ordering::Relaxed);
                    }
                }
            }
            if error.is_none() && !pending.is_empty() {
                error = Some(FormatError::invalid_input("block pipeline lost a block"));
            }
            (cw, error)
        });
        let mut sink = PipelineSink {
            jobs: Some(job_tx),
            free: free_rx,
            allocated: 0,
            max_buffers,
            capacity: block_size.min(16 << 20) + 1024,
            seq: 0,
            section: 0,
            failed,
        };
        let result = body(&mut sink);
        // Closing the job channel lets the workers, then the writer, finish.
        sink.jobs = None;
        let joined = writer.join();
        let (cw, writer_error) = match joined {
            Ok(x) => x,
            Err(_) => return Err(FormatError::invalid_input("block writer thread panicked")),
        };
        match (result, writer_error) {
            (_, Some(e)) => Err(e),
            (Err(e), None) => Err(e),
            (Ok(r), None) => Ok((r, cw)),
        }
    })
}
