//! Class 1 of issue 20: bounded memory and bounded messages for any `pipeline.yaml` (aliases,
//! nesting, size, encodings, shapes that are not a pipeline).

use super::*;

#[test]
fn yaml_billion_laughs_is_refused_in_bounded_memory() {
    let mut text = String::from("vars:\n  a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..10 {
        let prev = format!("*a{}", i - 1);
        text.push_str(&format!("  a{i}: &a{i} [{}]\n", vec![prev; 9].join(", ")));
    }
    text.push_str("stages:\n  a:\n    cmd: 'true'\n");
    let c = Case::new(&text);
    let t0 = Instant::now();
    for cmd in ["status", "dag", "run"] {
        c.expect(&[cmd], 2, "billion laughs");
    }
    assert!(t0.elapsed() < Duration::from_secs(20));
    c.expect(&["status"], 2, "pipeline.yaml:");
    c.finish();
}

#[test]
fn yaml_aliases_used_normally_still_work() {
    let c = Case::new(
        "vars:\n  sizes: &s [1, 2]\nstages:\n  a:\n    cmd: 'true'\n    matrix: {n: *s}\n",
    );
    let v = c.ws.json(&["status"], 0);
    assert_eq!(v["stages"].as_array().unwrap().len(), 2);
    c.finish();
}

#[test]
fn yaml_nested_anchors_share_rather_than_copy() {
    // 60 anchored levels around one list of 10^6 scalars (2 MB of text): each level once kept
    // its own copy of the list (60 × ~80 MB, over the address-space limit); shared, it is one.
    let levels = 60;
    let open: String = (0..levels).map(|i| format!("&l{i} [")).collect();
    let text = format!(
        "vars:\n  x: {open}{}{}\n  y: *l{}\nstages:\n  a:\n    cmd: 'true'\n",
        vec!["a"; 1_000_000].join(","),
        "]".repeat(levels),
        levels - 1
    );
    let c = Case::new(&text);
    c.run(&["status"]).expect_code(0);
    c.finish();
}

#[test]
fn yaml_deep_flow_nesting_is_refused() {
    let deep = format!("{}1{}", "[".repeat(50_000), "]".repeat(50_000));
    refused(
        &format!("vars:\n  x: {deep}\nstages:\n  a:\n    cmd: 'true'\n"),
        "deeper than 64",
    );
}

#[test]
fn yaml_deep_block_nesting_is_refused() {
    let mut text = String::from("vars:\n");
    for i in 0..80 {
        text.push_str(&format!("{}k{i}:\n", "  ".repeat(i + 1)));
    }
    text.push_str(&format!(
        "{}v\nstages:\n  a:\n    cmd: 'true'\n",
        "  ".repeat(81)
    ));
    refused(&text, "deeper than 64");
}

#[test]
fn yaml_alias_to_unknown_anchor_is_refused() {
    refused("stages:\n  a:\n    cmd: *nothing\n", "pipeline.yaml:3");
}

#[test]
fn yaml_merge_keys_are_supported() {
    let c = Case::new(
        "stages:\n  a: &base\n    cmd: 'echo merged > $PIPELINE_OUT/o.txt'\n    outs: [o.txt]\n  b:\n    <<: *base\n    cmd: 'echo own > $PIPELINE_OUT/o.txt'\n  c:\n    <<: *base\n",
    );
    let out = c.run(&["run", "--json"]);
    out.expect_code(0);
    let v = out.json();
    let read = |name: &str| {
        let dir = stage_json(&v, name)["artifact"]
            .as_str()
            .unwrap()
            .to_string();
        std::fs::read_to_string(Path::new(&dir).join("o.txt")).unwrap()
    };
    assert_eq!(read("a"), "merged\n");
    assert_eq!(read("b"), "own\n");
    assert_eq!(read("c"), "merged\n");
    c.finish();
}

#[test]
fn yaml_merge_key_of_a_scalar_is_refused() {
    refused("stages:\n  a:\n    <<: 5\n    cmd: 'true'\n", "merge key");
}

#[test]
fn yaml_file_over_the_size_limit_is_refused() {
    let mut text = String::from("stages:\n  a:\n    cmd: 'true'\n# ");
    text.push_str(&"x".repeat(5 << 20));
    refused(&text, "larger than 4 MiB");
}

#[test]
fn yaml_dev_zero_as_the_pipeline_file_is_refused() {
    let c = Case::new("stages:\n  a:\n    cmd: 'true'\n");
    let out = c.run_file(Path::new("/dev/zero"), &["status"]);
    expect(&out, 2, "larger than 4 MiB");
    c.finish();
}

#[test]
fn yaml_not_utf8_is_refused() {
    let c = Case::new("stages:\n  a:\n    cmd: 'true'\n");
    c.ws.write("pipeline.yaml", b"stages:\n  a:\n    cmd: '\xff\xfe'\n");
    c.expect(&["status"], 2, "not valid UTF-8");
    c.finish();
}

#[test]
fn yaml_error_on_a_200kb_line_is_not_echoed_whole() {
    let line = format!("{{a: [{}]}}", "x, ".repeat(70_000));
    let c = Case::new(&format!("stages: {line}\n  b: 1\n"));
    let out = c.run(&["status"]);
    out.expect_code(2);
    assert!(out.stderr.len() < 4096, "{} bytes", out.stderr.len());
    c.finish();
}

#[test]
fn yaml_huge_unknown_key_is_not_echoed_whole() {
    let key = "k".repeat(200_000);
    // An explicit key (`? KEY`): YAML refuses implicit keys over 1,024 characters itself.
    let c = Case::new(&format!(
        "stages:\n  a:\n    cmd: 'true'\n    ? {key}\n    : 1\n"
    ));
    let out = c.run(&["status"]);
    out.expect_code(2);
    assert!(out.stderr.len() < 4096, "{} bytes", out.stderr.len());
    assert!(
        out.stderr.contains("characters left out"),
        "{}",
        out.describe()
    );
    c.finish();
}

#[test]
fn yaml_set_flag_with_deep_nesting_is_taken_as_text() {
    // What YAML cannot read in `--set` is a string (a path with `: ` in it, say); the limits
    // keep that reading bounded.
    let c = Case::new("vars: {x: 1}\nstages:\n  a:\n    cmd: 'true'\n");
    let deep = format!("x={}1{}", "[".repeat(10_000), "]".repeat(10_000));
    c.run(&["--set", &deep, "status"]).expect_code(0);
    c.finish();
}

#[test]
fn yaml_shapes_that_are_not_a_pipeline_are_refused() {
    for (yaml, needle) in [
        ("", "empty"),
        ("# only a comment\n", "empty"),
        ("- a\n- b\n", "pipeline.yaml"),
        ("just a string\n", "pipeline.yaml"),
        ("stages:\n\ta:\n", "pipeline.yaml"),
        ("stages:\n  a:\n    cmd: 'unclosed\n", "pipeline.yaml"),
        ("stages: null\n", "pipeline.yaml"),
        (
            "stages:\n  a:\n    cmd: x\n  a:\n    cmd: y\n",
            "pipeline.yaml:4",
        ),
        ("stages:\n  a: [1, 2]\n", "pipeline.yaml:2"),
        ("stages:\n  a:\n    cmd: x\n    deps: [a]\n", "cycle"),
        (
            "stages:\n  a:\n    cmd: x\n    deps: [nope]\n",
            "pipeline.yaml:4",
        ),
        ("stages:\n  a:\n    cmd: '${vars.nope}'\n", "undefined var"),
        (
            "stages:\n  a:\n    cmd: x\n    outs: [../escape]\n",
            "inside $PIPELINE_OUT",
        ),
        (
            "stages:\n  a:\n    cmd: x\n    outs: [/etc/passwd]\n",
            "inside $PIPELINE_OUT",
        ),
        (
            "stages:\n  a:\n    cmd: x\n    resources: {gpu: -1}\n",
            "pipeline.yaml:4",
        ),
        (
            "stages:\n  a:\n    cmd: x\n    matrix: {n: 5}\n",
            "pipeline.yaml:4",
        ),
        (
            "stages:\n  a:\n    cmd: x\n    matrix: {n: []}\n",
            "pipeline.yaml:4",
        ),
    ] {
        refused(yaml, needle);
    }
}
