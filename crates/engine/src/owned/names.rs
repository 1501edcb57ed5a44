//! The shapes of the names the store gives the entries of its folders (see the module doc of
//! [`crate::owned`]); each is read off the code that makes the entry, cited at its function.
//! A name of another shape was not made by the store, whatever else it holds.

/// Whether `name` is a name the store gives an entry of the store folder `area`.
pub(super) fn fits(area: &str, name: &str) -> bool {
    match area {
        "artifacts" => is_fingerprint(name) || incoming(name).is_some_and(is_fingerprint),
        "work" => is_fingerprint(name),
        "tmp" => name == crate::exec::DOWNLOADS || run_dir(name) || pull_dir(name),
        "failed" => failed(name),
        "quarantine" => quarantined(name) || incoming(name).is_some_and(quarantined),
        "jobs" => job_dir(name),
        _ => false,
    }
}

/// The shape of the names of `area`'s entries, in words, for a refusal.
pub(super) fn shape(area: &str) -> &'static str {
    match area {
        "artifacts" | "work" => "a fingerprint, 32 hex digits",
        "tmp" => "<instance>-<fingerprint>-<pid>, pull-<pid>-<time> or downloads",
        "failed" => "a run id such as 2025-01-31T09-15-02.123Z",
        "quarantine" => "<fingerprint>-<run id>",
        "jobs" => "<fingerprint>-<pid>-<n>",
        _ => "none",
    }
}

/// Whether `name` is a fingerprint: 32 lowercase hex digits
/// ([`crate::manifest::Components::fingerprint`]).
pub fn is_fingerprint(name: &str) -> bool {
    name.len() == 32 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// What `.NAME.incoming-PID` is the copy of (`crate::exec::store::copy_then_rename`: a commit or
/// a quarantine across filesystems copies beside the destination, then renames).
fn incoming(name: &str) -> Option<&str> {
    let (inner, pid) = name.strip_prefix('.')?.rsplit_once(".incoming-")?;
    digits(pid).then_some(inner)
}

/// A run's temporary directory, `<dir_name(instance)>-<fingerprint>-<pid>`
/// (`crate::exec::local::execute`).
fn run_dir(name: &str) -> bool {
    let mut parts = name.rsplitn(3, '-');
    let (Some(pid), Some(fp), Some(instance)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    digits(pid) && is_fingerprint(fp) && !instance.is_empty()
}

/// A pull's staging directory, `pull-<pid>-<nanoseconds>` (`pipeline_remote`'s pull).
fn pull_dir(name: &str) -> bool {
    name.strip_prefix("pull-")
        .and_then(|rest| rest.split_once('-'))
        .is_some_and(|(pid, nanos)| digits(pid) && digits(nanos))
}

/// A run id with its colons as dashes, as [`crate::manifest::now_string`] gives it:
/// `2025-01-31T09-15-02.123Z`.
fn run_id(s: &str) -> bool {
    const SHAPE: &[u8] = b"dddd-dd-ddTdd-dd-dd.dddZ";
    s.len() == SHAPE.len()
        && s.bytes().zip(SHAPE).all(|(b, &want)| match want {
            b'd' => b.is_ascii_digit(),
            _ => b == want,
        })
}

/// A failed attempt's kept logs: `<run id>` (`crate::exec::local`), or `<run id>-job<id>` for a
/// cluster job (`crate::executor::slurm::finish::keep_failed`).
fn failed(name: &str) -> bool {
    match name.get(..24) {
        Some(id) if run_id(id) => {
            let rest = &name[24..];
            rest.is_empty() || rest.strip_prefix("-job").is_some_and(|job| !job.is_empty())
        }
        _ => false,
    }
}

/// A quarantined artifact, `<fingerprint>-<run id>` (`crate::maintain::verify`).
fn quarantined(name: &str) -> bool {
    name.split_at_checked(32)
        .is_some_and(|(fp, rest)| is_fingerprint(fp) && rest.strip_prefix('-').is_some_and(run_id))
}

/// A cluster job's directory, `<fingerprint>-<pid>-<n>`
/// (`crate::executor::slurm::tracker::submit`'s `new_attempt`).
fn job_dir(name: &str) -> bool {
    let mut parts = name.rsplitn(3, '-');
    let (Some(seq), Some(pid), Some(fp)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    digits(seq) && digits(pid) && is_fingerprint(fp)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FP: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn names_the_store_gives_fit() {
        let now = crate::manifest::now_string().replace(':', "-");
        for (area, name) in [
            ("artifacts", FP.to_string()),
            ("artifacts", format!(".{FP}.incoming-42")),
            ("work", FP.to_string()),
            ("tmp", format!("pretrain@share_type=all-{FP}-1234")),
            ("tmp", format!("a-b-{FP}-1")),
            ("tmp", "pull-12-1732770000123456789".to_string()),
            ("tmp", "downloads".to_string()),
            ("failed", now.clone()),
            ("failed", format!("{now}-job12345")),
            ("quarantine", format!("{FP}-{now}")),
            ("quarantine", format!(".{FP}-{now}.incoming-7")),
            ("jobs", format!("{FP}-99-3")),
        ] {
            assert!(fits(area, &name), "{area}/{name}");
        }
    }

    #[test]
    fn other_names_do_not() {
        let upper = FP.to_uppercase();
        for (area, name) in [
            ("artifacts", "notes"),
            ("artifacts", &FP[..31]),
            ("artifacts", upper.as_str()),
            ("artifacts", ".notes.incoming-1"),
            ("work", "else"),
            ("tmp", "keep.txt"),
            ("tmp", "pull-1"),
            ("tmp", "pull-x-1"),
            ("tmp", "x-notafingerprint-1"),
            ("failed", "2025-01-31"),
            ("failed", "2025-01-31T09-15-02.123Z-x"),
            ("quarantine", FP),
            ("jobs", FP),
            ("index", FP),
        ] {
            assert!(!fits(area, name), "{area}/{name}");
        }
        assert!(!fits("tmp", &format!("-{FP}-1")), "no instance part");
    }
}
