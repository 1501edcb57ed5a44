//! `pipeline run-instance SPEC.json` (hidden): one stage instance run from the spec that
//! `pipeline run` wrote for a cluster job; exit 0 when it succeeded, 1 when the stage failed,
//! 2 when the spec itself is a mistake.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use pipeline_engine::executor::instance::run_spec;

use crate::global::registry;
use crate::sanitize;

/// Runs the instance; a failed stage is printed here (its cause chain, escaped) and exits 1.
pub fn run_instance(spec: &Path) -> Result<ExitCode> {
    Ok(match run_spec(&registry(), spec) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.user_error().is_some() => return Err(e.into()),
        Err(e) => {
            let text = pipeline_engine::error::chain_text(&e);
            eprintln!("error: {}", sanitize::message(&text));
            ExitCode::from(1)
        }
    })
}
