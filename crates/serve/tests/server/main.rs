//! The server end to end, over real HTTP on 127.0.0.1 (port 0), with a fake model whose batches
//! a test can hold, fail or crash: the shapes of `/predict`, every status it answers, that
//! concurrent requests share batches, that shutdown answers what is in flight, and that a flood
//! of oversized bodies does not grow the process.

mod api;
mod fake;
mod flood;
mod lifecycle;
mod slow_clients;
