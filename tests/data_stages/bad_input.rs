//! Bad input to the data stages: each refusal names the file, line or param, exits non-zero
//! and leaves the store clean.

use super::*;

/// The default pipeline in a workspace with its own data root `data/` (the fixture corpus'
/// `lines` file and the fixture vocab), to be spoiled by each test.
fn data_ws() -> Ws {
    let ws = default_ws();
    ws.write(
        "data/corpus/a/docs.txt",
        read(format!("{}/corpus/lines/docs.txt", fixtures())),
    );
    ws.write(
        "data/vocab/vocab.txt",
        read(format!("{}/vocab/vocab.txt", fixtures())),
    );
    // The tasks' files, which `clean` reads to keep their dev and test texts out of the corpus.
    for task in TASK_DIRS {
        copy_dir(
            &Path::new(&fixtures()).join(task),
            &ws.path(&format!("data/{task}")),
        );
    }
    ws
}

/// The fixture folders of the tasks the default pipeline decontaminates against.
const TASK_DIRS: [&str; 9] = [
    "lcqmc",
    "afqmc",
    "nli_extra",
    "xnli_zh",
    "chnsenticorp",
    "smp2020_ewect",
    "msra_ner",
    "cmrc2018",
    "c3",
];

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// `pipeline run mask --set data=data EXTRA...`
fn run_data(ws: &Ws, extra: &[&str]) -> Output {
    let mut args = vec!["run", "mask", "--set", "data=data"];
    args.extend_from_slice(extra);
    ws.run(&args)
}

/// Asserts a failed stage: exit code 1, no panic, `stage` reported FAILED with each of
/// `needles` in its error (the run summary, on stdout).
fn assert_stage_failed(out: &Output, stage: &str, needles: &[&str]) {
    out.expect_code(1);
    out.assert_no_panic();
    let summary = &out.stdout;
    assert!(
        summary.contains(&format!("FAILED  {stage}")),
        "`{stage}` not reported as failed\n{}",
        out.describe()
    );
    let error = summary
        .lines()
        .skip_while(|l| !l.contains(&format!("FAILED  {stage}")))
        .find_map(|l| l.trim().strip_prefix("error: "))
        .unwrap_or_else(|| panic!("no error line under `{stage}`\n{}", out.describe()));
    for n in needles {
        assert!(
            error.contains(n),
            "the error of `{stage}` lacks {n:?}\n{}",
            out.describe()
        );
    }
}

/// Asserts a param error caught before anything runs: exit code 2, no panic, nothing on
/// stdout, each of `needles` on stderr.
fn assert_param_error(out: &Output, needles: &[&str]) {
    out.expect_code(2);
    out.assert_no_panic();
    assert!(out.stdout.trim().is_empty(), "{}", out.describe());
    assert!(out.stderr.starts_with("error: "), "{}", out.describe());
    for n in needles {
        assert!(
            out.stderr.contains(n),
            "stderr lacks {n:?}\n{}",
            out.describe()
        );
    }
}

#[test]
fn the_spoilable_data_root_works_as_given() {
    // The baseline of the bad-input tests: unspoiled, it runs.
    let ws = data_ws();
    let out = run_data(&ws, &[]);
    out.expect_code(0);
    out.assert_no_panic();
}

#[test]
fn vocab_missing_a_special_token_names_the_file_and_the_token() {
    let ws = data_ws();
    let vocab = read(ws.path("data/vocab/vocab.txt"));
    let without: String = vocab
        .lines()
        .filter(|l| *l != "[MASK]")
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(without, vocab);
    ws.write("data/vocab/vocab.txt", without);
    let out = run_data(&ws, &[]);
    assert_stage_failed(
        &out,
        "vocab",
        &[
            &ws.path("data/vocab/vocab.txt").display().to_string(),
            "missing special token(s) [MASK]",
        ],
    );
    assert!(out.stdout.contains("skipped  mask"), "{}", out.describe());
}

#[test]
fn vocab_with_a_duplicate_token_names_the_line() {
    let ws = data_ws();
    let mut vocab = read(ws.path("data/vocab/vocab.txt"));
    let first = vocab
        .lines()
        .position(|l| l == "的")
        .expect("的 in the fixture vocab")
        + 1;
    let total = vocab.lines().count();
    vocab.push_str("的\n");
    ws.write("data/vocab/vocab.txt", vocab);
    let out = run_data(&ws, &[]);
    let at = format!(
        "{}:{}: token \"的\" duplicates line {first}",
        ws.path("data/vocab/vocab.txt").display(),
        total + 1
    );
    assert_stage_failed(&out, "vocab", &[&at]);
}

#[test]
fn empty_corpus_files_are_an_error_that_says_why() {
    let ws = data_ws();
    std::fs::remove_file(ws.path("data/corpus/a/docs.txt")).unwrap();
    ws.write("data/corpus/a/empty.txt", "");
    ws.write("data/corpus/b/blank.txt", "\n  \n\n");
    let out = run_data(&ws, &[]);
    assert_stage_failed(
        &out,
        "clean",
        &["the 2 input file(s) hold no documents (5 bytes read)"],
    );
    assert!(out.stdout.contains("skipped  vocab"), "{}", out.describe());
}

#[test]
fn a_corpus_whose_documents_are_all_dropped_says_what_dropped_them() {
    let ws = data_ws();
    let out = run_data(&ws, &["--set", "clean.min_doc_chars=100000"]);
    assert_stage_failed(
        &out,
        "clean",
        &[
            "all 114 documents were dropped",
            "too short (min_doc_chars = 100000",
        ],
    );
}

#[test]
fn max_seq_length_too_small_is_a_param_error() {
    let ws = data_ws();
    let out = run_data(&ws, &["--set", "mask.max_seq_length=4"]);
    assert_param_error(
        &out,
        &[
            "stage `mask`",
            "max_seq_length = 4 is too small",
            "[CLS] A [SEP] B [SEP]",
        ],
    );
    // 5 is the smallest that fits, and runs.
    let out = run_data(&ws, &["--set", "mask.max_seq_length=5"]);
    out.expect_code(0);
    out.assert_no_panic();
}

#[test]
fn masked_lm_prob_outside_the_open_unit_interval_is_a_param_error() {
    let ws = data_ws();
    for p in ["0", "1", "1.5", "-0.1"] {
        let out = run_data(&ws, &["--set", &format!("mask.masked_lm_prob={p}")]);
        assert_param_error(
            &out,
            &[
                "stage `mask`",
                &format!("masked_lm_prob = {p} must be in (0, 1)"),
            ],
        );
    }
    // Nothing ran: no artifact was made.
    assert!(!ws.path(".pipeline/artifacts/mask").exists());
}

#[test]
fn unreadable_inputs_are_errors_naming_the_file() {
    // A directory where the vocab file is expected (works as root too).
    let ws = data_ws();
    std::fs::remove_file(ws.path("data/vocab/vocab.txt")).unwrap();
    std::fs::create_dir(ws.path("data/vocab/vocab.txt")).unwrap();
    let out = run_data(&ws, &[]);
    assert_stage_failed(
        &out,
        "vocab",
        &["param `file`: data/vocab/vocab.txt", "is a directory"],
    );

    // A corpus file without read permission (root reads it anyway: then skipped).
    let ws = data_ws();
    let file = ws.path("data/corpus/a/docs.txt");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o000)).unwrap();
    if std::fs::read(&file).is_ok() {
        println!(
            "note: running as root (or with CAP_DAC_OVERRIDE): chmod 000 does not stop reads, \
             skipping the unreadable-file case"
        );
        return;
    }
    let out = run_data(&ws, &[]);
    assert_ne!(out.code, 0, "{}", out.describe());
    out.assert_no_panic();
    let all = format!("{}{}", out.stdout, out.stderr);
    assert!(
        all.contains("data/corpus/a/docs.txt") && all.to_lowercase().contains("permission denied"),
        "the error does not name the unreadable file\n{}",
        out.describe()
    );
}

#[test]
fn invalid_utf8_lines_are_skipped_counted_and_located() {
    let ws = data_ws();
    let mut bad: Vec<u8> = Vec::new();
    bad.extend("今天天气很好，我们一起去公园散步，看到了很多盛开的花。\n".as_bytes());
    bad.extend(b"\xff\xfe broken bytes \xc3\x28\n");
    bad.extend("这家餐厅的菜很好吃，服务也很周到，下次我们还会再来。\n".as_bytes());
    bad.extend("半个字符".as_bytes());
    bad.extend(b"\xe4\xbd\n");
    ws.write("data/corpus/b/bad.txt", bad);
    let v = ws.json(&["run", "mask", "--set", "data=data"], 0);
    assert_eq!(v["ok"], true, "{v:#}");
    let clean = artifact(&v, "clean");
    let cm = metrics(&clean);
    assert_eq!(cm["invalid_utf8_lines"], 2, "{cm:#}");
    assert_eq!(cm["files"], 2, "{cm:#}");
    // docs.txt's 114 documents and bad.txt's two valid lines.
    assert_eq!(cm["documents_in"], 116, "{cm:#}");
    assert_eq!(cm["documents_out"], 113, "{cm:#}");
    let corpus = read(clean.join("corpus-00000.txt"));
    assert!(
        corpus.contains("这家餐厅的菜很好吃"),
        "the valid lines are kept"
    );
    assert!(
        !corpus.contains("broken bytes"),
        "the invalid line is dropped"
    );
    assert!(!corpus.contains('\u{fffd}'), "no replacement characters");
    let log = read(clean.join(".log/clean.log"));
    for line in [2, 4] {
        let at = format!("data/corpus/b/bad.txt:{line}: invalid UTF-8, line skipped");
        assert!(log.contains(&at), "clean.log lacks {at:?}:\n{log}");
    }

    // The warning on stderr names the first bad line and no temporary folder.
    let out = ws.run(&["run", "clean", "--set", "data=data", "--force"]);
    out.expect_code(0);
    out.assert_no_panic();
    assert!(
        out.stderr.contains(
            "2 lines of invalid UTF-8 skipped in 1 file(s), the first at data/corpus/b/bad.txt:2"
        ),
        "{}",
        out.describe()
    );
    assert!(!out.stderr.contains(".pipeline/tmp/"), "{}", out.describe());
}
