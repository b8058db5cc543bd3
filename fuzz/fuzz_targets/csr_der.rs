//! Fuzzes the DER layer directly: the input is wrapped as a `CERTIFICATE REQUEST` PEM block, so
//! every execution reaches the DER decoder instead of stopping at the PEM scanner.
#![no_main]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // benchmark and fuzz harnesses: fixed inputs, and a panic is the finding
use libfuzzer_sys::fuzz_target;
use nodeauth_csr::{SignerProfile, parse};

fuzz_target!(|data: &[u8]| {
    let mut pem = String::from("-----BEGIN CERTIFICATE REQUEST-----\n");
    pem.push_str(&nodeauth_fuzz_base64(data));
    pem.push_str("\n-----END CERTIFICATE REQUEST-----\n");
    let Ok(csr) = parse(pem.as_bytes()) else {
        return;
    };
    let _ = csr.verify_signature();
    let _ = SignerProfile::kubelet_serving().validate(&csr, &["digital signature", "server auth"]);
});

fn nodeauth_fuzz_base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}
