use super::*;
use serde_json::json;

fn tmp() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE_NAME);
    (dir, path)
}

#[test]
fn scalars_written_read_back_in_order_with_the_file_version_first() {
    let (_d, path) = tmp();
    let mut w = EventWriter::create(&path, 100.0).unwrap();
    w.scalars(1, 101.5, &[("loss".into(), 2.5), ("lr".into(), 0.0)])
        .unwrap();
    w.scalars(2, 102.5, &[("loss".into(), 2.25)]).unwrap();
    let events = read(&path).unwrap();
    assert_eq!(events.len(), 3);
    assert_eq!(
        events[0].what,
        Some(proto::What::FileVersion("brain.Event:2".into()))
    );
    assert_eq!(events[0].wall_time, 100.0);
    let s = scalars_of(&events);
    assert_eq!(
        s,
        vec![
            Scalar {
                tag: "loss".into(),
                step: 1,
                wall_time: 101.5,
                value: 2.5
            },
            Scalar {
                tag: "lr".into(),
                step: 1,
                wall_time: 101.5,
                value: 0.0
            },
            Scalar {
                tag: "loss".into(),
                step: 2,
                wall_time: 102.5,
                value: 2.25
            },
        ]
    );
}

#[test]
fn what_is_written_is_readable_before_the_writer_is_dropped() {
    let (_d, path) = tmp();
    let mut w = EventWriter::create(&path, 0.0).unwrap();
    w.scalars(7, 1.0, &[("a".into(), 1.0)]).unwrap();
    assert_eq!(scalars(&path).unwrap().len(), 1);
    w.scalars(8, 2.0, &[("a".into(), 2.0)]).unwrap();
    assert_eq!(scalars(&path).unwrap().len(), 2);
}

#[test]
fn a_torn_tail_is_truncated_and_damage_is_corrupt_naming_file_and_offset() {
    let (_d, path) = tmp();
    let mut w = EventWriter::create(&path, 0.0).unwrap();
    w.scalars(1, 1.0, &[("a".into(), 1.0)]).unwrap();
    drop(w);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
    let e = read(&path).unwrap_err();
    assert!(matches!(e, Error::Truncated { .. }), "{e}");
    let (events, problem) = read_prefix(&path).unwrap();
    assert_eq!(events.len(), 1);
    assert!(problem.is_some());

    let mut bad = bytes.clone();
    let last = bad.len() - 6;
    bad[last] ^= 0x40;
    std::fs::write(&path, &bad).unwrap();
    let e = read(&path).unwrap_err().to_string();
    assert!(
        e.contains(FILE_NAME) && e.contains("corrupt") && e.contains("byte"),
        "{e}"
    );
}

#[test]
fn keeping_steps_up_to_a_checkpoint_drops_the_later_ones_and_a_torn_tail() {
    let (_d, path) = tmp();
    let mut w = EventWriter::create(&path, 0.0).unwrap();
    for step in 1..=5 {
        w.scalars(step, step as f64, &[("a".into(), step as f32)])
            .unwrap();
    }
    drop(w);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(&[1, 2, 3]);
    std::fs::write(&path, &bytes).unwrap();
    keep_steps_up_to(&path, 3).unwrap();
    let mut w = EventWriter::append(&path, 9.0).unwrap();
    w.scalars(4, 9.0, &[("a".into(), 40.0)]).unwrap();
    let steps: Vec<(i64, f32)> = scalars(&path)
        .unwrap()
        .iter()
        .map(|s| (s.step, s.value))
        .collect();
    assert_eq!(steps, vec![(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0)]);
    assert!(!path.with_file_name("events-rewrite.tmp").exists());
}

#[test]
fn a_metrics_line_becomes_one_event_of_its_numeric_fields() {
    let line = json!({"step": 10, "loss": 1.5, "note": "x", "bad": null, "eval_instances": 4});
    let (step, mut values) = scalars_of_line(&line, "step").unwrap();
    values.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(step, 10);
    assert_eq!(
        values,
        vec![("eval_instances".into(), 4.0), ("loss".into(), 1.5)]
    );
    assert_eq!(scalars_of_line(&json!({"epoch": 1}), "step"), None);
}

#[test]
fn the_artifact_copy_is_a_function_of_the_lines() {
    let dir = tempfile::tempdir().unwrap();
    let jsonl = dir.path().join("metrics.jsonl");
    std::fs::write(
        &jsonl,
        "{\"step\":1,\"loss\":3.0,\"elapsed_s\":0.5}\n{\"step\":2,\"eval_mlm_accuracy\":0.25}\nnot json\n",
    )
    .unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    assert_eq!(write_from_jsonl(&jsonl, &a, "step").unwrap(), 2);
    std::thread::sleep(std::time::Duration::from_millis(5));
    write_from_jsonl(&jsonl, &b, "step").unwrap();
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    let s = scalars(&a).unwrap();
    assert_eq!(s.len(), 3);
    assert_eq!(
        (s[2].tag.as_str(), s[2].step, s[2].wall_time),
        ("eval_mlm_accuracy", 2, 0.5)
    );
}

#[test]
fn a_fifo_or_device_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("metrics.jsonl");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo failed");
    let out = dir.path().join("events");
    let e = write_from_jsonl(&fifo, &out, "step").unwrap_err();
    assert!(
        e.to_string()
            .contains("metrics.jsonl: not a regular file (it is a FIFO)"),
        "{e}"
    );
    let e = read(Path::new("/dev/zero")).unwrap_err();
    assert!(e.to_string().contains("a character device"), "{e}");
}
