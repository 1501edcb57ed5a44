//! A YAML document as a tree of nodes that remember where they came from.
//!
//! yaml-rust2's event parser gives every node its line and column; keeping them lets every
//! configuration error point at the exact spot in `pipeline.yaml` (serde-based YAML crates
//! report positions for syntax errors only, not for the semantic checks done afterwards).

use std::collections::HashMap;
use std::sync::Arc;

use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// A value from the file and where it was written.
#[derive(Debug, Clone)]
pub struct Located<T> {
    /// The value as read.
    pub value: T,
    /// Where it starts in the file, for errors about it.
    pub mark: Mark,
}

/// A position in the source file (1-based line and column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Mark {
    /// Line, from 1.
    pub line: usize,
    /// Column in characters, from 1.
    pub col: usize,
}

/// One node of the document: a scalar, list or mapping, with where it starts.
#[derive(Debug, Clone)]
pub struct Node {
    /// Where the node starts in the file; for a node an alias copied in, where the alias is.
    pub mark: Mark,
    /// What the node holds.
    pub value: NodeValue,
}

/// Lists and mappings are shared (`Arc`), not copied, between an anchor, the tree and each
/// alias of it: nested anchors (`&a [&b [&c [...]]]`) once kept a full copy of every anchored
/// node, so ~63 levels in a 4 MiB file could hold ~10 GB before any alias was counted.
#[derive(Debug, Clone)]
pub enum NodeValue {
    /// `plain` scalars are unquoted and resolve to null, bools and numbers as YAML 1.2 says;
    /// quoted ones are always strings.
    Scalar {
        /// The value with quotes and escapes resolved (`"a\tb"` holds a tab).
        text: String,
        /// Written without quotes.
        plain: bool,
    },
    /// A list, items in order.
    Seq(Arc<Vec<Node>>),
    /// A mapping, key and value in the order written, merge keys (`<<`) already applied.
    Map(Arc<Vec<(Node, Node)>>),
}

impl Node {
    /// What the node is, as error messages say it after "found": `null`, `a boolean`,
    /// `a number`, `a string`, `a list` or `a mapping`.
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

    /// A scalar's text before type resolution (`1e-4` stays `1e-4`); `None` for a list or
    /// mapping.
    pub fn scalar_text(&self) -> Option<&str> {
        match &self.value {
            NodeValue::Scalar { text, .. } => Some(text),
            _ => None,
        }
    }

    /// Whether the node is a null scalar (`~`, `null` or nothing at all); the quoted `"null"`
    /// is a string.
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

/// Refusals that keep memory bounded whatever the file says. A real pipeline.yaml is a few
/// hundred nodes (a 10,000-value matrix is ~10,000); these are orders of magnitude above that
/// and orders below what hurts (the "billion laughs" file that took 21 GB before the limit is
/// refused after ~1 ms).
pub mod limits {
    /// Nodes and scalar bytes that aliases may add to the document, counted before copying.
    pub const ALIAS_WEIGHT: usize = 4 << 20;
    /// How deep lists and mappings may nest (`Node`'s clone, drop and `to_json` recurse).
    pub const DEPTH: usize = 64;
    /// The largest pipeline file read at all.
    pub const FILE_BYTES: u64 = 4 << 20;
}

/// Why a document could not be read: the YAML parser's complaint, or one of the [`limits`]
/// (depth, alias expansion) that it went past.
#[derive(Debug)]
pub struct SyntaxError {
    /// Where the parser stopped, or the node that went past a limit.
    pub mark: Mark,
    /// What is wrong, without the position.
    pub message: String,
}

/// Parses one YAML document (a second one in the same stream is ignored). An empty document
/// gives `None`. Aliases are expanded within [`limits::ALIAS_WEIGHT`], nesting is limited to
/// [`limits::DEPTH`], and merge keys (`<<: *base`, `<<: [*a, *b]`) copy the keys the mapping
/// does not set itself.
///
/// The parser is pulled event by event rather than through `Parser::load`, whose recursion
/// would overflow the stack on deep nesting before any limit of ours could stop it.
pub fn parse(text: &str) -> Result<Option<Node>, SyntaxError> {
    let mut builder = Builder::default();
    let mut parser = Parser::new_from_str(text);
    let mut started = false;
    loop {
        let (ev, marker) = parser.next_token().map_err(|e| SyntaxError {
            mark: to_mark(e.marker()),
            // The scanner's own limit on flow nesting (`[[[…`), which it may reach before ours.
            message: match e.info() {
                "recursion limit exceeded" => format!(
                    "lists and mappings nest deeper than {} levels here",
                    limits::DEPTH
                ),
                info => info.to_string(),
            },
        })?;
        match ev {
            Event::StreamEnd => break,
            Event::DocumentStart if started => break,
            Event::DocumentStart => started = true,
            Event::DocumentEnd => break,
            ev => builder.on_event(ev, to_mark(&marker)),
        }
        if let Some(err) = builder.error.take() {
            return Err(err);
        }
    }
    Ok(builder.root)
}

fn to_mark(m: &Marker) -> Mark {
    Mark {
        line: m.line(),
        col: m.col() + 1,
    }
}

/// What a node costs to copy out in full (as `to_json` and the config reader do): its weight
/// (nodes plus scalar bytes) and its height (levels of nesting).
#[derive(Debug, Clone, Copy)]
struct Size {
    weight: usize,
    height: usize,
}

impl Size {
    const CONTAINER: Size = Size {
        weight: 1,
        height: 1,
    };

    /// A container's size after one more child.
    fn add(&mut self, child: Size) {
        self.weight += child.weight;
        self.height = self.height.max(child.height + 1);
    }
}

/// An open list or mapping: where it starts, its anchor, what it holds so far and their size.
enum Open {
    Seq(Mark, usize, Vec<Node>, Size),
    Map(Mark, usize, Vec<(Node, Node)>, Option<Node>, Size),
}

/// An anchored node (shared with the tree, see [`NodeValue`]) and its size.
struct Anchored {
    node: Node,
    size: Size,
}

#[derive(Default)]
struct Builder {
    stack: Vec<Open>,
    root: Option<Node>,
    anchors: HashMap<usize, Anchored>,
    /// What aliases have added so far.
    alias_weight: usize,
    error: Option<SyntaxError>,
}

impl Builder {
    fn fail(&mut self, mark: Mark, message: String) {
        self.error.get_or_insert(SyntaxError { mark, message });
    }

    /// Adds a finished node to the open container (or makes it the root). Sizes add up as
    /// nodes finish, so no tree is walked twice (nested anchors once measured each level's
    /// subtree again).
    fn push_node(&mut self, node: Node, size: Size, anchor: usize) {
        if anchor > 0 {
            let node = node.clone();
            self.anchors.insert(anchor, Anchored { node, size });
        }
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some(Open::Seq(_, _, items, total)) => {
                total.add(size);
                items.push(node);
            }
            Some(Open::Map(_, _, entries, pending_key, total)) => {
                total.add(size);
                match pending_key.take() {
                    None => *pending_key = Some(node),
                    Some(key) => entries.push((key, node)),
                }
            }
        }
    }

    fn open(&mut self, mark: Mark, open: Open) {
        if self.stack.len() >= limits::DEPTH {
            self.fail(
                mark,
                format!(
                    "lists and mappings nest deeper than {} levels here",
                    limits::DEPTH
                ),
            );
            return;
        }
        self.stack.push(open);
    }

    fn alias(&mut self, mark: Mark, id: usize) {
        let Some(a) = self.anchors.get(&id) else {
            return self.fail(mark, "alias to an unknown anchor".into());
        };
        if self.stack.len() + a.size.height > limits::DEPTH {
            let msg = format!(
                "this alias nests lists and mappings deeper than {} levels",
                limits::DEPTH
            );
            return self.fail(mark, msg);
        }
        if self.alias_weight + a.size.weight > limits::ALIAS_WEIGHT {
            let msg = format!(
                "aliases expand to more than {} nodes and bytes (nested aliases multiply: \
                 the \"billion laughs\" pattern); write the values out or use fewer levels",
                limits::ALIAS_WEIGHT
            );
            return self.fail(mark, msg);
        }
        self.alias_weight += a.size.weight;
        let size = a.size;
        let mut node = a.node.clone();
        node.mark = mark;
        self.push_node(node, size, 0);
    }

    fn close_map(&mut self, mark: Mark, anchor: usize, entries: Vec<(Node, Node)>, size: Size) {
        match merge_keys(entries) {
            Ok(entries) => self.push_node(
                Node {
                    mark,
                    value: NodeValue::Map(Arc::new(entries)),
                },
                size,
                anchor,
            ),
            Err((at, msg)) => self.fail(at, msg),
        }
    }

    fn on_event(&mut self, ev: Event, mark: Mark) {
        if self.error.is_some() {
            return;
        }
        match ev {
            Event::Scalar(text, style, anchor, _tag) => {
                let plain = matches!(style, TScalarStyle::Plain);
                let size = Size {
                    weight: 1 + text.len(),
                    height: 0,
                };
                let value = NodeValue::Scalar { text, plain };
                self.push_node(Node { mark, value }, size, anchor);
            }
            Event::SequenceStart(anchor, _) => {
                let open = Open::Seq(mark, anchor, Vec::new(), Size::CONTAINER);
                self.open(mark, open)
            }
            Event::MappingStart(anchor, _) => {
                let open = Open::Map(mark, anchor, Vec::new(), None, Size::CONTAINER);
                self.open(mark, open)
            }
            Event::SequenceEnd => {
                if let Some(Open::Seq(m, anchor, items, size)) = self.stack.pop() {
                    let value = NodeValue::Seq(Arc::new(items));
                    self.push_node(Node { mark: m, value }, size, anchor);
                }
            }
            Event::MappingEnd => {
                if let Some(Open::Map(m, anchor, entries, _, size)) = self.stack.pop() {
                    self.close_map(m, anchor, entries, size);
                }
            }
            Event::Alias(id) => self.alias(mark, id),
            _ => {}
        }
    }
}

/// YAML 1.1 merge keys: `<<: *base` (or a list of them) adds the keys of the merged mappings
/// that the mapping does not set itself; of several merged mappings the first wins.
fn merge_keys(entries: Vec<(Node, Node)>) -> Result<Vec<(Node, Node)>, (Mark, String)> {
    let is_merge =
        |k: &Node| matches!(&k.value, NodeValue::Scalar { text, plain: true } if text == "<<");
    if !entries.iter().any(|(k, _)| is_merge(k)) {
        return Ok(entries);
    }
    let (merges, mut own): (Vec<_>, Vec<_>) = entries.into_iter().partition(|(k, _)| is_merge(k));
    let mut sources = Vec::new();
    for (_, v) in merges {
        match &v.value {
            NodeValue::Map(_) => sources.push(v),
            NodeValue::Seq(items) => sources.extend(items.iter().cloned()),
            NodeValue::Scalar { .. } => {
                return Err((
                    v.mark,
                    "a merge key `<<` takes a mapping (`<<: *base`) or a list of them".into(),
                ));
            }
        }
    }
    // A set, not a scan of `own` per merged key: both sides may have ~10^5 keys.
    let mut taken: std::collections::HashSet<Option<String>> = own
        .iter()
        .map(|(k, _)| k.scalar_text().map(str::to_string))
        .collect();
    for source in sources {
        let NodeValue::Map(extra) = &source.value else {
            return Err((
                source.mark,
                "a merge key `<<` takes a mapping (`<<: *base`) or a list of them".into(),
            ));
        };
        for (k, v) in extra.iter() {
            if taken.insert(k.scalar_text().map(str::to_string)) {
                own.push((k.clone(), v.clone()));
            }
        }
    }
    Ok(own)
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

    #[test]
    fn nested_aliases_are_refused_before_they_expand() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            let prev = format!("*a{}", i - 1);
            text.push_str(&format!("a{i}: &a{i} [{}]\n", vec![prev; 10].join(", ")));
        }
        let err = parse(&text).unwrap_err();
        assert!(err.message.contains("billion laughs"), "{err:?}");
        assert!(err.mark.line > 1 && err.mark.line <= 12, "{err:?}");
    }

    #[test]
    fn nested_anchors_share_their_nodes() {
        // 60 anchored levels around one list: each level once held its own copy of the list.
        let inner = vec!["x"; 1000].join(", ");
        let text = format!(
            "a: {}[{inner}]{}\nb: *l0\n",
            (0..60).map(|i| format!("&l{i} [")).collect::<String>(),
            "]".repeat(60)
        );
        let root = parse(&text).unwrap().unwrap();
        let NodeValue::Map(entries) = &root.value else {
            panic!()
        };
        let (NodeValue::Seq(a), NodeValue::Seq(b)) = (&entries[0].1.value, &entries[1].1.value)
        else {
            panic!()
        };
        assert!(Arc::ptr_eq(a, b), "the alias shares the anchored list");
        let mut deepest = b;
        while let Some(Node {
            value: NodeValue::Seq(next),
            ..
        }) = deepest.first()
        {
            deepest = next;
        }
        assert_eq!(deepest.len(), 1000);
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let text = format!("a: {}1{}\n", "[".repeat(100_000), "]".repeat(100_000));
        let err = parse(&text).unwrap_err();
        assert!(err.message.contains("deeper than 64"), "{err:?}");
    }

    #[test]
    fn merge_keys_copy_what_the_mapping_does_not_set() {
        let root = parse("base: &b {x: 1, y: 2}\nother: &o {z: 3}\nm:\n  <<: [*b, *o]\n  y: 5\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            root.to_json()["m"],
            serde_json::json!({"y": 5, "x": 1, "z": 3})
        );
        let err = parse("m:\n  <<: 3\n").unwrap_err();
        assert!(err.message.contains("merge key"), "{err:?}");
        assert_eq!(err.mark.line, 2);
    }
}
