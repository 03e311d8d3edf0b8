//! The simulation's tests, one binary: seeded schedules of faults, commands,
//! edits and shutdowns against the real supervisor ([`simulation`]), the
//! reconciler played through it ([`reconcile`]), and every state it reaches
//! round-tripping through an upgrade's serialization ([`resume`]).

mod reconcile;
mod resume;
mod simulation;
