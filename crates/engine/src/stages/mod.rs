//! Stage kinds built into the engine.
pub mod cmd;
