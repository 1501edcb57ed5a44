//! A YAML document as a tree of nodes that remember where they came from.
//!
//! yaml-rust2's event parser gives every node its line and column; keeping them lets every
//! configuration error point at the exact spot in `pipeline.yaml` (serde-based YAML crates
//! report positions for syntax errors only, not for the semantic checks done afterwards).

use std::collections::HashMap;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// A position in the source file (1-based line and column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Mark {
    pub line: usize,
    pub col: usize,
}

#[derive(Debug, Clone)]
pub struct Node {
    pub mark: Mark,
    pub value: NodeValue,
}

#[derive(Debug, Clone)]
pub enum NodeValue {
    /// `plain` scalars are unquoted and resolve to null, bools and numbers as YAML 1.2 says;
    /// quoted ones are always strings.
    Scalar {
        text: String,
        plain: bool,
    },
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

impl Node {
    pub fn type_name(&self) -> &'static str {
        match &self.value {
            NodeValue::Scalar { .. } => match self.to_json() {
                serde_json::Value::Null => "null",
                serde_json::Value::Bool(_) => "a boolean",
                serde_json::Value::Number(_) => "a number",
                _ => "a string",
            },
            NodeValue::Seq(_) => "a list",
            NodeValue::Map(_) => "a mapping",
        }
    }

    /// The node as JSON (the form params take in fingerprints and in `PIPELINE_PARAMS`).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        match &self.value {
            NodeValue::Scalar { text, plain } => {
                if *plain {
                    scalar_to_json(text)
                } else {
                    Value::String(text.clone())
                }
            }
            NodeValue::Seq(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            NodeValue::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.scalar_text().unwrap_or_default().to_string(), v.to_json()))
                    .collect(),
            ),
        }
    }

    pub fn scalar_text(&self) -> Option<&str> {
        match &self.value {
            NodeValue::Scalar { text, .. } => Some(text),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self.to_json(), serde_json::Value::Null)
            && matches!(self.value, NodeValue::Scalar { .. })
    }
}

/// Resolves a plain (unquoted) scalar the way YAML's core schema does.
pub fn scalar_to_json(text: &str) -> serde_json::Value {
    use serde_json::Value;
    match yaml_rust2::Yaml::from_str(text) {
        yaml_rust2::Yaml::Null => Value::Null,
        yaml_rust2::Yaml::Boolean(b) => Value::Bool(b),
        yaml_rust2::Yaml::Integer(i) => Value::from(i),
        yaml_rust2::Yaml::Real(r) => {
            match r.parse::<f64>().ok().and_then(serde_json::Number::from_f64) {
                Some(n) => Value::Number(n),
                // .inf and .nan have no JSON form; keep the text so nothing is lost.
                None => Value::String(r),
            }
        }
        _ => Value::String(text.to_string()),
    }
}

#[derive(Debug)]
pub struct SyntaxError {
    pub mark: Mark,
    pub message: String,
}

/// Parses one YAML document. An empty document gives `None`.
pub fn parse(text: &str) -> Result<Option<Node>, SyntaxError> {
    let mut builder = Builder::default();
    let mut parser = Parser::new_from_str(text);
    parser.load(&mut builder, false).map_err(|e| SyntaxError {
        mark: to_mark(e.marker()),
        message: e.info().to_string(),
    })?;
    if let Some(err) = builder.error {
        return Err(err);
    }
    Ok(builder.root)
}

fn to_mark(m: &Marker) -> Mark {
    Mark {
        line: m.line(),
        col: m.col() + 1,
    }
}

enum Open {
    Seq(Mark, usize, Vec<Node>),
    Map(Mark, usize, Vec<(Node, Node)>, Option<Node>),
}

#[derive(Default)]
struct Builder {
    stack: Vec<Open>,
    root: Option<Node>,
    anchors: HashMap<usize, Node>,
    error: Option<SyntaxError>,
}

impl Builder {
    fn push_node(&mut self, node: Node, anchor: usize) {
        if anchor > 0 {
            self.anchors.insert(anchor, node.clone());
        }
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some(Open::Seq(_, _, items)) => items.push(node),
            Some(Open::Map(_, _, entries, pending_key)) => match pending_key.take() {
                None => *pending_key = Some(node),
                Some(key) => entries.push((key, node)),
            },
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, marker: Marker) {
        let mark = to_mark(&marker);
        match ev {
            Event::Scalar(text, style, anchor, _tag) => {
                let plain = matches!(style, TScalarStyle::Plain);
                self.push_node(
                    Node {
                        mark,
                        value: NodeValue::Scalar { text, plain },
                    },
                    anchor,
                );
            }
            Event::SequenceStart(anchor, _) => self.stack.push(Open::Seq(mark, anchor, Vec::new())),
            Event::MappingStart(anchor, _) => {
                self.stack.push(Open::Map(mark, anchor, Vec::new(), None))
            }
            Event::SequenceEnd => {
                if let Some(Open::Seq(m, anchor, items)) = self.stack.pop() {
                    self.push_node(
                        Node {
                            mark: m,
                            value: NodeValue::Seq(items),
                        },
                        anchor,
                    );
                }
            }
            Event::MappingEnd => {
                if let Some(Open::Map(m, anchor, entries, _)) = self.stack.pop() {
                    self.push_node(
                        Node {
                            mark: m,
                            value: NodeValue::Map(entries),
                        },
                        anchor,
                    );
                }
            }
            Event::Alias(id) => match self.anchors.get(&id).cloned() {
                Some(mut node) => {
                    node.mark = mark;
                    self.push_node(node, 0);
                }
                None => {
                    self.error.get_or_insert(SyntaxError {
                        mark,
                        message: "alias to an unknown anchor".into(),
                    });
                }
            },
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_one_based_and_point_at_the_node() {
        let root = parse("a: 1\nb:\n  - x\n  - 'y'\n").unwrap().unwrap();
        let NodeValue::Map(entries) = &root.value else {
            panic!()
        };
        assert_eq!(entries[0].0.mark, Mark { line: 1, col: 1 });
        assert_eq!(entries[1].0.mark, Mark { line: 2, col: 1 });
        let NodeValue::Seq(items) = &entries[1].1.value else {
            panic!()
        };
        assert_eq!(items[1].mark, Mark { line: 4, col: 5 });
        assert_eq!(items[1].to_json(), serde_json::json!("y"));
    }

    #[test]
    fn plain_scalars_resolve_quoted_stay_strings() {
        let root = parse("a: 1e-4\nb: '3'\nc: true\nd: ~\ne: 12\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            root.to_json(),
            serde_json::json!({"a": 0.0001, "b": "3", "c": true, "d": null, "e": 12})
        );
    }

    #[test]
    fn syntax_error_has_a_position() {
        let err = parse("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(err.mark.line >= 1, "{err:?}");
    }

    #[test]
    fn empty_document_is_none() {
        assert!(parse("# nothing\n").unwrap().is_none());
    }
}
