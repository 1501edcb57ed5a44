//! Build script of the `pipeline` binary: links it as a position-dependent executable.
//!
//! Why: as a PIE, the binary carries ~196,000 relative relocations (burn's vtables), which the
//! dynamic loader applies at every start, writing ~2.8 MB of pages (~890 page faults). A no-op
//! `pipeline run` is meant to take a few milliseconds, and that was a large part of it.
//! Linked with `-no-pie`, the addresses are fixed at link time (195 page faults at start). The
//! cost is that the binary's own code is not address-randomised; libraries still are.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
