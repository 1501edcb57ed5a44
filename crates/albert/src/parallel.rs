//! Data parallelism inside one CPU: a batch is split into one micro-batch per core, each core
//! runs forward and backward on its own micro-batch, and the gradients are summed.
//!
//! Why: burn's CPU backend parallelises its large matrix products but runs most element-wise
//! ops (softmax, LayerNorm, GELU, their backward) on one thread, so a 2-core machine spends much
//! of a training step with one core idle. Splitting the batch keeps every core busy for the
//! whole step, and each core's matrix products run single-threaded on a smaller batch, which is
//! the efficient regime for the small matrices of ALBERT-tiny.
//!
//! Each worker gets a replica of the model whose parameters are fresh autodiff leaves over the
//! same memory (no copy): with shared leaves the workers' graphs would be merged by burn's
//! autodiff into one graph behind one mutex, and their backward passes would run one after the
//! other. Gradients come back keyed by the parameters' ids, which the replicas keep, so they sum
//! into one [`GradientsParams`] for the real model's optimiser step.
//!
//! Each worker runs on a rayon pool of its own with one thread, so the backend's own rayon
//! parallelism inside a worker sees one thread and stays sequential (no oversubscription).

use std::ops::Range;

use burn::module::{Module, ModuleMapper, Param};
use burn::optim::{GradientsAccumulator, GradientsParams};
use burn::tensor::{Device, Tensor};

/// One single-threaded rayon pool per worker.
pub struct DataParallel {
    pools: Vec<rayon::ThreadPool>,
}

impl std::fmt::Debug for DataParallel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DataParallel({} workers)", self.pools.len())
    }
}

/// Makes every float parameter a new autodiff leaf over the same data, keeping its id.
struct FreshLeaves;

impl ModuleMapper for FreshLeaves {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let tracked = param.is_require_grad();
        param.map(|t| {
            let t = t.detach();
            if tracked { t.require_grad() } else { t }
        })
    }
}

/// A replica of `model` with its own autodiff graph (see the module docs).
pub fn replica<M: Module>(model: &M) -> M {
    model.clone().map(&mut FreshLeaves)
}

impl DataParallel {
    /// `workers` single-threaded workers; 1 (or a failure to start threads, which is logged)
    /// means everything runs on the calling thread.
    pub fn new(workers: usize) -> DataParallel {
        if workers <= 1 {
            return DataParallel { pools: Vec::new() };
        }
        let pools = (0..workers)
            .map(|k| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(1)
                    .thread_name(move |_| format!("data-parallel-{k}"))
                    .build()
            })
            .collect::<Result<Vec<_>, _>>();
        match pools {
            Ok(pools) => DataParallel { pools },
            Err(e) => {
                tracing::warn!("cannot start {workers} data-parallel workers ({e}); using one");
                DataParallel { pools: Vec::new() }
            }
        }
    }

    /// One worker per core of the global rayon pool (`RAYON_NUM_THREADS` decides).
    pub fn per_core() -> DataParallel {
        DataParallel::new(rayon::current_num_threads())
    }

    /// One worker per core on a CPU device, one on a GPU (which parallelises each op itself).
    /// On libtorch's CPU device, torch's own intra-op threads are set to one, as the workers
    /// already occupy every core (measured: 2 workers × 1 torch thread ≈ flex's speed, 1 × 2
    /// threads 25 % slower, 2 × 2 oversubscribed).
    pub fn for_device(device: &Device) -> DataParallel {
        if !crate::device::is_cpu(device) {
            return DataParallel::new(1);
        }
        let parallel = DataParallel::per_core();
        #[cfg(feature = "tch")]
        if parallel.workers() > 1 && device.clone().without_autodiff() != Device::flex() {
            tch::set_num_threads(1);
        }
        parallel
    }

    /// How many micro-batches run at once (1: no parallelism).
    pub fn workers(&self) -> usize {
        self.pools.len().max(1)
    }

    /// `rows` split into at most [`Self::workers`] contiguous, non-empty ranges whose sizes
    /// differ by at most one.
    pub fn split(&self, rows: usize) -> Vec<Range<usize>> {
        split_rows(rows, self.workers())
    }

    /// Runs `f(worker)` for each worker index in `0..parts` (≤ [`Self::workers`]), each on its
    /// own core, and returns the results in worker order. `f` must not depend on which thread
    /// runs it.
    pub fn map<T: Send>(&self, parts: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
        assert!(parts <= self.workers(), "more parts than workers");
        if parts <= 1 || self.pools.is_empty() {
            return (0..parts).map(&f).collect();
        }
        let f = &f;
        std::thread::scope(|s| {
            let handles: Vec<_> = self.pools[..parts]
                .iter()
                .enumerate()
                .map(|(k, pool)| s.spawn(move || pool.install(|| f(k))))
                .collect();
            handles
                .into_iter()
                .map(|h| match h.join() {
                    Ok(v) => v,
                    Err(panic) => std::panic::resume_unwind(panic),
                })
                .collect()
        })
    }

    /// Runs `f` on worker `worker`'s own thread (on the calling thread when there are no
    /// worker threads): a whole batch on one core, for a caller that keeps several batches in
    /// flight, one per worker, instead of splitting each batch across them (`pipeline serve`).
    pub fn run_on<T: Send>(&self, worker: usize, f: impl FnOnce() -> T + Send) -> T {
        match self.pools.get(worker) {
            Some(pool) => pool.install(f),
            None => f(),
        }
    }

    /// Forward and backward of `parts` micro-batches in parallel: `loss(replica, k)` returns
    /// micro-batch `k`'s loss (already weighted by its share of the batch) and whatever the
    /// caller wants back from it. Returns the gradients summed over the micro-batches, keyed by
    /// `model`'s parameter ids, and the callers' values in micro-batch order.
    pub fn backward<M, T, F>(&self, model: &M, parts: usize, loss: F) -> (GradientsParams, Vec<T>)
    where
        M: Module + Sync,
        T: Send,
        F: Fn(&M, usize) -> (Tensor<1>, T) + Sync,
    {
        if parts <= 1 {
            let (l, v) = loss(model, 0);
            return (GradientsParams::from_grads(l.backward(), model), vec![v]);
        }
        let results = self.map(parts, |k| {
            let worker_model = replica(model);
            let (l, v) = loss(&worker_model, k);
            let grads = GradientsParams::from_grads(l.backward(), &worker_model);
            (grads, v)
        });
        let mut sum = GradientsAccumulator::<M>::new();
        let mut values = Vec::with_capacity(parts);
        for (grads, v) in results {
            sum.accumulate(model, grads);
            values.push(v);
        }
        (sum.grads(), values)
    }
}

/// `rows` split into at most `parts` contiguous, non-empty ranges whose sizes differ by at most
/// one (the first ranges take the extra rows).
pub fn split_rows(rows: usize, parts: usize) -> Vec<Range<usize>> {
    let parts = parts.clamp(1, rows.max(1));
    let (base, extra) = (rows / parts, rows % parts);
    let mut start = 0;
    (0..parts)
        .map(|k| {
            let len = base + usize::from(k < extra);
            let r = start..start + len;
            start += len;
            r
        })
        .filter(|r| !r.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::{Linear, LinearConfig};
    use burn::tensor::Distribution;

    /// `run_on` runs on that worker's own single thread, where the backend's rayon sees one
    /// thread; without worker threads, on the caller's.
    #[test]
    fn run_on_runs_on_the_workers_own_single_thread() {
        let where_and_threads = || {
            let name = std::thread::current().name().map(str::to_string);
            (name, rayon::current_num_threads())
        };
        let parallel = DataParallel::new(2);
        for worker in 0..2 {
            let (name, threads) = parallel.run_on(worker, where_and_threads);
            assert_eq!(name, Some(format!("data-parallel-{worker}")));
            assert_eq!(threads, 1);
        }
        let caller = std::thread::current().name().map(str::to_string);
        assert_eq!(DataParallel::new(1).run_on(0, where_and_threads).0, caller);
    }

    #[test]
    fn split_covers_every_row_once() {
        for rows in 0..40 {
            for parts in 1..6 {
                let r = split_rows(rows, parts);
                assert!(r.len() <= parts);
                let covered: Vec<usize> = r.iter().flat_map(|r| r.clone()).collect();
                assert_eq!(covered, (0..rows).collect::<Vec<_>>());
                let (min, max) = (
                    r.iter().map(|r| r.len()).min().unwrap_or(0),
                    r.iter().map(|r| r.len()).max().unwrap_or(0),
                );
                assert!(max - min <= 1, "{rows} rows in {parts}: {r:?}");
            }
        }
    }

    /// The summed gradients of two halves equal the gradient of the whole batch.
    #[test]
    fn halves_sum_to_the_whole_batch_gradient() {
        let device = Device::flex().autodiff();
        device.seed(3);
        let model: Linear = LinearConfig::new(8, 4).init(&device);
        let x = Tensor::<2>::random([6, 8], Distribution::Normal(0.0, 1.0), &device);
        let whole =
            GradientsParams::from_grads(model.forward(x.clone()).square().sum().backward(), &model);
        let dp = DataParallel::new(2);
        let ranges = dp.split(6);
        let (grads, rows) = dp.backward(&model, ranges.len(), |m, k| {
            let part = x.clone().slice(ranges[k].clone());
            (m.forward(part).square().sum(), ranges[k].len())
        });
        assert_eq!(rows, vec![3, 3]);
        let w = model.weight.id;
        let a = whole.get::<2>(w).unwrap();
        let b = grads.get::<2>(w).unwrap();
        let diff = (a - b).abs().max().into_scalar::<f32>();
        assert!(diff < 1e-5, "weight gradients differ by {diff}");
    }
}
