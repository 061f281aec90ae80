//! The front's client for the bridge socket: the pooled client of `bridge-proto`
//! ([`bridge_proto::client::Pool`]), one request per call, each bounded by the front→bridge
//! timeout, on connections kept open between calls. The front keeps no other state of the
//! bridge.

/// The front's pooled bridge client.
pub use bridge_proto::client::Pool as Bridge;
