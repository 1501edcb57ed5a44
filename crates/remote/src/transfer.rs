//! Moving bytes: listings, one object up (hashed on the way, in parts when large, aborted when
//! anything goes wrong) and one object down into the download area (hashed on the way, resumed
//! where a killed pull stopped, refused unless size and digest match).

use std::path::Path as LocalPath;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::TryStreamExt;
use futures::future::Either;
use indicatif::ProgressBar;
use object_store::path::Path;
use object_store::{MultipartUpload, ObjectStoreExt, PutPayload};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;

use crate::downloads::Area;
use crate::{Remote, RemoteError, Result};

/// Files bigger than this go up as multipart uploads of parts this size, several parts in
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

/// Tells the uploads of one push to stop: another upload failed, or SIGINT/SIGTERM arrived
/// (the push catches them, so that each multipart upload in flight is aborted on the remote
/// rather than left there, holding its parts, until a lifecycle rule removes it).
#[derive(Debug, Default)]
pub(crate) struct Stop {
    failed: AtomicBool,
}

impl Stop {
    pub(crate) fn fail(&self) {
        self.failed.store(true, Ordering::Relaxed);
    }

    fn why(&self) -> Option<RemoteError> {
        if pipeline_engine::executor::interrupted() {
            Some(RemoteError::Interrupted)
        } else if self.failed.load(Ordering::Relaxed) {
            Some(RemoteError::Cancelled)
        } else {
            None
        }
    }

    /// `fut`, unless a stop comes first (checked every 50 ms: a part in flight is not waited
    /// for, its upload is aborted).
    pub(crate) async fn unless_stopped<T>(
        &self,
        fut: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let watch = async {
            loop {
                if let Some(why) = self.why() {
                    return why;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        let (fut, watch) = (std::pin::pin!(fut), std::pin::pin!(watch));
        match futures::future::select(fut, watch).await {
            Either::Left((r, _)) => r,
            Either::Right((why, _)) => Err(why),
        }
    }
}

impl Remote {
    /// Uploads `file` as the object `digest`, hashing what it sends: a file that no longer has
    /// the digest its manifest gives is not written. Returns whether it went up in parts.
    pub(crate) async fn upload(
        &self,
        file: &LocalPath,
        digest: &str,
        bar: &ProgressBar,
        stop: &Stop,
    ) -> Result<bool> {
        if let Some(why) = stop.why() {
            return Err(why);
        }
        let location = crate::layout::object_path(digest);
        self.check_folders(&location)?;
        let mut f = tokio::fs::File::open(file).await.map_err(io_err(file))?;
        let len = f.metadata().await.map_err(io_err(file))?.len();
        if len <= PART as u64 {
            let mut buf = Vec::with_capacity(len as usize);
            f.read_to_end(&mut buf).await.map_err(io_err(file))?;
            check_digest(file, blake3::hash(&buf).to_hex().as_str(), digest)?;
            let n = buf.len() as u64;
            stop.unless_stopped(self.put_small(&location, buf)).await?;
            bar.inc(n);
            return Ok(false);
        }
        let mut upload = stop
            .unless_stopped(async {
                self.store
                    .put_multipart(&location)
                    .await
                    .map_err(|e| self.store_err(e))
            })
            .await?;
        let sent = stop
            .unless_stopped(self.send_parts(&mut f, file, digest, upload.as_mut(), bar))
            .await;
        if sent.is_err() {
            // Best effort: the error that stopped the upload is the one worth reporting.
            if let Err(e) = upload.abort().await {
                tracing::warn!("aborting the upload of {location}: {e}");
            }
        }
        sent.map(|()| true)
    }

    /// Reads `f` a part at a time (hashing it), keeps [`PART_CONCURRENCY`] parts in flight, and
    /// completes the upload once every part is there and the digest is right. On object_store's
    /// `MultipartUpload` itself rather than its `BufWriter`/`WriteMultipart`: those take the
    /// upload with them when they fail (`finish` consumes it), so its parts could not be
    /// aborted.
    async fn send_parts(
        &self,
        f: &mut tokio::fs::File,
        file: &LocalPath,
        digest: &str,
        upload: &mut dyn MultipartUpload,
        bar: &ProgressBar,
    ) -> Result<()> {
        let mut hasher = blake3::Hasher::new();
        // Each part is a task of its own, so that parts go on while the next one is read and
        // hashed; leaving this function early drops the set, which stops the parts in flight.
        let mut in_flight = JoinSet::new();
        loop {
            let mut buf = Vec::with_capacity(PART);
            let n = (&mut *f)
                .take(PART as u64)
                .read_to_end(&mut buf)
                .await
                .map_err(io_err(file))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf);
            while in_flight.len() >= PART_CONCURRENCY {
                self.part_done(&mut in_flight, bar).await?;
            }
            let part = upload.put_part(PutPayload::from(buf));
            in_flight.spawn(async move { part.await.map(|()| n as u64) });
        }
        while !in_flight.is_empty() {
            self.part_done(&mut in_flight, bar).await?;
        }
        check_digest(file, hasher.finalize().to_hex().as_str(), digest)?;
        upload.complete().await.map_err(|e| self.store_err(e))?;
        Ok(())
    }

    /// On a directory remote, refuses to write `location` through a folder that is a link
    /// ([`crate::dirfs::check_folders`]).
    fn check_folders(&self, location: &Path) -> Result<()> {
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        crate::dirfs::check_folders(dir, location.as_ref()).map_err(|e| RemoteError::Refused {
            object: self.url_of(location),
            why: format!("not written: {e}"),
        })
    }

    async fn part_done(
        &self,
        in_flight: &mut JoinSet<object_store::Result<u64>>,
        bar: &ProgressBar,
    ) -> Result<()> {
        match in_flight.join_next().await {
            Some(Ok(sent)) => bar.inc(sent.map_err(|e| self.store_err(e))?),
            Some(Err(e)) => {
                return Err(RemoteError::UploadTask(e.to_string()));
            }
            None => {}
        }
        Ok(())
    }

    /// Writes a small object in one atomic put.
    pub(crate) async fn put_small(&self, location: &Path, bytes: Vec<u8>) -> Result<()> {
        self.check_folders(location)?;
        self.store
            .put(location, PutPayload::from(bytes))
            .await
            .map(|_| ())
            .map_err(|e| self.store_err(e))
    }

    /// Brings object `digest` into the download area, checking its size and blake3 digest (a
    /// corrupt or truncated object is an error that names it). What a killed pull left of it is
    /// not fetched again. Returns the bytes fetched from the remote.
    pub(crate) async fn download(
        &self,
        digest: &str,
        size: u64,
        area: &Area,
        bar: &ProgressBar,
    ) -> Result<u64> {
        if area.has(digest, size) {
            bar.inc(size);
            return Ok(0);
        }
        let partial = area.partial(digest);
        let kept = match tokio::fs::metadata(&partial).await {
            Ok(m) if m.len() <= size => m.len(),
            _ => 0,
        };
        let fetched = match self.fetch(digest, size, &partial, kept, bar).await {
            // The kept bytes may be what made the digest wrong (a disk that lost a write):
            // fetch the whole object once before calling the remote's copy corrupt.
            Err(RemoteError::Corrupt { .. }) if kept > 0 => {
                self.fetch(digest, size, &partial, 0, bar).await
            }
            other => other,
        };
        match fetched {
            Ok(n) => {
                area.complete(digest)?;
                Ok(n)
            }
            Err(e) => {
                if matches!(e, RemoteError::Corrupt { .. }) {
                    let _ = tokio::fs::remove_file(&partial).await;
                }
                Err(e)
            }
        }
    }

    /// Fetches object `digest` into `partial`, whose first `kept` bytes are already there and
    /// are kept (hashed, not fetched again); every byte is written before the next is asked
    /// for, so that a kill leaves a prefix of the object. Returns the bytes fetched.
    async fn fetch(
        &self,
        digest: &str,
        size: u64,
        partial: &LocalPath,
        kept: u64,
        bar: &ProgressBar,
    ) -> Result<u64> {
        let location = crate::layout::object_path(digest);
        let corrupt = |why: String| RemoteError::Corrupt {
            object: self.url_of(&location),
            why,
        };
        let mut hasher = blake3::Hasher::new();
        let mut out = if kept > 0 {
            hash_prefix(partial, kept, &mut hasher).await?
        } else {
            tokio::fs::File::create(partial)
                .await
                .map_err(io_err(partial))?
        };
        bar.inc(kept);
        let mut got = kept;
        if kept < size || size == 0 {
            let mut stream = self.object_chunks(&location, size, kept, &corrupt).await?;
            while let Some(chunk) = stream.try_next().await? {
                got += chunk.len() as u64;
                if got > size {
                    return Err(corrupt(format!(
                        "it holds more than the {size} bytes expected"
                    )));
                }
                hasher.update(&chunk);
                out.write_all(&chunk).await.map_err(io_err(partial))?;
                bar.inc(chunk.len() as u64);
            }
        }
        out.flush().await.map_err(io_err(partial))?;
        if got != size {
            return Err(corrupt(format!(
                "{got} bytes instead of {size} (truncated)"
            )));
        }
        let actual = hasher.finalize().to_hex().to_string();
        if actual != digest {
            return Err(corrupt(format!("its blake3 digest is {actual}")));
        }
        Ok(got - kept)
    }
}

/// Hashes the first `kept` bytes of `partial` and opens it for appending after them.
async fn hash_prefix(
    partial: &LocalPath,
    kept: u64,
    hasher: &mut blake3::Hasher,
) -> Result<tokio::fs::File> {
    let mut f = tokio::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(partial)
        .await
        .map_err(io_err(partial))?;
    // Only the bytes measured are kept, whatever the file holds now.
    f.set_len(kept).await.map_err(io_err(partial))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).await.map_err(io_err(partial))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(f)
}

/// A local file whose bytes no longer have the digest its manifest gives is not sent.
fn check_digest(file: &LocalPath, actual: &str, digest: &str) -> Result<()> {
    if actual == digest {
        return Ok(());
    }
    Err(RemoteError::Changed {
        file: file.to_path_buf(),
        digest: digest.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Spec;

    /// A directory remote holding one object of `len` bytes, and a download area beside it.
    fn setup(len: usize) -> (tempfile::TempDir, Remote, Area, Vec<u8>, String) {
        let tmp = tempfile::tempdir().unwrap();
        let spec = Spec {
            name: "r".into(),
            url: tmp.path().join("remote").display().to_string(),
        };
        let remote = Remote::open(&spec, tmp.path(), true).unwrap();
        let area = Area::create(tmp.path().join("area")).unwrap();
        let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let digest = blake3::hash(&data).to_hex().to_string();
        let location = crate::layout::object_path(&digest);
        remote
            .rt
            .block_on(remote.put_small(&location, data.clone()))
            .unwrap();
        (tmp, remote, area, data, digest)
    }

    fn download(remote: &Remote, area: &Area, digest: &str, len: usize) -> Result<u64> {
        let bar = ProgressBar::hidden();
        remote
            .rt
            .block_on(remote.download(digest, len as u64, area, &bar))
    }

    #[test]
    fn a_download_resumes_after_the_bytes_that_arrived() {
        let (_tmp, remote, area, data, digest) = setup(300_000);
        std::fs::write(area.partial(&digest), &data[..120_000]).unwrap();
        assert_eq!(
            download(&remote, &area, &digest, data.len()).unwrap(),
            180_000
        );
        assert!(area.has(&digest, data.len() as u64));
        assert!(!area.partial(&digest).exists());
        assert_eq!(download(&remote, &area, &digest, data.len()).unwrap(), 0);
    }

    #[test]
    fn wrong_kept_bytes_cost_one_whole_download() {
        let (_tmp, remote, area, data, digest) = setup(300_000);
        let mut kept = data[..120_000].to_vec();
        kept[5] ^= 1;
        std::fs::write(area.partial(&digest), &kept).unwrap();
        assert_eq!(
            download(&remote, &area, &digest, data.len()).unwrap(),
            300_000
        );
        assert!(area.has(&digest, data.len() as u64));
    }

    #[test]
    fn a_corrupt_object_is_refused_and_nothing_of_it_kept() {
        let (_tmp, remote, area, data, _) = setup(1_000);
        let claimed = blake3::hash(b"other").to_hex().to_string();
        let location = crate::layout::object_path(&claimed);
        remote
            .rt
            .block_on(remote.put_small(&location, data.clone()))
            .unwrap();
        let e = download(&remote, &area, &claimed, data.len()).unwrap_err();
        assert!(e.to_string().contains(&claimed[2..]), "{e}");
        assert!(e.to_string().contains("blake3"), "{e}");
        assert!(!area.partial(&claimed).exists());
        assert!(!area.has(&claimed, data.len() as u64));
        let e = download(&remote, &area, &claimed, data.len() + 5).unwrap_err();
        assert!(e.to_string().contains("truncated"), "{e}");
    }
}
