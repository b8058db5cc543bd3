//! Fuzzes the bootstrap token Secret mapping and the controller decisions built on it.
//!
//! The input is split on NUL bytes into name, namespace, type, then key/value pairs. Nothing may
//! panic; every Secret accepted as a token record must map back to the same record.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use nodeauth_token::secret::{self, Secret, TokenRecord};
use nodeauth_token::{BootstrapToken, Timestamp, signer};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fuzz_target!(|data: &[u8]| {
    let mut parts = data.split(|b| *b == 0);
    let name = parts.next().map(text).unwrap_or_default();
    let namespace = parts.next().map(text).unwrap_or_default();
    let secret_type = parts.next().map(text).unwrap_or_default();
    let mut data_map = BTreeMap::new();
    while let (Some(k), Some(v)) = (parts.next(), parts.next()) {
        data_map.insert(text(k), v.to_vec());
    }
    let secret = Secret {
        // Steer a good share of inputs past the name/namespace/type checks.
        name: if name.is_empty() {
            "bootstrap-token-abcdef".into()
        } else {
            name
        },
        namespace: if namespace.is_empty() {
            "kube-system".into()
        } else {
            namespace
        },
        secret_type: if secret_type.is_empty() {
            secret::SECRET_TYPE.into()
        } else {
            secret_type
        },
        data: data_map,
        uid: None,
        deleting: data.first() == Some(&1),
    };
    let now = Timestamp::from_second(1_900_000_000).unwrap_or(Timestamp::UNIX_EPOCH);
    if let Ok(record) = TokenRecord::from_secret(&secret) {
        assert_eq!(
            TokenRecord::from_secret(&record.to_secret()).as_ref(),
            Ok(&record)
        );
    }
    let _ = TokenRecord::from_secret_strict(&secret);
    let _ = secret::expiry_status(&secret, now);
    if let Ok(token) = BootstrapToken::parse("abcdef.0123456789abcdef") {
        let _ = secret::authenticate(&secret, &token, now);
    }
    let cm = BTreeMap::from([("kubeconfig".to_owned(), "apiVersion: v1\n".to_owned())]);
    if let Some(plan) = signer::plan_signatures([&secret], &cm, now) {
        let again = signer::plan_signatures([&secret], &plan.desired_data, now);
        assert!(again.is_some_and(|p| !p.changed));
    }
    let _ = signer::plan_cleanup([&secret], now);
});
