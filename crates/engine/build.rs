//! The `cmd` stage kind's code version covers only the file that implements it: editing the
//! rest of the engine does not change what a user's command produces.
fn main() {
    code_version::emit_files("CMD_CODE_VERSION", &["src/stages/cmd.rs"]);
}
