//! The `cmd` stage kind: runs a user's shell command with the contract in the README.
//!
//! `sh -c "<cmd>"` in the workspace root, with `PIPELINE_OUT` (an empty directory that becomes
//! the artifact), `PIPELINE_PARAMS` (the params as JSON), `PIPELINE_DEP_<NAME>` (each dep's
//! artifact directory), `PIPELINE_STAGE` (the instance name) and `PIPELINE_WORK` (scratch space
//! kept across failed attempts). stdout and stderr are saved with the artifact.

use std::collections::HashMap;
use std::fs::File;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use pipeline_params::ParamError;
use serde_json::{Map, Value};

use crate::stage::{Stage, StageContext};

/// The `cmd` kind: a shell command that writes its output into `$PIPELINE_OUT`.
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

/// Every `PIPELINE_DEP_…` variable a `cmd` sees, with the index into `deps` (`(instance,
/// stage)` pairs) of the dep it names: each dep under its instance name, and an instance that
/// expanded with its dep (`p@x=1`) also under the plain stage name (`PIPELINE_DEP_P`) when it
/// is the only dep of that stage. The plan's collision check and the command's environment
/// both come from here, so the check sees exactly what is exported.
pub fn dep_env_vars<'a>(deps: &[(&'a str, &'a str)]) -> Vec<(String, usize)> {
    let mut per_stage: HashMap<&str, usize> = HashMap::with_capacity(deps.len());
    for (_, stage) in deps {
        *per_stage.entry(stage).or_default() += 1;
    }
    let mut vars = Vec::with_capacity(deps.len() * 2);
    for (i, (instance, stage)) in deps.iter().enumerate() {
        vars.push((dep_env_name(instance), i));
        if instance != stage && per_stage[stage] == 1 {
            vars.push((dep_env_name(stage), i));
        }
    }
    vars
}

impl Stage for CmdStage {
    fn kind(&self) -> &'static str {
        "cmd"
    }

    fn code_version(&self) -> &'static str {
        env!("CMD_CODE_VERSION")
    }

    fn validate(&self, _params: &Map<String, Value>, spec: &Value) -> Result<(), ParamError> {
        match spec.get("cmd").and_then(Value::as_str) {
            Some(c) if !c.trim().is_empty() => Ok(()),
            _ => Err(ParamError("`cmd` is empty".into())),
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
        let names: Vec<(&str, &str)> = ctx
            .deps
            .iter()
            .map(|d| (d.instance.as_str(), d.stage.as_str()))
            .collect();
        for (var, i) in dep_env_vars(&names) {
            command.env(var, &ctx.deps[i].dir);
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

    #[test]
    fn a_lone_expanded_dep_is_also_seen_under_its_stage_name() {
        let vars = dep_env_vars(&[("p@x=1", "p"), ("q@x=1", "q"), ("q@x=2", "q"), ("r", "r")]);
        let names: Vec<&str> = vars.iter().map(|(v, _)| v.as_str()).collect();
        assert_eq!(
            names,
            [
                "PIPELINE_DEP_P_X_1",
                "PIPELINE_DEP_P",
                "PIPELINE_DEP_Q_X_1",
                "PIPELINE_DEP_Q_X_2",
                "PIPELINE_DEP_R"
            ]
        );
        assert_eq!(vars[1].1, 0);
    }
}
