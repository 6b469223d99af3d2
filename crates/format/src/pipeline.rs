//! Parallel key-group encoding: encoder threads each take the next key group, visit it,
//! encode its records into blocks and compress and checksum them; the calling thread writes
//! the finished blocks in key-group order. A key group's blocks depend only on its own
//! entries (no state carries over between key groups), and blocks are written in key-group
//! order, so the bytes are exactly those of the serial path.

use crate::block::{BlockEncoder, WriteOptions, BLOCK_HEADER_LEN};
use crate::container::ContainerWriter;
use crate::error::FormatError;
use crate::wire::Result;
use std::io::IoSlice;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::Mutex;

/// Where the blocks of a key group go.
pub(crate) trait BlockSink {
    /// Takes the records in `raw` (`entries` whole records) as the next block of key group
    /// `kg`; on return `raw` is an empty buffer to fill next.
    fn block(&mut self, kg: u32, raw: &mut Vec<u8>, entries: u32) -> Result<()>;

    /// [`BlockSink::block`] of records the caller keeps (a decoder's buffer): a sink that
    /// compresses reads them in place and copies them only when they are stored
    /// uncompressed. Default: a copy, then `block`.
    fn block_ref(&mut self, kg: u32, raw: &[u8], entries: u32, scratch: &mut Vec<u8>) -> Result<()> {
        scratch.clear();
        scratch.extend_from_slice(raw);
        self.block(kg, scratch, entries)
    }

    /// A block already encoded with the sink's codec (`header` and `payload` as stored,
    /// their CRC checked and `payload` decompressed to `raw` by the caller): a sink that
    /// compresses stores it as it is instead of compressing `raw` again. Default: `block_ref`
    /// of `raw`.
    fn block_stored(
        &mut self,
        kg: u32,
        header: &[u8; BLOCK_HEADER_LEN],
        payload: &[u8],
        raw: &[u8],
        entries: u32,
        scratch: &mut Vec<u8>,
    ) -> Result<()> {
        let _ = (header, payload);
        self.block_ref(kg, raw, entries, scratch)
    }
}

/// The serial sink: encode and write on the calling thread. The caller closes the section
/// ([`ContainerWriter::end_section`]) after each key group.
impl BlockSink for ContainerWriter {
    fn block(&mut self, kg: u32, raw: &mut Vec<u8>, entries: u32) -> Result<()> {
        if self.open_section() != Some(kg) {
            self.begin_section(kg);
        }
        self.write_block(raw, entries)?;
        raw.clear();
        Ok(())
    }
}

/// A block encoded by an encoder thread: its stored bytes are `stored[..stored_len]`.
struct Block {
    header: [u8; BLOCK_HEADER_LEN],
    stored: Vec<u8>,
    stored_len: usize,
    raw_len: usize,
    entries: u32,
}

/// What an encoder thread tells the writer about the key group it claimed, in order.
enum Msg {
    Block(Block),
    /// The key group is complete.
    End,
    Failed(FormatError),
}

fn stopped() -> FormatError {
    crate::error::WriteProblem::PipelineStopped.into()
}

/// Bytes of blocks an encoder thread may have in flight (queued, or waiting in the writer's
/// batch) before it waits for the writer to hand buffers back: 32 blocks of the default
/// size, at least 4 blocks.
const BYTES_IN_FLIGHT_PER_THREAD: usize = 2 << 20;

/// The writer gathers blocks into one vectored write of up to this many bytes and blocks.
const BATCH_BYTES: usize = 1 << 20;
const BATCH_BLOCKS: usize = 64;

/// An encoder thread's sink: compresses and checksums each block on this thread and sends it
/// to the writer, drawing buffers from a bounded pool the writer refills.
struct ThreadSink<'a> {
    enc: BlockEncoder,
    tx: Sender<Msg>,
    free: Receiver<Vec<u8>>,
    allocated: usize,
    max_buffers: usize,
    capacity: usize,
    stop: &'a AtomicBool,
}

impl ThreadSink<'_> {
    /// A buffer (its content is garbage): a returned one, a new one while under the bound,
    /// else wait for one.
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

impl BlockSink for ThreadSink<'_> {
    fn block_ref(&mut self, kg: u32, raw: &[u8], entries: u32, _scratch: &mut Vec<u8>) -> Result<()> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(stopped());
        }
        let mut spare = self.buffer()?;
        let (header, compressed) = self.enc.encode_detached(raw, kg, entries, &mut spare)?;
        let (stored_len, raw_len) = if compressed {
            (
                u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize,
                raw.len(),
            )
        } else {
            spare.clear();
            spare.extend_from_slice(raw);
            (raw.len(), raw.len())
        };
        self.tx
            .send(Msg::Block(Block {
                header,
                stored: spare,
                stored_len,
                raw_len,
                entries,
            }))
            .map_err(|_| stopped())
    }

    fn block_stored(
        &mut self,
        _kg: u32,
        header: &[u8; BLOCK_HEADER_LEN],
        payload: &[u8],
        raw: &[u8],
        entries: u32,
        _scratch: &mut Vec<u8>,
    ) -> Result<()> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(stopped());
        }
        let mut stored = self.buffer()?;
        stored.clear();
        stored.extend_from_slice(payload);
        self.tx
            .send(Msg::Block(Block {
                header: *header,
                stored,
                stored_len: payload.len(),
                raw_len: raw.len(),
                entries,
            }))
            .map_err(|_| stopped())
    }

    fn block(&mut self, kg: u32, raw: &mut Vec<u8>, entries: u32) -> Result<()> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(stopped());
        }
        let mut spare = self.buffer()?;
        let (header, compressed) = self.enc.encode_detached(raw, kg, entries, &mut spare)?;
        let raw_len = raw.len();
        let (stored, stored_len) = if compressed {
            raw.clear();
            let stored_len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
            (spare, stored_len)
        } else {
            spare.clear();
            (std::mem::replace(raw, spare), raw_len)
        };
        self.tx
            .send(Msg::Block(Block {
                header,
                stored,
                stored_len,
                raw_len,
                entries,
            }))
            .map_err(|_| stopped())
    }
}

/// Blocks received by the writer, not yet written.
#[derive(Default)]
struct Batch {
    blocks: Vec<(usize, Block)>,
    bytes: usize,
}

impl Batch {
    /// Writes the gathered blocks with one vectored write and hands their buffers back.
    fn flush(&mut self, cw: &mut ContainerWriter, free: &[Sender<Vec<u8>>]) -> Result<()> {
        if self.blocks.is_empty() {
            return Ok(());
        }
        let mut slices = Vec::with_capacity(2 * self.blocks.len());
        for (_, b) in &self.blocks {
            slices.push(IoSlice::new(&b.header));
            slices.push(IoSlice::new(&b.stored[..b.stored_len]));
        }
        let r = cw.write_all_vectored(&mut slices);
        for (owner, b) in self.blocks.drain(..) {
            let _ = free[owner].send(b.stored);
        }
        self.bytes = 0;
        r
    }
}

/// Encodes the key groups `kgs` on `threads` encoder threads (no more than there are key
/// groups), compressed as `opts` says, and writes their blocks to `cw` on the calling thread,
/// in the order of `kgs`. Each thread starts from `init()` and calls
/// `encode` for every key group it takes; `encode` hands the key group's blocks to the sink
/// and must leave nothing of it behind (the next key group may be on another thread).
/// Returns every thread's state, for totals.
///
/// A failure stops the other threads and is returned; of several, the one of the earliest
/// key group (as the serial path would report it). A panic on an encoder thread is resumed
/// on the calling thread.
pub(crate) fn encode_parallel<S: Send>(
    cw: &mut ContainerWriter,
    kgs: &[u32],
    threads: usize,
    opts: &WriteOptions,
    init: impl Fn() -> S + Sync,
    encode: impl Fn(&mut S, u32, &mut dyn BlockSink) -> Result<()> + Sync,
) -> Result<Vec<S>> {
    let WriteOptions {
        compression,
        block_size,
    } = *opts;
    let threads = threads.min(kgs.len()).max(1);
    let encoders = (0..threads)
        .map(|_| BlockEncoder::new(compression))
        .collect::<Result<Vec<_>>>()?;
    let stop = AtomicBool::new(false);
    // Key groups are claimed in order under this lock, and each claim is announced to the
    // writer on the same lock, so the writer learns in key-group order which thread has
    // which key group.
    let (claim_tx, claim_rx) = channel::<usize>();
    let claims = Mutex::new((0usize, claim_tx));
    let capacity = block_size.min(16 << 20) + 1024;
    let max_buffers = (BYTES_IN_FLIGHT_PER_THREAD / capacity).clamp(4, 32);
    std::thread::scope(|s| {
        let mut data_rx = Vec::with_capacity(threads);
        let mut free_tx = Vec::with_capacity(threads);
        let mut handles = Vec::with_capacity(threads);
        for (t, enc) in encoders.into_iter().enumerate() {
            let (tx, rx) = channel::<Msg>();
            let (ftx, frx) = channel::<Vec<u8>>();
            data_rx.push(rx);
            free_tx.push(ftx);
            let (stop, claims, init, encode) = (&stop, &claims, &init, &encode);
            handles.push(s.spawn(move || {
                let mut state = init();
                let mut sink = ThreadSink {
                    enc,
                    tx,
                    free: frx,
                    allocated: 0,
                    max_buffers,
                    capacity,
                    stop,
                };
                loop {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let kg = {
                        let mut c = claims.lock().unwrap_or_else(|p| p.into_inner());
                        let i = c.0;
                        if i >= kgs.len() || c.1.send(t).is_err() {
                            break;
                        }
                        c.0 += 1;
                        kgs[i]
                    };
                    let msg = match encode(&mut state, kg, &mut sink) {
                        Ok(()) => Msg::End,
                        Err(e) => Msg::Failed(e),
                    };
                    let failed = matches!(msg, Msg::Failed(_));
                    if sink.tx.send(msg).is_err() || failed {
                        break;
                    }
                }
                state
            }));
        }

        let mut batch = Batch::default();
        let mut result: Result<()> = Ok(());
        'kgs: for &kg in kgs {
            let t = match claim_rx.try_recv() {
                Ok(t) => t,
                Err(_) => {
                    if let Err(e) = batch.flush(cw, &free_tx) {
                        result = Err(e);
                        break;
                    }
                    match claim_rx.recv() {
                        Ok(t) => t,
                        Err(_) => {
                            result = Err(stopped());
                            break;
                        }
                    }
                }
            };
            let mut opened = false;
            loop {
                let msg = match data_rx[t].try_recv() {
                    Ok(m) => Some(m),
                    Err(TryRecvError::Empty) => None,
                    Err(TryRecvError::Disconnected) => {
                        result = Err(stopped());
                        break 'kgs;
                    }
                };
                let msg = match msg {
                    Some(m) => m,
                    None => {
                        // Never wait while holding buffers: their owner may need them.
                        if let Err(e) = batch.flush(cw, &free_tx) {
                            result = Err(e);
                            break 'kgs;
                        }
                        match data_rx[t].recv() {
                            Ok(m) => m,
                            Err(_) => {
                                result = Err(stopped());
                                break 'kgs;
                            }
                        }
                    }
                };
                match msg {
                    Msg::Block(b) => {
                        if !opened {
                            cw.begin_section(kg);
                            opened = true;
                        }
                        if let Err(e) = cw.add_block(b.stored_len, b.raw_len, b.entries) {
                            result = Err(e);
                            break 'kgs;
                        }
                        batch.bytes += BLOCK_HEADER_LEN + b.stored_len;
                        batch.blocks.push((t, b));
                        if batch.bytes >= BATCH_BYTES || batch.blocks.len() >= BATCH_BLOCKS {
                            if let Err(e) = batch.flush(cw, &free_tx) {
                                result = Err(e);
                                break 'kgs;
                            }
                        }
                    }
                    Msg::End => {
                        if opened {
                            cw.end_section();
                        }
                        break;
                    }
                    Msg::Failed(e) => {
                        result = Err(e);
                        break 'kgs;
                    }
                }
            }
        }
        if result.is_ok() {
            result = batch.flush(cw, &free_tx);
        }
        // Stop the encoders (those waiting for a buffer or sending see their channel close).
        stop.store(true, Ordering::Relaxed);
        drop(batch);
        drop(free_tx);
        drop(data_rx);
        let mut states = Vec::with_capacity(threads);
        let mut panic = None;
        for h in handles {
            match h.join() {
                Ok(st) => states.push(st),
                Err(p) => panic = panic.or(Some(p)),
            }
        }
        if let Some(p) = panic {
            std::panic::resume_unwind(p);
        }
        result.map(|()| states)
    })
}
