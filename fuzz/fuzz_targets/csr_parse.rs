//! Fuzzes `nodeauth_csr::parse` and, for inputs that parse, signature verification and validation
//! against every built-in signer profile. Nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nodeauth_csr::{SignatureCheck, SignerProfile, parse};

fuzz_target!(|data: &[u8]| {
    let Ok(csr) = parse(data) else { return };
    let _ = csr.verify_signature();
    let usages = [
        "digital signature",
        "key encipherment",
        "client auth",
        "server auth",
        "bogus",
    ];
    for profile in [
        SignerProfile::kubelet_client(),
        SignerProfile::kubelet_serving(),
        SignerProfile::kube_apiserver_client(),
    ] {
        let _ = profile.validate(&csr, &usages);
        let _ = profile.validate_with::<&str>(&csr, None, SignatureCheck::Skip);
    }
});
