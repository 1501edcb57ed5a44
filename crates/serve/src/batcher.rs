//! Dynamic batching: one bounded queue of inputs, and workers that take inputs from it into
//! batches and run the model on them.
//!
//! A request's inputs are queued all at once or not at all ([`Queue::submit`]), each with the
//! sender half of a oneshot channel its request waits on. A worker takes the first input, then
//! what else is queued, until their tokens would pass `max_batch_tokens`; and while other
//! requests are arriving (their bodies being read and checked, [`Queue::arrival`]) it waits for
//! them, until the first input has waited `max_wait` since it was queued. So a lone request is
//! predicted at once, concurrent ones share a batch, and an input that already waited behind a
//! busy worker is not made to wait again. The batch is predicted on a blocking thread. An input
//! that would overflow the budget is carried into the next batch. Several workers share the
//! queue: one collects while another predicts. Inputs whose request has gone (the client hung
//! up) are dropped, not predicted.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{Mutex, mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::metrics::Metrics;
use crate::{Model, ServeConfig};

/// What a request gets back for one input: its output, or why the batch failed.
pub(crate) type Reply<O> = Result<O, String>;

/// One queued input.
pub(crate) struct Job<I, O> {
    input: I,
    tokens: usize,
    queued: Instant,
    reply: oneshot::Sender<Reply<O>>,
}

/// The sending side of the queue, which the HTTP handlers hold.
pub(crate) struct Queue<I, O> {
    tx: mpsc::Sender<Job<I, O>>,
    arriving: Arc<AtomicUsize>,
    metrics: Arc<Metrics>,
}

/// A request on its way to the queue; a batch being collected waits for it (up to `max_wait`).
pub(crate) struct Arrival(Arc<AtomicUsize>);

impl Drop for Arrival {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The queue had no room for the request's inputs (or is closing).
#[derive(Debug)]
pub(crate) struct Full;

impl<I, O> Queue<I, O> {
    /// Queues `inputs` (each with its cost in tokens), all or none, and returns the receivers
    /// of their outputs in order.
    pub(crate) fn submit(
        &self,
        inputs: Vec<(I, usize)>,
    ) -> Result<Vec<oneshot::Receiver<Reply<O>>>, Full> {
        let permits = self.tx.try_reserve_many(inputs.len()).map_err(|_| Full)?;
        let queued = Instant::now();
        let mut receivers = Vec::with_capacity(inputs.len());
        for (permit, (input, tokens)) in permits.zip(inputs) {
            let (reply, rx) = oneshot::channel();
            permit.send(Job {
                input,
                tokens,
                queued,
                reply,
            });
            receivers.push(rx);
        }
        self.metrics.queue_depth.inc_by(receivers.len() as i64);
        Ok(receivers)
    }

    /// Counts a request as arriving until the returned guard is dropped: from before its body
    /// is read until its inputs are queued (or it is refused).
    pub(crate) fn arrival(&self) -> Arrival {
        self.arriving.fetch_add(1, Ordering::SeqCst);
        Arrival(self.arriving.clone())
    }

    /// Inputs queued and not yet taken.
    pub(crate) fn depth(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }
}

/// The receiving side, shared by the workers: the one that holds the lock collects a batch.
struct Intake<I, O> {
    rx: mpsc::Receiver<Job<I, O>>,
    /// The input that would have overflowed the last batch: the next one starts with it.
    carried: Option<Job<I, O>>,
    /// Requests on their way to the queue ([`Queue::arrival`]).
    arriving: Arc<AtomicUsize>,
}

/// How batches are made.
#[derive(Debug, Clone, Copy)]
struct Budget {
    tokens: usize,
    wait: Duration,
}

/// A model's queue and the workers that drain it.
pub(crate) type Started<M> = (
    Queue<<M as Model>::Input, <M as Model>::Output>,
    Vec<JoinHandle<()>>,
);

/// Starts `config.workers` workers on a queue of `config.max_queue` inputs.
pub(crate) fn start<M: Model>(
    model: Arc<M>,
    config: &ServeConfig,
    metrics: Arc<Metrics>,
) -> Started<M> {
    let (tx, rx) = mpsc::channel(config.max_queue);
    let arriving = Arc::new(AtomicUsize::new(0));
    let intake = Arc::new(Mutex::new(Intake {
        rx,
        carried: None,
        arriving: arriving.clone(),
    }));
    let budget = Budget {
        tokens: config.max_batch_tokens,
        wait: config.max_wait,
    };
    let workers = (0..config.workers)
        .map(|_| {
            let (model, intake, metrics) = (model.clone(), intake.clone(), metrics.clone());
            tokio::spawn(async move { work(model, intake, budget, metrics).await })
        })
        .collect();
    let queue = Queue {
        tx,
        arriving,
        metrics,
    };
    (queue, workers)
}

/// One worker: batches until the queue is closed and empty.
async fn work<M: Model>(
    model: Arc<M>,
    intake: Arc<Mutex<Intake<M::Input, M::Output>>>,
    budget: Budget,
    metrics: Arc<Metrics>,
) {
    loop {
        let batch = {
            let mut intake = intake.lock().await;
            collect(&mut intake, budget, &metrics).await
        };
        let Some(batch) = batch else { return };
        predict(&model, batch, &metrics).await;
    }
}

/// The next batch, or None once the queue is closed and empty.
async fn collect<I, O>(
    intake: &mut Intake<I, O>,
    budget: Budget,
    metrics: &Metrics,
) -> Option<Vec<Job<I, O>>> {
    let first = loop {
        let job = match intake.carried.take() {
            Some(job) => job,
            None => intake.rx.recv().await?,
        };
        if let Some(job) = live(job, metrics) {
            break job;
        }
    };
    let deadline = tokio::time::Instant::from_std(first.queued + budget.wait);
    let mut tokens = first.tokens;
    let mut batch = vec![first];
    while tokens < budget.tokens {
        let job = match intake.rx.try_recv() {
            Ok(job) => job,
            Err(TryRecvError::Disconnected) => break,
            // Nothing queued and nothing on its way: waiting would only delay this batch.
            Err(TryRecvError::Empty) if intake.arriving.load(Ordering::SeqCst) == 0 => break,
            Err(TryRecvError::Empty) => {
                match tokio::time::timeout_at(deadline, intake.rx.recv()).await {
                    Ok(Some(job)) => job,
                    Ok(None) | Err(_) => break,
                }
            }
        };
        let Some(job) = live(job, metrics) else {
            continue;
        };
        if tokens + job.tokens > budget.tokens {
            intake.carried = Some(job);
            break;
        }
        tokens += job.tokens;
        batch.push(job);
    }
    metrics.batch(batch.len(), tokens);
    Some(batch)
}

/// `job` taken off the queue, or None when its request is gone.
fn live<I, O>(job: Job<I, O>, metrics: &Metrics) -> Option<Job<I, O>> {
    if job.reply.is_closed() {
        tracing::debug!("an input whose request is gone is dropped");
        metrics.queue_depth.dec();
        return None;
    }
    Some(job)
}

/// Predicts `batch` on a blocking thread and answers each input's request.
async fn predict<M: Model>(
    model: &Arc<M>,
    batch: Vec<Job<M::Input, M::Output>>,
    metrics: &Metrics,
) {
    let started = Instant::now();
    let size = batch.len();
    let tokens: usize = batch.iter().map(|j| j.tokens).sum();
    // Until now they were waiting: in the queue, or in a batch still being collected.
    metrics.queue_depth.dec_by(size as i64);
    let (inputs, replies): (Vec<_>, Vec<_>) = batch.into_iter().map(|j| (j.input, j.reply)).unzip();
    let model = model.clone();
    let result = tokio::task::spawn_blocking(move || model.predict(&inputs)).await;
    let elapsed = started.elapsed();
    metrics.predicted(elapsed);
    let outputs = match result {
        Ok(Ok(outputs)) if outputs.len() == size => Ok(outputs),
        Ok(Ok(outputs)) => Err(format!(
            "the model gave {} outputs for a batch of {size} inputs",
            outputs.len()
        )),
        Ok(Err(e)) => Err(format!("{e:#}")),
        Err(e) => Err(format!("the model failed: {e}")),
    };
    tracing::debug!(
        size,
        tokens,
        ms = format_args!("{:.1}", elapsed.as_secs_f64() * 1e3),
        ok = outputs.is_ok(),
        "batch"
    );
    match outputs {
        Ok(outputs) => {
            for (reply, output) in replies.into_iter().zip(outputs) {
                // A request that has gone meanwhile has nobody to answer.
                let _ = reply.send(Ok(output));
            }
        }
        Err(message) => {
            tracing::warn!("a batch of {size} failed: {message}");
            for reply in replies {
                let _ = reply.send(Err(message.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Lengths;

    impl Model for Lengths {
        type Input = String;
        type Output = usize;
        fn info(&self) -> serde_json::Value {
            serde_json::Value::Null
        }
        fn check(&self, input: &String) -> Result<usize, String> {
            Ok(input.len())
        }
        fn predict(&self, batch: &[String]) -> anyhow::Result<Vec<usize>> {
            Ok(batch.iter().map(String::len).collect())
        }
    }

    fn config(tokens: usize) -> ServeConfig {
        ServeConfig {
            max_batch_tokens: tokens,
            max_wait: Duration::from_millis(50),
            max_queue: 8,
            ..ServeConfig::default()
        }
    }

    fn jobs(texts: &[&str]) -> Vec<(String, usize)> {
        texts.iter().map(|t| (t.to_string(), t.len())).collect()
    }

    /// A queue and its intake, without workers: a test collects by hand.
    fn channel(metrics: &Arc<Metrics>) -> (Queue<String, usize>, Intake<String, usize>) {
        let (tx, rx) = mpsc::channel(8);
        let arriving = Arc::new(AtomicUsize::new(0));
        let queue = Queue {
            tx,
            arriving: arriving.clone(),
            metrics: metrics.clone(),
        };
        let intake = Intake {
            rx,
            carried: None,
            arriving,
        };
        (queue, intake)
    }

    fn budget(tokens: usize, wait: Duration) -> Budget {
        Budget { tokens, wait }
    }

    #[tokio::test]
    async fn a_budget_splits_queued_inputs_into_batches_and_carries_the_overflow() {
        let metrics = Arc::new(Metrics::new());
        let (queue, mut intake) = channel(&metrics);
        let _rxs = queue
            .submit(jobs(&["aaaa", "bbbb", "cccccc", "d"]))
            .unwrap();
        assert_eq!(queue.depth(), 4);
        drop(queue);
        let budget = budget(10, Duration::from_millis(50));
        let sizes = |b: Vec<Job<String, usize>>| b.iter().map(|j| j.tokens).collect::<Vec<_>>();
        let first = collect(&mut intake, budget, &metrics).await.unwrap();
        assert_eq!(sizes(first), [4, 4]);
        let second = collect(&mut intake, budget, &metrics).await.unwrap();
        assert_eq!(sizes(second), [6, 1]);
        assert!(collect(&mut intake, budget, &metrics).await.is_none());
    }

    #[tokio::test]
    async fn a_lone_input_is_not_kept_waiting() {
        let metrics = Arc::new(Metrics::new());
        let (queue, mut intake) = channel(&metrics);
        let _rx = queue.submit(jobs(&["alone"])).unwrap();
        let started = Instant::now();
        let batch = collect(&mut intake, budget(100, Duration::from_secs(10)), &metrics).await;
        assert_eq!(batch.map(|b| b.len()), Some(1));
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn a_batch_waits_for_a_request_on_its_way_but_no_longer_than_max_wait() {
        let metrics = Arc::new(Metrics::new());
        let (queue, mut intake) = channel(&metrics);
        let _first = queue.submit(jobs(&["first"])).unwrap();
        let arrival = queue.arrival();
        let queue = Arc::new(queue);
        let late = {
            let queue = queue.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let rxs = queue.submit(jobs(&["late"])).unwrap();
                drop(arrival);
                rxs
            })
        };
        let wait = budget(100, Duration::from_secs(10));
        let batch = collect(&mut intake, wait, &metrics).await.unwrap();
        let inputs: Vec<_> = batch.iter().map(|j| j.input.as_str()).collect();
        assert_eq!(inputs, ["first", "late"]);
        let _late = late.await.unwrap();

        // One still arriving after max_wait does not hold the batch any longer.
        let _held = queue.arrival();
        let _next = queue.submit(jobs(&["next"])).unwrap();
        let started = Instant::now();
        let short = budget(100, Duration::from_millis(100));
        let batch = collect(&mut intake, short, &metrics).await.unwrap();
        assert_eq!(batch.len(), 1);
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(90) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
    }

    #[tokio::test]
    async fn a_full_queue_refuses_a_whole_request_and_keeps_none_of_it() {
        let metrics = Arc::new(Metrics::new());
        let (queue, _workers) = start(Arc::new(Lengths), &config(1000), metrics);
        // No worker has run yet on this single-threaded test runtime: the queue only fills.
        let _held = queue.submit(jobs(&["a"; 6])).unwrap();
        assert!(queue.submit(jobs(&["b"; 3])).is_err());
        assert_eq!(queue.depth(), 6);
        let _more = queue.submit(jobs(&["c"; 2])).unwrap();
        assert_eq!(queue.depth(), 8);
    }

    #[tokio::test]
    async fn workers_answer_every_input_in_order() {
        let metrics = Arc::new(Metrics::new());
        let (queue, workers) = start(Arc::new(Lengths), &config(6), metrics);
        let rxs = queue
            .submit(jobs(&["a", "bb", "ccc", "dddd", "eeeee"]))
            .unwrap();
        drop(queue);
        let mut got = Vec::new();
        for rx in rxs {
            got.push(rx.await.unwrap().unwrap());
        }
        assert_eq!(got, [1, 2, 3, 4, 5]);
        for w in workers {
            w.await.unwrap();
        }
    }

    #[tokio::test]
    async fn an_input_whose_request_is_gone_is_not_predicted() {
        let metrics = Arc::new(Metrics::new());
        let (queue, mut intake) = channel(&metrics);
        let mut rxs = queue.submit(jobs(&["gone", "kept"])).unwrap();
        rxs.remove(0);
        drop(queue);
        let batch = collect(&mut intake, budget(100, Duration::ZERO), &metrics)
            .await
            .unwrap();
        assert_eq!(batch.len(), 1);
        assert_eq!(batch[0].input, "kept");
    }
}
