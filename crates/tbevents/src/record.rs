//! TFRecord framing (tensorflow/core/lib/io/record_writer.cc): each record is its length as a
//! little-endian u64, the masked CRC-32C of those 8 bytes, the data, and the masked CRC-32C of
//! the data.

/// The mask leveldb and TensorFlow add to stored CRCs (crc32c.h: a CRC of data that contains
/// CRCs is otherwise weak).
const MASK_DELTA: u32 = 0xa282_ead8;

/// A CRC as TFRecord stores it: rotated and offset by [`MASK_DELTA`].
pub fn mask(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// The masked CRC-32C of `bytes`, as a record's two checksums are.
pub fn masked_crc(bytes: &[u8]) -> u32 {
    mask(crc32c::crc32c(bytes))
}

/// One record, framed.
pub fn frame(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
    out
}

/// What went wrong with one record of a buffer.
#[derive(Debug, PartialEq)]
pub enum Bad {
    /// The buffer ends inside the record (a writer still running, or killed mid-record).
    Truncated,
    /// A checksum or the length is wrong (which one, for the message).
    Corrupt(&'static str),
}

/// The record starting at `offset` and the offset after it.
pub fn next(buf: &[u8], offset: usize) -> Result<(&[u8], usize), Bad> {
    let rest = &buf[offset..];
    let header = rest.get(..12).ok_or(Bad::Truncated)?;
    let (len_bytes, crc_bytes) = header.split_at(8);
    if masked_crc(len_bytes) != u32::from_le_bytes(crc_bytes.try_into().expect("4 bytes")) {
        return Err(Bad::Corrupt("the length's checksum does not match"));
    }
    let len = u64::from_le_bytes(len_bytes.try_into().expect("8 bytes"));
    // Checked against what is there before anything is sliced: a corrupt length cannot make
    // the reader allocate or read past the file.
    let len = usize::try_from(len).map_err(|_| Bad::Corrupt("the length does not fit"))?;
    let end = len
        .checked_add(16)
        .ok_or(Bad::Corrupt("the length overflows"))?;
    if end > rest.len() {
        return Err(Bad::Truncated);
    }
    let data = &rest[12..12 + len];
    let crc = u32::from_le_bytes(rest[12 + len..end].try_into().expect("4 bytes"));
    if masked_crc(data) != crc {
        return Err(Bad::Corrupt("the data's checksum does not match"));
    }
    Ok((data, offset + end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_framed_record_reads_back() {
        let buf = [frame(b"hello"), frame(b"")].concat();
        let (a, at) = next(&buf, 0).unwrap();
        assert_eq!(a, b"hello");
        let (b, end) = next(&buf, at).unwrap();
        assert_eq!((b, end), (&b""[..], buf.len()));
    }

    #[test]
    fn the_crc_is_crc32c_masked_as_tensorflow_does() {
        // crc32c("123456789") = 0xe3069283 (the CRC-32C check value, RFC 3720 B.4).
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(
            mask(0xe306_9283),
            0xe306_9283u32.rotate_right(15) + MASK_DELTA
        );
        // The length record of an empty payload, as TensorFlow frames it.
        let f = frame(b"");
        assert_eq!(&f[..8], &[0; 8]);
        assert_eq!(f.len(), 16);
    }

    #[test]
    fn damage_is_told_apart_from_a_short_tail() {
        let buf = frame(b"hello");
        assert_eq!(next(&buf[..buf.len() - 1], 0), Err(Bad::Truncated));
        assert_eq!(next(&buf[..5], 0), Err(Bad::Truncated));
        let mut bad = buf.clone();
        bad[13] ^= 1;
        assert!(matches!(next(&bad, 0), Err(Bad::Corrupt(_))));
        let mut huge = buf.clone();
        huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        let crc = masked_crc(&huge[..8]).to_le_bytes();
        huge[8..12].copy_from_slice(&crc);
        assert!(matches!(next(&huge, 0), Err(Bad::Corrupt(_))));
    }
}
