//! The `.index` file: a LevelDB-format SSTable as TensorFlow's `core/lib/io/table*` writes it.
//!
//! Layout (tensorflow/core/lib/io/format.{h,cc}): data blocks, an empty metaindex block, an
//! index block mapping a separator key to each data block's `BlockHandle` (offset and size as
//! varints), and a 48-byte footer (metaindex handle, index handle, zero padding to 40 bytes, the
//! magic `0xdb4775248b80fb57`). Every block is followed by a 5-byte trailer: a compression byte
//! (0: none) and the masked CRC-32C of the block and that byte. A block is a run of
//! prefix-compressed entries (`shared`, `non_shared`, `value_len` as varints, the key's new
//! suffix, the value) followed by the restart offsets (u32 each) and their count (u32).
//!
//! The whole index is small (1.4 KB for albert_tiny, a few hundred KB for anything real), so it
//! is read in one piece and every block's checksum is verified, as TensorFlow does.

use crate::proto::{read_varint, write_varint};

/// The magic number ending every LevelDB table footer.
pub const MAGIC: u64 = 0xdb47_7524_8b80_fb57;
/// Bytes in a footer: two padded block handles and the magic number.
pub const FOOTER_LEN: usize = 48;
const TRAILER_LEN: usize = 5;
const MASK_DELTA: u32 = 0xa282_ead8;

/// LevelDB's checksum masking: a CRC of data that contains CRCs is otherwise weak.
pub fn mask(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// The CRC that [`mask`] masked.
pub fn unmask(masked: u32) -> u32 {
    masked.wrapping_sub(MASK_DELTA).rotate_left(15)
}

/// A structural problem in the table; the caller names the file.
pub type TableError = String;

/// Keys and values, in order.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

#[derive(Debug, Clone, Copy)]
struct Handle {
    offset: u64,
    size: u64,
}

fn read_handle(buf: &[u8], pos: &mut usize) -> Result<Handle, TableError> {
    Ok(Handle {
        offset: read_varint(buf, pos)?,
        size: read_varint(buf, pos)?,
    })
}

/// Returns the contents of the block at `h`, its checksum verified.
fn block<'a>(file: &'a [u8], h: Handle, what: &str) -> Result<&'a [u8], TableError> {
    let start = usize::try_from(h.offset).map_err(|_| "block offset out of range")?;
    let size = usize::try_from(h.size).map_err(|_| "block size out of range")?;
    let end = start
        .checked_add(size)
        .and_then(|e| e.checked_add(TRAILER_LEN))
        .filter(|&e| e <= file.len())
        .ok_or_else(|| {
            format!(
                "the {what} block (offset {start}, {size} bytes) runs past the end of the \
                 file ({} bytes): the file is truncated",
                file.len()
            )
        })?;
    let contents = &file[start..start + size];
    let trailer = &file[start + size..end];
    let stored = u32::from_le_bytes([trailer[1], trailer[2], trailer[3], trailer[4]]);
    let actual = crc32c::crc32c_append(crc32c::crc32c(contents), &trailer[..1]);
    if unmask(stored) != actual {
        return Err(format!(
            "the {what} block at offset {start} fails its checksum (stored {:#010x}, computed \
             {actual:#010x}): the file is corrupt",
            unmask(stored)
        ));
    }
    match trailer[0] {
        0 => Ok(contents),
        1 => Err(format!(
            "the {what} block at offset {start} is snappy-compressed, which TensorFlow's bundle \
             writer never does; this reader does not support it"
        )),
        t => Err(format!(
            "the {what} block at offset {start} has unknown compression type {t}"
        )),
    }
}

/// The entries of one block, keys fully expanded.
fn entries(b: &[u8], what: &str) -> Result<Entries, TableError> {
    if b.len() < 4 {
        return Err(format!("the {what} block is too short ({} bytes)", b.len()));
    }
    let n = b.len() - 4;
    let restarts = u32::from_le_bytes([b[n], b[n + 1], b[n + 2], b[n + 3]]) as usize;
    let data_end = restarts
        .checked_mul(4)
        .and_then(|r| n.checked_sub(r))
        .ok_or_else(|| format!("the {what} block claims {restarts} restart points"))?;
    let mut out = Vec::new();
    let mut key: Vec<u8> = Vec::new();
    let mut pos = 0;
    while pos < data_end {
        let shared = read_varint(b, &mut pos)? as usize;
        let non_shared = read_varint(b, &mut pos)? as usize;
        let value_len = read_varint(b, &mut pos)? as usize;
        let key_end = pos.checked_add(non_shared);
        let end = key_end.and_then(|k| k.checked_add(value_len));
        let (Some(key_end), Some(end)) = (key_end, end) else {
            return Err(format!("an entry of the {what} block overflows"));
        };
        if shared > key.len() || end > data_end {
            return Err(format!(
                "an entry of the {what} block at byte {pos} is malformed"
            ));
        }
        key.truncate(shared);
        key.extend_from_slice(&b[pos..key_end]);
        out.push((key.clone(), b[key_end..end].to_vec()));
        pos = end;
    }
    Ok(out)
}

/// Every key and value of the table, in order, with keys checked to be strictly increasing.
pub fn read_table(file: &[u8]) -> Result<Entries, TableError> {
    if file.len() < FOOTER_LEN {
        return Err(format!(
            "{} bytes is too short for a checkpoint index (the footer alone is {FOOTER_LEN})",
            file.len()
        ));
    }
    let footer = &file[file.len() - FOOTER_LEN..];
    let mut m = [0u8; 8];
    m.copy_from_slice(&footer[40..]);
    if u64::from_le_bytes(m) != MAGIC {
        return Err(
            "the footer's magic number is wrong: not a TensorFlow checkpoint index, or truncated"
                .into(),
        );
    }
    let mut pos = 0;
    let metaindex = read_handle(footer, &mut pos)?;
    let index = read_handle(footer, &mut pos)?;
    // TensorFlow never reads the (empty) metaindex block; checking it costs nothing and
    // catches corruption there too.
    block(file, metaindex, "metaindex")?;
    let mut out: Entries = Vec::new();
    for (_, handle) in entries(block(file, index, "index")?, "index")? {
        let mut p = 0;
        let h = read_handle(&handle, &mut p)?;
        for (k, v) in entries(block(file, h, "data")?, "data")? {
            if let Some((last, _)) = out.last()
                && *last >= k
            {
                return Err(format!(
                    "keys out of order ({:?} after {:?}): the index is corrupt",
                    String::from_utf8_lossy(&k),
                    String::from_utf8_lossy(last)
                ));
            }
            out.push((k, v));
        }
    }
    Ok(out)
}

/// Builds a block: prefix-compressed entries with a restart point every `interval` entries.
struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    count: usize,
    last: Vec<u8>,
}

impl BlockBuilder {
    fn new() -> Self {
        BlockBuilder {
            buf: Vec::new(),
            restarts: vec![0],
            count: 0,
            last: Vec::new(),
        }
    }

    fn add(&mut self, key: &[u8], value: &[u8]) {
        // TensorFlow's (and LevelDB's) default block_restart_interval.
        const INTERVAL: usize = 16;
        let shared = if self.count.is_multiple_of(INTERVAL) && self.count > 0 {
            self.restarts.push(self.buf.len() as u32);
            0
        } else {
            key.iter()
                .zip(&self.last)
                .take_while(|(a, b)| a == b)
                .count()
        };
        write_varint(&mut self.buf, shared as u64);
        write_varint(&mut self.buf, (key.len() - shared) as u64);
        write_varint(&mut self.buf, value.len() as u64);
        self.buf.extend_from_slice(&key[shared..]);
        self.buf.extend_from_slice(value);
        self.last = key.to_vec();
        self.count += 1;
    }

    fn finish(mut self) -> Vec<u8> {
        for r in &self.restarts {
            self.buf.extend_from_slice(&r.to_le_bytes());
        }
        self.buf
            .extend_from_slice(&(self.restarts.len() as u32).to_le_bytes());
        self.buf
    }
}

/// Appends `contents` and its trailer to `out`; returns its handle.
fn write_block(out: &mut Vec<u8>, contents: &[u8]) -> Handle {
    let h = Handle {
        offset: out.len() as u64,
        size: contents.len() as u64,
    };
    out.extend_from_slice(contents);
    out.push(0);
    let crc = crc32c::crc32c_append(crc32c::crc32c(contents), &[0]);
    out.extend_from_slice(&mask(crc).to_le_bytes());
    h
}

/// Writes a table of `entries` (keys strictly increasing) with ~4 KB data blocks, as
/// TensorFlow's `TableBuilder` does. Index keys are each block's last key, which the format
/// allows (any key ≥ the block's last and < the next block's first).
pub fn write_table(entries: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    const BLOCK_SIZE: usize = 4096;
    let mut out = Vec::new();
    let mut index = BlockBuilder::new();
    let mut data = BlockBuilder::new();
    let flush = |data: BlockBuilder, out: &mut Vec<u8>, index: &mut BlockBuilder| {
        let last = data.last.clone();
        let h = write_block(out, &data.finish());
        let mut v = Vec::new();
        write_varint(&mut v, h.offset);
        write_varint(&mut v, h.size);
        index.add(&last, &v);
    };
    for (k, v) in entries {
        data.add(k, v);
        if data.buf.len() >= BLOCK_SIZE {
            flush(
                std::mem::replace(&mut data, BlockBuilder::new()),
                &mut out,
                &mut index,
            );
        }
    }
    if data.count > 0 {
        flush(data, &mut out, &mut index);
    }
    let meta = write_block(&mut out, &BlockBuilder::new().finish());
    let idx = write_block(&mut out, &index.finish());
    let mut footer = Vec::with_capacity(FOOTER_LEN);
    for h in [meta, idx] {
        write_varint(&mut footer, h.offset);
        write_varint(&mut footer, h.size);
    }
    footer.resize(40, 0);
    footer.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&footer);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..n)
            .map(|i| {
                (
                    format!("bert/layer_{i:05}/kernel").into_bytes(),
                    vec![i as u8; i % 7],
                )
            })
            .collect()
    }

    #[test]
    fn round_trips_small_and_multi_block_tables() {
        for n in [0, 1, 17, 2000] {
            let t = sample(n);
            assert_eq!(read_table(&write_table(&t)).unwrap(), t, "{n} entries");
        }
    }

    #[test]
    fn mask_is_leveldbs() {
        // leveldb/util/crc32c_test.cc: Mask is not the identity, and Unmask inverts it.
        let crc = crc32c::crc32c(b"foo");
        assert_ne!(mask(crc), crc);
        assert_ne!(mask(mask(crc)), crc);
        assert_eq!(unmask(mask(crc)), crc);
        assert_eq!(unmask(unmask(mask(mask(crc)))), crc);
    }

    #[test]
    fn every_flipped_byte_or_truncation_is_an_error() {
        let good = write_table(&sample(40));
        let footer = good.len() - FOOTER_LEN;
        let mut handles_end = 0;
        for _ in 0..4 {
            read_varint(&good[footer..], &mut handles_end).unwrap();
        }
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x5a;
            // A flip in the footer's padding is harmless (TensorFlow ignores it too).
            let in_padding = i >= footer + handles_end && i < good.len() - 8;
            if !in_padding {
                assert!(read_table(&bad).is_err(), "byte {i} flipped went unnoticed");
            }
        }
        for len in [0, 10, good.len() / 2, good.len() - 1] {
            assert!(read_table(&good[..len]).is_err(), "truncated to {len}");
        }
    }
}
