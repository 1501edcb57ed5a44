//! A JSON array read one element at a time: the readers of the reading-comprehension files
//! (a SQuAD file's `data`, a C3 file's top level) keep only the examples, never the whole
//! document tree, so memory is the examples plus one element whatever the file size.

use std::fmt;
use std::fs::File;
use std::path::Path;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// The largest reading-comprehension file read (CMRC 2018 dev is 2 MB, SQuAD 2.0 train 40 MB).
pub const MAX_FILE_BYTES: u64 = 1 << 30;

/// Why a JSON data file could not be opened: the file system's error, or what is wrong with
/// the file as one to read (the message).
pub(crate) enum OpenError {
    Io(std::io::Error),
    Refused(String),
}

/// Opens a JSON data file: a regular file (a FIFO with no writer would block the open forever,
/// a device is no JSON file; opened with the shared reader's non-blocking open, the kind
/// checked on the opened handle) of at most [`MAX_FILE_BYTES`]. The file is streamed, so the
/// bound is on time, not memory (which is the examples plus one element).
pub(crate) fn open_data_file(path: &Path) -> Result<File, OpenError> {
    let file = pipeline_bounded::open(path).map_err(|e| match e {
        pipeline_bounded::ReadError::Io { source, .. } => OpenError::Io(source),
        other => OpenError::Refused(other.reason()),
    })?;
    let size = file.metadata().map_err(OpenError::Io)?.len();
    if size > MAX_FILE_BYTES {
        return Err(OpenError::Refused(format!(
            "{size} bytes, more than the {MAX_FILE_BYTES} this reader accepts"
        )));
    }
    Ok(file)
}

/// Why a JSON array could not be streamed (the readers put it in their own format error).
#[derive(Debug, thiserror::Error)]
pub(crate) enum StreamError {
    /// Not JSON, or not the expected shape: serde's message, with line and column.
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// The top-level object has no array under the key asked for.
    #[error("no `{0}` array at the top level")]
    NoArray(String),
}

/// Calls `f` on each element of a JSON array: the top-level value when `key` is `None`, else
/// the array under `key` of the top-level object (other keys are skipped unread). Streams: only
/// one element is in memory at a time. Errors are serde's, with line and column.
pub(crate) fn for_each_element<R: std::io::Read>(
    reader: R,
    key: Option<&str>,
    f: impl FnMut(Value),
) -> Result<(), StreamError> {
    let mut de = serde_json::Deserializer::from_reader(reader);
    let mut seen = false;
    let mut each = EachElement { f };
    let result = match key {
        None => {
            seen = true;
            (&mut de).deserialize_seq(&mut each)
        }
        Some(key) => (&mut de).deserialize_map(InKey {
            key,
            seen: &mut seen,
            each: &mut each,
        }),
    };
    result.and_then(|()| de.end())?;
    match key {
        Some(k) if !seen => Err(StreamError::NoArray(k.to_string())),
        _ => Ok(()),
    }
}

struct EachElement<F> {
    f: F,
}

impl<'de, F: FnMut(Value)> Visitor<'de> for &mut EachElement<F> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(v) = seq.next_element::<Value>()? {
            (self.f)(v);
        }
        Ok(())
    }
}

impl<'de, F: FnMut(Value)> DeserializeSeed<'de> for &mut EachElement<F> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

struct InKey<'k, 'e, F> {
    key: &'k str,
    seen: &'e mut bool,
    each: &'e mut EachElement<F>,
}

impl<'de, F: FnMut(Value)> Visitor<'de> for InKey<'_, '_, F> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "an object with a `{}` array", self.key)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(k) = map.next_key::<String>()? {
            if k == self.key && !*self.seen {
                *self.seen = true;
                map.next_value_seed(&mut *self.each)?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}
