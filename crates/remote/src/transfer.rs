//! Moving bytes: listings, one object up (hashed on the way, multipart when large) and one
//! object down (hashed on the way, refused unless size and digest match).

use std::collections::HashMap;
use std::path::Path as LocalPath;

use bytes::Bytes;
use futures::TryStreamExt;
use indicatif::ProgressBar;
use object_store::buffered::BufWriter;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStoreExt, PutPayload};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::{Remote, RemoteError, Result};

/// Files at least this big go up as multipart uploads of parts this size, several parts in
/// flight: S3 takes parts of 5 MiB to 5 GiB, and 16 MiB keeps a 1 GB file at 64 parts.
pub const PART: usize = 16 << 20;
/// Parts of one file in flight at once.
const PART_CONCURRENCY: usize = 4;

fn io_err(path: &LocalPath) -> impl FnOnce(std::io::Error) -> RemoteError + '_ {
    move |source| RemoteError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl Remote {
    /// Everything under `prefix`, in one listing (paged by the store, not one request per key).
    pub(crate) async fn list(&self, prefix: &str) -> Result<HashMap<Path, ObjectMeta>> {
        let prefix = Path::from(prefix);
        self.store
            .list(Some(&prefix))
            .map_ok(|m| (m.location.clone(), m))
            .try_collect()
            .await
            .map_err(|e| self.store_err(e))
    }

    /// Uploads `file` as the object `digest`, hashing what it sends: a file that no longer has
    /// the digest its manifest gives is not written (the upload is aborted).
    pub(crate) async fn upload(
        &self,
        file: &LocalPath,
        digest: &str,
        bar: &ProgressBar,
    ) -> Result<()> {
        let location = crate::layout::object_path(digest);
        let mut f = tokio::fs::File::open(file).await.map_err(io_err(file))?;
        let len = f.metadata().await.map_err(io_err(file))?.len();
        let mut hasher = blake3::Hasher::new();
        let mut writer = BufWriter::with_capacity(self.store.clone(), location.clone(), PART)
            .with_max_concurrency(PART_CONCURRENCY);
        loop {
            let mut buf = Vec::with_capacity(PART.min(len as usize + 1));
            let n = (&mut f)
                .take(PART as u64)
                .read_to_end(&mut buf)
                .await
                .map_err(io_err(file))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf);
            writer
                .put(Bytes::from(buf))
                .await
                .map_err(|e| self.store_err(e))?;
            bar.inc(n as u64);
        }
        if hasher.finalize().to_hex().as_str() != digest {
            let _ = writer.abort().await;
            return Err(RemoteError::Engine(anyhow::anyhow!(
                "{} changed since it was hashed (its digest is no longer {digest}); `pipeline verify` checks the store",
                file.display()
            )));
        }
        writer.shutdown().await.map_err(io_err(file))
    }

    /// Writes a small object in one atomic put.
    pub(crate) async fn put_small(&self, location: &Path, bytes: Vec<u8>) -> Result<()> {
        self.store
            .put(location, PutPayload::from(bytes))
            .await
            .map(|_| ())
            .map_err(|e| self.store_err(e))
    }

    /// A small object's bytes; `None` when it does not exist.
    pub(crate) async fn get_small(&self, location: &Path) -> Result<Option<Bytes>> {
        match self.store.get(location).await {
            Ok(r) => r.bytes().await.map(Some).map_err(|e| self.store_err(e)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.store_err(e)),
        }
    }

    /// Downloads object `digest` into `dest`, checking its size and blake3 digest: a corrupt or
    /// truncated object is an error that names it.
    pub(crate) async fn download(
        &self,
        digest: &str,
        size: u64,
        dest: &LocalPath,
        bar: &ProgressBar,
    ) -> Result<()> {
        let location = crate::layout::object_path(digest);
        let corrupt = |why: String| RemoteError::Corrupt {
            object: format!("{}/{location}", self.url.trim_end_matches('/')),
            why,
        };
        let result = match self.store.get(&location).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(corrupt("it is missing".into()));
            }
            Err(e) => return Err(self.store_err(e)),
        };
        if let Some(parent) = dest.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(io_err(parent))?;
        }
        let mut out = tokio::fs::File::create(dest).await.map_err(io_err(dest))?;
        let mut hasher = blake3::Hasher::new();
        let mut got = 0u64;
        let mut stream = result.into_stream();
        while let Some(chunk) = stream.try_next().await.map_err(|e| self.store_err(e))? {
            got += chunk.len() as u64;
            if got > size {
                return Err(corrupt(format!(
                    "it holds more than the {size} bytes expected"
                )));
            }
            hasher.update(&chunk);
            out.write_all(&chunk).await.map_err(io_err(dest))?;
            bar.inc(chunk.len() as u64);
        }
        out.flush().await.map_err(io_err(dest))?;
        if got != size {
            return Err(corrupt(format!(
                "{got} bytes instead of {size} (truncated)"
            )));
        }
        let actual = hasher.finalize().to_hex().to_string();
        if actual != digest {
            return Err(corrupt(format!("its blake3 digest is {actual}")));
        }
        Ok(())
    }
}
