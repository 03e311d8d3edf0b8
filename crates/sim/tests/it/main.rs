//! The simulation's tests, one binary: seeded schedules of faults, commands,
//! edits and shutdowns against the real supervisor, swept on every core and
//! at scale ([`simulation`]), drawn from a seed ([`schedule`]) and played,
//! shrunk and reported ([`play`]); the failures they found, replayed
//! ([`found`]); scenarios written by hand ([`scenarios`]); the reconciler
//! played through it ([`reconcile`]); and every state it reaches
//! round-tripping through an upgrade's serialization ([`resume`]).

mod found;
mod play;
mod reconcile;
mod resume;
mod scenarios;
mod schedule;
mod simulation;
