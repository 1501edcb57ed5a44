//! A small builder for an ONNX graph, and the check that what it built is well formed.
//!
//! The builder names every value it creates (`scope/Op_n`, a counter making it unique) and
//! appends nodes in the order they are asked for, so a node can only read values that exist
//! already: the graph comes out in topological order, as `GraphProto` requires. [`check`]
//! verifies that anyway, on the finished graph, because onnxruntime's own complaint about a
//! dangling input names a value and not the code that forgot it.

use std::collections::{HashMap, HashSet};

use crate::proto::{
    AttributeProto, Dim, GraphProto, NodeProto, TensorProto, ValueInfoProto, value_info,
};

/// A graph that is not well formed: a value read before (or without) being produced, or a
/// name given twice. A bug in the exporter, not in the model.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GraphError {
    /// A node reads a value no graph input, initializer or earlier node provides.
    #[error("node {node} ({op}) reads {value}, which nothing before it produces")]
    Undefined {
        /// The node's name.
        node: String,
        /// Its operator.
        op: String,
        /// The value it reads.
        value: String,
    },
    /// Two inputs, initializers or node outputs share a name.
    #[error("the value {0} is defined twice")]
    DuplicateValue(String),
    /// Two nodes share a name.
    #[error("two nodes are named {0}")]
    DuplicateNode(String),
    /// A graph output no node, input or initializer provides.
    #[error("the graph output {0} is never produced")]
    MissingOutput(String),
}

/// An ONNX graph under construction.
#[derive(Debug, Default)]
pub struct Graph {
    nodes: Vec<NodeProto>,
    initializers: Vec<TensorProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
    scope: String,
    counter: usize,
    /// Constants already made, by their values, so that `[-1]` is one initializer.
    int_constants: HashMap<Vec<i64>, String>,
    int_scalars: HashMap<i64, String>,
    float_constants: HashMap<u32, String>,
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph::default()
    }

    /// Names the nodes created from now on `scope/Op_n` (a readable path in a viewer).
    pub fn set_scope(&mut self, scope: &str) {
        self.scope = scope.to_string();
    }

    /// Declares a graph input and returns its name.
    pub fn input(&mut self, name: &str, elem_type: i32, dims: &[Dim]) -> String {
        self.inputs.push(value_info(name, elem_type, dims));
        name.to_string()
    }

    /// Adds a float initializer (a weight) and returns its name.
    pub fn weight(&mut self, name: &str, dims: &[usize], values: &[f32]) -> String {
        self.initializers
            .push(TensorProto::floats(name, dims, values));
        name.to_string()
    }

    /// A 1-D int64 constant (shapes, axes, indices), made once per distinct value.
    pub fn ints(&mut self, values: &[i64]) -> String {
        if let Some(name) = self.int_constants.get(values) {
            return name.clone();
        }
        let name = format!("const/ints_{}", self.next());
        self.initializers
            .push(TensorProto::int64s(&name, &[values.len()], values));
        self.int_constants.insert(values.to_vec(), name.clone());
        name
    }

    /// A 0-D int64 constant (a scalar index).
    pub fn int_scalar(&mut self, value: i64) -> String {
        if let Some(name) = self.int_scalars.get(&value) {
            return name.clone();
        }
        let name = format!("const/int_scalar_{}", self.next());
        self.initializers
            .push(TensorProto::int64s(&name, &[], &[value]));
        self.int_scalars.insert(value, name.clone());
        name
    }

    /// A 0-D float constant, made once per distinct value.
    pub fn float(&mut self, value: f32) -> String {
        if let Some(name) = self.float_constants.get(&value.to_bits()) {
            return name.clone();
        }
        let name = format!("const/float_{}", self.next());
        self.initializers
            .push(TensorProto::floats(&name, &[], &[value]));
        self.float_constants.insert(value.to_bits(), name.clone());
        name
    }

    fn next(&mut self) -> usize {
        self.counter += 1;
        self.counter
    }

    /// Appends a node of one output and returns the output's name.
    pub fn op(
        &mut self,
        op_type: &str,
        inputs: &[&str],
        attributes: Vec<AttributeProto>,
    ) -> String {
        self.op_n(op_type, inputs, 1, attributes).remove(0)
    }

    /// Appends a node of `outputs` outputs and returns their names.
    pub fn op_n(
        &mut self,
        op_type: &str,
        inputs: &[&str],
        outputs: usize,
        attribute: Vec<AttributeProto>,
    ) -> Vec<String> {
        let n = self.next();
        let name = format!("{}/{op_type}_{n}", self.scope);
        let output: Vec<String> = match outputs {
            1 => vec![name.clone()],
            n => (0..n).map(|i| format!("{name}:{i}")).collect(),
        };
        self.nodes.push(NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: output.clone(),
            name,
            op_type: op_type.into(),
            attribute,
            domain: String::new(),
        });
        output
    }

    /// Declares `value` a graph output named `name` (through an `Identity`, which
    /// onnxruntime removes at load).
    pub fn output(&mut self, value: &str, name: &str, elem_type: i32, dims: &[Dim]) {
        self.nodes.push(NodeProto {
            input: vec![value.to_string()],
            output: vec![name.to_string()],
            name: format!("output/{name}"),
            op_type: "Identity".into(),
            attribute: Vec::new(),
            domain: String::new(),
        });
        self.outputs.push(value_info(name, elem_type, dims));
    }

    /// The values of the float initializers (the model's parameters, constants aside).
    pub fn parameters(&self) -> usize {
        self.initializers
            .iter()
            .filter(|t| !t.name.starts_with("const/"))
            .map(TensorProto::len)
            .sum()
    }

    /// The finished graph, checked with [`check`].
    pub fn finish(self, name: &str, doc: &str) -> Result<GraphProto, GraphError> {
        let graph = GraphProto {
            node: self.nodes,
            name: name.into(),
            initializer: self.initializers,
            doc_string: doc.into(),
            input: self.inputs,
            output: self.outputs,
        };
        check(&graph)?;
        Ok(graph)
    }
}

/// Checks that `graph` is well formed: names unique (values and nodes), every node input
/// produced before the node (by a graph input, an initializer or an earlier node; an empty
/// name is an omitted optional input), every graph output produced.
pub fn check(graph: &GraphProto) -> Result<(), GraphError> {
    let mut defined: HashSet<&str> = HashSet::new();
    let declared = graph
        .input
        .iter()
        .map(|v| v.name.as_str())
        .chain(graph.initializer.iter().map(|t| t.name.as_str()));
    for name in declared {
        if !defined.insert(name) {
            return Err(GraphError::DuplicateValue(name.into()));
        }
    }
    let mut node_names = HashSet::new();
    for node in &graph.node {
        if !node.name.is_empty() && !node_names.insert(node.name.as_str()) {
            return Err(GraphError::DuplicateNode(node.name.clone()));
        }
        if let Some(value) = node
            .input
            .iter()
            .find(|v| !v.is_empty() && !defined.contains(v.as_str()))
        {
            return Err(GraphError::Undefined {
                node: node.name.clone(),
                op: node.op_type.clone(),
                value: value.clone(),
            });
        }
        for out in &node.output {
            if !defined.insert(out.as_str()) {
                return Err(GraphError::DuplicateValue(out.clone()));
            }
        }
    }
    match graph
        .output
        .iter()
        .find(|o| !defined.contains(o.name.as_str()))
    {
        Some(o) => Err(GraphError::MissingOutput(o.name.clone())),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{FLOAT, INT64};

    fn small() -> Graph {
        let mut g = Graph::new();
        let x = g.input("x", FLOAT, &[Dim::Named("batch"), Dim::Fixed(2)]);
        let w = g.weight("w", &[2, 3], &[0.0; 6]);
        g.set_scope("layer");
        let y = g.op("MatMul", &[&x, &w], vec![]);
        let y = g.op("Relu", &[&y], vec![]);
        g.output(&y, "y", FLOAT, &[Dim::Named("batch"), Dim::Fixed(3)]);
        g
    }

    #[test]
    fn a_built_graph_is_in_order_with_unique_scoped_names() {
        let g = small();
        assert_eq!(g.parameters(), 6);
        let graph = g.finish("g", "").unwrap();
        let names: Vec<&str> = graph.node.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["layer/MatMul_1", "layer/Relu_2", "output/y"]);
        assert_eq!(graph.node[1].input, ["layer/MatMul_1"]);
    }

    #[test]
    fn constants_are_made_once_per_value() {
        let mut g = Graph::new();
        let a = g.ints(&[-1]);
        let b = g.ints(&[-1]);
        let s = g.int_scalar(-1);
        let f = g.float(0.5);
        assert_eq!(a, b);
        assert_ne!(a, s, "a scalar and a 1-D constant differ in shape");
        assert_eq!(f, g.float(0.5));
        assert_ne!(f, g.float(0.25));
        assert_eq!(g.initializers.len(), 4);
        assert_eq!(g.parameters(), 0, "constants are not parameters");
        let split = g.op_n("Split", &[&f], 2, vec![]);
        assert_eq!(split.len(), 2);
        assert_ne!(split[0], split[1]);
    }

    #[test]
    fn reading_a_value_before_it_exists_is_refused() {
        let mut graph = small().finish("g", "").unwrap();
        graph.node.swap(0, 1);
        let e = check(&graph).unwrap_err();
        assert!(
            matches!(&e, GraphError::Undefined { value, .. } if value == "layer/MatMul_1"),
            "{e}"
        );
        let mut dangling = small().finish("g", "").unwrap();
        dangling.node[0].input[1] = "nowhere".into();
        assert!(matches!(
            check(&dangling),
            Err(GraphError::Undefined { .. })
        ));
    }

    #[test]
    fn duplicate_names_and_missing_outputs_are_refused() {
        let mut twice = small().finish("g", "").unwrap();
        twice.initializer.push(twice.initializer[0].clone());
        assert_eq!(check(&twice), Err(GraphError::DuplicateValue("w".into())));
        let mut nodes = small().finish("g", "").unwrap();
        nodes.node[1].name = nodes.node[0].name.clone();
        assert!(matches!(check(&nodes), Err(GraphError::DuplicateNode(_))));
        let mut outputs = small().finish("g", "").unwrap();
        outputs.output.push(value_info("z", INT64, &[]));
        assert_eq!(check(&outputs), Err(GraphError::MissingOutput("z".into())));
        // An empty input name is an omitted optional input, not a dangling one.
        let mut optional = small().finish("g", "").unwrap();
        optional.node[1].input.push(String::new());
        assert_eq!(check(&optional), Ok(()));
    }
}
