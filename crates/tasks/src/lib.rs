//! Fine-tuning tasks, without a model: reading sentence-pair, single-text, tagging (NER) and
//! multiple-choice data sets,
//! their label maps, the train/dev/evaluation protocols, and evaluation metrics. The finetune
//! stage parses its params with [`ProtocolSpec::from_params`], loads the examples with
//! [`ProtocolSpec::load`], writes [`Protocol::summary`] into metrics.json, and scores its
//! predictions with [`metrics::evaluate`].
//!
//! - [`kinds`]: the task kinds, each one module holding its format, its example and reader,
//!   and how it is encoded, decoded, scored and served (the `Kind` trait, without a model: the
//!   finetune stage gives the head's outputs); [`kinds::of`] registers them;
//! - [`task`]: the built-in tasks (`lcqmc`, `afqmc`, `xnli`, `cmnli`, `ocnli`, `cnsd_snli`;
//!   `chnsenticorp`, `smp2020_ewect`; `msra_ner`), the generic `pair`, `single` and `tagging`
//!   tasks and the `choice` task; class labels (tags) and their order;
//! - [`read`]: file readers that skip and count bad rows (with file:line samples), and fail
//!   clearly on a wrong header, a missing file or a file with no examples; the JSONL format of
//!   `choice` files;
//! - [`protocol`]: train files, a dev set (files or a seeded held-out fraction of train), named
//!   evaluation sets, caps; serialisable for metrics.json;
//! - [`split`]: the seeded, stratified, frozen held-out and subsample draws;
//! - [`metrics`]: accuracy, binary F1, macro-F1, the confusion matrix.
//!
//! # Params
//!
//! | param | default | what |
//! |---|---|---|
//! | `task` | required | a task name (`lcqmc`, `afqmc`, `xnli`, `cmnli`, `ocnli`, `cnsd_snli`, `choice`, `chnsenticorp`, `smp2020_ewect`, `msra_ner`, `cmrc2018`, `squad`, `c3`) or a map (`{name: pair, text_a: 0, text_b: 1, label: 2, header: false, labels: [...], label_map: {...}}`, or a built-in with overrides); defines the labels and the default format of every file |
//! | `train` | required | FILES: the training files |
//! | `dev` | — | FILES: the model-selection set (the best epoch is chosen on it) |
//! | `dev_fraction` | — | instead of `dev`: this share of the train examples, held out (stratified by label, seeded) |
//! | `test` | — | FILES: shorthand for an evaluation set named `test` |
//! | `eval` | — | named evaluation sets: `{NAME: FILES, …}` (reported by name), or `[{name: NAME, files: FILES}, …]` / `[{name: NAME, path: P, format: F}, …]` to keep an order |
//! | `split_seed` | 12345 | seed of the held-out dev set and of the caps' subsamples (apart from the training seed, so that varying the training seed keeps the split) |
//! | `max_train_examples` | none | cap the train examples (stratified seeded subsample, taken after holding out dev), for the CPU budget |
//! | `max_eval_examples` | none | cap dev and each evaluation set, for smoke runs only: capped results are not comparable with published ones |
//! | `max_bad_fraction` | 0.01 | fail when more than this share of a file's rows are bad (wrong column count, unknown label, empty text, invalid UTF-8) |
//! | `drop_eval_overlap` | true | drop train examples whose texts are those of a dev-file or evaluation example, before holding out dev (counted per file in metrics.json) |
//! | `test_fraction` | — | reading tasks (`cmrc2018`, `squad`, `c3`) only: this share of the train files' articles (documents) held out as the evaluation set `test`, beside `dev_fraction`'s for dev; both by group, seeded ([`protocol`]'s `reading`) |
//!
//! FILES is a path, a `{path: P, format: F}` entry (F: a task name or map, when this file's
//! format differs from the task's; its labels must be labels of the task), or a list of those.
//! Relative paths are relative to the workspace root. A file may not be both a train file and
//! a dev or evaluation file.
//!
//! LCQMC (no train split in the shared data: train on 90 % of dev, select on the other 10 %,
//! report on the official test):
//!
//! ```yaml
//! finetune_lcqmc:
//!   kind: finetune
//!   deps: [pretrain]
//!   inputs: ["${vars.data}/lcqmc/*.tsv"]
//!   params:
//!     task: lcqmc
//!     train: ${vars.data}/lcqmc/dev.tsv
//!     dev_fraction: 0.1
//!     split_seed: 12345
//!     test: ${vars.data}/lcqmc/test.tsv
//! ```
//!
//! XNLI (train on the Chinese NLI sets, 3 classes; select on 5 % of them; report on XNLI dev
//! and test). CLUE's CMNLI dev set contains every XNLI dev pair (2,490 of its 12,241 rows), so
//! `drop_eval_overlap` matters here: without it `xnli_dev` measures memorisation.
//!
//! ```yaml
//! finetune_xnli:
//!   kind: finetune
//!   deps: [pretrain]
//!   inputs: ["${vars.data}/nli_extra/*/*.tsv", "${vars.data}/xnli_zh/*.tsv"]
//!   params:
//!     task: xnli
//!     train:
//!       - {path: "${vars.data}/nli_extra/cmnli/dev.tsv", format: cmnli}
//!       - {path: "${vars.data}/nli_extra/ocnli/dev.tsv", format: ocnli}
//!       - {path: "${vars.data}/nli_extra/cnsd_snli/dev.tsv", format: cnsd_snli}
//!       - {path: "${vars.data}/nli_extra/cnsd_snli/test.tsv", format: cnsd_snli}
//!     dev_fraction: 0.05
//!     eval:
//!       xnli_dev: ${vars.data}/xnli_zh/dev.tsv
//!       xnli_test: ${vars.data}/xnli_zh/test.tsv
//! ```
//!
//! A multiple-choice task (the JSONL format is in [`read`]):
//!
//! ```yaml
//! params:
//!   task: choice
//!   train: ${vars.data}/choice/train.jsonl
//!   dev_fraction: 0.1
//!   test: ${vars.data}/choice/test.jsonl
//! ```
//!
//! CMRC 2018 and C3 (labelled dev sets only in the shared data: our protocol is a seeded
//! 80 / 10 / 10 split of dev by article or document: train, select, report):
//!
//! ```yaml
//! params:
//!   task: cmrc2018            # or c3, or squad for any SQuAD v1 file
//!   train: ${vars.data}/cmrc2018/dev.json
//!   dev_fraction: 0.1
//!   test_fraction: 0.1
//! ```
//!
//! A TSV with its own columns and label spellings:
//!
//! ```yaml
//! params:
//!   task: {name: pair, text_a: sentence1, text_b: sentence2, label: gold_label, header: true,
//!          labels: [contradiction, entailment, neutral], label_map: {"-": neutral}}
//!   train: data/my_nli/train.tsv
//!   dev: data/my_nli/dev.tsv
//! ```

#![warn(missing_docs)]

pub mod correlation;
pub mod entities;
mod error;
// The task kinds: each kind's encoding, decoding, scoring and serving, and their registry.
pub mod kinds;
pub mod metrics;
mod params;
pub mod protocol;
pub mod read;
pub mod split;
pub mod task;
// The unlabelled texts of a protocol's splits, for the pretraining corpus (the `clean` stage).
pub mod texts;

// Reading comprehension (CMRC 2018 span extraction, C3 multiple choice): the readers, the split
// by article or document, span features and their decoding.
pub mod group_split;
mod json_stream;
mod tally;
// The reading kinds' formats, readers, features and metric live in their kinds' modules; here
// under their old paths.
pub use kinds::reading_choice::c3;
pub use kinds::span::{cmrc_eval, span_features, squad};

pub use error::TaskError;
pub use metrics::{
    ConfusionMatrix, Metrics, MetricsBlock, MetricsError, SpanMetricsBlock, evaluate,
};
pub use protocol::{
    DevSpec, EvalSpec, Examples, FileSpec, KindExample, Protocol, ProtocolSpec, ProtocolSummary,
    Split, SplitExample, WrongKind,
};
pub use read::{
    BadReason, BadRow, BadRows, ChoiceExample, FileReport, PairExample, ReadingReport,
    ScoredPairExample, SingleExample, TagExample,
};
pub use task::{
    ChoiceFormat, Column, PairFormat, ReadingFormat, SingleFormat, TagFormat, TagLayout, Task,
    TaskKind,
};

/// The param names a protocol reads, for the stage's `known_params` (the stage adds its
/// training params to them).
pub fn known_params() -> &'static [&'static str] {
    protocol::PARAMS
}
