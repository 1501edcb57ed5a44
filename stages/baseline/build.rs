//! The `baseline` kind's code version: this crate and the libraries it uses, not the engine.
fn main() {
    code_version::emit("STAGE_CODE_VERSION", &["pipeline-engine"]);
}
