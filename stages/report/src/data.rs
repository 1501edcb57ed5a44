//! The report's fixed data, kept out of the code: each built-in table's columns
//! (`data/columns.txt`), the task titles and the fixed sentences of the sections
//! (`data/texts.txt`). Both are embedded at build time, and build.rs folds them into the kind's
//! code version, so an edited sentence re-runs the report like a code change.

use crate::table::{Col, cols};

const COLUMNS: &str = include_str!("../data/columns.txt");
const TEXTS: &str = include_str!("../data/texts.txt");

/// The body of the `[name]` section of a file of sections (up to the next header).
fn section(file: &'static str, name: &str) -> Option<&'static str> {
    let header = format!("\n[{name}]\n");
    let start = file.find(&header)? + header.len();
    let end = file[start..].find("\n[").map_or(file.len(), |i| start + i);
    Some(&file[start..end])
}

/// The columns of a built-in table, `@other` lines taking those of section `other`. A table
/// without a section is a bug in the report, caught by the tests that build every table.
pub fn columns(table: &str) -> Vec<Col> {
    let body = section(COLUMNS, table)
        .unwrap_or_else(|| panic!("data/columns.txt has no section [{table}]"));
    body.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(|l| match l.trim().strip_prefix('@') {
            Some(other) => columns(other),
            None => cols(l),
        })
        .collect()
}

/// The text of `key` in data/texts.txt (`key = text`, one a line). A missing key is a bug in
/// the report, caught by the tests that build every section.
pub fn text(key: &str) -> &'static str {
    TEXTS
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(" = ")?;
            (k.trim() == key).then_some(v.trim())
        })
        .unwrap_or_else(|| panic!("data/texts.txt has no `{key}`"))
}

/// [`text`] as a paragraph: followed by a blank line.
pub fn para(key: &str) -> String {
    format!("{}\n\n", text(key))
}

/// [`text`] as a line.
pub fn line(key: &str) -> String {
    format!("{}\n", text(key))
}

/// A task's title: `task.<name>` in data/texts.txt, else its name in capitals.
pub fn task_title(task: &str) -> String {
    let key = format!("task.{task}");
    TEXTS
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(" = ")?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
        .unwrap_or_else(|| task.to_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_section_reads_and_includes_resolve() {
        let sections: Vec<&str> = COLUMNS
            .lines()
            .filter_map(|l| l.strip_prefix('[')?.strip_suffix(']'))
            .collect();
        assert!(sections.len() >= 10, "{sections:?}");
        for s in sections {
            assert!(!columns(s).is_empty(), "[{s}]");
        }
        let grid = columns("model_size_grid");
        assert_eq!(grid[0].key, "embedding_size", "@size comes first");
        assert_eq!(task_title("lcqmc"), "LCQMC (question matching)");
        assert_eq!(task_title("my_task"), "MY_TASK");
    }
}
