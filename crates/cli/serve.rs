//! `pipeline serve`: a fine-tuned model behind an HTTP/JSON endpoint.

use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::Args;

use crate::global::Global;

/// `pipeline serve`'s arguments.
#[derive(Debug, Args)]
pub struct ServeArgs {}

/// Serves until SIGTERM or SIGINT.
pub fn serve(_global: &Global, _args: &ServeArgs) -> Result<ExitCode> {
    bail!("serve is not built yet")
}
