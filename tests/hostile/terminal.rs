//! What reaches the terminal and SVG from files (control characters, huge cells), and how
//! failures are reported (-q, doubled error text, exit codes): issue 31, classes 5 and 6.
//!
//! Hostile metrics are written by a `cmd` stage that copies a prepared `metrics.json` into
//! `$PIPELINE_OUT`, as a stage of a shared lab might. Every case runs the binary under the
//! address-space and time limits (`Case::run`), asserts the exit code, the message and a bound
//! on what was printed, and ends with `Case::finish` (the store verifies clean and the directory
//! outside the workspace is unchanged).

use super::*;

/// OSC 0 (retitle the terminal), OSC 52 (write the clipboard), CSI 2J (clear the screen), the
/// 8-bit CSI (U+009B), a right-to-left override and a bare BEL.
const HOSTILE: [&str; 6] = [
    "\u{1b}]0;pwned\u{7}",
    "\u{1b}]52;c;cHduZWQ=\u{7}",
    "\u{1b}[2J",
    "\u{9b}31m",
    "x\u{202e}y",
    "\u{7}",
];

/// A workspace whose stage `s` (a matrix over `n` when `ns` has several values) copies
/// `m<n>.json` into its `metrics.json`.
fn metrics_case(files: &[(&str, Value)]) -> Case {
    let ns: Vec<String> = files.iter().map(|(n, _)| format!("'{n}'")).collect();
    let c = Case::new(&format!(
        "stages:\n  s:\n    cmd: 'cp m${{params.n}}.json $PIPELINE_OUT/metrics.json'\n    \
         matrix: {{n: [{}]}}\n",
        ns.join(", ")
    ));
    for (n, m) in files {
        c.ws.write(&format!("m{n}.json"), serde_json::to_vec(m).unwrap());
    }
    c.run(&["run", "-q"]).expect_code(0);
    c
}

/// No control character (but newline and tab) and no bidirectional override reached what the
/// binary printed.
fn assert_no_raw_controls(out: &Output) {
    let all = format!("{}{}", out.stdout, out.stderr);
    let raw = all.chars().find(|&c| {
        (c.is_control() && c != '\n' && c != '\t') || ('\u{202a}'..='\u{202e}').contains(&c)
    });
    assert_eq!(raw, None, "a raw control character\n{}", out.describe());
}

/// Runs `args`, asserts exit 0, bounded output and no raw control character.
fn clean_output(c: &Case, args: &[&str]) -> Output {
    let out = c.run(args);
    out.expect_code(0);
    let size = out.stdout.len() + out.stderr.len();
    assert!(size < MAX_OUTPUT, "{args:?} printed {size} bytes");
    assert_no_raw_controls(&out);
    out
}

#[test]
fn terminal_metrics_with_a_70000_character_key_and_value_do_not_panic() {
    let key = "k".repeat(70_000);
    let m = serde_json::json!({ &key: "v".repeat(70_000), "acc": 0.5 });
    let other = serde_json::json!({ &key: "w".repeat(70_000), "acc": 0.25 });
    let c = metrics_case(&[("1", m), ("2", other)]);
    for args in [
        &["metrics"][..],
        &["exp", "show"],
        &["exp", "show", "--md"],
        &["show", "s@n=1"],
        &["diff", "s@n=1", "s@n=2"],
    ] {
        let out = clean_output(&c, args);
        assert!(
            out.stdout.contains('…'),
            "{args:?}: not cut\n{}",
            out.describe()
        );
    }
    // JSON stays exact.
    let v = c.run(&["metrics", "--json"]).json();
    assert_eq!(
        v["rows"][0]["metrics"][&key].as_str().map(str::len),
        Some(70_000)
    );
    c.finish();
}

#[test]
fn terminal_exp_show_to_a_pipe_does_not_pad_rows_to_a_20_mb_cell() {
    let big = serde_json::json!({ "note": "n".repeat(20 << 20), "acc": 0.5 });
    let small = serde_json::json!({ "note": "short", "acc": 0.25 });
    let c = metrics_case(&[("1", big.clone()), ("2", small), ("3", big)]);
    let t0 = Instant::now();
    let out = clean_output(&c, &["exp", "show"]);
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    assert_eq!(out.stdout.lines().count(), 4, "{}", out.describe());
    for line in out.stdout.lines() {
        assert!(line.len() < 1024, "a row of {} bytes", line.len());
    }
    clean_output(&c, &["exp", "show", "--md"]);
    clean_output(&c, &["metrics"]);
    c.finish();
}

#[test]
fn terminal_escape_sequences_in_metric_names_and_values_are_escaped() {
    let mut m = serde_json::Map::new();
    for (i, h) in HOSTILE.iter().enumerate() {
        m.insert(format!("{h}key{i}"), Value::String(format!("{h}value{i}")));
    }
    let other: serde_json::Map<String, Value> = m
        .keys()
        .map(|k| (k.clone(), Value::String("plain".into())))
        .collect();
    let c = metrics_case(&[("1", Value::Object(m)), ("2", Value::Object(other))]);
    for args in [
        &["metrics"][..],
        &["exp", "show"],
        &["exp", "show", "--md"],
        &["exp", "show", "--width", "0"],
        &["show", "s@n=1"],
        &["diff", "s@n=1", "s@n=2"],
        &["status"],
    ] {
        let out = clean_output(&c, args);
        if args[0] != "status" {
            assert!(
                out.stdout.contains("\\u{1b}]0;pwned\\u{7}"),
                "{args:?}: the name is not shown escaped\n{}",
                out.describe()
            );
        }
    }
    c.finish();
}

#[test]
fn terminal_json_output_keeps_hostile_values_exact_and_escaped_by_json() {
    let m = serde_json::json!({ HOSTILE[0]: HOSTILE[1] });
    let c = metrics_case(&[("1", m)]);
    for args in [&["metrics", "--json"][..], &["exp", "show", "--json"]] {
        let out = c.run(args);
        out.expect_code(0);
        assert_no_raw_controls(&out);
        let v = out.json();
        assert_eq!(v["rows"][0]["metrics"][HOSTILE[0]], HOSTILE[1], "{args:?}");
    }
    // CSV is data: to a pipe its values are as stored (the contract), on a terminal escaped.
    let out = c.run(&["exp", "show", "--csv"]);
    out.expect_code(0);
    assert!(out.stdout.contains(HOSTILE[1]), "{}", out.describe());
    c.finish();
}

#[test]
fn terminal_escape_sequences_in_a_param_value_are_escaped() {
    // YAML's "\e" is ESC: the param reaches the manifest, then `status` quotes the stored
    // value in its reason once the pipeline changes it.
    let yaml = |p: &str| {
        format!(
            "stages:\n  s:\n    cmd: 'echo {{}} > $PIPELINE_OUT/metrics.json'\n    params: {{p: \"{p}\"}}\n  t:\n    cmd: 'true'\n    params: {{p: 1}}\n"
        )
    };
    let c = Case::new(&yaml("\\e]0;pwned\\a"));
    clean_output(&c, &["run"]);
    c.ws.set_yaml(&yaml("\\e[2Jnew"));
    let out = clean_output(&c, &["status"]);
    assert!(
        out.stdout.contains("param p changed \\u{1b}]0;pwned\\u{7}"),
        "{}",
        out.describe()
    );
    clean_output(&c, &["run", "--dry-run"]);
    clean_output(&c, &["run"]);
    clean_output(&c, &["exp", "show"]);
    clean_output(&c, &["diff", "s"]);
    clean_output(&c, &["show", "s"]);
    clean_output(&c, &["dag"]);
    clean_output(&c, &["runs"]);
    c.finish();
}

/// A small well-formedness check of XML as plotters writes it: no character XML 1.0 forbids,
/// every `&` a known entity, tags balanced and `<` only in tags.
fn assert_xml(svg: &str) {
    let bad = svg.chars().find(|&c| {
        (c < ' ' && !matches!(c, '\t' | '\n' | '\r')) || matches!(c, '\u{fffe}' | '\u{ffff}')
    });
    assert_eq!(bad, None, "a character XML forbids");
    for (at, _) in svg.match_indices('&') {
        let entity = svg[at + 1..].split(';').next().unwrap_or("");
        assert!(
            matches!(entity, "lt" | "gt" | "amp" | "quot" | "apos") || entity.starts_with('#'),
            "a bare & at {at}: {}",
            &svg[at..(at + 20).min(svg.len())]
        );
    }
    let mut open: Vec<String> = Vec::new();
    let mut rest = svg;
    while let Some(start) = rest.find('<') {
        let end = start + rest[start..].find('>').expect("an unclosed tag");
        let tag = &rest[start + 1..end];
        assert!(!tag.contains('<'), "a < inside a tag: {tag}");
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(
                open.pop().as_deref(),
                Some(name.trim()),
                "unbalanced </{name}>"
            );
        } else if !tag.starts_with(['?', '!']) && !tag.ends_with('/') {
            open.push(tag.split_whitespace().next().unwrap_or("").to_string());
        }
        rest = &rest[end + 1..];
    }
    assert!(open.is_empty(), "unclosed: {open:?}");
}

#[test]
fn terminal_plot_of_series_named_with_control_characters_writes_valid_xml() {
    let c = Case::new(
        r#"stages:
  s:
    cmd: 'cp lines.jsonl $PIPELINE_OUT/metrics.jsonl'
    matrix: {n: ["a\e]0;pwned\a", "b<&>\x9b\x01\x08"]}
"#,
    );
    let line = |step: u32, v: f64| serde_json::json!({"step": step, "lo\u{1b}ss": v}).to_string();
    c.ws.write(
        "lines.jsonl",
        format!("{}\n{}\n", line(1, 2.0), line(2, 1.0)),
    );
    clean_output(&c, &["run"]);
    // The metric's own name holds an ESC too: it is the SVG's title and y axis.
    let out = clean_output(&c, &["plot", "s", "--metric", "lo\u{1b}ss", "-o", "p.svg"]);
    assert!(
        out.stdout.contains("s@n=a\\u{1b}]0;pwned\\u{7} (2 points)"),
        "{}",
        out.describe()
    );
    let svg = std::fs::read_to_string(c.ws.path("p.svg")).unwrap();
    assert_xml(&svg);
    assert!(
        svg.contains("s@n=b&lt;&amp;&gt;\\u{9b}\\u{1}\\u{8}"),
        "{svg}"
    );
    assert!(svg.contains("lo\\u{1b}ss"), "{svg}");
    std::fs::remove_file(c.ws.path("p.svg")).unwrap();
    c.finish();
}

#[test]
fn terminal_run_quiet_still_prints_the_failure_block_on_stderr() {
    let c = Case::new(
        "stages:\n  ok:\n    cmd: 'true'\n  bad:\n    cmd: 'echo last words >&2; printf \"\\033]0;pwned\\007\\n\" >&2; exit 3'\n",
    );
    let out = c.run(&["run", "-q"]);
    expect(&out, 1, "command exited with status 3");
    assert!(out.stdout.is_empty(), "{}", out.describe());
    for needle in [
        "FAILED  bad",
        "error: command exited with status 3",
        "| last words",
    ] {
        assert!(
            out.stderr.contains(needle),
            "no {needle:?}\n{}",
            out.describe()
        );
    }
    assert!(
        out.stderr.contains("\\u{1b}]0;pwned\\u{7}"),
        "{}",
        out.describe()
    );
    assert_no_raw_controls(&out);
    // --json: stdout is the one object, the block goes to stderr as well.
    let out = c.run(&["run", "--json"]);
    out.expect_code(1);
    assert_eq!(out.json()["ok"], false);
    assert!(out.stderr.contains("FAILED  bad"), "{}", out.describe());
    // Without -q the block stays under its FAILED line on stdout.
    let out = c.run(&["run"]);
    out.expect_code(1);
    assert!(
        out.stdout.contains("error: command exited with status 3"),
        "{}",
        out.describe()
    );
    c.finish();
}

/// How often `needle` occurs in what `out` printed.
fn count(out: &Output, needle: &str) -> usize {
    format!("{}{}", out.stdout, out.stderr)
        .matches(needle)
        .count()
}

#[test]
fn terminal_an_os_error_is_printed_once() {
    let c = Case::new("stages:\n  s:\n    cmd: 'echo x > $PIPELINE_OUT/o.txt'\n");
    c.run(&["run", "-q"]).expect_code(0);
    // A regular file where the remote directory should be: the OS says "File exists".
    c.ws.write("not-a-dir", "x");
    let remote = c.ws.path("not-a-dir").display().to_string();
    let out = c.run(&["push", "--remote", &remote]);
    expect(&out, 1, "(os error 17)");
    assert_eq!(count(&out, "(os error 17)"), 1, "{}", out.describe());
    assert!(out.stderr.contains(&remote), "{}", out.describe());
    let out = c.run(&["pull", "--remote", &remote]);
    expect(&out, 1, "(os error 20)");
    assert_eq!(count(&out, "(os error 20)"), 1, "{}", out.describe());
    c.finish();
}

#[test]
fn terminal_a_json_error_is_printed_once() {
    let c = Case::new("stages:\n  s:\n    cmd: 'echo x > $PIPELINE_OUT/o.txt'\n");
    c.run(&["run", "-q"]).expect_code(0);
    let remote = c.ws.path("remote").display().to_string();
    c.run(&["push", "--remote", &remote]).expect_code(0);
    let manifests = c.ws.path("remote/manifests");
    let dir = std::fs::read_dir(&manifests)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::write(dir.join("s.json"), "{bad").unwrap();
    std::fs::remove_dir_all(c.ws.path(".pipeline/artifacts/s")).unwrap();
    let why = "key must be a string at line 1 column 2";
    let out = c.run(&["pull", "--remote", &remote]);
    expect(&out, 1, why);
    assert_eq!(count(&out, why), 1, "{}", out.describe());
    // `run` warns and runs the stage here: the warning says it once too.
    let out = c.run(&["run", "--remote", &remote]);
    expect(&out, 0, why);
    assert_eq!(count(&out, why), 1, "{}", out.describe());
    c.finish();
}

#[test]
fn terminal_a_store_that_is_a_file_exits_2_naming_it() {
    let c = Case::new("stages:\n  s:\n    cmd: 'true'\n");
    // Root writes through any mode bits, but not through a file where a directory must be.
    c.ws.write(".pipeline", "not a directory\n");
    for cmd in [&["run"][..], &["gc"], &["verify"]] {
        let out = c.run(cmd);
        expect(&out, 2, "cannot write the workspace state directory");
        assert!(out.stderr.contains(".pipeline"), "{}", out.describe());
        assert_eq!(count(&out, "(os error 20)"), 1, "{}", out.describe());
    }
    assert_eq!(
        std::fs::read_to_string(c.ws.path(".pipeline")).unwrap(),
        "not a directory\n"
    );
    std::fs::remove_file(c.ws.path(".pipeline")).unwrap();
    c.finish();
}

/// `pipeline ARGS` in `c`'s workspace as the user `nobody` (root ignores mode bits), under the
/// limits; `None` where that cannot be done (not root, or no `setpriv`).
fn as_nobody(c: &Case, args: &[&str]) -> Option<Output> {
    let id = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&id.stdout).trim() != "0" {
        return None;
    }
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "ulimit -v {MEM_KIB} && exec setpriv --reuid=65534 --regid=65534 --clear-groups \"$0\" \"$@\""
        ))
        .arg(BIN)
        .arg("-f")
        .arg(c.ws.file())
        .args(args)
        .current_dir(c.ws.root())
        .env_remove("RUST_LOG");
    let out = run_bounded(cmd, TIME);
    (!out.stderr.contains("setpriv:")).then_some(out)
}

#[test]
fn terminal_an_unwritable_store_exits_2_saying_where() {
    use std::os::unix::fs::PermissionsExt;
    let c = Case::new("stages:\n  s:\n    cmd: 'true'\n");
    let mode = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
    // The workspace read-only, no .pipeline yet.
    mode(c.ws.root(), 0o555).unwrap();
    let Some(out) = as_nobody(&c, &["run"]) else {
        mode(c.ws.root(), 0o755).unwrap();
        eprintln!("skipped: needs root and setpriv to run as another user");
        return c.finish();
    };
    expect(&out, 2, "cannot write the workspace state directory");
    assert!(
        out.stderr
            .contains(&format!("{}/.pipeline", c.ws.root().display()))
    );
    assert_eq!(count(&out, "Permission denied"), 1, "{}", out.describe());
    assert!(!c.ws.path(".pipeline").exists());
    // A store made by another user (root): there, but not this user's to write.
    mode(c.ws.root(), 0o755).unwrap();
    c.run(&["run", "-q"]).expect_code(0);
    for cmd in [&["run", "--force"][..], &["gc"], &["verify"]] {
        let out = as_nobody(&c, cmd).unwrap();
        expect(&out, 2, "cannot write the workspace state directory");
        assert!(out.stderr.contains(".pipeline"), "{}", out.describe());
    }
    // Only its tmp/ read-only: the run is refused before any stage, not failed by one.
    let tmp = c.ws.path(".pipeline/tmp");
    Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(c.ws.path(".pipeline"))
        .status()
        .unwrap();
    mode(&tmp, 0o555).unwrap();
    let out = as_nobody(&c, &["run", "--force"]).unwrap();
    expect(&out, 2, &format!("{}", tmp.display()));
    assert!(!out.stdout.contains("FAILED"), "{}", out.describe());
    mode(&tmp, 0o755).unwrap();
    c.finish();
}

#[test]
fn terminal_a_did_you_mean_over_huge_hostile_keys_is_bounded_and_escaped() {
    let key = format!("{}{}", HOSTILE[0], "k".repeat(70_000));
    let c = metrics_case(&[("1", serde_json::json!({ key: 1, "acc": 0.5 }))]);
    for args in [
        &["exp", "show", "--metrics", "nosuch"][..],
        &["exp", "show", "--sort", "nosuch"],
    ] {
        let out = c.run(args);
        expect(&out, 2, "nosuch");
        assert_no_raw_controls(&out);
    }
    c.finish();
}

#[test]
fn terminal_a_70000_character_instance_name_does_not_panic_the_listings() {
    let c = Case::new(&format!(
        "stages:\n  s:\n    cmd: 'true'\n    matrix: {{n: ['{}', \"\\e[2J\"]}}\n",
        "x".repeat(70_000)
    ));
    for args in [&["dag"][..], &["status"], &["run", "--dry-run"]] {
        let out = clean_output(&c, args);
        assert!(out.stdout.contains('…'), "{args:?}\n{}", out.describe());
    }
    c.finish();
}
