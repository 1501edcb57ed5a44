//! Table 1: model sizes. Exact counts from our model code (`AlbertConfig::parameter_count`)
//! for albert_zh's configs and, at base dimensions, for embedding size × cross-layer sharing;
//! the published figures beside them, and the difference explained: recomputed with the
//! English vocabulary (V = 30,000) and, where that is not enough, with the parts a published
//! count leaves out.

use pipeline_albert::config::NAMED_CONFIGS;
use pipeline_albert::{AlbertConfig, ParameterCount, ShareType};

use crate::published::{Published, SizeRow};
use crate::table::{Cell, Table, cells};

/// The English ALBERT/BERT vocabulary the published counts use.
pub const ENGLISH_VOCAB: usize = 30_000;

fn millions(n: u64) -> String {
    format!("{:.2}M", n as f64 / 1e6)
}

/// BERT-base as albert_zh's `bert_config.json` describes it: base dimensions, E = H, no
/// sharing (what `AlbertConfig::from_file` makes of that file).
pub fn bert_base() -> AlbertConfig {
    let mut c = AlbertConfig::named("base").expect("base is a named config");
    c.embedding_size = c.hidden_size;
    c.share_type = ShareType::None;
    c
}

fn with_vocab(c: &AlbertConfig, v: usize) -> AlbertConfig {
    let mut c = c.clone();
    c.vocab_size = v;
    c
}

/// The E→H projection our code always has (BERT has none when E = H).
fn projection(c: &AlbertConfig) -> u64 {
    (c.embedding_size * c.hidden_size + c.hidden_size) as u64
}

fn pooler(c: &AlbertConfig) -> u64 {
    (c.hidden_size * c.hidden_size + c.hidden_size) as u64
}

/// Why our count differs from a published figure (in millions, rounded as published). Tries,
/// in order, what the figure may count: the backbone at V = 30,000; without the E→H projection
/// when E = H; without the pooler; with the pretraining heads.
pub fn explain_published(c: &AlbertConfig, published_m: f64) -> String {
    let ours = c.parameter_count();
    let en = with_vocab(c, ENGLISH_VOCAB);
    let p = en.parameter_count();
    let dv = (ENGLISH_VOCAB as i64 - c.vocab_size as i64) * c.embedding_size as i64;
    let vocab = format!(
        "vocabulary {} here vs {} (English): {}{} in the word embeddings; at V = {} our backbone is {}",
        crate::table::thousands(c.vocab_size as i64),
        crate::table::thousands(ENGLISH_VOCAB as i64),
        if dv >= 0 { "+" } else { "−" },
        millions(dv.unsigned_abs()),
        crate::table::thousands(ENGLISH_VOCAB as i64),
        millions(p.backbone)
    );
    let rounds = |n: u64| (n as f64 / 1e6).round() == published_m.round();
    let same_e_h = c.embedding_size == c.hidden_size;
    if c.vocab_size == ENGLISH_VOCAB && rounds(ours.backbone) {
        return format!("{} rounds to the published figure", millions(ours.backbone));
    }
    if rounds(p.backbone) {
        return format!("{vocab}, as published");
    }
    if same_e_h {
        let no_proj = p.backbone - projection(&en);
        if rounds(no_proj) {
            return format!(
                "{vocab}; our code keeps the E→H projection even when E = H (+{}), which BERT \
                 lacks: without it {}, as published",
                millions(projection(&en)),
                millions(no_proj)
            );
        }
        let bare = no_proj - pooler(&en);
        if rounds(bare) {
            return format!(
                "{vocab}; our code keeps the E→H projection even when E = H (+{}), which BERT \
                 lacks: without it {}, and {} without the pooler ({}) too, as published (the \
                 published figure leaves the pooler out)",
                millions(projection(&en)),
                millions(no_proj),
                millions(bare),
                millions(pooler(&en))
            );
        }
    }
    let no_pool = p.backbone - pooler(&en);
    if rounds(no_pool) {
        return format!(
            "{vocab}; without the pooler ({}) {}, as published",
            millions(pooler(&en)),
            millions(no_pool)
        );
    }
    if rounds(p.total) {
        return format!(
            "{vocab}; with the MLM and SOP heads {}, as published",
            millions(p.total)
        );
    }
    format!(
        "{vocab} (with the MLM and SOP heads {}): the published {}M is not reproduced",
        millions(p.total),
        published_m
    )
}

/// What albert_zh's own parameter figure corresponds to.
fn explain_albert_zh(c: &AlbertConfig, claimed_m: f64) -> String {
    let zh = c.parameter_count().backbone;
    let en = with_vocab(c, ENGLISH_VOCAB).parameter_count().backbone;
    let rounds = |n: u64| (n as f64 / 1e6).round() == claimed_m.round();
    if rounds(zh) {
        format!("{claimed_m}M: matches our count ({})", millions(zh))
    } else if rounds(en) {
        format!(
            "{claimed_m}M: the English model's count ({} at V = 30,000), not its own ({})",
            millions(en),
            millions(zh)
        )
    } else {
        format!(
            "{claimed_m}M: not reproduced ({} here, {} at V = 30,000)",
            millions(zh),
            millions(en)
        )
    }
}

fn fp32_mb(n: u64) -> f64 {
    round(n as f64 * 4.0 / 1e6, 1)
}

fn fp32_mib(n: u64) -> f64 {
    round(n as f64 * 4.0 / (1024.0 * 1024.0), 1)
}

/// `x` rounded to `decimals` places, halves away from zero (`round(3.14159, 2)` = 3.14): the
/// CSV and JSON get a figure at the precision it means, not its float noise.
pub fn round(x: f64, decimals: i32) -> f64 {
    let f = 10f64.powi(decimals);
    (x * f).round() / f
}

fn size_cells(c: &AlbertConfig) -> Vec<(&'static str, Cell)> {
    let n: ParameterCount = c.parameter_count();
    let en = with_vocab(c, ENGLISH_VOCAB).parameter_count();
    cells! {
        embedding_size: c.embedding_size as u64,
        hidden_size: c.hidden_size as u64,
        layers: c.num_hidden_layers as u64,
        intermediate_size: c.intermediate_size as u64,
        share_type: c.share_type.name(),
        params_backbone: n.backbone,
        params_pretraining: n.total,
        fp32_mb: fp32_mb(n.total),
        fp32_mib: fp32_mib(n.total),
        params_backbone_v30000: en.backbone,
    }
}

fn published_m(x: Option<f64>) -> Option<String> {
    x.map(|m| format!("{m}M"))
}

/// Table 1a: albert_zh's configs and BERT-base.
pub fn model_size(published: &Published) -> Table {
    let mut t = Table::new(
        "model_size",
        "Model size",
        crate::data::columns("model_size"),
    );
    let mut names: Vec<&str> = NAMED_CONFIGS.to_vec();
    names.push("bert-base");
    for name in names {
        let c = if name == "bert-base" {
            bert_base()
        } else {
            AlbertConfig::named(name).expect("a named config")
        };
        let p = published.model_size.iter().find(|r| r.model == name);
        t.push(model_size_row(name, &c, p));
    }
    t.notes
        .push(crate::data::text("model_size.note_counts").to_string());
    t.notes
        .push(crate::data::text("model_size.note_bert").to_string());
    t
}

/// One config: our exact counts, the published figures, and what explains the difference.
fn model_size_row(
    name: &'static str,
    c: &AlbertConfig,
    p: Option<&SizeRow>,
) -> Vec<(&'static str, Cell)> {
    let mut cells = cells! {
        model: Cell::from(name),
    };
    cells.extend(size_cells(c));
    let mut shown = Vec::new();
    let mut vs_zh = Vec::new();
    if let Some(p) = p {
        cells.push(("paper_params_m", p.paper_params_m.into()));
        cells.push(("hf_params_m", p.hf_params_m.into()));
        cells.push(("albert_zh_params_m", p.albert_zh_params_m.into()));
        cells.push(("albert_zh_file_mb", p.albert_zh_file_mb.into()));
        shown = published_figures(p);
        if let Some(m) = p.paper_params_m {
            let mut why = explain_published(c, m);
            if let Some(note) = &p.note {
                why.push_str(&format!(" ({note})"));
            }
            cells.push(("vs_paper", why.into()));
        }
        if let Some(m) = p.albert_zh_params_m {
            vs_zh.push(explain_albert_zh(c, m));
        }
        if let Some(f) = p.albert_zh_file_mb {
            let n = c.parameter_count().total;
            vs_zh.push(format!(
                "file {f}M vs our fp32 {:.1} MB = {:.1} MiB",
                fp32_mb(n),
                fp32_mib(n)
            ));
        }
    }
    if name == "bert-base" {
        let bare = c.parameter_count().backbone - projection(c);
        vs_zh.push(format!(
            "BERT itself has no E→H projection: bert-base-chinese holds {} parameters",
            crate::table::thousands(bare as i64)
        ));
    }
    cells.push(("published", Cell::from(shown.join(" · "))));
    if !vs_zh.is_empty() {
        cells.push(("vs_albert_zh", vs_zh.join("; ").into()));
    }
    cells
}

/// `paper 12M`, `transformers 11M`, `albert_zh 12M`, `albert_zh file 40M`: those published.
fn published_figures(p: &SizeRow) -> Vec<String> {
    let mut shown = Vec::new();
    if let Some(m) = published_m(p.paper_params_m) {
        shown.push(format!("paper {m}"));
    }
    if let Some(m) = published_m(p.hf_params_m) {
        shown.push(format!("transformers {m}"));
    }
    if let Some(m) = published_m(p.albert_zh_params_m) {
        shown.push(format!("albert_zh {m}"));
    }
    if let Some(f) = p.albert_zh_file_mb {
        shown.push(format!("albert_zh file {f}M"));
    }
    shown
}

/// Table 1b: base dimensions, E ∈ {768, 128} × sharing, as the paper's Tables 3 and 4.
pub fn model_size_grid(published: &Published) -> Table {
    let mut t = Table::new(
        "model_size_grid",
        "Model size: embedding size × cross-layer sharing (base dimensions)",
        crate::data::columns("model_size_grid"),
    );
    for e in [768usize, 128] {
        for share in [
            ShareType::None,
            ShareType::Attention,
            ShareType::Ffn,
            ShareType::All,
        ] {
            let mut c = AlbertConfig::named("base").expect("base");
            c.embedding_size = e;
            c.share_type = share;
            let p = published
                .model_size_grid
                .iter()
                .find(|r| r.embedding_size == e && r.share_type == share.name());
            let mut cells = size_cells(&c);
            if let Some(p) = p {
                cells.push(("paper_params_m", p.paper_params_m.into()));
                cells.push((
                    "albert_pytorch_model_size",
                    p.albert_pytorch_model_size.into(),
                ));
                if let Some(m) = p.paper_params_m {
                    cells.push(("vs_paper", explain_published(&c, m).into()));
                }
            }
            t.push(cells);
        }
    }
    t.notes
        .push(crate::data::text("model_size_grid.note_dims").to_string());
    t.notes
        .push(crate::data::text("model_size_grid.note_albert_pytorch").to_string());
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_match_transformers_and_bert() {
        // transformers' albert-base-v2 AlbertModel: 11,683,584 (V = 30,000).
        let base = AlbertConfig::named("base").unwrap();
        assert_eq!(
            with_vocab(&base, 30_000).parameter_count().backbone,
            11_683_584
        );
        // Our albert_zh base (V = 21,128): 10,547,968 backbone.
        assert_eq!(base.parameter_count().backbone, 10_547_968);
        // bert-base-chinese (BertModel, no projection): 102,267,648.
        let bert = bert_base();
        assert_eq!(
            bert.parameter_count().backbone - projection(&bert),
            102_267_648
        );
        // albert-xxlarge-v2 in transformers: 222,595,584 (the model card says 223M).
        let xx = AlbertConfig::named("xxlarge").unwrap();
        assert_eq!(
            with_vocab(&xx, 30_000).parameter_count().backbone,
            222_595_584
        );
    }

    #[test]
    fn differences_from_the_paper_are_explained() {
        let base = AlbertConfig::named("base").unwrap();
        let why = explain_published(&base, 12.0);
        assert!(
            why.contains("at V = 30,000 our backbone is 11.68M, as published"),
            "{why}"
        );
        // BERT-base: 108M is the count without the projection and the pooler.
        let why = explain_published(&bert_base(), 108.0);
        assert!(why.contains("without the pooler"), "{why}");
        assert!(why.contains("108.49M"), "{why}");
        // The grid: E = 768 all-shared is 31M without our projection.
        let mut c = AlbertConfig::named("base").unwrap();
        c.embedding_size = 768;
        let why = explain_published(&c, 31.0);
        assert!(why.contains("31.11M, as published"), "{why}");
        // xxlarge: 235M is not reproduced.
        let xx = AlbertConfig::named("xxlarge").unwrap();
        assert!(explain_published(&xx, 235.0).contains("not reproduced"));
        // albert_zh's base "12M" is the English count.
        assert!(explain_albert_zh(&base, 12.0).contains("the English model's count"));
        assert!(
            explain_albert_zh(&AlbertConfig::named("tiny").unwrap(), 4.0)
                .contains("matches our count")
        );
    }

    #[test]
    fn every_published_grid_figure_is_reproduced_at_v30000() {
        let p = Published::load().unwrap();
        let t = model_size_grid(&p);
        assert_eq!(t.rows.len(), 8);
        let vs = t.cols.iter().position(|c| c.key == "vs_paper").unwrap();
        for row in &t.rows {
            match &row[vs] {
                Cell::Str(s) => assert!(s.contains("as published"), "{s}"),
                other => panic!("{other:?}"),
            }
        }
        let sizes = model_size(&p);
        assert_eq!(sizes.rows.len(), 7);
        let md = sizes.markdown().unwrap();
        assert!(
            md.contains("| base | 128 | 768 | 12 | all | 10,547,968 |"),
            "{md}"
        );
    }

    #[test]
    fn unit_conversions() {
        assert_eq!(fp32_mb(10_669_322), 42.7);
        assert_eq!(fp32_mib(10_669_322), 40.7);
        assert_eq!(round(1.25, 1), 1.3);
    }
}
