//! The three messages of tensorflow/core/util/event.proto and framework/summary.proto that a
//! scalar event file needs, with prost's derive.
//!
//! Why prost and not hand-encoding (as crates/tfckpt does for its two index messages): writing
//! would be ~30 lines by hand, but reading files that TensorBoard, PyTorch or TensorFlow wrote
//! needs every wire type skipped correctly (they add `metadata`, `tensor`, `source_metadata`,
//! `session_log` …), and `simple_value` sits in a proto3 `oneof`, so a 0.0 must still be
//! encoded: prost's `optional` gives exactly that. prost was already in Cargo.lock (a
//! dependency of the tree), and its derive needs neither protoc nor a build script.

/// `tensorflow.Event`: one record of an event file.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Event {
    /// Seconds since the Unix epoch.
    #[prost(double, tag = "1")]
    pub wall_time: f64,
    /// The training step (or epoch) the event belongs to; 0 for the `file_version` event.
    #[prost(int64, tag = "2")]
    pub step: i64,
    /// The other members of the `what` oneof (graph_def, log_message, session_log …) are
    /// skipped as unknown fields.
    #[prost(oneof = "What", tags = "3, 5")]
    pub what: Option<What>,
}

/// `Event.what`, the members a scalar file uses.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum What {
    /// `"brain.Event:2"` in the first record of every file.
    #[prost(string, tag = "3")]
    FileVersion(String),
    /// The scalars logged at the event's step.
    #[prost(message, tag = "5")]
    Summary(Summary),
}

/// `tensorflow.Summary`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Summary {
    /// One entry per tag.
    #[prost(message, repeated, tag = "1")]
    pub value: Vec<SummaryValue>,
}

/// `tensorflow.Summary.Value`: a tag and, for a scalar, its `simple_value`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SummaryValue {
    /// The curve's name.
    #[prost(string, tag = "1")]
    pub tag: String,
    /// A member of the `value` oneof: `optional` so that 0.0 is written too.
    #[prost(float, optional, tag = "2")]
    pub simple_value: Option<f32>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn a_zero_scalar_is_on_the_wire() {
        let v = SummaryValue {
            tag: "a".into(),
            simple_value: Some(0.0),
        };
        // tag 1 (len 1, "a"), then field 2 wire type 5 and four zero bytes.
        assert_eq!(v.encode_to_vec(), vec![0x0a, 1, b'a', 0x15, 0, 0, 0, 0]);
    }

    #[test]
    fn unknown_fields_of_other_writers_are_skipped() {
        // An Event with step 3, a graph_def (tag 4, bytes) and source_metadata (tag 10).
        let mut bytes = vec![0x10, 3, 0x22, 2, 0xff, 0xee];
        bytes.extend([0x52, 0]);
        let e = Event::decode(&bytes[..]).unwrap();
        assert_eq!(e.step, 3);
        assert_eq!(e.what, None);
    }
}
