//! Checksum repair, so mutations get past the CRC32s and reach the structure behind them.
//!
//! Every file format here checksums each part (header, blocks or change sets, index,
//! trailer). A random mutation almost always fails the first CRC check, so on its own a
//! fuzzer spends nearly all its time on the checksum-mismatch path. The file targets
//! therefore run each input twice: as is (checksum detection, framing) and, when it differs,
//! with every CRC recomputed here (everything behind the checksums). The repair follows the
//! framing fields as they are, however corrupt: it never panics and fixes what it can find.
//! Formats: `docs/format.md` (data files, `_metadata`) and `docs/changelog-format.md`.

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at.checked_add(8)?)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Some(u64::from_le_bytes(a))
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    if let Some(s) = at.checked_add(4).and_then(|end| b.get_mut(at..end)) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

/// `_metadata`: magic ‖ version ‖ flags ‖ body_len ‖ body ‖ crc32(everything before).
/// Sets `body_len` to what the file holds and recomputes the CRC.
pub fn metadata(b: &mut [u8]) {
    if b.len() < 20 {
        return;
    }
    let body = (b.len() - 20) as u32;
    put_u32(b, 12, body);
    let crc_pos = b.len() - 4;
    let crc = crc32fast::hash(&b[..crc_pos]);
    put_u32(b, crc_pos, crc);
}

/// Keyed and operator data files: `header (16-byte prefix, body, crc) ‖ blocks ‖ index (…,
/// crc) ‖ trailer (index offset, index length, crc, "SKIX")`. Each block is a 24-byte header
/// (stored_len, raw_len, section, entries, codec, 3 reserved, crc over the first 20 bytes
/// and the stored bytes) and its stored bytes; the blocks tile the area between header and
/// index.
pub fn container(b: &mut [u8]) {
    const TRAILER: usize = 24;
    const BLOCK_HEADER: usize = 24;
    if b.len() < 16 + 4 + TRAILER {
        return;
    }
    let t = b.len() - TRAILER;
    // Header.
    let body_len = u32_at(b, 12).unwrap_or(0) as usize;
    let header_crc = 16usize.saturating_add(body_len);
    let header_end = header_crc.saturating_add(4);
    if header_end <= t {
        let crc = crc32fast::hash(&b[..header_crc]);
        put_u32(b, header_crc, crc);
    }
    // Index bounds, from the trailer.
    let index_offset = u64_at(b, t).unwrap_or(0);
    let index_len = u64_at(b, t + 8).unwrap_or(0);
    let index_ok = index_offset.checked_add(index_len) == Some(t as u64) && index_len >= 4;
    // Blocks, from the end of the header up to the index (or the trailer).
    let data_end = if index_ok { index_offset as usize } else { t };
    let mut pos = header_end;
    while pos.saturating_add(BLOCK_HEADER) <= data_end {
        let stored = u32_at(b, pos).unwrap_or(0) as usize;
        let Some(end) = (pos + BLOCK_HEADER).checked_add(stored).filter(|&e| e <= data_end) else {
            break;
        };
        let mut h = crc32fast::Hasher::new();
        h.update(&b[pos..pos + 20]);
        h.update(&b[pos + BLOCK_HEADER..end]);
        let crc = h.finalize();
        put_u32(b, pos + 20, crc);
        pos = end;
    }
    // Index, then trailer.
    if index_ok {
        let io = index_offset as usize;
        let crc = crc32fast::hash(&b[io..t - 4]);
        put_u32(b, t - 4, crc);
    }
    let crc = crc32fast::hash(&b[t..t + 16]);
    put_u32(b, t + 16, crc);
}

/// Changelog log files: `header (40 bytes, crc at 36) ‖ change sets ‖ index ‖ trailer (index
/// offset u64, index length u32, index crc, count, "SKCE")`. Each change set is a 48-byte
/// header (stored_len at 40, crc at 44 over the first 44 bytes and the stored bytes) and its
/// stored bytes. A padded file (header flag bit 0) is repaired up to its last non-zero byte.
pub fn changelog(b: &mut [u8]) {
    if u32_at(b, 8).is_some_and(|f| f & 1 != 0) {
        let end = b.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1);
        if let Some(logical) = b.get_mut(..end) {
            return changelog_to_trailer(logical);
        }
    }
    changelog_to_trailer(b)
}

fn changelog_to_trailer(b: &mut [u8]) {
    const HEADER: usize = 40;
    const TRAILER: usize = 24;
    const CS_HEADER: usize = 48;
    if b.len() < HEADER + TRAILER {
        return;
    }
    let crc = crc32fast::hash(&b[..36]);
    put_u32(b, 36, crc);
    let t = b.len() - TRAILER;
    let index_offset = u64_at(b, t).unwrap_or(0);
    let index_len = u64::from(u32_at(b, t + 8).unwrap_or(0));
    let index_ok = index_offset >= HEADER as u64 && index_offset.checked_add(index_len) == Some(t as u64);
    let data_end = if index_ok { index_offset as usize } else { t };
    let mut pos = HEADER;
    while pos.saturating_add(CS_HEADER) <= data_end {
        let stored = u32_at(b, pos + 40).unwrap_or(0) as usize;
        let Some(end) = (pos + CS_HEADER).checked_add(stored).filter(|&e| e <= data_end) else {
            break;
        };
        let mut h = crc32fast::Hasher::new();
        h.update(&b[pos..pos + 44]);
        h.update(&b[pos + CS_HEADER..end]);
        let crc = h.finalize();
        put_u32(b, pos + 44, crc);
        pos = end;
    }
    if index_ok {
        let crc = crc32fast::hash(&b[index_offset as usize..t]);
        put_u32(b, t + 12, crc);
    }
}

/// Runs `f` on `data`, then on a CRC-repaired copy if the repair changed anything.
pub fn both(data: &[u8], repair: fn(&mut [u8]), mut f: impl FnMut(&[u8])) {
    f(data);
    let mut fixed = data.to_vec();
    repair(&mut fixed);
    if fixed != data {
        f(&fixed);
    }
}
