//! Fuzzes the cluster-info kubeconfig parser and PEM pinning. Nothing may panic, and a document
//! we render must parse back to the same cluster.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nodeauth_token::kubeconfig::ClusterInfo;
use nodeauth_token::pin;

fuzz_target!(|data: &[u8]| {
    if let Ok(info) = ClusterInfo::parse(data) {
        assert_eq!(
            ClusterInfo::parse(info.to_yaml().as_bytes()).as_ref(),
            Ok(&info)
        );
        let _ = info.ca_pins();
    }
    let _ = ClusterInfo::from_admin_kubeconfig(data);
    let _ = pin::pins_from_pem(data);
});
