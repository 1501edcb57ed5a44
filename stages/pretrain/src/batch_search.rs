//! Searching for the largest batch whose training steps fit a device, given a probe that says
//! whether one size fits: `batch_size: auto` takes powers of two only
//! ([`largest_power_of_two`], as Lightning's `BatchSizeFinder` in its `power` mode), and
//! `pipeline bench maxbatch` refines between the last power that fits and the first that does
//! not ([`largest_fitting`], the search `benches/hf_baseline.py maxbatch` runs for
//! transformers, so that the two are comparable).
//!
//! Both assume memory grows with the rows: once a size does not fit, no larger one does.

use serde::{Deserialize, Serialize};

/// One size a search tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tried {
    /// Rows of the probe's batch.
    pub rows: usize,
    /// Whether two training steps of it ran without running out of memory.
    pub fits: bool,
}

/// What [`largest_fitting`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The largest size that fitted (0 when one row did not).
    pub rows: usize,
    /// The first size of the doubling that did not fit; `None` when the cap was reached first.
    pub first_oom: Option<usize>,
    /// Every size tried, in order.
    pub tried: Vec<Tried>,
}

/// The largest power of two `n ≤ cap` with `fits(n)`, trying 1, 2, 4, … and stopping at the
/// first that does not fit; 0 when one row does not fit. Also every size tried, in order.
pub fn largest_power_of_two<E>(
    cap: usize,
    mut fits: impl FnMut(usize) -> Result<bool, E>,
) -> Result<(usize, Vec<Tried>), E> {
    let mut tried = Vec::new();
    let mut largest = 0;
    let mut rows = 1;
    while rows <= cap {
        let ok = fits(rows)?;
        tried.push(Tried { rows, fits: ok });
        if !ok {
            break;
        }
        largest = rows;
        match rows.checked_mul(2) {
            Some(next) => rows = next,
            None => break,
        }
    }
    Ok((largest, tried))
}

/// The largest `n ≤ cap` with `fits(n)`, to within `granularity` rows: doubling from 1 to the
/// first size that does not fit, then halving the gap between the last that fitted and the
/// smallest that did not until it is at most `granularity` wide (the sizes it tries then are
/// multiples of `granularity`). Where nothing up to the cap failed, the largest power of two
/// within it.
pub fn largest_fitting<E>(
    cap: usize,
    granularity: usize,
    mut fits: impl FnMut(usize) -> Result<bool, E>,
) -> Result<Found, E> {
    let granularity = granularity.max(1);
    let (mut lo, mut tried) = largest_power_of_two(cap, &mut fits)?;
    let first_oom = tried.last().filter(|t| !t.fits).map(|t| t.rows);
    let Some(mut hi) = first_oom else {
        return Ok(Found {
            rows: lo,
            first_oom,
            tried,
        });
    };
    while hi - lo > granularity {
        let mid = (lo + (hi - lo) / 2) / granularity * granularity;
        let mid = mid.max(lo + granularity);
        if mid >= hi {
            break;
        }
        let ok = fits(mid)?;
        tried.push(Tried {
            rows: mid,
            fits: ok,
        });
        if ok {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(Found {
        rows: lo,
        first_oom,
        tried,
    })
}

#[cfg(test)]
mod tests {
    use anyhow::bail;
    use pipeline_albert::memory::unless_out_of_memory;
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_size_that_runs_out_of_memory_ends_the_probe() {
        let (found, tried) = largest_power_of_two(1024, |rows| {
            Ok::<_, anyhow::Error>(
                unless_out_of_memory(|| {
                    assert!(
                        rows <= 8,
                        "CUDA out of memory. Tried to allocate {rows} GiB"
                    );
                })
                .is_some(),
            )
        })
        .expect("probed");
        assert_eq!(
            (found, tried.last().map(|t| (t.rows, t.fits))),
            (8, Some((16, false)))
        );
    }

    #[test]
    fn the_probe_doubles_until_a_size_does_not_fit() {
        let (found, tried) =
            largest_power_of_two(4096, |rows| Ok::<_, ()>(rows <= 300)).expect("probed");
        assert_eq!(found, 256);
        let sizes: Vec<(usize, bool)> = tried.iter().map(|t| (t.rows, t.fits)).collect();
        assert_eq!(
            sizes,
            [1, 2, 4, 8, 16, 32, 64, 128, 256]
                .map(|r| (r, true))
                .into_iter()
                .chain([(512, false)])
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn the_probe_stops_at_the_cap_and_reports_nothing_fitting_as_zero() {
        let (found, tried) = largest_power_of_two(100, |_| Ok::<_, ()>(true)).expect("probed");
        assert_eq!(
            (found, tried.len()),
            (64, 7),
            "1 … 64, and 128 is past the cap"
        );
        let (found, tried) = largest_power_of_two(100, |_| Ok::<_, ()>(false)).expect("probed");
        assert_eq!((found, tried.len()), (0, 1));
        let e = largest_power_of_two(8, |_| bail!("broken")).expect_err("an error is not a size");
        assert_eq!(e.to_string(), "broken");
    }

    #[test]
    fn the_refinement_finds_the_exact_limit_between_two_powers() {
        let found = largest_fitting(16384, 1, |rows| Ok::<_, ()>(rows <= 300)).expect("searched");
        assert_eq!((found.rows, found.first_oom), (300, Some(512)));
        // 10 doublings (1 … 512), then the gap of 256 halved 8 times.
        assert_eq!(found.tried.len(), 10 + 8);
        let coarse = largest_fitting(16384, 8, |rows| Ok::<_, ()>(rows <= 300)).expect("searched");
        assert_eq!(coarse.rows, 296);
        assert!(coarse.tried[10..].iter().all(|t| t.rows % 8 == 0));
    }

    #[test]
    fn the_refinement_reports_the_cap_and_nothing_fitting() {
        let capped = largest_fitting(100, 1, |_| Ok::<_, ()>(true)).expect("searched");
        assert_eq!((capped.rows, capped.first_oom), (64, None));
        let none = largest_fitting(100, 1, |_| Ok::<_, ()>(false)).expect("searched");
        assert_eq!(
            (none.rows, none.first_oom, none.tried.len()),
            (0, Some(1), 1)
        );
    }

    proptest! {
        /// Where sizes up to `limit` fit: the search lands within `granularity` below the
        /// limit (or on the largest power of two of the cap when the cap is below it), never
        /// reports a size that did not fit, and never tries one twice or past the cap.
        #[test]
        fn the_search_lands_within_the_granularity_of_the_limit(
            limit in 0usize..5000,
            cap in 1usize..10000,
            granularity in 1usize..64,
        ) {
            let found = largest_fitting(cap, granularity, |rows| Ok::<_, ()>(rows <= limit))
                .expect("searched");
            prop_assert!(found.rows <= limit);
            if found.first_oom.is_some() {
                prop_assert!(limit - found.rows < granularity, "{found:?}");
            } else {
                prop_assert!(found.rows <= cap && found.rows * 2 > cap, "{found:?}");
            }
            let mut sizes: Vec<usize> = found.tried.iter().map(|t| t.rows).collect();
            prop_assert!(sizes.iter().all(|&s| s <= cap));
            sizes.sort_unstable();
            sizes.dedup();
            prop_assert_eq!(sizes.len(), found.tried.len());
        }
    }
}
