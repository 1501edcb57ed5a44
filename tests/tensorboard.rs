//! TensorBoard event files from the training stages, through the binary on the bundled
//! fixtures with a very small model: readable while `pretrain` runs (in its work area), trimmed
//! when a killed run resumes, kept in the artifact's log directory (beside the full
//! `metrics.jsonl`, timings included, which the digested artifact leaves out) as a function of
//! it, and the same from `finetune`. Read back with our reader always, and with TensorBoard's own
//! (`event_accumulator`) where python3 can import it (skipped with a note elsewhere).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use pipeline_tbevents::{FILE_NAME, proto::What};
use serde_json::Value;

fn yaml(pretrain_params: &str, rest: &str) -> String {
    format!(
        r#"{data}  pretrain:
    kind: pretrain
    deps: [mask, vocab]
    params:
      model: tiny
      hidden_size: 32
      num_attention_heads: 2
      intermediate_size: 64
      embedding_size: 16
      num_hidden_layers: 2
      batch_size: 8
      learning_rate: 0.005
      log_interval: 1
{pretrain_params}
{rest}
"#,
        data = fixture_data_stages_yaml()
    )
}

/// The event file in pretrain's work area, while a run has one.
fn live_events(ws: &Ws) -> Option<PathBuf> {
    let work = ws.path(".pipeline/work");
    for inst in std::fs::read_dir(work).ok()?.flatten() {
        for fp in std::fs::read_dir(inst.path()).ok()?.flatten() {
            let p = fp.path().join(FILE_NAME);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// The steps and values of one tag, in file order.
fn series(scalars: &[pipeline_tbevents::Scalar], tag: &str) -> Vec<(i64, f32)> {
    scalars
        .iter()
        .filter(|s| s.tag == tag)
        .map(|s| (s.step, s.value))
        .collect()
}

/// (step, value) of `key` in the metrics.jsonl lines that have it.
fn jsonl_series(path: &Path, step_key: &str, key: &str) -> Vec<(i64, f32)> {
    read(path)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter_map(|l| Some((l[step_key].as_i64()?, l.get(key)?.as_f64()? as f32)))
        .collect()
}

/// Whether python3 imports TensorBoard's event reader; prints a skip note when not.
fn tensorboard_installed(test: &str) -> bool {
    let ok = Command::new("python3")
        .args([
            "-c",
            "import tensorboard.backend.event_processing.event_accumulator",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!(
            "note: python3 cannot import tensorboard: skipping TensorBoard's reader in {test}"
        );
    }
    ok
}

/// Every scalar series TensorBoard's EventAccumulator reads from the directory `dir`.
fn tensorboard_scalars(dir: &Path) -> BTreeMap<String, Vec<(i64, f32)>> {
    const SCRIPT: &str = r#"
import json, sys
from tensorboard.backend.event_processing import event_accumulator as ea
acc = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0})
acc.Reload()
print(json.dumps({t: [[e.step, e.value] for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}))
"#;
    let out = Command::new("python3")
        .args(["-c", SCRIPT])
        .arg(dir)
        .output()
        .expect("starting python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "TensorBoard's reader failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: BTreeMap<String, Vec<(i64, f64)>> =
        serde_json::from_str(stdout.lines().last().unwrap_or("")).expect("JSON from python");
    v.into_iter()
        .map(|(k, s)| (k, s.into_iter().map(|(a, b)| (a, b as f32)).collect()))
        .collect()
}

/// Spawns `pipeline run pretrain`, waits until its live event file holds `min_steps` training
/// steps, checks them, and kills the run with SIGKILL; returns the steps it had seen.
fn watch_then_kill(ws: &Ws, min_steps: usize) -> usize {
    let mut child = ws
        .command(&["run", "pretrain"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let (path, losses) = loop {
        if let Some(p) = live_events(ws) {
            // The writer may be inside a record: read what is whole.
            let (events, _) = pipeline_tbevents::read_prefix(&p).unwrap();
            let scalars = pipeline_tbevents::scalars_of(&events);
            let losses = series(&scalars, "loss");
            if losses.len() >= min_steps {
                assert_eq!(
                    events[0].what,
                    Some(What::FileVersion("brain.Event:2".into()))
                );
                assert!(
                    scalars.iter().all(|s| s.wall_time > 1.7e9),
                    "the live file has the clock's wall times"
                );
                break (p, losses);
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "no live event file with {min_steps} steps appeared"
        );
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the run ended before its events were seen: {status}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let steps: Vec<i64> = losses.iter().map(|l| l.0).collect();
    assert_eq!(steps, (1..=losses.len() as i64).collect::<Vec<_>>());
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    if tensorboard_installed("watch_then_kill") {
        // What a `tensorboard --logdir .pipeline/work` sees of the killed run.
        let tb = tensorboard_scalars(path.parent().unwrap());
        assert!(tb["loss"].len() >= losses.len(), "{:?}", tb.keys());
    }
    losses.len()
}

#[test]
fn pretrain_events_are_live_survive_a_resume_and_match_metrics_jsonl() {
    let ws = Ws::new(&yaml(
        "      steps: 200\n      checkpoint_interval: 5\n      eval_interval: 50",
        "",
    ));
    ws.run_ok(&["mask"]);
    watch_then_kill(&ws, 12);

    let v = ws.run_ok(&["pretrain"]);
    let dir = artifact(&v, "pretrain");
    // The full records and the events (timings included) are in the log directory.
    let m: Value = serde_json::from_str(&read(dir.join(".log/metrics.json"))).unwrap();
    assert!(m["resumed_from_step"].as_u64().is_some(), "the run resumed");
    let events = dir.join(".log").join(FILE_NAME);
    let all = pipeline_tbevents::read(&events).unwrap();
    assert_eq!(all[0].what, Some(What::FileVersion("brain.Event:2".into())));
    let scalars = pipeline_tbevents::scalars(&events).unwrap();
    let jsonl = dir.join(".log/metrics.jsonl");
    // Every metrics.jsonl series is a TensorBoard scalar, no step twice across the resume.
    for tag in [
        "loss",
        "mlm_loss",
        "sop_loss",
        "mlm_accuracy",
        "sop_accuracy",
        "lr",
        "grad_norm",
        "tokens_per_s",
        "eval_mlm_accuracy",
        "eval_mlm_loss",
        "eval_sop_accuracy",
    ] {
        assert_eq!(
            series(&scalars, tag),
            jsonl_series(&jsonl, "step", tag),
            "{tag}"
        );
    }
    let steps: Vec<i64> = series(&scalars, "loss").iter().map(|s| s.0).collect();
    assert_eq!(steps, (1..=200).collect::<Vec<_>>());
    assert_eq!(series(&scalars, "eval_mlm_accuracy").len(), 4);
    // The artifact's file is a function of metrics.jsonl: rebuilt, it is the same bytes.
    let again = tempfile::tempdir().unwrap();
    let copy = again.path().join(FILE_NAME);
    pipeline_tbevents::write_from_jsonl(&jsonl, &copy, "step").unwrap();
    assert_eq!(
        std::fs::read(&events).unwrap(),
        std::fs::read(&copy).unwrap()
    );
    assert!(
        live_events(&ws).is_none(),
        "the work area is gone after success"
    );

    if tensorboard_installed("pretrain_events_are_live…") {
        let tb = tensorboard_scalars(&dir.join(".log"));
        for tag in ["loss", "lr", "tokens_per_s", "eval_mlm_accuracy"] {
            assert_eq!(tb[tag], series(&scalars, tag), "TensorBoard's {tag}");
        }
    }
    // `pipeline plot` draws the evaluation curve from the same artifact.
    let out = ws.run(&[
        "plot",
        "pretrain",
        "--metric",
        "eval_mlm_accuracy",
        "-o",
        "acc.svg",
    ]);
    out.expect_code(0);
    assert!(out.stdout.contains("pretrain (4 points)"), "{}", out.stdout);
    assert!(read(ws.path("acc.svg")).starts_with("<svg"));
}

#[test]
fn finetune_writes_an_event_per_epoch() {
    let ws = Ws::new(&yaml(
        "      steps: 10",
        r#"  finetune_lcqmc:
    kind: finetune
    deps: [pretrain]
    inputs: ["${vars.data}/lcqmc/*.tsv"]
    params:
      task: lcqmc
      train: ${vars.data}/lcqmc/dev.tsv
      dev_fraction: 0.1
      epochs: 2
      batch_size: 16
      learning_rate: 0.002
      max_seq_length: 64"#,
    ));
    let v = ws.run_ok(&["finetune_lcqmc"]);
    let dir = artifact(&v, "finetune_lcqmc");
    let scalars = pipeline_tbevents::scalars(&dir.join(".log").join(FILE_NAME)).unwrap();
    let jsonl = dir.join(".log/metrics.jsonl");
    for tag in [
        "train_loss",
        "train_accuracy",
        "dev_accuracy",
        "dev_macro_f1",
        "learning_rate",
        "grad_norm",
        "tokens_per_s",
    ] {
        let s = series(&scalars, tag);
        assert_eq!(s, jsonl_series(&jsonl, "epoch", tag), "{tag}");
        assert_eq!(s.iter().map(|x| x.0).collect::<Vec<_>>(), [1, 2], "{tag}");
    }
    if tensorboard_installed("finetune_writes_an_event_per_epoch") {
        let tb = tensorboard_scalars(&dir.join(".log"));
        assert_eq!(tb["dev_accuracy"], series(&scalars, "dev_accuracy"));
    }
}
