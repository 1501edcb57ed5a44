//! Random mutations of the repository's own `pipeline.yaml`: whatever the edit, planning it
//! (`pipeline status`) never panics and ends with exit 0, or exit 2 and a bounded message
//! naming the file. Seeded with the project's one RNG (`pipeline_shards::rng`), so a failure names the
//! seed that reproduces it, and the mutated text is printed.

use super::*;
use pipeline_shards::rng::SplitMix64;

const DEFAULT_PIPELINE: &str = include_str!("../../pipeline.yaml");

/// Edited files planned per run of the test (~40 ms each in a debug build).
const MUTATIONS: u64 = 150;

/// Characters that change YAML's structure, and some that do not.
const ALPHABET: &[&str] = &[
    ":",
    "-",
    " ",
    "  ",
    "\n",
    "\t",
    "[",
    "]",
    "{",
    "}",
    ",",
    "&a",
    "*a",
    "<<: *a",
    "!",
    "|",
    ">",
    "'",
    "\"",
    "#",
    "?",
    "${",
    "${vars.",
    "}",
    "@",
    "=",
    "~",
    "null",
    "1e309",
    "-1",
    "好",
    "\u{0}",
    "\u{feff}",
    "stages:",
    "deps: [",
    "matrix: {x: [",
    "kind: ",
    "cmd: ",
];

fn pick(rng: &mut SplitMix64, n: usize) -> usize {
    rng.below(n.max(1) as u64) as usize
}

/// One random edit at a character boundary: delete a span, insert structure, duplicate or
/// drop a line, re-indent a line, or truncate.
fn mutate(text: &str, rng: &mut SplitMix64) -> String {
    let bounds: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .collect();
    let at = bounds[pick(rng, bounds.len())];
    let lines: Vec<&str> = text.lines().collect();
    let line = pick(rng, lines.len());
    match rng.below(6) {
        0 => {
            let end = bounds[pick(rng, bounds.len())].max(at).min(at + 64);
            let end = bounds
                .iter()
                .copied()
                .find(|&b| b >= end)
                .unwrap_or(text.len());
            format!("{}{}", &text[..at], &text[end..])
        }
        1 => format!(
            "{}{}{}",
            &text[..at],
            ALPHABET[pick(rng, ALPHABET.len())],
            &text[at..]
        ),
        2 => {
            let mut l = lines.clone();
            l.insert(line, lines[line]);
            l.join("\n")
        }
        3 => {
            let mut l = lines.clone();
            l.remove(line);
            l.join("\n")
        }
        4 => {
            let mut l: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
            let indent = " ".repeat(pick(rng, 9));
            l[line] = format!("{indent}{}", l[line].trim_start());
            l.join("\n")
        }
        _ => text[..at].to_string(),
    }
}

#[test]
fn fuzz_mutated_default_pipeline_never_panics() {
    let c = Case::new(DEFAULT_PIPELINE);
    // The default `vars.data` is the repository's fixtures: unmutated, the file plans.
    std::os::unix::fs::symlink(
        concat!(env!("CARGO_MANIFEST_DIR"), "/datasets"),
        c.ws.path("datasets"),
    )
    .unwrap();
    c.run(&["status"]).expect_code(0);
    let mut counts = BTreeMap::new();
    for seed in 0..MUTATIONS {
        let mut rng = SplitMix64::new(0x5eed_0000 + seed);
        let mut text = DEFAULT_PIPELINE.to_string();
        for _ in 0..=rng.below(3) {
            text = mutate(&text, &mut rng);
        }
        c.ws.set_yaml(&text);
        // `run_bounded` fails the test on a panic or an allocation failure.
        let out = c.run(&["status"]);
        let all = format!("{}{}", out.stdout, out.stderr);
        match out.code {
            0 => {}
            2 => {
                assert!(
                    all.contains("pipeline.yaml"),
                    "seed {seed}: exit 2 without naming the file\n{}\n--- text ---\n{text}",
                    out.describe()
                );
                assert!(all.len() < MAX_OUTPUT, "seed {seed}: {} bytes", all.len());
            }
            code => panic!(
                "seed {seed}: exit {code}\n{}\n--- text ---\n{text}",
                out.describe()
            ),
        }
        *counts.entry(out.code).or_insert(0) += 1;
    }
    eprintln!("exit codes of {MUTATIONS} mutations: {counts:?}");
    c.ws.set_yaml(ONE_STAGE);
    c.finish();
}
