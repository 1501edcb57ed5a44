//! The clean stage's output: documents into `corpus-NNNNN.txt` files, one sentence a line, a
//! blank line between documents, a new file after `shard_bytes`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;

/// Writes documents into `corpus-NNNNN.txt` files, a new one after `shard_bytes` bytes.
pub struct ShardWriter {
    dir: PathBuf,
    shard_bytes: u64,
    index: u64,
    file: Option<(PathBuf, BufWriter<File>)>,
    bytes: u64,
}

impl ShardWriter {
    pub fn new(dir: &Path, shard_bytes: u64) -> Self {
        ShardWriter {
            dir: dir.to_path_buf(),
            shard_bytes,
            index: 0,
            file: None,
            bytes: 0,
        }
    }

    /// Writes one document (its sentences, each ending in `\n`).
    pub fn write(&mut self, doc: &str) -> anyhow::Result<()> {
        if self.file.is_some() && self.bytes >= self.shard_bytes {
            self.close()?;
        }
        let separator: &[u8] = if self.file.is_some() { b"\n" } else { b"" };
        if self.file.is_none() {
            let path = self.dir.join(format!("corpus-{:05}.txt", self.index));
            let f = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
            self.index += 1;
            self.bytes = 0;
            self.file = Some((path, BufWriter::with_capacity(1 << 20, f)));
        }
        if let Some((path, out)) = &mut self.file {
            out.write_all(separator)
                .and_then(|_| out.write_all(doc.as_bytes()))
                .with_context(|| format!("writing {}", path.display()))?;
            self.bytes += (separator.len() + doc.len()) as u64;
        }
        Ok(())
    }

    fn close(&mut self) -> anyhow::Result<()> {
        if let Some((path, mut out)) = self.file.take() {
            out.flush()
                .with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }

    /// Closes the last shard; returns the number of shards.
    pub fn finish(mut self) -> anyhow::Result<u64> {
        self.close()?;
        Ok(self.index)
    }
}
