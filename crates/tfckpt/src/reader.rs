//! Opening a checkpoint (directory, prefix or `.index`) and reading its tensors.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::proto::{Entry, Header};
use crate::{DType, Error, table};

/// The largest `.index` read. It holds one entry (~50 bytes) per tensor: albert_zh's base
/// model's is 3.5 KB, BERT-large's with its Adam slots some 60 KB, so 64 MiB is a million
/// tensors; past it the file is not an index, and a device or a still-growing file is not read
/// on (the whole index is parsed in memory).
const MAX_INDEX_BYTES: u64 = 64 << 20;

/// The largest `checkpoint` state file read: a few lines naming the checkpoints kept.
const MAX_STATE_BYTES: u64 = 1 << 20;

/// The bundle format version this reader implements (`kTensorBundleVersion`).
const BUNDLE_VERSION: i32 = 1;

/// An open checkpoint: its index, parsed and checked, and the paths of its data shards.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// The checkpoint prefix (`…/model.ckpt`), the index and shards being `prefix.*`.
    pub prefix: PathBuf,
    /// `<prefix>.index`.
    pub index_path: PathBuf,
    /// The index's header: shard count, endianness, version.
    pub header: Header,
    /// Tensor entries in key order (the header and the slice entries of partitioned variables
    /// left out).
    entries: Vec<(String, Entry)>,
    shards: Vec<PathBuf>,
}

/// One tensor's bytes (little-endian) with its dtype and shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    /// The element type.
    pub dtype: DType,
    /// Dimension sizes, outermost first.
    pub shape: Vec<usize>,
    /// The raw elements, little-endian, row-major.
    pub bytes: Vec<u8>,
}

impl Tensor {
    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The values as f32 (exact for float16, bfloat16 and bool; rounded for float64 and
    /// large integers).
    pub fn to_f32(&self) -> Vec<f32> {
        let b = &self.bytes;
        match self.dtype {
            DType::F32 => b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            DType::F64 => b
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32)
                .collect(),
            DType::F16 => b
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            DType::BF16 => b
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
                .collect(),
            DType::I32 => b
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32)
                .collect(),
            DType::I64 => b
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32)
                .collect(),
            DType::Bool => b.iter().map(|&x| f32::from(x != 0)).collect(),
        }
    }
}

/// Whether `path` looks like a TensorFlow checkpoint (a directory with a `checkpoint` file or
/// an `.index`, a prefix whose `.index` exists, or an `.index` / `.data-…` file), as opposed
/// to a Hugging Face model directory.
pub fn is_checkpoint(path: &Path) -> bool {
    if path.is_dir() {
        if path.join("config.json").is_file() {
            return false;
        }
        return path.join("checkpoint").is_file() || index_files(path).is_ok_and(|v| !v.is_empty());
    }
    let s = path.to_string_lossy();
    (path.is_file() && (s.ends_with(".index") || data_prefix(&s).is_some()))
        || with_suffix(path, ".index").is_file()
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// `…/model.ckpt` of `…/model.ckpt.data-00000-of-00001`.
fn data_prefix(s: &str) -> Option<&str> {
    let (prefix, rest) = s.rsplit_once(".data-")?;
    let (a, b) = rest.split_once("-of-")?;
    (a.len() == 5 && b.len() == 5 && a.bytes().chain(b.bytes()).all(|c| c.is_ascii_digit()))
        .then_some(prefix)
}

fn index_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "index"))
        .collect();
    v.sort();
    Ok(v)
}

/// The prefix a user's path means (see [`Checkpoint::open`]).
fn resolve_prefix(path: &Path) -> Result<PathBuf, Error> {
    if path.is_dir() {
        let state = path.join("checkpoint");
        if state.is_file() {
            let text = pipeline_bounded::read_to_string(
                &state,
                MAX_STATE_BYTES,
                "a checkpoint state file",
            )
            .map_err(|e| Error::new(&state, format!("cannot read: {}", e.reason())))?;
            let name = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("model_checkpoint_path:"))
                .map(|v| v.trim().trim_matches('"').to_string())
                .ok_or_else(|| {
                    Error::new(
                        &state,
                        "no `model_checkpoint_path: \"…\"` line: give the checkpoint's prefix \
                         (…/model.ckpt-N) instead of the directory",
                    )
                })?;
            let p = Path::new(&name);
            return Ok(if p.is_absolute() {
                p.to_path_buf()
            } else {
                path.join(p)
            });
        }
        let found = index_files(path).map_err(|e| Error::new(path, format!("cannot list: {e}")))?;
        return match found.as_slice() {
            [one] => Ok(one.with_extension("")),
            [] => Err(Error::new(
                path,
                "neither a `checkpoint` file nor a .index file here: not a TensorFlow checkpoint \
                 directory",
            )),
            _ => Err(Error::new(
                path,
                format!(
                    "{} .index files and no `checkpoint` file naming one: give the prefix \
                     (…/model.ckpt-N) of the one you mean",
                    found.len()
                ),
            )),
        };
    }
    let s = path.to_string_lossy();
    if let Some(p) = s.strip_suffix(".index") {
        return Ok(PathBuf::from(p));
    }
    if let Some(p) = data_prefix(&s) {
        return Ok(PathBuf::from(p));
    }
    Ok(path.to_path_buf())
}

impl Checkpoint {
    /// Opens a checkpoint given as a directory (its `checkpoint` file names the prefix), a
    /// prefix (`…/model.ckpt-125000`) or the `.index` path, and checks that every data shard is
    /// there and long enough for the tensors it holds.
    pub fn open(path: &Path) -> Result<Checkpoint, Error> {
        let c = Checkpoint::open_index(path)?;
        for (i, shard) in c.shards.iter().enumerate() {
            // Opened as it will be read (regular files only, without blocking on a FIFO), so
            // that a FIFO or `/dev/zero` (whose length reads as 0) is named for what it is.
            let len = pipeline_bounded::open(shard)
                .map_err(|e| e.reason())
                .and_then(|f| f.metadata().map_err(|e| e.to_string()))
                .map_err(|e| {
                    Error::new(
                        shard,
                        format!(
                            "data shard {} of {} cannot be opened ({e}): copy every \
                             .data-NNNNN-of-NNNNN file of the checkpoint",
                            i + 1,
                            c.shards.len()
                        ),
                    )
                })?
                .len();
            for (name, e) in c.entries.iter().filter(|(_, e)| e.shard_id as usize == i) {
                let end = (e.offset as u64).saturating_add(e.size as u64);
                if end > len {
                    return Err(Error::tensor(
                        shard,
                        name,
                        format!(
                            "its bytes {}..{end} lie beyond the end of the file ({len} bytes): \
                             the data file is truncated (copy it again)",
                            e.offset
                        ),
                    ));
                }
            }
        }
        Ok(c)
    }

    /// Opens and checks the index alone (names, dtypes and shapes are readable without the
    /// data files, as for albert_zh's published `.index` files).
    pub fn open_index(path: &Path) -> Result<Checkpoint, Error> {
        let prefix = resolve_prefix(path)?;
        let index_path = with_suffix(&prefix, ".index");
        let bytes = read_index(&index_path)?;
        let (header, entries) = decode_index(&index_path, &bytes)?;
        check_header(&index_path, &header)?;
        let n = header.num_shards as usize;
        let shards = (0..n)
            .map(|i| with_suffix(&prefix, &format!(".data-{i:05}-of-{n:05}")))
            .collect();
        Ok(Checkpoint {
            prefix,
            index_path,
            header,
            entries,
            shards,
        })
    }

    /// Tensor names in key order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(n, _)| n.as_str())
    }

    /// The number of tensors.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the checkpoint holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The data shard files the header names (`<prefix>.data-NNNNN-of-NNNNN`).
    pub fn shards(&self) -> &[PathBuf] {
        &self.shards
    }

    fn entry(&self, name: &str) -> Result<&Entry, Error> {
        self.entries
            .binary_search_by(|(n, _)| n.as_str().cmp(name))
            .map(|i| &self.entries[i].1)
            .map_err(|_| {
                Error::tensor(
                    &self.index_path,
                    name,
                    format!("not in the checkpoint ({} tensors)", self.entries.len()),
                )
            })
    }

    /// The raw index entry of a tensor.
    pub fn raw_entry(&self, name: &str) -> Option<&Entry> {
        self.entry(name).ok()
    }

    /// A tensor's dtype and shape as the index records them, checked as [`Self::read`] checks
    /// them (no data read).
    pub fn spec(&self, name: &str) -> Result<(DType, Vec<usize>), Error> {
        let e = self.entry(name)?;
        let bad = |m: String| Error::tensor(&self.index_path, name, m);
        if e.slices > 0 {
            return Err(bad(format!(
                "a partitioned variable (saved in {} slices), which is not supported: re-save \
                 the checkpoint without a partitioner",
                e.slices
            )));
        }
        let dtype = DType::from_tf(e.dtype).map_err(|e| bad(e.to_string()))?;
        if e.unknown_rank || e.shape.iter().any(|&d| d < 0) {
            return Err(bad(format!("its shape {:?} is not fully known", e.shape)));
        }
        let shape: Vec<usize> = e.shape.iter().map(|&d| d as usize).collect();
        let bytes = shape
            .iter()
            .try_fold(dtype.width(), |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| bad(format!("its shape {shape:?} overflows")))?;
        if e.size < 0 || e.size as usize != bytes {
            return Err(bad(format!(
                "the index says {} bytes but a {} tensor of shape {shape:?} has {bytes}: the \
                 index is corrupt",
                e.size,
                dtype.name()
            )));
        }
        if e.shard_id < 0 || e.shard_id >= self.header.num_shards {
            return Err(bad(format!(
                "it lies in shard {} of a {}-shard checkpoint",
                e.shard_id, self.header.num_shards
            )));
        }
        Ok((dtype, shape))
    }

    /// Reads a tensor's bytes into `out` (which must be exactly its size) and verifies their
    /// checksum; returns its dtype and shape.
    fn read_into(&self, name: &str, out: &mut [u8]) -> Result<(), Error> {
        let e = self.entry(name)?;
        let shard = &self.shards[e.shard_id as usize];
        // Not a bound on size (a tensor's offset and size were checked against the index and
        // the shard's length), but regular files only: a FIFO put in a shard's place since
        // `open` looked would block this open forever.
        let mut f = pipeline_bounded::open(shard).map_err(|err| {
            Error::tensor(
                shard,
                name,
                format!("cannot open its data shard: {}", err.reason()),
            )
        })?;
        f.seek(SeekFrom::Start(e.offset as u64))
            .and_then(|_| f.read_exact(out))
            .map_err(|err| {
                Error::tensor(
                    shard,
                    name,
                    format!(
                        "cannot read {} bytes at offset {} ({err}): the data file is truncated",
                        e.size, e.offset
                    ),
                )
            })?;
        let actual = crc32c::crc32c(out);
        if table::unmask(e.crc32c) != actual {
            return Err(Error::tensor(
                shard,
                name,
                format!(
                    "checksum mismatch (index {:#010x}, data {actual:#010x}): the data file is \
                     corrupt; copy it again",
                    table::unmask(e.crc32c)
                ),
            ));
        }
        Ok(())
    }

    /// Reads one tensor, every check done.
    pub fn read(&self, name: &str) -> Result<Tensor, Error> {
        let (dtype, shape) = self.spec(name)?;
        let n: usize = shape.iter().product::<usize>() * dtype.width();
        let mut bytes = vec![0u8; n];
        self.read_into(name, &mut bytes)?;
        Ok(Tensor {
            dtype,
            shape,
            bytes,
        })
    }

    /// Reads one floating-point tensor as f32. For float32 — nearly every weight — the bytes
    /// go straight into the returned vector (no second copy: this is the import's hot path).
    pub fn read_f32(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>), Error> {
        let (dtype, shape) = self.spec(name)?;
        if !matches!(dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
            return Err(Error::tensor(
                &self.index_path,
                name,
                format!(
                    "a {} tensor where a floating-point weight is expected",
                    dtype.name()
                ),
            ));
        }
        if dtype != DType::F32 || cfg!(target_endian = "big") {
            let t = self.read(name)?;
            return Ok((shape, t.to_f32()));
        }
        let mut values = vec![0f32; shape.iter().product()];
        // SAFETY: any byte pattern is a valid f32, u8 has alignment 1, and the slice covers
        // exactly the vector's initialised elements; on a little-endian host the file's bytes
        // are the values.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(values.as_mut_ptr().cast::<u8>(), values.len() * 4)
        };
        self.read_into(name, bytes)?;
        Ok((shape, values))
    }
}

/// The bytes of a checkpoint's `.index` file, read bounded.
fn read_index(index_path: &Path) -> Result<Vec<u8>, Error> {
    pipeline_bounded::read(index_path, MAX_INDEX_BYTES, "a checkpoint index").map_err(|e| {
        let reason = e.reason();
        Error::new(
            index_path,
            if e.is_not_found() {
                format!(
                    "cannot read the checkpoint index ({reason}): give a checkpoint \
                     directory, a prefix (…/model.ckpt-N) or its .index file"
                )
            } else {
                format!("cannot read the checkpoint index: {reason}")
            },
        )
    })
}

/// The bundle header and the tensors' entries of an index table, in key order.
fn decode_index(index_path: &Path, bytes: &[u8]) -> Result<(Header, Vec<(String, Entry)>), Error> {
    let kv = table::read_table(bytes).map_err(|m| Error::new(index_path, m))?;
    let mut header = None;
    let mut entries = Vec::with_capacity(kv.len());
    for (k, v) in kv {
        if k.is_empty() {
            header = Some(Header::decode(&v).map_err(|m| {
                Error::new(index_path, format!("the bundle header is malformed: {m}"))
            })?);
            continue;
        }
        // Keys of partitioned variables' slices start with a 0 byte (an OrderedCode
        // encoding); the full tensor's own entry lists them and is refused when read.
        if k[0] == 0 {
            continue;
        }
        let name = String::from_utf8_lossy(&k).into_owned();
        let e = Entry::decode(&v).map_err(|m| {
            Error::tensor(
                index_path,
                &name,
                format!("its index entry is malformed: {m}"),
            )
        })?;
        entries.push((name, e));
    }
    let header = header.ok_or_else(|| {
        Error::new(
            index_path,
            "no bundle header (the empty key): not a TensorFlow V2 checkpoint index",
        )
    })?;
    Ok((header, entries))
}

/// Refuses a bundle this reader cannot read: big-endian, a newer format, no data shards.
fn check_header(index_path: &Path, header: &Header) -> Result<(), Error> {
    if header.big_endian {
        return Err(Error::new(
            index_path,
            "the checkpoint was written on a big-endian machine; only little-endian \
             checkpoints are read. Re-save it on an x86 or ARM machine",
        ));
    }
    if header.min_consumer > BUNDLE_VERSION || header.bad_consumers.contains(&BUNDLE_VERSION) {
        return Err(Error::new(
            index_path,
            format!(
                "bundle format version: the checkpoint needs a reader of version ≥ {} (this \
                 one is {BUNDLE_VERSION}); re-save it with TensorFlow 1.x or 2.x",
                header.min_consumer
            ),
        ));
    }
    if header.num_shards < 1 {
        return Err(Error::new(
            index_path,
            format!("the header says {} data shards", header.num_shards),
        ));
    }
    Ok(())
}
