//! The `cmd` stage kind: runs a user's shell command with the contract in the README.
//!
//! `sh -c "<cmd>"` in the workspace root, with `PIPELINE_OUT` (an empty directory that becomes
//! the artifact), `PIPELINE_PARAMS` (the params as JSON), `PIPELINE_DEP_<NAME>` (each dep's
//! artifact directory), `PIPELINE_STAGE` (the instance name) and `PIPELINE_WORK` (scratch space
//! kept across failed attempts). stdout and stderr are saved with the artifact.

use std::fs::File;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Map, Value};

use crate::stage::{Stage, StageContext};

pub struct CmdStage;

/// `PIPELINE_DEP_` + the name upper-cased, non-alphanumerics as `_`.
pub fn dep_env_name(name: &str) -> String {
    let mut out = String::from("PIPELINE_DEP_");
    out.extend(name.chars().map(|c| {
        if c.is_ascii_alphanumeric() {
            c.to_ascii_uppercase()
        } else {
            '_'
        }
    }));
    out
}

impl Stage for CmdStage {
    fn kind(&self) -> &'static str {
        "cmd"
    }

    fn code_version(&self) -> &'static str {
        env!("CMD_CODE_VERSION")
    }

    fn validate(&self, _params: &Map<String, Value>, spec: &Value) -> Result<(), String> {
        match spec.get("cmd").and_then(Value::as_str) {
            Some(c) if !c.trim().is_empty() => Ok(()),
            _ => Err("`cmd` is empty".into()),
        }
    }

    fn run(&self, ctx: &StageContext) -> anyhow::Result<()> {
        let cmd = ctx
            .spec
            .get("cmd")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let stdout = File::create(ctx.log_dir.join("stdout.txt")).context("creating stdout.txt")?;
        let stderr = File::create(ctx.log_dir.join("stderr.txt")).context("creating stderr.txt")?;
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(cmd)
            .current_dir(ctx.root)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .env("PIPELINE_OUT", ctx.out_dir)
            .env("PIPELINE_WORK", ctx.work_dir)
            .env("PIPELINE_STAGE", ctx.instance)
            .env("PIPELINE_PARAMS", serde_json::to_string(ctx.params)?);
        for dep in ctx.deps {
            command.env(dep_env_name(&dep.instance), &dep.dir);
            // An instance that expanded with its dep also sees it under the plain stage name.
            if dep.instance != dep.stage
                && ctx.deps.iter().filter(|d| d.stage == dep.stage).count() == 1
            {
                command.env(dep_env_name(&dep.stage), &dep.dir);
            }
        }
        // Its own process group, ended (background processes included) before `wait` returns,
        // so nothing writes into the output once it is hashed.
        let mut group = crate::procgroup::spawn(&mut command).context("starting `sh -c`")?;
        ctx.progress.enable_steady_tick(Duration::from_millis(200));
        let status = group.wait().context("waiting for the command")?;
        if !status.success() {
            match status.code() {
                Some(code) => bail!("command exited with status {code}"),
                None => bail!("command was killed by a signal ({status})"),
            }
        }
        let outs = ctx
            .spec
            .get("outs")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let missing: Vec<&str> = outs
            .iter()
            .filter_map(Value::as_str)
            .filter(|o| !ctx.out_dir.join(o).exists())
            .collect();
        if !missing.is_empty() {
            bail!(
                "the command succeeded but did not write the declared outs {} into $PIPELINE_OUT",
                missing.join(", ")
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dep_names_are_env_safe() {
        assert_eq!(dep_env_name("clean"), "PIPELINE_DEP_CLEAN");
        assert_eq!(
            dep_env_name("pre-train@share_type=all"),
            "PIPELINE_DEP_PRE_TRAIN_SHARE_TYPE_ALL"
        );
    }
}
