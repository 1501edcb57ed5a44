//! The two protobuf messages of a tensor bundle's index, decoded and encoded by hand.
//!
//! Why not a protobuf crate: the bundle uses six fields of `BundleEntryProto` and three of
//! `BundleHeaderProto` (tensorflow/core/protobuf/tensor_bundle.proto); generating code for them
//! would need `protoc` (or a large build-time dependency) and TensorFlow's `.proto` files in the
//! tree for ~150 lines of varint handling. Unknown fields are skipped as protobuf requires, so a
//! newer writer's extra fields do not break reading.

/// `BundleHeaderProto`: the value of the index's empty key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Header {
    /// How many `.data-NNNNN-of-NNNNN` shards hold the tensors.
    pub num_shards: i32,
    /// `true` for `BIG` (1); TensorFlow writes the host's order, so a big-endian machine's
    /// checkpoint holds big-endian tensors.
    pub big_endian: bool,
    /// `VersionDef.producer`.
    pub producer: i32,
    /// `VersionDef.min_consumer`.
    pub min_consumer: i32,
    /// `VersionDef.bad_consumers`.
    pub bad_consumers: Vec<i32>,
}

/// `BundleEntryProto`: where one tensor's bytes are and what they are.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Entry {
    /// TensorFlow's `DataType` enum value.
    pub dtype: i32,
    /// Dimension sizes (`-1` for an unknown one).
    pub shape: Vec<i64>,
    /// `TensorShapeProto.unknown_rank`.
    pub unknown_rank: bool,
    /// The data shard holding the bytes.
    pub shard_id: i32,
    /// Where in the shard they start.
    pub offset: i64,
    /// How many bytes there are.
    pub size: i64,
    /// The masked CRC-32C of the tensor's bytes.
    pub crc32c: u32,
    /// The number of `TensorSliceProto`s: a partitioned variable when non-zero.
    pub slices: usize,
}

/// A malformed message; the caller adds the file and key.
pub type DecodeError = String;

/// A protobuf wire-format reader over one message.
struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
}

enum Value<'a> {
    Varint(u64),
    Fixed32(u32),
    /// Read to skip it; no field we use is fixed64.
    Fixed64(#[allow(dead_code)] u64),
    Bytes(&'a [u8]),
}

pub(crate) fn read_varint(buf: &[u8], pos: &mut usize) -> Result<u64, DecodeError> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos).ok_or("a varint runs past the end")?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("a varint is longer than 10 bytes".into())
}

pub(crate) fn write_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

impl<'a> Fields<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Fields { buf, pos: 0 }
    }

    fn next_field(&mut self) -> Result<Option<(u64, Value<'a>)>, DecodeError> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = read_varint(self.buf, &mut self.pos)?;
        let (number, wire) = (key >> 3, key & 7);
        let take = |pos: &mut usize, n: usize| -> Result<&'a [u8], DecodeError> {
            let end = pos
                .checked_add(n)
                .filter(|&e| e <= self.buf.len())
                .ok_or_else(|| format!("field {number} runs past the end"))?;
            let s = &self.buf[*pos..end];
            *pos = end;
            Ok(s)
        };
        let value = match wire {
            0 => Value::Varint(read_varint(self.buf, &mut self.pos)?),
            1 => {
                let b = take(&mut self.pos, 8)?;
                Value::Fixed64(u64::from_le_bytes(b.try_into().map_err(|_| "fixed64")?))
            }
            2 => {
                let n = read_varint(self.buf, &mut self.pos)?;
                let n = usize::try_from(n).map_err(|_| "length out of range")?;
                Value::Bytes(take(&mut self.pos, n)?)
            }
            5 => {
                let b = take(&mut self.pos, 4)?;
                Value::Fixed32(u32::from_le_bytes(b.try_into().map_err(|_| "fixed32")?))
            }
            other => return Err(format!("unsupported wire type {other} (field {number})")),
        };
        Ok(Some((number, value)))
    }
}

fn varint(v: Value<'_>, field: &str) -> Result<u64, DecodeError> {
    match v {
        Value::Varint(x) => Ok(x),
        _ => Err(format!("field {field} is not a varint")),
    }
}

fn bytes<'a>(v: Value<'a>, field: &str) -> Result<&'a [u8], DecodeError> {
    match v {
        Value::Bytes(x) => Ok(x),
        _ => Err(format!("field {field} is not length-delimited")),
    }
}

impl Header {
    /// The header from its protobuf bytes (unknown fields skipped).
    pub fn decode(buf: &[u8]) -> Result<Header, DecodeError> {
        let mut h = Header::default();
        let mut f = Fields::new(buf);
        while let Some((n, v)) = f.next_field()? {
            match n {
                1 => h.num_shards = varint(v, "num_shards")? as i32,
                2 => h.big_endian = varint(v, "endianness")? == 1,
                3 => {
                    let mut vf = Fields::new(bytes(v, "version")?);
                    while let Some((n, v)) = vf.next_field()? {
                        match (n, v) {
                            (1, v) => h.producer = varint(v, "producer")? as i32,
                            (2, v) => h.min_consumer = varint(v, "min_consumer")? as i32,
                            (3, Value::Bytes(packed)) => {
                                let mut p = 0;
                                while p < packed.len() {
                                    h.bad_consumers.push(read_varint(packed, &mut p)? as i32);
                                }
                            }
                            (3, v) => h.bad_consumers.push(varint(v, "bad_consumers")? as i32),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(h)
    }

    /// The header's protobuf bytes (fields at their default left out, as protobuf writes them).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if self.num_shards != 0 {
            out.push(1 << 3);
            write_varint(&mut out, self.num_shards as u64);
        }
        if self.big_endian {
            out.push(2 << 3);
            write_varint(&mut out, 1);
        }
        let mut version = Vec::new();
        if self.producer != 0 {
            version.push(1 << 3);
            write_varint(&mut version, self.producer as u64);
        }
        if self.min_consumer != 0 {
            version.push(2 << 3);
            write_varint(&mut version, self.min_consumer as u64);
        }
        for &b in &self.bad_consumers {
            version.push(3 << 3);
            write_varint(&mut version, b as u64);
        }
        out.push((3 << 3) | 2);
        write_varint(&mut out, version.len() as u64);
        out.extend_from_slice(&version);
        out
    }
}

impl Entry {
    /// The entry from its protobuf bytes (unknown fields skipped).
    pub fn decode(buf: &[u8]) -> Result<Entry, DecodeError> {
        let mut e = Entry::default();
        let mut f = Fields::new(buf);
        while let Some((n, v)) = f.next_field()? {
            match n {
                1 => e.dtype = varint(v, "dtype")? as i32,
                2 => {
                    let mut sf = Fields::new(bytes(v, "shape")?);
                    while let Some((n, v)) = sf.next_field()? {
                        match n {
                            2 => {
                                let mut size = 0i64;
                                let mut df = Fields::new(bytes(v, "shape.dim")?);
                                while let Some((n, v)) = df.next_field()? {
                                    if n == 1 {
                                        size = varint(v, "dim.size")? as i64;
                                    }
                                }
                                e.shape.push(size);
                            }
                            3 => e.unknown_rank = varint(v, "unknown_rank")? != 0,
                            _ => {}
                        }
                    }
                }
                3 => e.shard_id = varint(v, "shard_id")? as i32,
                4 => e.offset = varint(v, "offset")? as i64,
                5 => e.size = varint(v, "size")? as i64,
                6 => match v {
                    Value::Fixed32(c) => e.crc32c = c,
                    _ => return Err("field crc32c is not fixed32".into()),
                },
                7 => e.slices += 1,
                _ => {}
            }
        }
        Ok(e)
    }

    /// The encoding TensorFlow's writer produces (default-valued fields omitted).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if self.dtype != 0 {
            out.push(1 << 3);
            write_varint(&mut out, self.dtype as u64);
        }
        let mut shape = Vec::new();
        for &d in &self.shape {
            let mut dim = Vec::new();
            if d != 0 {
                dim.push(1 << 3);
                write_varint(&mut dim, d as u64);
            }
            shape.push((2 << 3) | 2);
            write_varint(&mut shape, dim.len() as u64);
            shape.extend_from_slice(&dim);
        }
        out.push((2 << 3) | 2);
        write_varint(&mut out, shape.len() as u64);
        out.extend_from_slice(&shape);
        for (field, v) in [
            (3u8, self.shard_id as i64),
            (4, self.offset),
            (5, self.size),
        ] {
            if v != 0 {
                out.push(field << 3);
                write_varint(&mut out, v as u64);
            }
        }
        out.push((6 << 3) | 5);
        out.extend_from_slice(&self.crc32c.to_le_bytes());
        // Slices are only counted when reading; written as empty messages (tests use them).
        for _ in 0..self.slices {
            out.extend_from_slice(&[(7 << 3) | 2, 0]);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_the_real_albert_tiny_header_and_an_entry() {
        // Bytes copied from albert_tiny_zh's albert_model.ckpt.index.
        let h = Header::decode(&[0x08, 0x01, 0x1a, 0x02, 0x08, 0x01]).unwrap();
        assert_eq!((h.num_shards, h.big_endian, h.producer), (1, false, 1));
        let beta = [
            0x08, 0x01, 0x12, 0x05, 0x12, 0x03, 0x08, 0xb8, 0x02, 0x28, 0xe0, 0x09, 0x35, 0x04,
            0x48, 0xaf, 0xe5,
        ];
        let e = Entry::decode(&beta).unwrap();
        assert_eq!(e.dtype, 1);
        assert_eq!(e.shape, vec![312]);
        assert_eq!((e.offset, e.size), (0, 1248));
        assert_eq!(e.crc32c, 0xe5af4804);
        // And our encoder writes exactly what TensorFlow wrote.
        assert_eq!(e.encode(), beta);
    }

    #[test]
    fn round_trips_and_refuses_garbage() {
        let e = Entry {
            dtype: 19,
            shape: vec![3, 0, 5],
            shard_id: 1,
            offset: 1 << 33,
            size: 0,
            crc32c: 7,
            ..Entry::default()
        };
        assert_eq!(Entry::decode(&e.encode()).unwrap(), e);
        let h = Header {
            num_shards: 2,
            big_endian: true,
            producer: 1,
            min_consumer: 3,
            bad_consumers: vec![1, 2],
        };
        assert_eq!(Header::decode(&h.encode()).unwrap(), h);
        assert!(Entry::decode(&[0x12, 0x09, 0x00]).is_err());
        assert!(Entry::decode(&[0x08, 0xff, 0xff]).is_err());
        assert!(Entry::decode(&[0x0f]).is_err());
    }
}
