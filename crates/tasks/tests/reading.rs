//! The reading-comprehension readers on real files: the project's fixtures (always) and the
//! shared CMRC 2018 and C3 files when `PIPELINE_DATA_ROOT` points at them
//! (`PIPELINE_DATA_ROOT=../shared/datasets cargo test -p pipeline-tasks --test reading`;
//! skipped with a note otherwise). The counts asserted are those the module docs quote.

use std::path::{Path, PathBuf};

use pipeline_tasks::c3::{C3_DEV_FRACTION, C3_TEST_FRACTION, C3Issue, read_c3};
use pipeline_tasks::squad::{SquadError, SquadIssue, read_squad};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn data_root(sub: &str) -> Option<PathBuf> {
    let Some(root) = std::env::var_os("PIPELINE_DATA_ROOT") else {
        eprintln!(
            "note: PIPELINE_DATA_ROOT is unset; skipping the tests on the shared data \
             (PIPELINE_DATA_ROOT=../shared/datasets cargo test -p pipeline-tasks)"
        );
        return None;
    };
    let root = PathBuf::from(root);
    let root = if root.is_absolute() {
        root
    } else {
        workspace().join(root)
    };
    if !root.join(sub).is_dir() {
        eprintln!("note: {} has no {sub}/; skipping", root.display());
        return None;
    }
    Some(root)
}

#[test]
fn fixtures_read_clean_and_split() {
    let dir = workspace().join("datasets/fixtures");
    let dev = read_squad(&dir.join("cmrc2018/dev.json")).unwrap();
    dev.require_labels().unwrap();
    dev.check_bad_fraction(0.0).unwrap();
    assert_eq!((dev.report.articles, dev.examples.len()), (30, 76));
    assert_eq!(
        dev.report
            .answer_notes
            .count(SquadIssue::AnswerStartRepaired),
        1
    );
    assert_eq!(
        dev.report
            .answer_notes
            .count(SquadIssue::AnswerNotInContext),
        1
    );
    let s = dev.split(0.1, 0.1, 12345).unwrap();
    assert_eq!(s.groups, [24, 3, 3]);
    let test = read_squad(&dir.join("cmrc2018/test.json")).unwrap();
    assert!(matches!(
        test.require_labels(),
        Err(SquadError::Unlabelled { .. })
    ));
    let c3 = read_c3(&dir.join("c3/dev.json")).unwrap();
    c3.check_bad_fraction(0.0).unwrap();
    assert_eq!(c3.report.documents, 30);
    let s = c3.split(C3_DEV_FRACTION, C3_TEST_FRACTION, 12345).unwrap();
    assert_eq!(s.groups, [24, 3, 3]);
}

#[test]
fn shared_cmrc2018_counts() {
    let Some(root) = data_root("cmrc2018") else {
        return;
    };
    let dev = read_squad(&root.join("cmrc2018/dev.json")).unwrap();
    let r = &dev.report;
    eprintln!("cmrc2018/dev.json: {}", serde_json::to_string(r).unwrap());
    assert_eq!(
        (r.articles, r.contexts, r.questions_read, r.questions),
        (848, 848, 3219, 3219)
    );
    assert_eq!((r.dropped.total, r.answers, r.without_span), (0, 9657, 0));
    assert_eq!(r.answer_notes.count(SquadIssue::AnswerStartRepaired), 7);
    assert_eq!(r.answer_notes.count(SquadIssue::AnswerNotInContext), 193);
    dev.require_labels().unwrap();
    // Every training target is its text in the context, exactly.
    for ex in &dev.examples {
        let span = ex.target().unwrap();
        let text = ex.answers.iter().find(|a| a.span.is_some()).unwrap();
        assert_eq!(&ex.context[span.clone()], text.text);
    }
    let s = dev.split(0.1, 0.1, 12345).unwrap();
    eprintln!(
        "cmrc2018 dev split 80/10/10 by article: articles {:?}, questions {} / {} / {}",
        s.groups,
        s.train.len(),
        s.dev.len(),
        s.test.len()
    );
    assert_eq!(s.groups, [678, 85, 85]);
    let test = read_squad(&root.join("cmrc2018/test.json")).unwrap();
    let r = &test.report;
    eprintln!("cmrc2018/test.json: {}", serde_json::to_string(r).unwrap());
    assert_eq!((r.articles, r.questions, r.without_span), (470, 2000, 2000));
    assert!(matches!(
        test.require_labels(),
        Err(SquadError::Unlabelled { .. })
    ));
}

#[test]
fn shared_c3_counts() {
    let Some(root) = data_root("c3") else {
        return;
    };
    let f = read_c3(&root.join("c3/dev.json")).unwrap();
    let r = &f.report;
    eprintln!("c3/dev.json: {}", serde_json::to_string(r).unwrap());
    assert_eq!((r.documents_read, r.documents), (2674, 2674));
    assert_eq!(
        (r.questions_read, r.questions, r.dropped.total),
        (3816, 3816, 0)
    );
    assert_eq!(
        r.by_choices
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect::<Vec<_>>(),
        [(2, 170), (3, 465), (4, 3181)]
    );
    assert_eq!(r.by_answer, [954, 1028, 1056, 778]);
    assert_eq!(r.dropped.count(C3Issue::AmbiguousAnswer), 0);
    let s = f.split(C3_DEV_FRACTION, C3_TEST_FRACTION, 12345).unwrap();
    eprintln!(
        "c3 split 80/10/10 by document: documents {:?}, questions {} / {} / {}",
        s.groups,
        s.train.len(),
        s.dev.len(),
        s.test.len()
    );
    assert_eq!(s.groups, [2140, 267, 267]);
}
