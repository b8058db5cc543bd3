//! Fuzzes the reading of kube-apiserver's replies to the protobuf writes
//! (`nodeauth_k8s::proto`): the envelope, and the error `Status` read from a protobuf, JSON or
//! any other body.
//!
//! The first two bytes are the reply's HTTP code, the rest its body. Nothing may panic; every
//! error body must give a Status that carries a code (never 0, which would read as no error),
//! and an envelope this crate writes must name its own type.
#![no_main]
#![allow(
    clippy::expect_used,
    reason = "a fuzz target's assertion: our own envelope must read back"
)]

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::api::ObjectMeta;
use libfuzzer_sys::fuzz_target;
use nodeauth_k8s::proto::{self, Protobuf};

fuzz_target!(|data: &[u8]| {
    let (code, body) = match data {
        [a, b, rest @ ..] => (u16::from_be_bytes([*a, *b]).clamp(400, 599), rest),
        _ => (500, data),
    };
    let status = proto::status_from(code, body);
    assert_ne!(status.code, 0, "a Status without a code from {body:?}");
    let _ = proto::type_of(body);
    // Whatever text a Lease carries, the envelope around it names it.
    let text = String::from_utf8_lossy(body).into_owned();
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(text.clone()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(text),
            ..Default::default()
        }),
    };
    let (version, kind) = proto::type_of(&lease.to_protobuf()).expect("our own envelope");
    assert_eq!(
        (version.as_str(), kind.as_str()),
        ("coordination.k8s.io/v1", "Lease")
    );
});
