//! `pipeline dag`: the stage instances and their deps, as text, Graphviz dot, Mermaid or JSON.

use std::process::ExitCode;

use anyhow::Result;
use clap::ValueEnum;
use serde_json::json;
use unicode_width::UnicodeWidthStr;

use crate::global::{Global, load, print_json};
use crate::sanitize;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DagFormat {
    Text,
    Dot,
    Mermaid,
}

pub fn dag(global: &Global, format: DagFormat, json: bool) -> Result<ExitCode> {
    let p = load(global)?;
    let insts = &p.plan.instances;
    if json {
        let stages: Vec<_> = insts
            .iter()
            .map(|i| {
                let deps: Vec<&str> = i.deps.iter().map(|d| insts[*d].name.as_str()).collect();
                json!({"instance": i.name, "stage": i.stage, "kind": i.kind, "deps": deps})
            })
            .collect();
        print_json(&json!({ "stages": stages }))?;
        return Ok(ExitCode::SUCCESS);
    }
    match format {
        DagFormat::Text => {
            // Matrix values make the names: escaped and cut, padded without `{:width$}`
            // (which panics over 65,535).
            let name = |i: usize| sanitize::cell(&insts[i].name, sanitize::NAME);
            let names: Vec<String> = (0..insts.len()).map(name).collect();
            let width = names.iter().map(|n| n.width()).max().unwrap_or(0);
            for (i, n) in insts.iter().zip(&names) {
                let deps: Vec<&str> = i.deps.iter().map(|d| names[*d].as_str()).collect();
                let arrow = if deps.is_empty() {
                    String::new()
                } else {
                    format!("  ← {}", deps.join(", "))
                };
                println!("{}  [{}]{arrow}", sanitize::pad(n, width, false), i.kind);
            }
        }
        DagFormat::Dot => {
            println!("digraph pipeline {{\n  rankdir=LR;\n  node [shape=box];");
            for i in insts {
                println!(
                    "  {:?} [label={:?}];",
                    i.name,
                    format!("{}\\n({})", i.name, i.kind)
                );
                for d in &i.deps {
                    println!("  {:?} -> {:?};", insts[*d].name, i.name);
                }
            }
            println!("}}");
        }
        DagFormat::Mermaid => {
            println!("graph LR");
            for (n, i) in insts.iter().enumerate() {
                let name = sanitize::line(&i.name).replace('"', "'");
                println!("  s{n}[\"{name} ({})\"]", i.kind);
                for d in &i.deps {
                    println!("  s{d} --> s{n}");
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
