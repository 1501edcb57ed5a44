//! A [`BatchReader`] on a thread of its own, a few batches ahead of whoever trains on them.
//!
//! Why: decoding, shuffling and padding a batch is host work that the training loop otherwise
//! does between two steps. On a GPU the host only queues kernels, and for small models it is
//! the host that sets the pace (a step of `tiny` is a thousand small launches): every
//! millisecond the loop spends reading is a millisecond the device waits. With the reader on
//! its own thread the next batches are ready when the step asks. The batches, their order and
//! the positions a checkpoint saves are exactly the reader's: only who calls it changes.

use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

use crate::batch::{Batch, BatchReader, ReaderPosition};
use crate::error::{Result, ShardError};

/// What the thread sends: a batch and the reader's position after it, or the reader's error.
type Item = Result<(Batch, ReaderPosition)>;

/// A [`BatchReader`] read `depth` batches ahead on a thread; [`Prefetch::next_batch`] and
/// [`Prefetch::position`] answer as the reader itself would.
pub struct Prefetch {
    rx: Receiver<Item>,
    /// The position after the last batch handed out.
    position: ReaderPosition,
    instances_per_epoch: u64,
    thread: Option<JoinHandle<()>>,
}

impl Prefetch {
    /// Starts reading `reader` on a new thread, at most `depth` (at least 1) batches ahead:
    /// the memory held is `depth` batches besides the reader's own.
    pub fn spawn(reader: BatchReader, depth: usize) -> Result<Prefetch> {
        let position = reader.position();
        let instances_per_epoch = reader.instances_per_epoch();
        let (tx, rx) = sync_channel(depth.max(1));
        let thread = std::thread::Builder::new()
            .name("batch-reader".into())
            .spawn(move || read_ahead(reader, tx))
            .map_err(ShardError::Thread)?;
        Ok(Prefetch {
            rx,
            position,
            instances_per_epoch,
            thread: Some(thread),
        })
    }

    /// The next batch, as [`BatchReader::next_batch`] gives it; `None` after the last.
    pub fn next_batch(&mut self) -> Result<Option<Batch>> {
        match self.rx.recv() {
            Ok(Ok((batch, position))) => {
                self.position = position;
                Ok(Some(batch))
            }
            Ok(Err(e)) => Err(e),
            // The thread ended: after the last batch, or by a panic, which must not read as
            // the end of the data.
            Err(_) => match self.thread.take().map(JoinHandle::join) {
                Some(Err(panic)) => Err(ShardError::ThreadPanicked(panic_text(panic.as_ref()))),
                _ => Ok(None),
            },
        }
    }

    /// The position after the last batch handed out (save it with a checkpoint).
    pub fn position(&self) -> ReaderPosition {
        self.position.clone()
    }

    /// Instances in one epoch (all shards).
    pub fn instances_per_epoch(&self) -> u64 {
        self.instances_per_epoch
    }
}

impl Drop for Prefetch {
    /// Stops the thread: with the receiver gone its next send fails and it returns, after at
    /// most the batch it is reading.
    fn drop(&mut self) {
        let (_, closed) = sync_channel(1);
        drop(std::mem::replace(&mut self.rx, closed));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The thread: batches with their positions until the reader ends, fails, or nobody listens.
fn read_ahead(mut reader: BatchReader, tx: SyncSender<Item>) {
    loop {
        let item = match reader.next_batch() {
            Ok(Some(batch)) => Ok((batch, reader.position())),
            Ok(None) => return,
            Err(e) => Err(e),
        };
        let failed = item.is_err();
        if tx.send(item).is_err() || failed {
            return;
        }
    }
}

/// A panic's message.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "no message".into())
}

#[cfg(test)]
#[path = "prefetch_tests.rs"]
mod tests;
