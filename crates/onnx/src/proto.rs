//! The ONNX messages the exporter writes, derived with prost from the field numbers of
//! onnx/onnx's `onnx.proto` (proto2; every field written is set, so proto3's "absent = default"
//! encoding prost uses reads back the same). Only what an inference graph of dense tensors needs
//! is here: no sparse tensors, functions, training info or external data (a model under 2 GB
//! fits in one file).

use prost::Message;

/// The IR version written: 8 is the first that opset 17 (`LayerNormalization`) may be used
/// with, and every onnxruntime since 1.12 reads it.
pub const IR_VERSION: i64 = 8;

/// The default ("ai.onnx") operator set the graph's nodes are from: 17 has
/// `LayerNormalization`, `Shape` with `start`/`end`, and `Unsqueeze`/`Squeeze` with their axes as
/// inputs.
pub const OPSET: i64 = 17;

/// `TensorProto.DataType`: 32-bit float.
pub const FLOAT: i32 = 1;
/// `TensorProto.DataType`: 64-bit signed integer.
pub const INT64: i32 = 7;

/// `AttributeProto.AttributeType` values used here.
pub mod attribute_type {
    /// A single float (`f`).
    pub const FLOAT: i32 = 1;
    /// A single integer (`i`).
    pub const INT: i32 = 2;
    /// A list of integers (`ints`).
    pub const INTS: i32 = 7;
}

/// A model file: the graph and the operator sets it uses.
#[derive(Clone, PartialEq, Message)]
pub struct ModelProto {
    /// The IR version the model targets.
    #[prost(int64, tag = "1")]
    pub ir_version: i64,
    /// The tool that wrote the model.
    #[prost(string, tag = "2")]
    pub producer_name: String,
    /// Its version.
    #[prost(string, tag = "3")]
    pub producer_version: String,
    /// Reverse-domain namespace of the model.
    #[prost(string, tag = "4")]
    pub domain: String,
    /// The model's own version.
    #[prost(int64, tag = "5")]
    pub model_version: i64,
    /// Free text (Markdown).
    #[prost(string, tag = "6")]
    pub doc_string: String,
    /// The graph.
    #[prost(message, optional, tag = "7")]
    pub graph: Option<GraphProto>,
    /// The operator sets the nodes bind to.
    #[prost(message, repeated, tag = "8")]
    pub opset_import: Vec<OperatorSetIdProto>,
    /// Key/value metadata (onnxruntime shows it as the session's custom metadata).
    #[prost(message, repeated, tag = "14")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

/// An operator set: a domain ("" is ai.onnx) and its version.
#[derive(Clone, PartialEq, Message)]
pub struct OperatorSetIdProto {
    /// The domain; empty for the standard operators.
    #[prost(string, tag = "1")]
    pub domain: String,
    /// The operator set's version.
    #[prost(int64, tag = "2")]
    pub version: i64,
}

/// One key/value pair of metadata.
#[derive(Clone, PartialEq, Message)]
pub struct StringStringEntryProto {
    /// The key.
    #[prost(string, tag = "1")]
    pub key: String,
    /// The value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// A graph: nodes in topological order, constant tensors, inputs and outputs.
#[derive(Clone, PartialEq, Message)]
pub struct GraphProto {
    /// The nodes, each after every node whose output it reads.
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeProto>,
    /// The graph's name.
    #[prost(string, tag = "2")]
    pub name: String,
    /// Named constant tensors (the weights).
    #[prost(message, repeated, tag = "5")]
    pub initializer: Vec<TensorProto>,
    /// Free text (Markdown).
    #[prost(string, tag = "10")]
    pub doc_string: String,
    /// The values the caller feeds.
    #[prost(message, repeated, tag = "11")]
    pub input: Vec<ValueInfoProto>,
    /// The values the caller gets back.
    #[prost(message, repeated, tag = "12")]
    pub output: Vec<ValueInfoProto>,
}

/// One operator application.
#[derive(Clone, PartialEq, Message)]
pub struct NodeProto {
    /// The values it reads, by name.
    #[prost(string, repeated, tag = "1")]
    pub input: Vec<String>,
    /// The values it writes, by name.
    #[prost(string, repeated, tag = "2")]
    pub output: Vec<String>,
    /// The node's own name (unique in the graph).
    #[prost(string, tag = "3")]
    pub name: String,
    /// The operator (`MatMul`, `LayerNormalization`...).
    #[prost(string, tag = "4")]
    pub op_type: String,
    /// Its attributes.
    #[prost(message, repeated, tag = "5")]
    pub attribute: Vec<AttributeProto>,
    /// The operator's domain; empty for ai.onnx.
    #[prost(string, tag = "7")]
    pub domain: String,
}

/// A named attribute of a node: one float, one integer or a list of integers here.
#[derive(Clone, PartialEq, Message)]
pub struct AttributeProto {
    /// The attribute's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// A float value.
    #[prost(float, optional, tag = "2")]
    pub f: Option<f32>,
    /// An integer value.
    #[prost(int64, optional, tag = "3")]
    pub i: Option<i64>,
    /// A list of integers.
    #[prost(int64, repeated, tag = "8")]
    pub ints: Vec<i64>,
    /// Which of the value fields is set ([`attribute_type`]).
    #[prost(int32, tag = "20")]
    pub r#type: i32,
}

impl AttributeProto {
    /// A float attribute.
    pub fn float(name: &str, value: f32) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            f: Some(value),
            r#type: attribute_type::FLOAT,
            ..Default::default()
        }
    }

    /// An integer attribute.
    pub fn int(name: &str, value: i64) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            i: Some(value),
            r#type: attribute_type::INT,
            ..Default::default()
        }
    }

    /// A list-of-integers attribute.
    pub fn ints(name: &str, values: &[i64]) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            ints: values.to_vec(),
            r#type: attribute_type::INTS,
            ..Default::default()
        }
    }
}

/// A constant tensor, its values little-endian in `raw_data`.
#[derive(Clone, PartialEq, Message)]
pub struct TensorProto {
    /// Its shape.
    #[prost(int64, repeated, tag = "1")]
    pub dims: Vec<i64>,
    /// Its element type ([`FLOAT`], [`INT64`]).
    #[prost(int32, tag = "2")]
    pub data_type: i32,
    /// Its name (the value name nodes read it by).
    #[prost(string, tag = "8")]
    pub name: String,
    /// The values, fixed width, little-endian, row-major.
    #[prost(bytes = "vec", tag = "9")]
    pub raw_data: Vec<u8>,
}

impl TensorProto {
    /// A float tensor of shape `dims` (row-major `values`).
    pub fn floats(name: &str, dims: &[usize], values: &[f32]) -> TensorProto {
        TensorProto {
            dims: dims.iter().map(|&d| d as i64).collect(),
            data_type: FLOAT,
            name: name.into(),
            raw_data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    /// An int64 tensor of shape `dims`.
    pub fn int64s(name: &str, dims: &[usize], values: &[i64]) -> TensorProto {
        TensorProto {
            dims: dims.iter().map(|&d| d as i64).collect(),
            data_type: INT64,
            name: name.into(),
            raw_data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }

    /// The number of elements its shape holds.
    pub fn len(&self) -> usize {
        self.dims.iter().map(|&d| d.max(0) as usize).product()
    }

    /// Whether its shape holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A named value's type: graph inputs and outputs carry one.
#[derive(Clone, PartialEq, Message)]
pub struct ValueInfoProto {
    /// The value's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its type.
    #[prost(message, optional, tag = "2")]
    pub r#type: Option<TypeProto>,
}

/// A value's type: here always a tensor.
#[derive(Clone, PartialEq, Message)]
pub struct TypeProto {
    /// The tensor type (`oneof value`'s `tensor_type`).
    #[prost(message, optional, tag = "1")]
    pub tensor_type: Option<TensorTypeProto>,
}

/// `TypeProto.Tensor`: an element type and a shape.
#[derive(Clone, PartialEq, Message)]
pub struct TensorTypeProto {
    /// The element type ([`FLOAT`], [`INT64`]).
    #[prost(int32, tag = "1")]
    pub elem_type: i32,
    /// The shape, each dimension a number or a name.
    #[prost(message, optional, tag = "2")]
    pub shape: Option<TensorShapeProto>,
}

/// A tensor's shape.
#[derive(Clone, PartialEq, Message)]
pub struct TensorShapeProto {
    /// The dimensions, outermost first.
    #[prost(message, repeated, tag = "1")]
    pub dim: Vec<Dimension>,
}

/// One dimension: a fixed size or a symbolic name (a dynamic axis).
#[derive(Clone, PartialEq, Message)]
pub struct Dimension {
    /// `oneof value`: `dim_value` or `dim_param`.
    #[prost(oneof = "DimensionValue", tags = "1, 2")]
    pub value: Option<DimensionValue>,
}

/// A dimension's value.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum DimensionValue {
    /// A fixed size.
    #[prost(int64, tag = "1")]
    DimValue(i64),
    /// A named, dynamic size (`batch`, `sequence`).
    #[prost(string, tag = "2")]
    DimParam(String),
}

/// A dimension of a value's shape, as [`value_info`] takes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Dim {
    /// Fixed.
    Fixed(usize),
    /// Dynamic, with this name.
    Named(&'static str),
}

/// The declared type of a graph input or output.
pub fn value_info(name: &str, elem_type: i32, dims: &[Dim]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|d| Dimension {
            value: Some(match d {
                Dim::Fixed(n) => DimensionValue::DimValue(*n as i64),
                Dim::Named(s) => DimensionValue::DimParam((*s).into()),
            }),
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TensorTypeProto {
                elem_type,
                shape: Some(TensorShapeProto { dim }),
            }),
        }),
    }
}

/// The bytes of `model` as a `.onnx` file holds them.
pub fn encode(model: &ModelProto) -> Vec<u8> {
    model.encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operator_set_encodes_to_the_bytes_onnx_proto_defines() {
        // Field 1 (string, wire type 2) = "", skipped by proto3 rules; field 2 (varint) = 17.
        let set = OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        };
        assert_eq!(set.encode_to_vec(), vec![0x10, 17]);
        let named = OperatorSetIdProto {
            domain: "ai".into(),
            version: 1,
        };
        assert_eq!(named.encode_to_vec(), vec![0x0a, 2, b'a', b'i', 0x10, 1]);
    }

    #[test]
    fn a_float_tensor_is_little_endian_raw_data_under_field_9() {
        let t = TensorProto::floats("w", &[2], &[1.0, -2.0]);
        let bytes = t.encode_to_vec();
        // dims (field 1, packed: tag 0x0a, length 1, value 2), data_type (field 2 = 1),
        // name (field 8 = "w"), raw_data (field 9, 8 bytes).
        let mut expected = vec![0x0a, 1, 2, 0x10, 1, 0x42, 1, b'w', 0x4a, 8];
        expected.extend(1.0f32.to_le_bytes());
        expected.extend((-2.0f32).to_le_bytes());
        assert_eq!(bytes, expected);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn attributes_carry_their_type_discriminator() {
        let a = AttributeProto::int("axis", -1);
        let back = AttributeProto::decode(a.encode_to_vec().as_slice()).unwrap();
        assert_eq!(back.r#type, attribute_type::INT);
        assert_eq!(back.i, Some(-1));
        // A zero still has to be written: onnxruntime reads a missing `i` as no value.
        let zero = AttributeProto::int("axis", 0).encode_to_vec();
        assert!(zero.windows(2).any(|w| w == [0x18, 0]), "{zero:?}");
        let e = AttributeProto::float("epsilon", 1e-12);
        assert_eq!(
            AttributeProto::decode(e.encode_to_vec().as_slice())
                .unwrap()
                .f,
            Some(1e-12)
        );
    }

    #[test]
    fn dynamic_dimensions_are_named_and_round_trip() {
        let v = value_info(
            "input_ids",
            INT64,
            &[Dim::Named("batch"), Dim::Named("sequence")],
        );
        let back = ValueInfoProto::decode(v.encode_to_vec().as_slice()).unwrap();
        assert_eq!(back, v);
        let dims = &back.r#type.unwrap().tensor_type.unwrap().shape.unwrap().dim;
        assert_eq!(
            dims[1].value,
            Some(DimensionValue::DimParam("sequence".into()))
        );
        // A fixed dimension of 0 is still a dimension (the oneof is written).
        let fixed = value_info("x", FLOAT, &[Dim::Fixed(0)]);
        assert_eq!(
            ValueInfoProto::decode(fixed.encode_to_vec().as_slice()).unwrap(),
            fixed
        );
    }
}
