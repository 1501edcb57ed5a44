//! `pack` (short documents joined into full instances) and the training shards' layout (one
//! masking pass a shard), on the fixture vocabulary.

use std::path::Path;

use super::*;
use crate::report::round4;
use serde_json::json;

/// A masker with the fixture vocabulary (the vocab stage's layout: vocab.txt + tokenizer.json).
fn masker(dir: &Path, pack: bool) -> Masker {
    let vocab_dir = dir.join("vocab");
    std::fs::create_dir_all(&vocab_dir).unwrap();
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets/fixtures/vocab/vocab.txt");
    std::fs::copy(fixture, vocab_dir.join("vocab.txt")).unwrap();
    let v = pipeline_text::vocab::Vocab::load(&vocab_dir.join("vocab.txt")).unwrap();
    let tok = pipeline_text::hf::wordpiece_tokenizer(&v, true).unwrap();
    pipeline_text::hf::write_tokenizer_json(&tok, &vocab_dir.join("tokenizer.json")).unwrap();
    let (vocab, tokenizer) = load_tokenizer(&vocab_dir).unwrap();
    let config = MaskConfig {
        max_seq_length: 64,
        dupe_factor: 2,
        eval_fraction: 0.2,
        short_seq_prob: 0.0,
        pack,
        ..MaskConfig::default()
    };
    Masker::new(config, vocab, tokenizer).unwrap()
}

/// 300 short documents of two short sentences each (about 20 tokens), written as the clean
/// stage writes them.
fn corpus(dir: &Path) -> Vec<PathBuf> {
    let mut text = String::new();
    for i in 0..300 {
        let a = ["今天天气很好。", "我们去公园散步。", "图书馆周末开放。"][i % 3];
        let b = ["孩子们在放风筝！", "妈妈做了饭菜。"][i % 2];
        text.push_str(&format!("{a}\n{b}\n\n"));
    }
    let path = dir.join("corpus-00000.txt");
    std::fs::write(&path, text).unwrap();
    vec![path]
}

#[test]
fn packing_fills_instances_and_keeps_the_splits_apart() {
    let dir = tempfile::tempdir().unwrap();
    let files = corpus(dir.path());
    let run = |pack: bool| {
        let out = dir.path().join(format!("out-{pack}"));
        std::fs::create_dir_all(&out).unwrap();
        let report = masker(dir.path(), pack).run(&files, &out, |_| {}).unwrap();
        (report, out)
    };
    let (plain, _) = run(false);
    let (packed, out) = run(true);
    let config = MaskConfig {
        max_seq_length: 64,
        pack: true,
        ..MaskConfig::default()
    };
    let json = serde_json::to_value(packed.to_json(&config)).unwrap();
    let padding = |r: &MaskReport| 1.0 - r.train.tokens as f64 / (r.train.instances * 64) as f64;
    // Each short document alone is a third of an instance; packed, nearly full ones.
    assert!(padding(&plain) > 0.5, "{}", padding(&plain));
    assert!(padding(&packed) < 0.15, "{}", padding(&packed));
    assert_eq!(
        json["train"]["padding_fraction"],
        json!(round4(padding(&packed)))
    );
    assert_eq!(json["pack"], json!(true));
    assert!(packed.packs < plain.packs / 2, "{} packs", packed.packs);
    // The same documents are held out either way, and never packed with training ones.
    assert_eq!(packed.eval_documents, plain.eval_documents);
    assert_eq!(packed.documents, 300);
    assert!(packed.eval.instances > 0);
    // The shards say how they were made.
    let meta = pipeline_shards::shard_metadata(&out.join("shard-00000.arrow")).unwrap();
    assert_eq!(meta.get("pack").map(String::as_str), Some("true"));
}

/// The fixture corpus masked unpacked into `out/` of a fresh directory: the report, and the
/// directory (kept alive while the shards are read).
fn masked_unpacked() -> (MaskReport, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let files = corpus(dir.path());
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let r = masker(dir.path(), false).run(&files, &out, |_| {}).unwrap();
    (r, dir)
}

#[test]
fn without_pack_every_document_is_its_own_unit() {
    let (r, _dir) = masked_unpacked();
    assert_eq!(r.packs, r.documents);
}

#[test]
fn each_training_shard_holds_one_masking_pass() {
    // Unpacked, each two-sentence document is one instance a pass; dupe_factor 2.
    let (r, dir) = masked_unpacked();
    let out = dir.path().join("out");
    let train_documents = r.documents - r.eval_documents;
    assert_eq!(r.train.instances, 2 * train_documents);
    assert_eq!(r.train.shards, ["shard-00000.arrow", "shard-00001.arrow"]);
    // So each shard holds every training document once, not one block's documents twice.
    for shard in &r.train.shards {
        let rows = pipeline_shards::read_shard(out.join(shard))
            .unwrap()
            .0
            .len();
        assert_eq!(rows as u64, train_documents, "{shard}");
    }
}

#[test]
fn metrics_carry_each_splits_no_context_and_sop_floors() {
    let (r, _dir) = masked_unpacked();
    let v = r
        .metrics(&MaskConfig::default(), Some("clean@x".into()))
        .unwrap();
    assert_eq!(v["clean_instance"], json!("clean@x"));
    for split in ["train", "eval"] {
        let f = &v[split]["no_context_floor"];
        let stats = if split == "train" {
            &r.train.stats
        } else {
            &r.eval.stats
        };
        assert_eq!(f["predictions"], json!(stats.masked), "{split}: {f}");
        // [MASK] is read off the inputs exactly as masking wrote it.
        assert_eq!(
            f["mask_share"],
            json!(round4(stats.replaced_mask as f64 / stats.masked as f64))
        );
        let acc = f["mlm_accuracy"].as_f64().unwrap();
        let loss = f["mlm_loss"].as_f64().unwrap();
        // At least the kept positions are right; far from all of them.
        assert!(acc >= f["kept_share"].as_f64().unwrap() && acc < 0.6, "{f}");
        assert!(loss.is_finite() && loss > 0.0, "{f}");
        // Every instance is a pair the SOP floor scores; the fixture's sentences all end with
        // a stop, so its edges hold little: the rule is near chance, not a sure thing.
        let sop = &v[split]["sop_floor"];
        let instances = if split == "train" {
            r.train.instances
        } else {
            r.eval.instances
        };
        assert_eq!(sop["pairs"], json!(instances), "{split}: {sop}");
        let sop_acc = sop["sop_accuracy"].as_f64().unwrap();
        assert!((0.3..0.8).contains(&sop_acc), "{split}: {sop}");
    }
}
