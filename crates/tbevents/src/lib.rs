//! TensorBoard event files for the training stages: scalars written as TFRecords of `Event`
//! protos, each record written whole and flushed to the OS as it comes so that
//! `tensorboard --logdir` shows a run in progress, and our own reader (what the tests use,
//! and what a resumed run uses to drop the steps it is about to redo).
//!
//! A file starts with the `file_version: "brain.Event:2"` event; every later event carries one
//! `Summary` with a `simple_value` per scalar. TensorBoard finds a file by `tfevents` in its
//! name ([`FILE_NAME`]).

#![warn(missing_docs)]

mod jsonl;
pub mod proto;
mod record;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use prost::Message;

pub use jsonl::{scalars_of_line, write_from_jsonl};
use proto::{Event, Summary, SummaryValue, What};

/// The name the stages give their event file. TensorBoard reads any file whose name contains
/// `tfevents`; the usual `events.out.tfevents.<time>.<host>` carries a time and a host name,
/// which would make two runs' artifacts differ, so ours has neither.
pub const FILE_NAME: &str = "events.out.tfevents.0.pipeline";

/// The `file_version` of TensorBoard's current format.
pub const FILE_VERSION: &str = "brain.Event:2";

/// Why an event file could not be written or read; every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be created, opened, read, written or renamed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The event file (or its rewrite beside it).
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file could not be read: missing, not a regular file (a FIFO would block the open,
    /// a device never ends), or over the reader's limit. The reader's error names the file (and
    /// the limit); boxed, as the rarest and largest variant.
    #[error(transparent)]
    Read(Box<pipeline_bounded::ReadError>),
    /// A record whose checksum does not match, or whose data is not an `Event`.
    #[error("{}: the record at byte {offset} is corrupt: {what}", path.display())]
    Corrupt {
        /// The event file.
        path: PathBuf,
        /// Where the bad record starts.
        offset: usize,
        /// Which check failed.
        what: String,
    },
    /// The file ends inside a record.
    #[error(
        "{}: the file ends inside the record at byte {offset} (its writer is still running, or was killed mid-record)",
        path.display()
    )]
    Truncated {
        /// The event file.
        path: PathBuf,
        /// Where the partial record starts.
        offset: usize,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One scalar as TensorBoard plots it.
#[derive(Debug, Clone, PartialEq)]
pub struct Scalar {
    /// The curve it belongs to (a `metrics.jsonl` field name).
    pub tag: String,
    /// The x value: the training step (or epoch) it was logged at.
    pub step: i64,
    /// Seconds since the Unix epoch (or since the run started, for files made from
    /// `metrics.jsonl`).
    pub wall_time: f64,
    /// The y value.
    pub value: f32,
}

/// Appends events to one file. Each event is one `write` of its whole record on an unbuffered
/// file, so a reader never waits on our buffer, and a kill leaves at most one partial record
/// at the end (which TensorBoard, and [`read_prefix`], stop before).
pub struct EventWriter {
    file: File,
    path: PathBuf,
}

impl EventWriter {
    /// A new file at `path` (replacing one that is there), starting with the `file_version`
    /// event stamped `wall_time`.
    pub fn create(path: &Path, wall_time: f64) -> Result<EventWriter, Error> {
        let file = File::create(path).map_err(io(path))?;
        let mut w = EventWriter {
            file,
            path: path.to_path_buf(),
        };
        w.write(&Event {
            wall_time,
            step: 0,
            what: Some(What::FileVersion(FILE_VERSION.into())),
        })?;
        Ok(w)
    }

    /// Continues the file at `path` (a resumed run), or creates it.
    pub fn append(path: &Path, wall_time: f64) -> Result<EventWriter, Error> {
        if !path.is_file() {
            return EventWriter::create(path, wall_time);
        }
        let file = OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(io(path))?;
        Ok(EventWriter {
            file,
            path: path.to_path_buf(),
        })
    }

    /// One event with these scalars at `step`.
    pub fn scalars(
        &mut self,
        step: i64,
        wall_time: f64,
        values: &[(String, f32)],
    ) -> Result<(), Error> {
        let value = values
            .iter()
            .map(|(tag, v)| SummaryValue {
                tag: tag.clone(),
                simple_value: Some(*v),
            })
            .collect();
        self.write(&Event {
            wall_time,
            step,
            what: Some(What::Summary(Summary { value })),
        })
    }

    fn write(&mut self, event: &Event) -> Result<(), Error> {
        let bytes = record::frame(&event.encode_to_vec());
        self.file.write_all(&bytes).map_err(io(&self.path))?;
        self.file.flush().map_err(io(&self.path))
    }
}

/// Every event of a file; a partial record at the end is an error ([`Error::Truncated`]).
pub fn read(path: &Path) -> Result<Vec<Event>, Error> {
    let (events, problem) = read_prefix(path)?;
    match problem {
        Some(e) => Err(e),
        None => Ok(events),
    }
}

/// The largest event file read: ours hold ~150 bytes per logged step, so a million steps is
/// 150 MB. A resumed pretraining rewrites the file it finds in its work folder; past this it is
/// not one of ours, and it is not read whole.
pub const MAX_EVENTS_BYTES: u64 = 512 << 20;

/// The events before the first bad or partial record, and what stopped the reading (as
/// TensorBoard does with a file that is still being written). The whole file is read at once
/// (regular files only, at most [`MAX_EVENTS_BYTES`]).
pub fn read_prefix(path: &Path) -> Result<(Vec<Event>, Option<Error>), Error> {
    let buf = pipeline_bounded::read(path, MAX_EVENTS_BYTES, "an event file")
        .map_err(|e| Error::Read(Box::new(e)))?;
    let mut events = Vec::new();
    let mut offset = 0;
    while offset < buf.len() {
        let problem = match record::next(&buf, offset) {
            Ok((data, next)) => match Event::decode(data) {
                Ok(e) => {
                    events.push(e);
                    offset = next;
                    continue;
                }
                Err(e) => Error::Corrupt {
                    path: path.to_path_buf(),
                    offset,
                    what: format!("not an Event: {e}"),
                },
            },
            Err(record::Bad::Truncated) => Error::Truncated {
                path: path.to_path_buf(),
                offset,
            },
            Err(record::Bad::Corrupt(what)) => Error::Corrupt {
                path: path.to_path_buf(),
                offset,
                what: what.into(),
            },
        };
        return Ok((events, Some(problem)));
    }
    Ok((events, None))
}

/// The scalars of a file, in file order.
pub fn scalars(path: &Path) -> Result<Vec<Scalar>, Error> {
    Ok(scalars_of(&read(path)?))
}

/// The scalars of some events, in order.
pub fn scalars_of(events: &[Event]) -> Vec<Scalar> {
    let mut out = Vec::new();
    for e in events {
        if let Some(What::Summary(s)) = &e.what {
            for v in &s.value {
                if let Some(value) = v.simple_value {
                    out.push(Scalar {
                        tag: v.tag.clone(),
                        step: e.step,
                        wall_time: e.wall_time,
                        value,
                    });
                }
            }
        }
    }
    out
}

/// Drops the events after `step` (and a partial last record): a run resumed from its
/// checkpoint at `step` redoes the later steps and would otherwise log them twice. The file
/// is rewritten beside itself and renamed over it.
pub fn keep_steps_up_to(path: &Path, step: i64) -> Result<(), Error> {
    if !path.is_file() {
        return Ok(());
    }
    let (events, _) = read_prefix(path)?;
    let mut bytes = Vec::new();
    for e in events
        .iter()
        .filter(|e| e.step <= step || matches!(e.what, Some(What::FileVersion(_))))
    {
        bytes.extend(record::frame(&e.encode_to_vec()));
    }
    // Not a `tfevents` name, so that TensorBoard never reads the half-written copy.
    let tmp = path.with_file_name("events-rewrite.tmp");
    std::fs::write(&tmp, bytes).map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

/// Seconds since the Unix epoch, as `wall_time` holds them.
pub fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests;
