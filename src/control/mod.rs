//! The control socket's server: requests in, replies out, for the loop to
//! answer ([`server`]). The protocol's types are `model::protocol`; the
//! client side is [`crate::client`]; what the loop does with a command is
//! in [`crate::supervisor`].

pub mod server;
