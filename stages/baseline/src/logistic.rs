//! The logistic regressions: linfa-logistic's multinomial model (L-BFGS from argmin, L2
//! penalty `alpha`), one per candidate `alpha`, the one best on the protocol's dev split kept,
//! just as the finetune stage keeps its best epoch on dev.

use anyhow::Context;
use linfa::prelude::*;
use linfa_logistic::{MultiFittedLogisticRegression, MultiLogisticRegression};
use ndarray::{Array1, Array2};

/// A fitted model and how it was chosen.
pub struct Fitted {
    model: MultiFittedLogisticRegression<f32, usize>,
    /// The L2 penalty of the model kept: the best on dev, the first of them on a tie.
    pub alpha: f64,
    /// `(alpha, dev accuracy)` of every candidate, in the order tried.
    pub tried: Vec<(f64, f64)>,
}

impl Fitted {
    /// The class id of each row of `x` (a matrix of the vocabulary the model was fitted with).
    pub fn predict(&self, x: &Array2<f32>) -> Vec<usize> {
        self.model.predict(x).to_vec()
    }
}

/// One model for `alpha`.
fn fit_one(
    x: &Array2<f32>,
    y: &[usize],
    alpha: f64,
    max_iterations: u64,
) -> anyhow::Result<MultiFittedLogisticRegression<f32, usize>> {
    let targets = Array1::from_vec(y.to_vec());
    let data = DatasetBase::new(x.view(), targets);
    MultiLogisticRegression::<f32>::default()
        .alpha(alpha as f32)
        .max_iterations(max_iterations)
        .fit(&data)
        .with_context(|| format!("fitting the logistic regression (alpha {alpha})"))
}

fn accuracy(pred: &[usize], gold: &[usize]) -> f64 {
    if gold.is_empty() {
        return 0.0;
    }
    pred.iter().zip(gold).filter(|(p, g)| p == g).count() as f64 / gold.len() as f64
}

/// Fits one model per `alphas` entry on `(x, y)` and keeps the best on `(dev_x, dev_y)` (the
/// first on a tie, so list the strongest penalty first to prefer the simpler model).
pub fn fit(
    x: &Array2<f32>,
    y: &[usize],
    dev_x: &Array2<f32>,
    dev_y: &[usize],
    alphas: &[f64],
    max_iterations: u64,
) -> anyhow::Result<Fitted> {
    let mut classes: Vec<usize> = y.to_vec();
    classes.sort_unstable();
    classes.dedup();
    if classes.len() < 2 {
        anyhow::bail!(
            "the training split has {} class(es): a classifier needs examples of at least two \
             (check the train files' labels)",
            classes.len()
        );
    }
    let mut best: Option<Fitted> = None;
    let mut tried = Vec::new();
    for &alpha in alphas {
        let model = fit_one(x, y, alpha, max_iterations)?;
        let acc = accuracy(&model.predict(dev_x).to_vec(), dev_y);
        tried.push((alpha, acc));
        let better = best
            .as_ref()
            .is_none_or(|b| acc > b.tried.last().map_or(f64::MIN, |t| t.1));
        if better {
            best = Some(Fitted {
                model,
                alpha,
                tried: vec![(alpha, acc)],
            });
        }
    }
    let mut best = best.context("no alpha to try: `alpha` must list at least one value")?;
    best.tried = tried;
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Class = which of three features is on (with a distractor feature that is always on):
    /// a linear model must learn it exactly; the majority class would get a third.
    #[test]
    fn learns_a_separable_three_class_toy_task() {
        let n = 60;
        let mut x = Array2::<f32>::zeros((n, 4));
        let mut y = Vec::new();
        for i in 0..n {
            let c = i % 3;
            x[[i, c]] = 1.0;
            x[[i, 3]] = 1.0;
            y.push(c);
        }
        let f = fit(&x, &y, &x, &y, &[1.0, 0.01], 200).unwrap();
        assert_eq!(f.predict(&x), y);
        assert_eq!(f.tried.len(), 2);
        assert_eq!(
            f.alpha, 1.0,
            "the first alpha already gets every dev example right"
        );
    }

    #[test]
    fn binary_task_and_the_dev_split_chooses_alpha() {
        // Feature 0 decides the label; a huge penalty shrinks the model to the prior.
        let n = 40;
        let mut x = Array2::<f32>::zeros((n, 2));
        let mut y = Vec::new();
        for i in 0..n {
            let pos = i % 4 == 0;
            x[[i, 0]] = if pos { 1.0 } else { 0.0 };
            x[[i, 1]] = 1.0;
            y.push(usize::from(pos));
        }
        let f = fit(&x, &y, &x, &y, &[1e6, 0.1], 200).unwrap();
        assert_eq!(f.alpha, 0.1, "{:?}", f.tried);
        assert_eq!(f.predict(&x), y);
        assert!(
            f.tried[0].1 < 1.0,
            "alpha 1e6 predicts the majority: {:?}",
            f.tried
        );
    }

    #[test]
    fn one_class_only_is_an_error() {
        let x = Array2::<f32>::ones((4, 2));
        let err = fit(&x, &[1, 1, 1, 1], &x, &[1, 1, 1, 1], &[1.0], 10);
        assert!(err.is_err());
    }
}
