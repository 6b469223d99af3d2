//! Blocks: the unit of compression and checksumming in data files (`docs/format.md`
//! §"Blocks").
#![deny(clippy::indexing_slicing)]

use crate::error::FormatError;
use crate::wire::{le_u32, Result};
use zstd::zstd_safe::{CParameter, ParamSwitch};

/// How the blocks of a data file are compressed. Recorded per block, so a reader needs no
/// option to read any file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// Stored as is.
    None,
    /// LZ4 block format (`lz4_flex`): fast, the default.
    Lz4,
    /// Zstandard at the given level (1..=22; negative levels are the fast modes).
    Zstd {
        /// Compression level.
        level: i32,
    },
}

/// Options for writing data files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteOptions {
    /// Codec for every block. A block that does not shrink is stored uncompressed.
    pub compression: Compression,
    /// Target uncompressed size of a block: a block is closed once its records reach this
    /// many bytes (a single larger record makes a larger block), and at every key group end.
    pub block_size: usize,
}

impl Default for WriteOptions {
    /// LZ4, 64 KiB blocks.
    fn default() -> Self {
        WriteOptions {
            compression: Compression::Lz4,
            block_size: 64 * 1024,
        }
    }
}

/// Block codec code: stored bytes are the raw records.
pub(crate) const CODEC_NONE: u8 = 0;
/// Block codec code: LZ4 block format.
pub(crate) const CODEC_LZ4: u8 = 1;
/// Block codec code: one Zstandard frame.
pub(crate) const CODEC_ZSTD: u8 = 2;

/// Size of a block header.
pub(crate) const BLOCK_HEADER_LEN: usize = 24;
/// Bytes of the block header covered by its CRC together with the stored bytes.
pub(crate) const BLOCK_CRC_SCOPE: usize = 20;

/// Readers reject a compressed block whose raw length exceeds
/// `stored_len * MAX_EXPANSION + EXPANSION_SLACK`, so a corrupted or hostile length cannot
/// make them allocate more than a bounded multiple of the file's size. LZ4 cannot exceed it;
/// a Zstandard block that would is written as LZ4 instead.
pub(crate) use statekit_core::limits::MAX_EXPANSION;

fn codec_name(code: u8) -> &'static str {
    match code {
        CODEC_NONE => "none",
        CODEC_LZ4 => "lz4",
        CODEC_ZSTD => "zstd",
        _ => "unknown",
    }
}

/// Blocks in a row whose literals zstd stored raw (its Huffman coding of them did not pay)
/// before [`LiteralSkip`] stops asking for it.
const RAW_LITERALS_RUN: u32 = 2;
/// Blocks compressed without Huffman-coded literals before the next one tries them again.
const SKIP_LITERALS_BLOCKS: u32 = 32;

/// When zstd's Huffman coding of literals is skipped.
///
/// zstd (levels 1 and up) builds a histogram and a Huffman table of every block's literals
/// and then stores them raw when the coding would not pay. On state whose literals are
/// incompressible (random ids, hashes, serialized numbers between repeated bytes) that is a
/// third of the CPU of level 1 for no byte saved. So, within one section (key group): after
/// [`RAW_LITERALS_RUN`] blocks in a row came out with raw literals, the next
/// [`SKIP_LITERALS_BLOCKS`] are compressed with literal compression disabled (zstd's
/// `ZSTD_c_literalCompressionMode`), then one block tries it again. Where the coding does not
/// pay this writes exactly the bytes plain level-1 compression writes; where it starts to
/// pay mid-section, at most [`SKIP_LITERALS_BLOCKS`] blocks keep raw literals before a probe
/// notices. The state restarts with every section, so a block's bytes depend only on its own
/// section's blocks, whichever thread encodes it (`crate::pipeline`).
#[derive(Clone, Copy, Debug, Default)]
struct LiteralSkip {
    /// The section the state belongs to.
    section: Option<u32>,
    /// Blocks in a row (literal compression on) whose literals came out raw.
    raw_run: u32,
    /// Blocks still to compress with literal compression off.
    skip_left: u32,
    /// Whether the zstd context has literal compression off now.
    disabled: bool,
}

impl LiteralSkip {
    /// Whether the next block of `section` skips literal compression.
    fn skip_next(&mut self, section: u32) -> bool {
        if self.section != Some(section) {
            *self = LiteralSkip {
                section: Some(section),
                disabled: self.disabled,
                ..LiteralSkip::default()
            };
        }
        self.skip_left > 0
    }

    /// Records how the block went: `huffman` is whether its literals were Huffman-coded
    /// (`None` when it was compressed with literal compression off).
    fn record(&mut self, huffman: Option<bool>) {
        match huffman {
            None => self.skip_left = self.skip_left.saturating_sub(1),
            Some(true) => self.raw_run = 0,
            Some(false) => {
                self.raw_run += 1;
                if self.raw_run >= RAW_LITERALS_RUN {
                    self.skip_left = SKIP_LITERALS_BLOCKS;
                    // One more block of raw literals (the next probe) skips again.
                    self.raw_run = RAW_LITERALS_RUN - 1;
                }
            }
        }
    }
}

/// Whether the first block of a zstd frame has Huffman-coded literals (compressed or
/// treeless), from the frame header, block header and literals section header (RFC 8878
/// §3.1.1); false for a raw or RLE block, `None` when `frame` is too short to tell.
fn huffman_literals(frame: &[u8]) -> Option<bool> {
    let descriptor = *frame.get(4)?;
    let single_segment = descriptor & 0x20 != 0;
    let dictionary_id = match descriptor & 3 {
        0 => 0,
        1 => 1,
        2 => 2,
        _ => 4,
    };
    let content_size = match descriptor >> 6 {
        0 => usize::from(single_segment),
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let block = 5 + usize::from(!single_segment) + dictionary_id + content_size;
    let block_type = (*frame.get(block)? >> 1) & 3;
    if block_type != 2 {
        return Some(false);
    }
    Some(matches!(*frame.get(block + 3)? & 3, 2 | 3))
}

/// Compresses blocks, reusing its buffers and codec contexts.
pub(crate) struct BlockEncoder {
    compression: Compression,
    zstd: Option<zstd::bulk::Compressor<'static>>,
    literals: LiteralSkip,
    /// Blocks compressed with literal compression off (tests).
    #[cfg(test)]
    skipped: usize,
    /// Compressed bytes are `scratch[..scratch_len]`. The buffer keeps its length between
    /// blocks, so LZ4 (which needs an initialized output) does not zero it for every block.
    scratch: Vec<u8>,
    scratch_len: usize,
}

/// An encoded block: its header and the stored bytes to write after it.
pub(crate) struct EncodedBlock<'a> {
    pub header: [u8; BLOCK_HEADER_LEN],
    pub payload: &'a [u8],
}

impl BlockEncoder {
    pub(crate) fn new(compression: Compression) -> Result<Self> {
        let zstd = match compression {
            Compression::Zstd { level } => Some(
                zstd::bulk::Compressor::new(level)
                    .map_err(|error| FormatError::from(crate::error::WriteProblem::ZstdLevel { level, error }))?,
            ),
            _ => None,
        };
        Ok(BlockEncoder {
            compression,
            zstd,
            literals: LiteralSkip::default(),
            #[cfg(test)]
            skipped: 0,
            scratch: Vec::new(),
            scratch_len: 0,
        })
    }

    /// Encodes `raw` (whole records) as one block of `section` holding `entries` records.
    pub(crate) fn encode<'a>(&'a mut self, raw: &'a [u8], section: u32, entries: u32) -> Result<EncodedBlock<'a>> {
        let raw_len = u32::try_from(raw.len())
            .map_err(|_| FormatError::from(crate::error::WriteProblem::BlockTooLarge { len: raw.len() }))?;
        let mut codec = CODEC_NONE;
        match self.compression {
            Compression::None => {}
            Compression::Lz4 => {
                if self.lz4(raw) {
                    codec = CODEC_LZ4;
                }
            }
            Compression::Zstd { .. } => {
                let mut ok = false;
                if let Some(z) = self.zstd.as_mut() {
                    let skip = self.literals.skip_next(section);
                    if skip != self.literals.disabled {
                        let mode = if skip { ParamSwitch::Disable } else { ParamSwitch::Auto };
                        z.set_parameter(CParameter::LiteralCompressionMode(mode))
                            .map_err(|error| FormatError::from(crate::error::WriteProblem::ZstdLiterals { error }))?;
                        self.literals.disabled = skip;
                    }
                    self.scratch.clear();
                    self.scratch.reserve(zstd::zstd_safe::compress_bound(raw.len()));
                    ok = z.compress_to_buffer(raw, &mut self.scratch).is_ok() && self.scratch.len() < raw.len();
                    self.scratch_len = self.scratch.len();
                    if skip {
                        self.literals.record(None);
                        #[cfg(test)]
                        {
                            self.skipped += 1;
                        }
                    } else {
                        // A block that did not shrink has no literals worth coding either.
                        let huffman = if ok {
                            huffman_literals(&self.scratch).unwrap_or(true)
                        } else {
                            false
                        };
                        self.literals.record(Some(huffman));
                    }
                }
                if ok && !within_expansion(self.scratch_len as u64, raw.len() as u64) {
                    // Too compressible for the readers' expansion bound: LZ4 always fits it.
                    if self.lz4(raw) {
                        codec = CODEC_LZ4;
                    }
                } else if ok {
                    codec = CODEC_ZSTD;
                }
            }
        }
        let payload: &[u8] = match self.scratch.get(..self.scratch_len) {
            Some(compressed) if codec != CODEC_NONE => compressed,
            _ => {
                codec = CODEC_NONE;
                raw
            }
        };
        let mut header = [0u8; BLOCK_HEADER_LEN];
        header[0..4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        header[4..8].copy_from_slice(&raw_len.to_le_bytes());
        header[8..12].copy_from_slice(&section.to_le_bytes());
        header[12..16].copy_from_slice(&entries.to_le_bytes());
        header[16] = codec;
        let mut h = crc32fast::Hasher::new();
        h.update(&header[..BLOCK_CRC_SCOPE]);
        h.update(payload);
        header[20..24].copy_from_slice(&h.finalize().to_le_bytes());
        Ok(EncodedBlock { header, payload })
    }

    /// Like [`BlockEncoder::encode`], but hands the stored bytes over instead of lending them:
    /// when the block is compressed, `spare` is swapped with the internal buffer and its
    /// first `stored_len` bytes (the header's first field) are the stored bytes on return
    /// (`true`); otherwise the stored bytes are `raw` itself (`false`) and `spare` is
    /// untouched. `spare` may hold anything: it becomes the next output buffer.
    pub(crate) fn encode_detached(
        &mut self,
        raw: &[u8],
        section: u32,
        entries: u32,
        spare: &mut Vec<u8>,
    ) -> Result<([u8; BLOCK_HEADER_LEN], bool)> {
        let b = self.encode(raw, section, entries)?;
        let header = b.header;
        let compressed = header[16] != CODEC_NONE;
        if compressed {
            std::mem::swap(&mut self.scratch, spare);
        }
        Ok((header, compressed))
    }

    /// LZ4-compresses into `scratch`; false when it does not shrink the block.
    fn lz4(&mut self, raw: &[u8]) -> bool {
        let max = lz4_flex::block::get_maximum_output_size(raw.len());
        if self.scratch.len() < max {
            self.scratch.resize(max, 0);
        }
        let Some(out) = self.scratch.get_mut(..max) else {
            return false;
        };
        match lz4_flex::block::compress_into(raw, out) {
            Ok(n) if n < raw.len() => {
                self.scratch_len = n;
                true
            }
            _ => false,
        }
    }
}

use statekit_core::limits::within_expansion;

/// A parsed block header.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockHeader {
    /// Absolute offset of the header.
    pub offset: u64,
    pub stored_len: u32,
    pub raw_len: u32,
    pub section: u32,
    pub entries: u32,
    pub codec: u8,
}

impl BlockHeader {
    /// Bytes the block occupies in the file.
    pub(crate) fn total_len(&self) -> u64 {
        BLOCK_HEADER_LEN as u64 + u64::from(self.stored_len)
    }
}

/// Decompresses blocks, reusing its buffer and codec context.
#[derive(Default)]
pub(crate) struct BlockDecoder {
    zstd: Option<zstd::bulk::Decompressor<'static>>,
    buf: Vec<u8>,
}

impl BlockDecoder {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// A decoder around a reused buffer (see [`BlockDecoder::into_buffer`]).
    pub(crate) fn with_buffer(buf: Vec<u8>) -> Self {
        BlockDecoder { zstd: None, buf }
    }

    /// Gives the buffer back for reuse.
    pub(crate) fn into_buffer(self) -> Vec<u8> {
        self.buf
    }

    /// Reads the block at `pos` of `bytes` (the whole file), which must end by `limit`;
    /// checks its CRC and decompresses it. Returns the header and the raw records.
    pub(crate) fn read<'a>(
        &'a mut self,
        bytes: &'a [u8],
        pos: u64,
        limit: u64,
        file: &str,
    ) -> Result<(BlockHeader, &'a [u8])> {
        let err = |field: &str, reason: String| FormatError::corrupt(file, pos, field, reason);
        let start = usize::try_from(pos).map_err(|_| err("block", "offset beyond address space".into()))?;
        let avail = limit.saturating_sub(pos);
        let header: &[u8; BLOCK_HEADER_LEN] = match bytes.get(start..).and_then(<[u8]>::first_chunk) {
            Some(header) if avail >= BLOCK_HEADER_LEN as u64 => header,
            _ => {
                return Err(err(
                    "block.header",
                    format!("needs {BLOCK_HEADER_LEN} bytes, only {avail} left in the section"),
                ))
            }
        };
        let field = |p: usize| le_u32(header, p).unwrap_or(0);
        let h = BlockHeader {
            offset: pos,
            stored_len: field(0),
            raw_len: field(4),
            section: field(8),
            entries: field(12),
            codec: header[16],
        };
        let crc = field(20);
        if h.total_len() > avail {
            return Err(err(
                "block.stored_len",
                format!(
                    "block of {} stored bytes runs past the end of its section ({} bytes left)",
                    h.stored_len,
                    avail - BLOCK_HEADER_LEN as u64
                ),
            ));
        }
        let payload_start = start + BLOCK_HEADER_LEN;
        let payload = bytes
            .get(payload_start..payload_start + h.stored_len as usize)
            .ok_or_else(|| err("block.stored_len", "block runs past the end of the file".into()))?;
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&header[..BLOCK_CRC_SCOPE]);
        hasher.update(payload);
        let actual = hasher.finalize();
        if actual != crc {
            return Err(err(
                "block.crc32",
                format!("checksum mismatch: stored {crc:#010x}, computed {actual:#010x}"),
            ));
        }
        if header[17..20] != [0, 0, 0] {
            return Err(err("block.reserved", "reserved bytes are not zero".into()));
        }
        let raw_len = h.raw_len as usize;
        let raw: &[u8] = match h.codec {
            CODEC_NONE => {
                if h.raw_len != h.stored_len {
                    return Err(err(
                        "block.raw_len",
                        format!(
                            "uncompressed block has raw length {} but {} stored bytes",
                            h.raw_len, h.stored_len
                        ),
                    ));
                }
                payload
            }
            CODEC_LZ4 | CODEC_ZSTD => {
                if !within_expansion(u64::from(h.stored_len), u64::from(h.raw_len)) {
                    return Err(err(
                        "block.raw_len",
                        format!(
                            "raw length {} is more than {MAX_EXPANSION}x the {} stored bytes",
                            h.raw_len, h.stored_len
                        ),
                    ));
                }
                if self.buf.len() < raw_len {
                    self.buf.resize(raw_len, 0);
                }
                let out = self
                    .buf
                    .get_mut(..raw_len)
                    .ok_or_else(|| err("block.raw_len", format!("no buffer of {raw_len} bytes")))?;
                let produced = if h.codec == CODEC_LZ4 {
                    // The C decoder takes `int` lengths.
                    match (i32::try_from(payload.len()), i32::try_from(raw_len)) {
                        (Ok(_), Ok(n)) => {
                            lz4::block::decompress_to_buffer(payload, Some(n), out).map_err(|e| e.to_string())
                        }
                        _ => Err(format!(
                            "{} stored or {raw_len} raw bytes is too long for one LZ4 block",
                            payload.len()
                        )),
                    }
                } else {
                    let z = match self.zstd.as_mut() {
                        Some(z) => z,
                        None => self.zstd.insert(
                            zstd::bulk::Decompressor::new().map_err(|e| err("block", format!("zstd context: {e}")))?,
                        ),
                    };
                    z.decompress_to_buffer(payload, out).map_err(|e| e.to_string())
                };
                match produced {
                    Ok(n) if n == raw_len => out,
                    Ok(n) => {
                        return Err(err(
                            "block.raw_len",
                            format!(
                                "{} block decompressed to {n} bytes, header says {raw_len}",
                                codec_name(h.codec)
                            ),
                        ))
                    }
                    Err(e) => {
                        return Err(err(
                            "block.data",
                            format!("{} decompression failed: {e}", codec_name(h.codec)),
                        ))
                    }
                }
            }
            other => return Err(err("block.codec", format!("unknown codec {other}"))),
        };
        Ok((h, raw))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(c: Compression, raw: &[u8]) -> u8 {
        let mut enc = BlockEncoder::new(c).expect("encoder");
        let b = enc.encode(raw, 7, 3).expect("encode");
        let mut file = b.header.to_vec();
        file.extend_from_slice(b.payload);
        let mut dec = BlockDecoder::new();
        let (h, got) = dec.read(&file, 0, file.len() as u64, "f").expect("read");
        assert_eq!(got, raw);
        assert_eq!((h.section, h.entries), (7, 3));
        // Every single bit flip is caught.
        for i in 0..file.len() * 8 {
            let mut bad = file.clone();
            bad[i / 8] ^= 1 << (i % 8);
            assert!(
                BlockDecoder::new().read(&bad, 0, bad.len() as u64, "f").is_err(),
                "bit {i}"
            );
        }
        h.codec
    }

    #[test]
    fn codecs_round_trip_and_catch_flips() {
        let compressible: Vec<u8> = (0..2000u32).map(|i| (i % 7) as u8).collect();
        assert_eq!(round_trip(Compression::None, &compressible), CODEC_NONE);
        assert_eq!(round_trip(Compression::Lz4, &compressible), CODEC_LZ4);
        assert_eq!(round_trip(Compression::Zstd { level: 3 }, &compressible), CODEC_ZSTD);
        let incompressible = noise(0x9e37_79b9_7f4a_7c15, 300);
        assert_eq!(round_trip(Compression::Lz4, &incompressible), CODEC_NONE);
        assert_eq!(round_trip(Compression::Zstd { level: 3 }, &incompressible), CODEC_NONE);
    }

    #[test]
    fn extreme_ratio_falls_back_to_lz4() {
        let zeros = vec![0u8; 1 << 20];
        assert_eq!(round_trip(Compression::Zstd { level: 3 }, &zeros[..1024]), CODEC_ZSTD);
        let mut enc = BlockEncoder::new(Compression::Zstd { level: 3 }).expect("encoder");
        let b = enc.encode(&zeros, 0, 1).expect("encode");
        assert_eq!(b.header[16], CODEC_LZ4);
    }

    /// Pseudo-random bytes (xorshift).
    fn noise(seed: u64, n: usize) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    /// Records whose literals do not compress: 24 random bytes, then 200 repeated ones
    /// (the benchmark's state has this shape).
    fn random_literal_block(seed: u64) -> Vec<u8> {
        let mut b = Vec::new();
        for r in 0..256u64 {
            b.extend_from_slice(&noise(seed * 1000 + r, 24));
            b.extend(std::iter::repeat_n(b'a', 200));
        }
        b
    }

    /// English-like text: few distinct letters, so Huffman-coded literals pay.
    fn text_block(seed: u64) -> Vec<u8> {
        const WORDS: [&str; 12] = [
            "state",
            "key",
            "group",
            "savepoint",
            "operator",
            "value",
            "list",
            "map",
            "flink",
            "the",
            "of",
            "and",
        ];
        noise(seed, 12_000)
            .iter()
            .flat_map(|&r| [WORDS[usize::from(r) % WORDS.len()], " "])
            .flat_map(str::bytes)
            .collect()
    }

    /// The stored bytes of each block, encoded in order as blocks of `section`.
    fn encode_all(enc: &mut BlockEncoder, blocks: &[Vec<u8>], section: u32) -> Vec<Vec<u8>> {
        blocks
            .iter()
            .map(|raw| {
                let b = enc.encode(raw, section, 1).expect("encode");
                assert_eq!(b.header[16], CODEC_ZSTD);
                b.payload.to_vec()
            })
            .collect()
    }

    #[test]
    fn literal_types_are_read_from_frames() {
        let level1 = |raw: &[u8]| zstd::bulk::compress(raw, 1).expect("compress");
        assert_eq!(huffman_literals(&level1(&text_block(1))), Some(true));
        assert_eq!(huffman_literals(&level1(&random_literal_block(1))), Some(false));
        // Incompressible data is a raw block; a frame of nothing has an empty raw block.
        assert_eq!(huffman_literals(&level1(&noise(7, 5000))), Some(false));
        assert_eq!(huffman_literals(&level1(&[])), Some(false));
        // Without a content size, with a checksum, and truncated.
        let mut c = zstd::bulk::Compressor::new(1).expect("compressor");
        c.set_parameter(CParameter::ContentSizeFlag(false)).expect("flag");
        c.set_parameter(CParameter::ChecksumFlag(true)).expect("flag");
        let frame = c.compress(&text_block(2)).expect("compress");
        assert_eq!(huffman_literals(&frame), Some(true));
        for n in 0..8 {
            assert_eq!(huffman_literals(frame.get(..n).expect("prefix")), None, "{n} bytes");
        }
    }

    #[test]
    fn skipping_literal_coding_writes_level_one_bytes_where_it_does_not_pay() {
        for level in [1, 3, -1] {
            let plain = |raw: &[u8]| zstd::bulk::compress(raw, level).expect("compress");
            let blocks: Vec<Vec<u8>> = (0..100).map(random_literal_block).collect();
            let mut enc = BlockEncoder::new(Compression::Zstd { level }).expect("encoder");
            let got = encode_all(&mut enc, &blocks, 0);
            for (i, (raw, stored)) in blocks.iter().zip(&got).enumerate() {
                assert_eq!(*stored, plain(raw), "level {level}, block {i}");
            }
            // All but the two blocks that found the coding does not pay and, after them,
            // the probe that ends every 32 skipped blocks.
            assert_eq!(enc.skipped, 98 - 98 / 33, "level {level}");
        }
        // Where the coding pays, it is never skipped.
        let text: Vec<Vec<u8>> = (0..40).map(text_block).collect();
        let mut enc = BlockEncoder::new(Compression::Zstd { level: 1 }).expect("encoder");
        let got = encode_all(&mut enc, &text, 0);
        assert_eq!(enc.skipped, 0);
        for (raw, stored) in text.iter().zip(&got) {
            assert_eq!(*stored, zstd::bulk::compress(raw, 1).expect("compress"));
        }
    }

    #[test]
    fn literal_coding_returns_within_a_probe_and_restarts_with_each_section() {
        let plain = |raw: &[u8]| zstd::bulk::compress(raw, 1).expect("compress");
        // Literals that stop paying, then start paying again mid-section.
        let mut blocks: Vec<Vec<u8>> = (0..10).map(random_literal_block).collect();
        blocks.extend((0..60).map(text_block));
        let mut enc = BlockEncoder::new(Compression::Zstd { level: 1 }).expect("encoder");
        let got = encode_all(&mut enc, &blocks, 5);
        let differing: Vec<usize> = (0..blocks.len()).filter(|&i| got[i] != plain(&blocks[i])).collect();
        assert!(
            !differing.is_empty(),
            "the text right after the skip starts keeps raw literals"
        );
        assert!(
            differing
                .iter()
                .all(|&i| (10..10 + SKIP_LITERALS_BLOCKS as usize).contains(&i)),
            "{differing:?}"
        );
        let (mut dec, mut file) = (BlockDecoder::new(), Vec::new());
        for raw in &blocks {
            let b = enc.encode(raw, 6, 1).expect("encode");
            file.clear();
            file.extend_from_slice(&b.header);
            file.extend_from_slice(b.payload);
            let (_, back) = dec.read(&file, 0, file.len() as u64, "f").expect("read");
            assert_eq!(back, &raw[..]);
        }
        // A section's bytes do not depend on the sections encoded before it on the same
        // encoder (encoder threads take key groups in any order): here the section before
        // ends while skipping.
        let skipping: Vec<Vec<u8>> = (20..30).map(random_literal_block).collect();
        encode_all(&mut enc, &skipping, 6);
        let tail: Vec<Vec<u8>> = (50..60).map(text_block).collect();
        let after = encode_all(&mut enc, &tail, 7);
        let alone = encode_all(
            &mut BlockEncoder::new(Compression::Zstd { level: 1 }).expect("encoder"),
            &tail,
            7,
        );
        assert_eq!(after, alone);
    }

    /// A small block: `records` records whose literals pay Huffman coding (text) or not.
    fn small_block(text: bool, seed: u64, records: usize) -> Vec<u8> {
        let mut b = Vec::new();
        for r in 0..records as u64 {
            if text {
                // Lower-case letters: 4.7 bits each, so coding them saves about two fifths.
                b.extend(noise(seed * 1000 + r, 96).iter().map(|&x| b'a' + x % 26));
            } else {
                b.extend_from_slice(&noise(seed * 1000 + r, 24));
            }
            b.extend(std::iter::repeat_n(b'a', 120));
        }
        b
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 48, ..Default::default() })]

        /// Whatever the blocks and however sections follow each other on one encoder, each
        /// section's bytes are those a fresh encoder writes for it alone (encoder threads take
        /// key groups in any order), every block round-trips, and a section whose literals all
        /// pay Huffman coding is exactly plain zstd.
        #[test]
        fn sections_encode_alike_on_any_encoder(
            sections in proptest::collection::vec(
                proptest::collection::vec((proptest::bool::ANY, 0u64..1000, 8usize..48), 0..45),
                1..5,
            ),
            level in proptest::prop_oneof![proptest::strategy::Just(1), proptest::strategy::Just(3), proptest::strategy::Just(-1)],
        ) {
            let compression = Compression::Zstd { level };
            let mut shared = BlockEncoder::new(compression).expect("encoder");
            let mut dec = BlockDecoder::new();
            for (section, kinds) in sections.iter().enumerate() {
                let blocks: Vec<Vec<u8>> = kinds.iter().map(|&(text, seed, n)| small_block(text, seed, n)).collect();
                for (raw, kind) in blocks.iter().zip(kinds) {
                    // The generator makes both kinds of block.
                    let plain = zstd::bulk::compress(raw, 1).expect("compress");
                    proptest::prop_assert_eq!(huffman_literals(&plain), Some(kind.0));
                }
                let mut fresh = BlockEncoder::new(compression).expect("encoder");
                for raw in &blocks {
                    let a = shared.encode(raw, section as u32, 1).expect("encode");
                    let mut file = a.header.to_vec();
                    file.extend_from_slice(a.payload);
                    let b = fresh.encode(raw, section as u32, 1).expect("encode");
                    proptest::prop_assert_eq!(&file[BLOCK_HEADER_LEN..], b.payload);
                    proptest::prop_assert_eq!(&file[..BLOCK_HEADER_LEN], &b.header[..]);
                    let (_, back) = dec.read(&file, 0, file.len() as u64, "f").expect("read");
                    proptest::prop_assert_eq!(back, &raw[..]);
                }
                if level == 1 && kinds.iter().all(|k| k.0) {
                    proptest::prop_assert_eq!(fresh.skipped, 0);
                }
            }
        }
    }
}
