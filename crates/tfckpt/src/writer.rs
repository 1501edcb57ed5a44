//! Writing a checkpoint that TensorFlow's `tf.train.load_checkpoint` (and albert_zh's scripts,
//! through `tf.train.init_from_checkpoint`) reads: data shards with the tensors back to back,
//! the index with a header and one entry per tensor, and the `checkpoint` file.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::proto::{Entry, Header};
use crate::{DType, Error, table};

/// A checkpoint being written. Tensors may be added in any order; the index is sorted when
/// [`Writer::finish`] writes it.
pub struct Writer {
    prefix: PathBuf,
    shards: Vec<(PathBuf, BufWriter<File>, u64)>,
    entries: BTreeMap<String, Entry>,
}

impl Writer {
    /// Creates `<prefix>.data-0000i-of-0000n` for `num_shards` shards (at least 1).
    pub fn create(prefix: &Path, num_shards: usize) -> Result<Writer, Error> {
        let n = num_shards.max(1);
        let mut shards = Vec::with_capacity(n);
        for i in 0..n {
            let mut p = prefix.as_os_str().to_owned();
            p.push(format!(".data-{i:05}-of-{n:05}"));
            let path = PathBuf::from(p);
            let f = File::create(&path)
                .map_err(|e| Error::new(&path, format!("cannot create: {e}")))?;
            shards.push((path, BufWriter::with_capacity(1 << 20, f), 0));
        }
        Ok(Writer {
            prefix: prefix.to_path_buf(),
            shards,
            entries: BTreeMap::new(),
        })
    }

    /// Appends a tensor given as little-endian bytes to shard `shard`.
    pub fn add(
        &mut self,
        shard: usize,
        name: &str,
        dtype: DType,
        shape: &[usize],
        bytes: &[u8],
    ) -> Result<(), Error> {
        let index = self.index_path();
        if name.is_empty() || name.as_bytes()[0] == 0 {
            return Err(Error::new(
                index,
                "a tensor name may not be empty or start with a 0 byte",
            ));
        }
        if self.entries.contains_key(name) {
            return Err(Error::tensor(index, name, "added twice"));
        }
        let expected = shape.iter().product::<usize>() * dtype.width();
        if bytes.len() != expected {
            return Err(Error::tensor(
                index,
                name,
                format!(
                    "{} bytes given for a {} tensor of shape {shape:?} ({expected})",
                    bytes.len(),
                    dtype.name()
                ),
            ));
        }
        let n = self.shards.len();
        let (path, out, offset) = self.shards.get_mut(shard).ok_or_else(|| {
            Error::tensor(self.prefix.clone(), name, format!("shard {shard} of {n}"))
        })?;
        out.write_all(bytes)
            .map_err(|e| Error::tensor(path.clone(), name, format!("cannot write: {e}")))?;
        let entry = Entry {
            dtype: dtype.tf_code(),
            shape: shape.iter().map(|&d| d as i64).collect(),
            shard_id: shard as i32,
            offset: *offset as i64,
            size: bytes.len() as i64,
            crc32c: table::mask(crc32c::crc32c(bytes)),
            ..Entry::default()
        };
        *offset += bytes.len() as u64;
        self.entries.insert(name.to_string(), entry);
        Ok(())
    }

    /// Appends an f32 tensor to shard 0.
    pub fn add_f32(&mut self, name: &str, shape: &[usize], values: &[f32]) -> Result<(), Error> {
        let mut bytes = Vec::with_capacity(values.len() * 4);
        for v in values {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        self.add(0, name, DType::F32, shape, &bytes)
    }

    fn index_path(&self) -> PathBuf {
        let mut p = self.prefix.as_os_str().to_owned();
        p.push(".index");
        PathBuf::from(p)
    }

    /// Flushes the data shards and writes the index (header: TensorFlow's bundle version 1,
    /// little-endian).
    pub fn finish(self) -> Result<(), Error> {
        let n = self.shards.len();
        for (path, out, _) in self.shards {
            let f = out
                .into_inner()
                .map_err(|e| Error::new(&path, format!("cannot write: {}", e.error())))?;
            f.sync_all()
                .map_err(|e| Error::new(&path, format!("cannot write: {e}")))?;
        }
        let header = Header {
            num_shards: n as i32,
            producer: 1,
            ..Header::default()
        };
        let mut kv = Vec::with_capacity(self.entries.len() + 1);
        kv.push((Vec::new(), header.encode()));
        for (name, e) in &self.entries {
            kv.push((name.as_bytes().to_vec(), e.encode()));
        }
        let index = {
            let mut p = self.prefix.as_os_str().to_owned();
            p.push(".index");
            PathBuf::from(p)
        };
        std::fs::write(&index, table::write_table(&kv))
            .map_err(|e| Error::new(&index, format!("cannot write: {e}")))
    }
}

/// Writes the `checkpoint` file of `dir` naming `prefix_name` (relative to `dir`), as
/// `tf.train.Saver` does, so that `tf.train.latest_checkpoint(dir)` finds it.
pub fn write_checkpoint_file(dir: &Path, prefix_name: &str) -> Result<(), Error> {
    let path = dir.join("checkpoint");
    let text = format!(
        "model_checkpoint_path: \"{prefix_name}\"\nall_model_checkpoint_paths: \"{prefix_name}\"\n"
    );
    std::fs::write(&path, text).map_err(|e| Error::new(&path, format!("cannot write: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Checkpoint, skip_reason};

    fn write_sample(dir: &Path, shards: usize) -> PathBuf {
        let prefix = dir.join("model.ckpt-7");
        let mut w = Writer::create(&prefix, shards).unwrap();
        w.add_f32("b/kernel", &[2, 3], &[1.0, -2.0, 3.5, 0.0, 1e-8, -0.0])
            .unwrap();
        w.add(
            shards - 1,
            "a/half",
            DType::F16,
            &[2],
            &[0x00, 0x3c, 0x00, 0xc0],
        )
        .unwrap();
        w.add(0, "a/bf", DType::BF16, &[1], &[0x80, 0x3f]).unwrap();
        w.add(
            shards - 1,
            "global_step",
            DType::I64,
            &[],
            &125000i64.to_le_bytes(),
        )
        .unwrap();
        w.add(0, "flag", DType::Bool, &[3], &[1, 0, 1]).unwrap();
        w.add(0, "d", DType::F64, &[1], &0.25f64.to_le_bytes())
            .unwrap();
        w.add(
            0,
            "i",
            DType::I32,
            &[2],
            &[7, 0, 0, 0, 0xff, 0xff, 0xff, 0xff],
        )
        .unwrap();
        w.add_f32("b/kernel/adam_m", &[2, 3], &[0.0; 6]).unwrap();
        w.add_f32("empty", &[0, 4], &[]).unwrap();
        w.finish().unwrap();
        write_checkpoint_file(dir, "model.ckpt-7").unwrap();
        prefix
    }

    #[test]
    fn writes_what_it_reads_back_in_every_dtype_and_shard_layout() {
        for shards in [1, 2] {
            let dir = tempfile::tempdir().unwrap();
            let prefix = write_sample(dir.path(), shards);
            // Directory, prefix and .index all name the same checkpoint.
            for path in [
                dir.path().to_path_buf(),
                prefix.clone(),
                dir.path().join("model.ckpt-7.index"),
                dir.path()
                    .join(format!("model.ckpt-7.data-00000-of-{shards:05}")),
            ] {
                assert!(crate::is_checkpoint(&path), "{}", path.display());
                let c = Checkpoint::open(&path).unwrap();
                assert_eq!(c.len(), 9);
                assert_eq!(c.header.num_shards as usize, shards);
            }
            let c = Checkpoint::open(&prefix).unwrap();
            let (shape, v) = c.read_f32("b/kernel").unwrap();
            assert_eq!(shape, vec![2, 3]);
            assert_eq!(v, vec![1.0, -2.0, 3.5, 0.0, 1e-8, -0.0]);
            assert_eq!(c.read_f32("a/half").unwrap().1, vec![1.0, -2.0]);
            assert_eq!(c.read_f32("a/bf").unwrap().1, vec![1.0]);
            assert_eq!(c.read_f32("d").unwrap().1, vec![0.25]);
            assert_eq!(c.read("global_step").unwrap().to_f32(), vec![125000.0]);
            assert_eq!(c.read("flag").unwrap().to_f32(), vec![1.0, 0.0, 1.0]);
            assert_eq!(c.read("i").unwrap().to_f32(), vec![7.0, -1.0]);
            assert_eq!(c.read("empty").unwrap().shape, vec![0, 4]);
            assert!(c.read_f32("i").unwrap_err().message.contains("int32"));
            let skipped: Vec<&str> = c.names().filter(|n| skip_reason(n).is_some()).collect();
            assert_eq!(skipped, vec!["b/kernel/adam_m", "global_step"]);
        }
    }

    #[test]
    fn corrupt_truncated_and_missing_data_are_errors_naming_file_and_tensor() {
        let dir = tempfile::tempdir().unwrap();
        let prefix = write_sample(dir.path(), 2);
        let shard0 = dir.path().join("model.ckpt-7.data-00000-of-00002");
        let shard1 = dir.path().join("model.ckpt-7.data-00001-of-00002");
        let good = std::fs::read(&shard0).unwrap();

        let mut flipped = good.clone();
        flipped[5] ^= 1; // inside b/kernel? the first tensor added to shard 0
        std::fs::write(&shard0, &flipped).unwrap();
        let c = Checkpoint::open(&prefix).unwrap();
        let errs: Vec<Error> = c.names().filter_map(|n| c.read(n).err()).collect();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].file, shard0);
        assert!(errs[0].message.contains("checksum"), "{}", errs[0]);
        assert!(errs[0].tensor.is_some());

        std::fs::write(&shard0, &good[..good.len() - 3]).unwrap();
        let e = Checkpoint::open(&prefix).unwrap_err();
        assert_eq!(e.file, shard0);
        assert!(e.message.contains("truncated") && e.tensor.is_some(), "{e}");

        std::fs::write(&shard0, &good).unwrap();
        std::fs::remove_file(&shard1).unwrap();
        let e = Checkpoint::open(&prefix).unwrap_err();
        assert_eq!(e.file, shard1);
        assert!(e.message.contains("shard 2 of 2"), "{e}");
        // The index alone still opens (names and shapes without the weights).
        assert_eq!(Checkpoint::open_index(&prefix).unwrap().len(), 9);
    }

    #[test]
    fn bad_indexes_are_errors_naming_the_index() {
        let dir = tempfile::tempdir().unwrap();
        let prefix = write_sample(dir.path(), 1);
        let index = dir.path().join("model.ckpt-7.index");
        let good = std::fs::read(&index).unwrap();
        let header_entry = |h: Header| {
            let mut kv = table::read_table(&good).unwrap();
            kv[0].1 = h.encode();
            table::write_table(&kv)
        };
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (good[..good.len() - 1].to_vec(), "magic"),
            (
                header_entry(Header {
                    num_shards: 1,
                    big_endian: true,
                    producer: 1,
                    ..Header::default()
                }),
                "big-endian",
            ),
            (
                header_entry(Header {
                    num_shards: 1,
                    producer: 2,
                    min_consumer: 2,
                    ..Header::default()
                }),
                "version",
            ),
            (
                table::write_table(&table::read_table(&good).unwrap()[1..]),
                "no bundle header",
            ),
        ];
        for (bytes, expect) in cases {
            std::fs::write(&index, &bytes).unwrap();
            let e = Checkpoint::open(&prefix).unwrap_err();
            assert_eq!(e.file, index);
            assert!(e.to_string().contains(expect), "{e}");
        }
        // A string tensor and a partitioned variable are refused by name; size disagreeing
        // with the shape too.
        let mut kv = table::read_table(&good).unwrap();
        let mut tweak = |name: &str, f: &dyn Fn(&mut Entry)| {
            let i = kv.iter().position(|(k, _)| k == name.as_bytes()).unwrap();
            let mut e = Entry::decode(&kv[i].1).unwrap();
            f(&mut e);
            kv[i].1 = e.encode();
        };
        tweak("flag", &|e| e.dtype = 7);
        tweak("d", &|e| e.size = 4);
        tweak("a/bf", &|e| e.slices = 2);
        std::fs::write(&index, table::write_table(&kv)).unwrap();
        let c = Checkpoint::open(&prefix).unwrap();
        for (name, expect) in [
            ("flag", "string"),
            ("d", "index says 4 bytes"),
            ("a/bf", "partitioned"),
        ] {
            let e = c.read(name).unwrap_err();
            assert_eq!(
                (e.file.as_path(), e.tensor.as_deref()),
                (index.as_path(), Some(name))
            );
            assert!(e.message.contains(expect), "{e}");
        }
    }

    #[test]
    fn paths_that_are_not_checkpoints_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let e = Checkpoint::open(dir.path()).unwrap_err();
        assert!(e.message.contains("not a TensorFlow checkpoint"), "{e}");
        let e = Checkpoint::open(&dir.path().join("nope")).unwrap_err();
        assert!(
            e.message.contains("cannot read the checkpoint index"),
            "{e}"
        );
        assert!(!crate::is_checkpoint(dir.path()));
    }

    #[test]
    fn an_index_or_shard_that_is_a_fifo_or_too_large_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let prefix = write_sample(dir.path(), 1);
        let mkfifo = |p: &Path| {
            std::fs::remove_file(p).unwrap();
            let made = std::process::Command::new("mkfifo").arg(p).status();
            assert!(made.is_ok_and(|s| s.success()), "mkfifo failed");
        };
        let shard = dir.path().join("model.ckpt-7.data-00000-of-00001");
        mkfifo(&shard);
        let e = Checkpoint::open(&prefix).unwrap_err();
        assert_eq!(e.file, shard);
        assert!(
            e.message.contains("not a regular file (it is a FIFO)"),
            "{e}"
        );
        let index = dir.path().join("model.ckpt-7.index");
        mkfifo(&index);
        let e = Checkpoint::open(&prefix).unwrap_err();
        assert_eq!(e.file, index);
        assert_eq!(
            e.message,
            "cannot read the checkpoint index: not a regular file (it is a FIFO)"
        );
        // Sparse: 64 MiB and a byte of zeros, refused after reading one byte past the limit.
        std::fs::remove_file(&index).unwrap();
        std::fs::File::create(&index)
            .unwrap()
            .set_len((64 << 20) + 1)
            .unwrap();
        let e = Checkpoint::open_index(&prefix).unwrap_err();
        assert_eq!(
            e.message,
            "cannot read the checkpoint index: larger than 64 MiB, the limit for a checkpoint \
             index"
        );
    }
}
