//! Chinese text for the ALBERT data stages: everything between raw corpus files and token ids.
//!
//! - [`normalize`]: full-width → half-width, control/zero-width removal, whitespace, HTML
//!   remnants, traditional → simplified;
//! - [`sentences`]: sentence splitting on Chinese and Western end punctuation, bounded lengths;
//! - [`corpus`]: reading corpus files (one document per line, blank-line separated paragraphs,
//!   WikiExtractor `<doc>` blocks), counting invalid UTF-8 lines instead of failing;
//! - [`dedup`]: exact and near-duplicate document detection;
//! - [`vocab`], [`wordpiece`], [`hf`], [`train`], [`words`]: vocabularies, our fast BERT-style
//!   tokenizer, Hugging Face `tokenizer.json`, vocabulary training, jieba word boundaries.

#![warn(missing_docs)]

pub mod corpus;
pub mod dedup;
pub mod hf;
pub mod normalize;
pub mod sentences;
pub mod train;
pub mod vocab;
pub mod wordpiece;
pub mod words;

/// Hugging Face's tokenizer, which [`hf`] builds and [`train`] returns.
pub use tokenizers::Tokenizer;
