//! Classes 5 and 6 of issue 20: silent wrong inputs are errors at plan time with file:line, and
//! plans whose cost could grow too fast (huge matrices, long chains) stay quick.

use super::*;

#[test]
fn plan_dep_names_with_one_env_variable_are_refused() {
    refused(
        "stages:\n  a-b:\n    cmd: 'true'\n  a_b:\n    cmd: 'true'\n  c:\n    cmd: 'true'\n    deps: [a-b, a_b]\n",
        "would both be $PIPELINE_DEP_A_B",
    );
}

#[test]
fn plan_dep_seen_under_its_stage_name_collides_with_a_plain_dep() {
    // `p@x=1`, the one instance of `p`, is also exported as $PIPELINE_DEP_P: so is stage `P`.
    refused(
        "stages:\n  p:\n    cmd: 'true'\n    matrix: {x: [1]}\n  P:\n    cmd: 'true'\n  c:\n    cmd: 'true'\n    deps: [p, P]\n",
        "would both be $PIPELINE_DEP_P",
    );
}

#[test]
fn plan_cjk_dep_names_of_one_length_are_refused() {
    refused(
        "stages:\n  甲乙:\n    cmd: 'true'\n  丙丁:\n    cmd: 'true'\n  c:\n    cmd: 'true'\n    deps: [甲乙, 丙丁]\n",
        "pipeline.yaml:8",
    );
}

#[test]
fn plan_matrix_values_naming_one_instance_are_refused() {
    refused(
        "stages:\n  a:\n    cmd: 'true'\n    matrix: {n: [1, \"1\"]}\n",
        "name the same instance `a@n=1`",
    );
    refused(
        "stages:\n  a:\n    cmd: 'true'\n    matrix: {n: [true, \"true\"]}\n",
        "pipeline.yaml:4",
    );
}

#[test]
fn plan_inputs_reaching_into_the_store_are_refused() {
    let c = Case::new(ONE_STAGE);
    c.run(&["run"]).expect_code(0);
    for pattern in [".pipeline/**/*", "**/*.json", "*"] {
        c.ws.set_yaml(&format!(
            "stages:\n  a:\n    cmd: 'true'\n    inputs: [\"{pattern}\"]\n"
        ));
        c.expect(&["status"], 2, "reaches into the pipeline's own store");
    }
    c.ws.set_yaml("stages:\n  a:\n    cmd: 'true'\n    inputs: [\"**/*\", \"!.pipeline/**\"]\n");
    c.run(&["status"]).expect_code(0);
    c.ws.set_yaml(ONE_STAGE);
    c.finish();
}

#[test]
fn plan_inputs_reaching_the_store_through_a_symlink_are_refused() {
    let c = Case::new(ONE_STAGE);
    let v = c.ws.json(&["run"], 0);
    let artifact = PathBuf::from(stage_json(&v, "a")["artifact"].as_str().unwrap());
    std::os::unix::fs::symlink(".pipeline", c.ws.path("data")).unwrap();
    std::os::unix::fs::symlink(artifact.join("a.txt"), c.ws.path("one-file")).unwrap();
    c.ws.write("mine/ok.txt", "a workspace file");
    std::os::unix::fs::symlink("../.pipeline/artifacts", c.ws.path("mine/store")).unwrap();
    for inputs in [
        "[data]",
        "[\"data/**/*\"]",
        "[mine]",
        "[\"mine/*\"]",
        "[one-file]",
    ] {
        c.ws.set_yaml(&format!(
            "stages:\n  a:\n    cmd: 'true'\n    inputs: {inputs}\n"
        ));
        c.expect(&["status"], 2, "reaches into the pipeline's own store");
    }
    c.ws.set_yaml("stages:\n  a:\n    cmd: 'true'\n    inputs: [mine/ok.txt]\n");
    c.run(&["status"]).expect_code(0);
    c.ws.set_yaml(ONE_STAGE);
    c.finish();
}

// ---------------------------------------------------------------------------------------------
// Class 6: costs that grew too fast.

#[test]
fn costs_ten_thousand_value_matrix_with_a_dependent_plans_quickly() {
    let values: Vec<String> = (0..10_000).map(|i| i.to_string()).collect();
    let c = Case::new(&format!(
        "stages:\n  a:\n    cmd: 'true'\n    matrix: {{n: [{}]}}\n  b:\n    cmd: 'true'\n    deps: [a]\n  c:\n    cmd: 'true'\n    deps: [b]\n    aggregate: true\n",
        values.join(", ")
    ));
    let t0 = Instant::now();
    let out = c.run(&["dag", "--json"]);
    out.expect_code(0);
    // Debug build on 2 cores; the quadratic planner took ~14 s for this in a release build.
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
    assert_eq!(out.json()["stages"].as_array().unwrap().len(), 20_001);
    c.finish();
}

#[test]
fn costs_failing_stage_with_one_huge_line_shows_a_bounded_tail() {
    let c = Case::new(
        "stages:\n  a:\n    cmd: 'head -c 50000000 /dev/zero | tr \"\\0\" x >&2; exit 3'\n",
    );
    let out = c.expect(&["run"], 1, "status 3");
    assert!(out.stderr.len() < 8192, "{} bytes", out.stderr.len());
    c.finish();
}

#[test]
fn costs_long_chain_of_stages_plans_quickly() {
    let mut text = String::from("stages:\n  s0:\n    cmd: 'true'\n");
    for i in 1..1500 {
        text.push_str(&format!(
            "  s{i}:\n    cmd: 'true'\n    deps: [s{}]\n",
            i - 1
        ));
    }
    let c = Case::new(&text);
    let t0 = Instant::now();
    c.run(&["status", "--json"]).expect_code(0);
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
    c.finish();
}

#[test]
fn costs_three_axis_product_plans() {
    let v: Vec<String> = (0..20).map(|i| i.to_string()).collect();
    let list = v.join(", ");
    let c = Case::new(&format!(
        "stages:\n  a:\n    cmd: 'true'\n    matrix: {{x: [{list}], y: [{list}], z: [{list}]}}\n"
    ));
    let out = c.run(&["dag", "--json"]);
    out.expect_code(0);
    assert_eq!(out.json()["stages"].as_array().unwrap().len(), 8000);
    c.finish();
}
