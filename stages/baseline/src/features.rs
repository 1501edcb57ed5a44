//! Character n-gram features of sentence pairs, as the inputs of the logistic regressions.
//!
//! Chinese has no spaces, and the models we compare with see characters (bert-base-chinese's
//! vocabulary splits every CJK character), so the bag of words is a bag of character n-grams.
//! A pair is three bags in one vector: n-grams of `text_a` (`a:`), of `text_b` (`b:`), and those
//! found in both (`both:`), so that a linear model can weigh shared content apart from topic
//! words. The hypothesis-only view keeps `b:` alone (Gururangan et al. 2018: NLI hypotheses
//! give their label away through words such as negations).
//!
//! linfa's logistic regression takes a dense matrix, so the vocabulary keeps the `max_features`
//! features with the highest document frequency in the training split (ties broken by the
//! feature's text, so the choice is deterministic); values are 0/1 presence.

use std::collections::{BTreeSet, HashMap};

use ndarray::Array2;

/// Which texts of a pair the features come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// `a:` and `b:` n-grams and the `both:` n-grams they share.
    Pair,
    /// `b:` n-grams only (the NLI hypothesis).
    Hypothesis,
}

/// The distinct character n-grams (1 ≤ n ≤ `max_n`) of a text, whitespace left out.
pub fn ngrams(text: &str, max_n: usize) -> BTreeSet<String> {
    let chars: Vec<char> = text
        .chars()
        .filter(|c| !c.is_whitespace())
        .flat_map(char::to_lowercase)
        .collect();
    let mut out = BTreeSet::new();
    for n in 1..=max_n.max(1) {
        for w in chars.windows(n) {
            out.insert(w.iter().collect());
        }
    }
    out
}

/// The features of one pair, each once, in a fixed order.
pub fn pair_features(a: &str, b: &str, max_n: usize, view: View) -> Vec<String> {
    let gb = ngrams(b, max_n);
    let mut out: Vec<String> = gb.iter().map(|g| format!("b:{g}")).collect();
    if view == View::Pair {
        let ga = ngrams(a, max_n);
        out.extend(ga.iter().map(|g| format!("a:{g}")));
        out.extend(ga.intersection(&gb).map(|g| format!("both:{g}")));
    }
    out
}

/// The features kept, and their columns.
#[derive(Debug, Clone)]
pub struct Vocabulary {
    index: HashMap<String, usize>,
}

impl Vocabulary {
    /// The `max_features` features of the training documents with the highest document
    /// frequency, among those found in at least `min_df` documents.
    pub fn fit(docs: &[Vec<String>], max_features: usize, min_df: usize) -> Vocabulary {
        let mut df: HashMap<&str, usize> = HashMap::new();
        for d in docs {
            for f in d {
                *df.entry(f.as_str()).or_default() += 1;
            }
        }
        let mut ranked: Vec<(&str, usize)> = df
            .into_iter()
            .filter(|(_, n)| *n >= min_df.max(1))
            .collect();
        ranked.sort_by(|x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(y.0)));
        ranked.truncate(max_features);
        // Columns in text order: the same vocabulary gives the same matrix on every machine.
        let mut names: Vec<&str> = ranked.into_iter().map(|(f, _)| f).collect();
        names.sort_unstable();
        Vocabulary {
            index: names
                .into_iter()
                .enumerate()
                .map(|(i, f)| (f.to_string(), i))
                .collect(),
        }
    }

    /// How many features were kept: the columns of [`Vocabulary::matrix`] (which has one
    /// column even when none was).
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no feature reached `min_df` (the regression then has nothing to learn from).
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// One row of 0/1 per document; features outside the vocabulary are dropped.
    pub fn matrix(&self, docs: &[Vec<String>]) -> Array2<f32> {
        let mut x = Array2::<f32>::zeros((docs.len(), self.len().max(1)));
        for (i, d) in docs.iter().enumerate() {
            for f in d {
                if let Some(&j) = self.index.get(f) {
                    x[[i, j]] = 1.0;
                }
            }
        }
        x
    }
}

/// Jaccard similarity of the two texts' character sets (unigrams): |A ∩ B| / |A ∪ B|, 0 for
/// two empty texts.
pub fn char_jaccard(a: &str, b: &str) -> f64 {
    let (ga, gb) = (ngrams(a, 1), ngrams(b, 1));
    let union = ga.union(&gb).count();
    if union == 0 {
        return 0.0;
    }
    ga.intersection(&gb).count() as f64 / union as f64
}

/// Characters in both texts (whitespace left out): the length the LCQMC shortcut rides on.
pub fn pair_length(a: &str, b: &str) -> f64 {
    a.chars()
        .chain(b.chars())
        .filter(|c| !c.is_whitespace())
        .count() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ngrams_of_chinese_text() {
        let g = ngrams("天 气好", 2);
        let want: BTreeSet<String> = ["天", "气", "好", "天气", "气好"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(g, want);
        assert!(ngrams("", 3).is_empty());
    }

    #[test]
    fn pair_features_share_and_hypothesis_view() {
        let f = pair_features("北京", "北京大", 1, View::Pair);
        assert!(f.contains(&"both:北".to_string()));
        assert!(f.contains(&"a:京".to_string()));
        assert!(f.contains(&"b:大".to_string()));
        assert!(!f.contains(&"both:大".to_string()));
        let h = pair_features("北京", "北京大", 1, View::Hypothesis);
        assert!(h.iter().all(|x| x.starts_with("b:")), "{h:?}");
        assert_eq!(h.len(), 3);
    }

    #[test]
    fn vocabulary_keeps_frequent_features_and_builds_rows() {
        let docs: Vec<Vec<String>> = vec![
            vec!["x".into(), "y".into()],
            vec!["x".into(), "z".into()],
            vec!["x".into(), "y".into(), "w".into()],
        ];
        let v = Vocabulary::fit(&docs, 2, 1);
        assert_eq!(v.len(), 2, "x (3 docs) and y (2 docs)");
        let m = v.matrix(&[vec!["y".into(), "q".into()]]);
        assert_eq!(m.shape(), &[1, 2]);
        assert_eq!(m.sum(), 1.0, "y is in, q is not");
        let rare = Vocabulary::fit(&docs, 10, 2);
        assert_eq!(rare.len(), 2, "min_df 2 drops z and w");
    }

    #[test]
    fn jaccard_and_length() {
        assert!((char_jaccard("ab", "bc") - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(char_jaccard("", ""), 0.0);
        assert_eq!(char_jaccard("天气", "天气"), 1.0);
        assert_eq!(pair_length("天 气", "好"), 3.0);
    }
}
