//! Reading the YAML tree with the position of every mistake: [`Cx`] knows the file and its
//! text, so each check below (a mapping without duplicate keys, a string, a list of strings)
//! fails as a [`UserError`] quoting the offending line.

use std::path::Path;

use crate::error::UserError;
use crate::yaml::{Located, Mark, Node, NodeValue};

/// The file being checked: its name and text, for the errors.
pub(super) struct Cx<'a> {
    pub(super) path: &'a Path,
    pub(super) source: &'a str,
}

impl Cx<'_> {
    pub(super) fn err(&self, mark: Mark, message: impl Into<String>) -> UserError {
        UserError::at(self.path, self.source, mark, message)
    }

    /// A mapping with string keys and no duplicates.
    pub(super) fn map<'n>(
        &self,
        node: &'n Node,
        what: &str,
    ) -> Result<Vec<(Located<String>, &'n Node)>, UserError> {
        let NodeValue::Map(entries) = &node.value else {
            return Err(self.err(
                node.mark,
                format!("{what} must be a mapping, found {}", node.type_name()),
            ));
        };
        let mut out: Vec<(Located<String>, &Node)> = Vec::with_capacity(entries.len());
        for (k, v) in entries.iter() {
            let Some(name) = k.scalar_text() else {
                return Err(self.err(
                    k.mark,
                    format!("keys of {what} must be strings, found {}", k.type_name()),
                ));
            };
            if let Some((first, _)) = out.iter().find(|(f, _)| f.value == name) {
                let noun = if what == "`stages`" { "stage" } else { "key" };
                return Err(self
                    .err(k.mark, format!("duplicate {noun} `{name}` in {what}"))
                    .with_help(format!(
                        "it is first defined on line {}; rename or remove one of them",
                        first.mark.line
                    )));
            }
            out.push((
                Located {
                    value: name.to_string(),
                    mark: k.mark,
                },
                v,
            ));
        }
        Ok(out)
    }

    pub(super) fn string(&self, node: &Node, what: &str) -> Result<Located<String>, UserError> {
        match &node.value {
            NodeValue::Scalar { text, .. } if !node.is_null() => Ok(Located {
                value: text.clone(),
                mark: node.mark,
            }),
            _ => Err(self.err(
                node.mark,
                format!("{what} must be a string, found {}", node.type_name()),
            )),
        }
    }

    /// A list of strings; a single string is accepted as a list of one.
    pub(super) fn strings(
        &self,
        node: &Node,
        what: &str,
    ) -> Result<Vec<Located<String>>, UserError> {
        match &node.value {
            NodeValue::Seq(items) => items
                .iter()
                .map(|i| self.string(i, &format!("each entry of {what}")))
                .collect(),
            NodeValue::Scalar { .. } if node.is_null() => Ok(Vec::new()),
            NodeValue::Scalar { .. } if matches!(node.to_json(), serde_json::Value::String(_)) => {
                Ok(vec![self.string(node, what)?])
            }
            _ => Err(self.err(
                node.mark,
                format!(
                    "{what} must be a list of strings, found {}",
                    node.type_name()
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::PipelineFile;
    use crate::error::UserError;
    use std::path::Path;

    fn parse(text: &str) -> Result<PipelineFile, UserError> {
        PipelineFile::parse(Path::new("pipeline.yaml"), text.to_string())
    }

    #[test]
    fn duplicate_stage_names_the_first_line() {
        let e = parse("stages:\n  a:\n    cmd: x\n  a:\n    cmd: y\n").unwrap_err();
        assert!(e.message.contains("duplicate stage `a`"), "{e}");
        assert!(e.help.unwrap().contains("line 2"));
    }

    #[test]
    fn wrong_types_are_named() {
        let e = parse("stages:\n  a:\n    cmd: x\n    deps: 5\n").unwrap_err();
        assert!(
            e.message
                .contains("must be a list of strings, found a number"),
            "{e}"
        );
        let e = parse("stages:\n  a:\n    cmd: x\n    params: [1]\n").unwrap_err();
        assert!(e.message.contains("must be a mapping, found a list"), "{e}");
    }
}
