//! The training reader: shuffled, padded batches over a set of shards, endless or one pass, and
//! resumable from a saved [`ReaderPosition`].
//!
//! Order. Epoch `e` visits the shards in the order `permutation(n_shards, seed, e)` and the rows
//! of shard `i` (its index in the file list given to the reader) in the order
//! `permutation(rows_i, seed, e, i)`; both come from the crate's frozen SplitMix64 shuffle, so
//! the order depends only on the seed, the file list and the shards' row counts, never on
//! threads or timing. Without `shuffle` both orders are the identity. Batches fill across shard
//! boundaries; at the end of an epoch a short last batch is emitted, or dropped with `drop_last`.
//!
//! Memory. Only one shard is decoded at a time (plus one batch being assembled), so memory is
//! bounded by the largest shard, whatever the number of shards. Opening the reader only reads
//! each file's footer (schema and row count).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, ShardError};
use crate::read::{Limits, ShardData, shard_instances};
use crate::rng::{derive_seed, permutation};

/// Seed-derivation tags, so that the shard order and the row orders never share a stream.
const TAG_SHARD_ORDER: u64 = 1;
const TAG_ROW_ORDER: u64 = 2;

/// How the [`BatchReader`] batches, pads and orders.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BatchReaderConfig {
    /// Rows per batch (≥ 1).
    pub batch_size: usize,
    /// The longest row allowed (a longer row is an error naming its shard); also the cap of
    /// `seq_len`, and `seq_len` itself with `pad_to_max`.
    pub max_seq_length: usize,
    /// Width of the masked-LM arrays; a row with more masked positions is an error.
    pub max_predictions_per_seq: usize,
    /// Seed of the shard and row shuffles.
    pub seed: u64,
    /// Shuffle shards and rows each epoch (false: file order, row order).
    pub shuffle: bool,
    /// Drop the short last batch of each epoch (true for training with fixed shapes).
    pub drop_last: bool,
    /// Pad every batch to `max_seq_length` instead of its longest row rounded up to 8.
    pub pad_to_max: bool,
    /// `None`: endless (training); `Some(k)`: stop after k epochs.
    pub epochs: Option<u64>,
}

impl Default for BatchReaderConfig {
    fn default() -> Self {
        Self {
            batch_size: 32,
            max_seq_length: 512,
            max_predictions_per_seq: 20,
            seed: 0,
            shuffle: true,
            drop_last: true,
            pad_to_max: false,
            epochs: None,
        }
    }
}

impl BatchReaderConfig {
    /// Training defaults (shuffled, endless, drop_last) with the three sizes given.
    pub fn new(batch_size: usize, max_seq_length: usize, max_predictions_per_seq: usize) -> Self {
        Self {
            batch_size,
            max_seq_length,
            max_predictions_per_seq,
            ..Self::default()
        }
    }

    fn validate(&self) -> Result<()> {
        if self.batch_size < 1 {
            return Err(ShardError::Config("batch_size must be at least 1 (got 0)"));
        }
        if self.max_seq_length < 1 {
            return Err(ShardError::Config(
                "max_seq_length must be at least 1 (got 0)",
            ));
        }
        if self.epochs == Some(0) {
            return Err(ShardError::Config(
                "epochs must be at least 1, or absent for an endless reader",
            ));
        }
        Ok(())
    }
}

/// One padded batch, row-major (`[batch_size, seq_len]` and `[batch_size, max_predictions]`),
/// ready to become tensors.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// Rows in this batch (`config.batch_size`, or fewer for the last batch of an epoch without
    /// `drop_last`).
    pub batch_size: usize,
    /// Padded sequence length: the longest row rounded up to a multiple of 8, capped at
    /// `max_seq_length`; or `max_seq_length` with `pad_to_max`.
    pub seq_len: usize,
    /// `max_predictions_per_seq`: the width of the masked-LM arrays.
    pub max_predictions: usize,
    /// `[batch_size, seq_len]`, padded with 0.
    pub input_ids: Vec<i64>,
    /// `[batch_size, seq_len]`, 1 for real tokens, 0 for padding.
    pub attention_mask: Vec<i64>,
    /// `[batch_size, seq_len]`, 0/1 segment ids, padding 0.
    pub token_type_ids: Vec<i64>,
    /// `[batch_size, max_predictions]`, positions into the row, padded with 0.
    pub masked_positions: Vec<i64>,
    /// `[batch_size, max_predictions]`, original ids at the masked positions, padded with 0.
    pub masked_ids: Vec<i64>,
    /// `[batch_size, max_predictions]`, 1.0 for a real prediction, 0.0 for padding.
    pub masked_weights: Vec<f32>,
    /// `[batch_size]`, 0 = in order, 1 = swapped.
    pub sentence_order_labels: Vec<i64>,
    /// Real (unpadded) tokens in the batch.
    pub tokens: u64,
    /// Real masked positions in the batch (the sum of `masked_weights`).
    pub predictions: u64,
}

impl Batch {
    /// Rows `rows` of this batch as a batch of their own (same `seq_len` and width), for
    /// splitting a batch into per-core micro-batches.
    pub fn rows(&self, rows: std::ops::Range<usize>) -> Batch {
        let (s, m) = (self.seq_len, self.max_predictions);
        let tokens = |r: &std::ops::Range<usize>| r.start * s..r.end * s;
        let preds = |r: &std::ops::Range<usize>| r.start * m..r.end * m;
        let attention_mask = self.attention_mask[tokens(&rows)].to_vec();
        let masked_weights = self.masked_weights[preds(&rows)].to_vec();
        Batch {
            batch_size: rows.len(),
            seq_len: s,
            max_predictions: m,
            input_ids: self.input_ids[tokens(&rows)].to_vec(),
            token_type_ids: self.token_type_ids[tokens(&rows)].to_vec(),
            masked_positions: self.masked_positions[preds(&rows)].to_vec(),
            masked_ids: self.masked_ids[preds(&rows)].to_vec(),
            sentence_order_labels: self.sentence_order_labels[rows.clone()].to_vec(),
            tokens: attention_mask.iter().filter(|&&v| v != 0).count() as u64,
            predictions: masked_weights.iter().filter(|&&w| w > 0.0).count() as u64,
            attention_mask,
            masked_weights,
        }
    }
}

/// Where a [`BatchReader`] stands between two batches: enough to continue exactly there with
/// [`BatchReader::resume`]. Serialize it into a training checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReaderPosition {
    /// Epoch being read (0-based).
    pub epoch: u64,
    /// Index into this epoch's shard order of the shard being read (= number of shards finished
    /// this epoch).
    pub shard_cursor: usize,
    /// Index into that shard's row order of the next row (= rows of it already consumed).
    pub row_cursor: usize,
    /// Batches emitted since the start of the first epoch.
    pub batches: u64,
    /// The seed, shuffle flag, number of shards and rows per epoch the position belongs to:
    /// resuming with a different data set or order is an error, not a silent reshuffle.
    pub seed: u64,
    /// Whether rows were shuffled.
    pub shuffle: bool,
    /// The number of shard files.
    pub num_shards: usize,
    /// Rows in one epoch (all shards).
    pub instances_per_epoch: u64,
}

/// The decoded shard being read and its row order for the current epoch.
struct Current {
    file_index: usize,
    data: ShardData,
    order: Vec<u32>,
}

/// Shuffled, padded batches over a set of shards. See the module docs for the order.
///
/// `next_batch` is endless unless `config.epochs` is set; `BatchReader` is also an
/// `Iterator<Item = Result<Batch>>`. For evaluation use [`BatchReader::eval`]: one pass in file
/// order, the short last batch kept.
pub struct BatchReader {
    files: Vec<PathBuf>,
    rows: Vec<u64>,
    config: BatchReaderConfig,
    instances_per_epoch: u64,
    epoch: u64,
    shard_order: Vec<usize>,
    shard_cursor: usize,
    row_cursor: usize,
    batches: u64,
    current: Option<Current>,
    /// Rows of the batch being assembled (copied out of the shard so that a batch can span two
    /// shards while only one is decoded). Reused across batches.
    staging: ShardData,
    finished: bool,
}

impl BatchReader {
    /// A reader over `files` (their order is part of the seeded order: pass them sorted, e.g.
    /// from [`crate::list_shards`]). Checks every file's schema and reads its row count now.
    pub fn open<P: AsRef<Path>>(files: &[P], config: BatchReaderConfig) -> Result<Self> {
        config.validate()?;
        if files.is_empty() {
            return Err(ShardError::NoFiles);
        }
        let files: Vec<PathBuf> = files.iter().map(|p| p.as_ref().to_path_buf()).collect();
        let mut rows = Vec::with_capacity(files.len());
        for f in &files {
            let n = shard_instances(f)?;
            if n > u32::MAX as u64 {
                return Err(ShardError::TooManyRows {
                    path: f.clone(),
                    rows: n,
                });
            }
            rows.push(n);
        }
        let instances_per_epoch: u64 = rows.iter().sum();
        if config.epochs.is_none() {
            // An endless reader that can never fill a batch would spin forever.
            if instances_per_epoch == 0 {
                return Err(ShardError::NoInstances { files: files.len() });
            }
            if config.drop_last && instances_per_epoch < config.batch_size as u64 {
                return Err(ShardError::LessThanABatch {
                    instances: instances_per_epoch,
                    batch_size: config.batch_size,
                });
            }
        }
        let mut reader = Self {
            files,
            rows,
            config,
            instances_per_epoch,
            epoch: 0,
            shard_order: Vec::new(),
            shard_cursor: 0,
            row_cursor: 0,
            batches: 0,
            current: None,
            staging: ShardData::default(),
            finished: false,
        };
        reader.start_epoch(0);
        Ok(reader)
    }

    /// One pass over `files` in file and row order, the short last batch kept: every instance
    /// exactly once (for evaluation). `config`'s shuffle, drop_last and epochs are overridden.
    pub fn eval<P: AsRef<Path>>(files: &[P], config: BatchReaderConfig) -> Result<Self> {
        Self::open(
            files,
            BatchReaderConfig {
                shuffle: false,
                drop_last: false,
                epochs: Some(1),
                ..config
            },
        )
    }

    /// A reader that continues exactly where the one that returned `position` stopped: it yields
    /// the same batches that one would have yielded next. `files` and `config` must be the same
    /// (the seed, shuffle flag, shard count and rows per epoch are checked; batch_size and
    /// padding may change, the next batch then simply starts at the saved row).
    pub fn resume<P: AsRef<Path>>(
        files: &[P],
        config: BatchReaderConfig,
        position: &ReaderPosition,
    ) -> Result<Self> {
        let mut reader = Self::open(files, config)?;
        let p = position;
        reader.check_resumable(p)?;
        reader.start_epoch(p.epoch);
        reader.shard_cursor = p.shard_cursor;
        reader.row_cursor = p.row_cursor;
        reader.batches = p.batches;
        if p.shard_cursor < reader.files.len() {
            let rows = reader.rows[reader.shard_order[p.shard_cursor]];
            if p.row_cursor as u64 > rows {
                return Err(ShardError::Resume(format!(
                    "row cursor {} is past the {rows} rows of {}",
                    p.row_cursor,
                    reader.files[reader.shard_order[p.shard_cursor]].display()
                )));
            }
        }
        if let Some(k) = reader.config.epochs
            && p.epoch >= k
        {
            reader.finished = true;
        }
        Ok(reader)
    }

    /// Whether `p` was saved by a reader over these shards with this seed and shuffle flag.
    fn check_resumable(&self, p: &ReaderPosition) -> Result<()> {
        if p.seed != self.config.seed || p.shuffle != self.config.shuffle {
            return Err(ShardError::Resume(format!(
                "the saved reader position has seed {} shuffle {}, the config has seed {} \
                 shuffle {}",
                p.seed, p.shuffle, self.config.seed, self.config.shuffle
            )));
        }
        if p.num_shards != self.files.len() || p.instances_per_epoch != self.instances_per_epoch {
            return Err(ShardError::Resume(format!(
                "the saved reader position is for {} shards holding {} instances, these {} \
                 shards hold {}: resume on the same shard files",
                p.num_shards,
                p.instances_per_epoch,
                self.files.len(),
                self.instances_per_epoch
            )));
        }
        if p.shard_cursor > self.files.len() {
            return Err(ShardError::Resume(format!(
                "shard cursor {} is past the {} shards",
                p.shard_cursor,
                self.files.len()
            )));
        }
        Ok(())
    }

    /// The position after the last batch returned (save it with a checkpoint).
    pub fn position(&self) -> ReaderPosition {
        ReaderPosition {
            epoch: self.epoch,
            shard_cursor: self.shard_cursor,
            row_cursor: self.row_cursor,
            batches: self.batches,
            seed: self.config.seed,
            shuffle: self.config.shuffle,
            num_shards: self.files.len(),
            instances_per_epoch: self.instances_per_epoch,
        }
    }

    /// Instances in one epoch (all shards).
    pub fn instances_per_epoch(&self) -> u64 {
        self.instances_per_epoch
    }

    /// Batches in one epoch (the short last one counted unless `drop_last`).
    pub fn batches_per_epoch(&self) -> u64 {
        let b = self.config.batch_size as u64;
        if self.config.drop_last {
            self.instances_per_epoch / b
        } else {
            self.instances_per_epoch.div_ceil(b)
        }
    }

    /// The shard files, in the order given.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// The configuration.
    pub fn config(&self) -> &BatchReaderConfig {
        &self.config
    }

    /// The next batch; `None` only after the last of `config.epochs` epochs. An error (a corrupt
    /// shard, a row over the limits) names the shard file; the reader then stays finished.
    pub fn next_batch(&mut self) -> Result<Option<Batch>> {
        if self.finished {
            return Ok(None);
        }
        match self.fill() {
            Ok(b) => Ok(b),
            Err(e) => {
                self.finished = true;
                self.current = None;
                Err(e)
            }
        }
    }

    fn start_epoch(&mut self, epoch: u64) {
        self.epoch = epoch;
        self.shard_cursor = 0;
        self.row_cursor = 0;
        let n = self.files.len();
        self.shard_order = if self.config.shuffle {
            let seed = derive_seed(self.config.seed, &[TAG_SHARD_ORDER, epoch]);
            permutation(n, seed)
                .into_iter()
                .map(|i| i as usize)
                .collect()
        } else {
            (0..n).collect()
        };
        // The decoded shard's row order belongs to the previous epoch.
        self.current = None;
    }

    /// Makes `current` the shard at `shard_cursor`, decoding it if needed.
    fn load_current(&mut self) -> Result<()> {
        let file_index = self.shard_order[self.shard_cursor];
        if self
            .current
            .as_ref()
            .is_some_and(|c| c.file_index == file_index)
        {
            return Ok(());
        }
        // Drop the previous shard before decoding the next: one shard in memory at a time.
        self.current = None;
        let path = &self.files[file_index];
        let limits = Limits {
            max_seq_length: self.config.max_seq_length,
            max_predictions_per_seq: self.config.max_predictions_per_seq,
        };
        let (data, _) = ShardData::load(path, Some(limits))?;
        if data.rows() as u64 != self.rows[file_index] {
            return Err(ShardError::RowsChanged {
                path: path.clone(),
                rows: data.rows(),
                footer: self.rows[file_index],
            });
        }
        let order = if self.config.shuffle {
            let seed = derive_seed(
                self.config.seed,
                &[TAG_ROW_ORDER, self.epoch, file_index as u64],
            );
            permutation(data.rows(), seed)
        } else {
            (0..data.rows() as u32).collect()
        };
        self.current = Some(Current {
            file_index,
            data,
            order,
        });
        Ok(())
    }

    fn fill(&mut self) -> Result<Option<Batch>> {
        self.staging.clear();
        let n_shards = self.files.len();
        let want = self.config.batch_size;
        loop {
            if self.staging.rows() == want {
                break;
            }
            if self.shard_cursor == n_shards {
                // End of the epoch.
                if self.staging.rows() > 0 && !self.config.drop_last {
                    break;
                }
                self.staging.clear();
                let next = self.epoch + 1;
                if self.config.epochs.is_some_and(|k| next >= k) {
                    // Leave the position at the end of the last epoch.
                    self.finished = true;
                    self.current = None;
                    return Ok(None);
                }
                self.start_epoch(next);
                continue;
            }
            let file_index = self.shard_order[self.shard_cursor];
            if self.row_cursor as u64 >= self.rows[file_index] {
                self.shard_cursor += 1;
                self.row_cursor = 0;
                continue;
            }
            self.load_current()?;
            let Some(cur) = self.current.as_ref() else {
                return Err(ShardError::Internal("no shard decoded"));
            };
            // Copy as many rows as the batch still needs from this shard.
            let take = (want - self.staging.rows()).min(cur.order.len() - self.row_cursor);
            for &r in &cur.order[self.row_cursor..self.row_cursor + take] {
                self.staging.push(cur.data.row(r as usize));
            }
            self.row_cursor += take;
        }
        self.batches += 1;
        Ok(Some(self.assemble()))
    }

    /// Pads the staged rows into a [`Batch`].
    fn assemble(&self) -> Batch {
        let s = &self.staging;
        let b = s.rows();
        let longest = (0..b).map(|r| s.row(r).ids.len()).max().unwrap_or(0);
        let seq_len = if self.config.pad_to_max {
            self.config.max_seq_length
        } else {
            longest
                .div_ceil(8)
                .saturating_mul(8)
                .min(self.config.max_seq_length)
        };
        let p = self.config.max_predictions_per_seq;
        let mut input_ids = vec![0i64; b * seq_len];
        let mut attention_mask = vec![0i64; b * seq_len];
        let mut token_type_ids = vec![0i64; b * seq_len];
        let mut masked_positions = vec![0i64; b * p];
        let mut masked_ids = vec![0i64; b * p];
        let mut masked_weights = vec![0f32; b * p];
        let mut sentence_order_labels = Vec::with_capacity(b);
        for r in 0..b {
            let row = s.row(r);
            let tokens = r * seq_len..r * seq_len + row.ids.len();
            widen(&mut input_ids[tokens.clone()], row.ids);
            widen(&mut token_type_ids[tokens.clone()], row.types);
            attention_mask[tokens].fill(1);
            let targets = r * p..r * p + row.positions.len();
            widen(&mut masked_positions[targets.clone()], row.positions);
            widen(&mut masked_ids[targets.clone()], row.masked);
            masked_weights[targets].fill(1.0);
            sentence_order_labels.push(row.label as i64);
        }
        Batch {
            batch_size: b,
            seq_len,
            max_predictions: p,
            input_ids,
            attention_mask,
            token_type_ids,
            masked_positions,
            masked_ids,
            masked_weights,
            sentence_order_labels,
            tokens: s.tokens() as u64,
            predictions: s.predictions() as u64,
        }
    }
}

impl Iterator for BatchReader {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_batch().transpose()
    }
}

/// Copies `src` into `dst` (as long), widened to `i64`.
fn widen<T: Copy + Into<i64>>(dst: &mut [i64], src: &[T]) {
    for (d, &v) in dst.iter_mut().zip(src) {
        *d = v.into();
    }
}
