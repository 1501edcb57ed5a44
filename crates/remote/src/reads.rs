//! Reading a remote, which is untrusted input (issue 31): listings that never follow a link out
//! of a directory remote, manifests read up to a size limit, and objects opened without waiting
//! on a FIFO. A directory remote goes through [`crate::dirfs`], an S3 remote through
//! object_store (which has no links or FIFOs, but may hold a key of any size).

use std::collections::HashMap;
use std::io::{Read, SeekFrom};

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStoreExt};
use pipeline_bounded::size_text;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::dirfs::{self, Listing, Meta};
use crate::{Remote, RemoteError, Result};

/// The largest remote manifest read. A manifest costs about 180 bytes a file pretty-printed
/// (measured: 177 with 33-character paths), so the most files an artifact may hold
/// (`pull::MAX_FILES`, 50,000) make about 9 MB; a 900 MB manifest once aborted `pull` and `run`
/// with an allocation failure and made `status` take 1.9 GB. A 4 GiB one is now refused in
/// 0.6 s at 116 MB of memory (debug build).
pub const MANIFEST_LIMIT: u64 = 16 << 20;

/// Chunks of an object, in order.
pub(crate) type Chunks = BoxStream<'static, Result<Bytes>>;

/// How much of a directory remote's object is read at a time.
const CHUNK: usize = 1 << 20;

impl Remote {
    /// Everything under `prefix` that is a regular file (a directory remote's links, folders
    /// in a file's place and FIFOs left out), in one listing (paged by the store, not one
    /// request per key).
    pub(crate) async fn list(&self, prefix: &str) -> Result<HashMap<Path, Meta>> {
        Ok(self.listing(prefix).await?.files)
    }

    /// [`Remote::list`], with what a directory remote holds under `prefix` that is not a
    /// regular file where one belongs (never looked into).
    pub(crate) async fn listing(&self, prefix: &str) -> Result<Listing> {
        if let Some(dir) = &self.dir {
            let (dir, top) = (dir.clone(), prefix.to_string());
            let listed = tokio::task::spawn_blocking(move || dirfs::list(&dir, &top)).await;
            let io = |source| RemoteError::Io {
                path: self.dir.clone().unwrap_or_default().join(prefix),
                source,
            };
            return match listed {
                Ok(l) => l.map_err(io),
                Err(e) => Err(io(std::io::Error::other(e.to_string()))),
            };
        }
        let prefix = Path::from(prefix);
        let files = self
            .store
            .list(Some(&prefix))
            .map_ok(|m| {
                let t = m.last_modified.timestamp().max(0) as u64;
                let modified = std::time::UNIX_EPOCH + std::time::Duration::from_secs(t);
                let meta = Meta {
                    size: m.size,
                    modified,
                };
                (m.location, meta)
            })
            .try_collect()
            .await
            .map_err(|e| self.store_err(e))?;
        Ok(Listing {
            files,
            odd: Vec::new(),
        })
    }

    /// `location` as a message names it: the remote's URL and the key.
    pub(crate) fn url_of(&self, location: &Path) -> String {
        format!("{}/{location}", self.url.trim_end_matches('/'))
    }

    /// A manifest's bytes, at most [`MANIFEST_LIMIT`] of them; `None` when it does not exist.
    /// A bigger one, or (on a directory remote) a link, a FIFO or a folder in its place, is
    /// refused with an error naming it.
    pub(crate) async fn get_small(&self, location: &Path) -> Result<Option<Bytes>> {
        let refused = |why: String| RemoteError::Refused {
            object: self.url_of(location),
            why,
        };
        let too_large = || {
            refused(format!(
                "larger than {}, the limit for a remote manifest",
                size_text(MANIFEST_LIMIT)
            ))
        };
        if let Some(dir) = &self.dir {
            let file = match dirfs::open(dir, location.as_ref()) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(refused(e.to_string())),
            };
            let mut bytes = Vec::new();
            let read = file.take(MANIFEST_LIMIT + 1).read_to_end(&mut bytes);
            read.map_err(|source| RemoteError::Io {
                path: dir.join(location.as_ref()),
                source,
            })?;
            if bytes.len() as u64 > MANIFEST_LIMIT {
                return Err(too_large());
            }
            return Ok(Some(bytes.into()));
        }
        let result = match self.store.get(location).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.store_err(e)),
        };
        if result.meta.size > MANIFEST_LIMIT {
            return Err(too_large());
        }
        // The size the listing gave is not trusted to be what arrives.
        let mut stream = result.into_stream();
        let mut bytes = Vec::new();
        while let Some(chunk) = stream.try_next().await.map_err(|e| self.store_err(e))? {
            if (bytes.len() + chunk.len()) as u64 > MANIFEST_LIMIT {
                return Err(too_large());
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(Some(bytes.into()))
    }

    /// Object `location`'s bytes from byte `kept` on, which should be `size` in all. A missing
    /// object, one shorter than `kept` bytes, and (on a directory remote) a link, a FIFO or a
    /// folder in its place are `corrupt`, and said so before the rest is asked for.
    pub(crate) async fn object_chunks(
        &self,
        location: &Path,
        size: u64,
        kept: u64,
        corrupt: &dyn Fn(String) -> RemoteError,
    ) -> Result<Chunks> {
        if let Some(dir) = &self.dir {
            let path = dir.join(location.as_ref());
            let io = |source| RemoteError::Io {
                path: path.clone(),
                source,
            };
            let file = dirfs::open(dir, location.as_ref()).map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => corrupt("it is missing".into()),
                std::io::ErrorKind::Other => corrupt(e.to_string()),
                _ => io(e),
            })?;
            let there = file.metadata().map_err(io)?.len();
            if kept > 0 && there != size {
                return Err(corrupt(format!("{there} bytes instead of {size}")));
            }
            let mut file = tokio::fs::File::from_std(file);
            file.seek(SeekFrom::Start(kept)).await.map_err(io)?;
            return Ok(file_chunks(file, path));
        }
        let missing = |e| match e {
            object_store::Error::NotFound { .. } => corrupt("it is missing".into()),
            e => self.store_err(e),
        };
        // A range must start inside the object, or the request fails in a way that cannot be
        // told from a failing server: a remote object shorter than what arrived is corrupt, and
        // said so, before the rest is asked for. A ranged request only where bytes are kept:
        // some servers refuse `bytes=0-` for an empty object.
        let range = if kept > 0 {
            let there = self.store.head(location).await.map_err(missing)?.size;
            if there != size {
                return Err(corrupt(format!("{there} bytes instead of {size}")));
            }
            Some(GetRange::Offset(kept))
        } else {
            None
        };
        let opts = GetOptions {
            range,
            ..Default::default()
        };
        let result = self.store.get_opts(location, opts).await.map_err(missing)?;
        let remote = self.describe();
        Ok(result
            .into_stream()
            .map_err(move |cause| RemoteError::Store {
                remote: remote.clone(),
                cause,
            })
            .boxed())
    }
}

/// The rest of an opened file, a chunk at a time.
fn file_chunks(file: tokio::fs::File, path: std::path::PathBuf) -> Chunks {
    futures::stream::try_unfold((file, path), |(mut file, path)| async move {
        let mut buf = vec![0u8; CHUNK];
        let n = file
            .read(&mut buf)
            .await
            .map_err(|source| RemoteError::Io {
                path: path.clone(),
                source,
            })?;
        if n == 0 {
            return Ok(None);
        }
        buf.truncate(n);
        Ok(Some((Bytes::from(buf), (file, path))))
    })
    .boxed()
}
