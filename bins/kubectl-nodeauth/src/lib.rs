//! The testable core of `kubectl-nodeauth`: operations against kube-apiserver and their
//! rendering, callable from the binary's command modules and from integration tests.
//!
//! Policy and parsing live in the `nodeauth-*` crates; this library only moves their values to
//! and from the API server.
#![forbid(unsafe_code)]

pub mod cluster_info_admin;
pub mod kube_client;
pub mod token_admin;
