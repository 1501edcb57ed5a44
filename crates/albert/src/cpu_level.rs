//! Which vector instructions the hand-written CPU kernels ([`crate::fused`]) run with.
//!
//! Why: the workspace is built for the x86-64 baseline so that one binary runs on every x86-64
//! host, and at that level the compiler vectorises with SSE2 only (4 lanes). The kernels are
//! therefore compiled three times (baseline, AVX2 + FMA, AVX-512F) and the widest one the CPU
//! has is chosen at run time. Burn's own kernels (the `gemm` matrix products, `macerator`
//! element-wise ops) dispatch the same way inside burn, by their own detection: this level
//! does not reach them.
//!
//! `PIPELINE_CPU_LEVEL=baseline|avx2|avx512|auto` forces a level, so that tests and
//! benchmarks can run each path on one host. A level the CPU lacks is never run (its
//! instructions would fault): the best level at or below the requested one is used instead,
//! with a warning. The level in force is what `pipeline bench --json` records as `isa`.

use std::sync::OnceLock;

/// The environment variable that forces a level (see the module docs).
pub const ENV: &str = "PIPELINE_CPU_LEVEL";

/// A set of vector instructions the kernels are compiled for, narrowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CpuLevel {
    /// The target's baseline: SSE2 on x86-64, whatever the target guarantees elsewhere.
    Baseline,
    /// AVX2 and FMA (x86-64-v3: Haswell, AMD Zen and later).
    Avx2,
    /// AVX-512F on top of AVX2 and FMA.
    Avx512,
}

/// A value of [`ENV`] that names no level.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{ENV}={value:?} names no CPU level (baseline, avx2, avx512 or auto)")]
pub struct UnknownLevel {
    /// The value as given.
    pub value: String,
}

impl CpuLevel {
    /// Every level, narrowest first.
    pub const ALL: [CpuLevel; 3] = [CpuLevel::Baseline, CpuLevel::Avx2, CpuLevel::Avx512];

    /// The level's name, as [`ENV`] and the bench lines spell it.
    pub fn name(self) -> &'static str {
        match self {
            CpuLevel::Baseline => "baseline",
            CpuLevel::Avx2 => "avx2",
            CpuLevel::Avx512 => "avx512",
        }
    }

    /// A level by name (case and surrounding blanks ignored); `Ok(None)` for `auto` or an
    /// empty value (the CPU's best).
    pub fn parse(value: &str) -> Result<Option<CpuLevel>, UnknownLevel> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(None),
            "baseline" | "sse2" | "x86-64" => Ok(Some(CpuLevel::Baseline)),
            "avx2" => Ok(Some(CpuLevel::Avx2)),
            "avx512" | "avx512f" | "avx-512" => Ok(Some(CpuLevel::Avx512)),
            _ => Err(UnknownLevel {
                value: value.to_string(),
            }),
        }
    }

    /// Whether this CPU can run the level's instructions.
    pub fn available(self) -> bool {
        match self {
            CpuLevel::Baseline => true,
            #[cfg(target_arch = "x86_64")]
            CpuLevel::Avx2 => {
                std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
            }
            #[cfg(target_arch = "x86_64")]
            CpuLevel::Avx512 => {
                CpuLevel::Avx2.available() && std::is_x86_feature_detected!("avx512f")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The widest level this CPU has.
    pub fn detected() -> CpuLevel {
        best_at_most(CpuLevel::Avx512)
    }

    /// The level the kernels run with: [`ENV`]'s, if set and available, else the CPU's best.
    /// Read once per process.
    pub fn active() -> CpuLevel {
        static ACTIVE: OnceLock<CpuLevel> = OnceLock::new();
        *ACTIVE.get_or_init(|| {
            let value = std::env::var(ENV).ok();
            let (level, warning) = choose(value.as_deref(), CpuLevel::detected());
            if let Some(w) = warning {
                tracing::warn!("{w}");
            }
            level
        })
    }
}

impl std::fmt::Display for CpuLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The widest available level no wider than `level`.
fn best_at_most(level: CpuLevel) -> CpuLevel {
    CpuLevel::ALL
        .into_iter()
        .rev()
        .find(|l| *l <= level && l.available())
        .unwrap_or(CpuLevel::Baseline)
}

/// The level for the value of [`ENV`] (`None`: unset) on a CPU whose best is `detected`, and
/// a warning when the request cannot be honoured as given.
fn choose(value: Option<&str>, detected: CpuLevel) -> (CpuLevel, Option<String>) {
    let requested = match value.map(CpuLevel::parse) {
        None | Some(Ok(None)) => return (detected, None),
        Some(Ok(Some(level))) => level,
        Some(Err(e)) => return (detected, Some(format!("{e}; using {detected}"))),
    };
    if requested <= detected {
        return (requested, None);
    }
    (
        detected,
        Some(format!(
            "{ENV}={requested}: this CPU has {detected} at most; using {detected}"
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_errors() {
        for level in CpuLevel::ALL {
            assert_eq!(CpuLevel::parse(level.name()), Ok(Some(level)));
        }
        assert_eq!(CpuLevel::parse(" AVX2 "), Ok(Some(CpuLevel::Avx2)));
        assert_eq!(CpuLevel::parse("auto"), Ok(None));
        assert!(CpuLevel::parse("avx3").is_err());
    }

    #[test]
    fn a_request_is_honoured_only_up_to_what_the_cpu_has() {
        use CpuLevel::*;
        assert_eq!(choose(None, Avx2), (Avx2, None));
        assert_eq!(choose(Some("auto"), Avx512), (Avx512, None));
        assert_eq!(choose(Some("baseline"), Avx512), (Baseline, None));
        assert_eq!(choose(Some("avx2"), Avx512), (Avx2, None));
        let (level, warning) = choose(Some("avx512"), Avx2);
        assert_eq!(level, Avx2);
        assert!(warning.is_some_and(|w| w.contains("avx2 at most")));
        let (level, warning) = choose(Some("sse9"), Baseline);
        assert_eq!(level, Baseline);
        assert!(warning.is_some_and(|w| w.contains("sse9")));
    }

    #[test]
    fn the_detected_level_and_every_level_below_it_are_available() {
        let best = CpuLevel::detected();
        for level in CpuLevel::ALL {
            assert_eq!(level.available(), level <= best, "{level}");
        }
        assert!(CpuLevel::active() <= best);
    }
}
