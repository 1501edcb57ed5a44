//! Bad input: every mistake in `pipeline.yaml`, a flag, a target or the workspace exits with
//! code 2, does not panic, prints nothing on stdout (not even with `--json`) and says on
//! stderr what is wrong and where: the file, `LINE:COL`, and the key, stage or var.

#[path = "bad_input/commands_and_workspace.rs"]
mod commands_and_workspace;
mod common;
#[path = "bad_input/pipeline_file.rs"]
mod pipeline_file;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;

/// Runs `args`, asserts the bad-input contract and returns the output.
fn bad(ws: &Ws, args: &[&str]) -> Output {
    let out = ws.run(args);
    check_bad(&out);
    out
}

fn check_bad(out: &Output) {
    out.expect_code(2);
    out.assert_no_panic();
    assert!(
        out.stderr.starts_with("error: "),
        "stderr does not start with `error: `\n{}",
        out.describe()
    );
    assert!(
        out.stdout.trim().is_empty(),
        "something was printed on stdout\n{}",
        out.describe()
    );
}

/// Asserts that stderr holds every one of `needles`.
fn says(out: &Output, needles: &[&str]) {
    for n in needles {
        assert!(
            out.stderr.contains(n),
            "stderr lacks {n:?}\n{}",
            out.describe()
        );
    }
}

/// `<path of pipeline.yaml>:LINE:COL: `, how an error in the file starts.
fn at(ws: &Ws, line: usize, col: usize) -> String {
    format!("{}:{line}:{col}: ", ws.file().display())
}

/// A pipeline that is fine, for the flag and target mistakes.
const GOOD: &str = r#"
vars: {nap: 0}
stages:
  train:
    cmd: "echo ${params.lr} > $PIPELINE_OUT/lr.txt"
    params: {lr: 1}
  report:
    cmd: "cat $PIPELINE_DEP_TRAIN/lr.txt > $PIPELINE_OUT/r.txt"
    deps: [train]
"#;
