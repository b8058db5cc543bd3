//! Keys and helpers shared by the unit tests. Keys are TEST ONLY (fixed or committed fixtures).

use rsa::pkcs8::DecodePrivateKey;

use crate::{Csr, CsrBuilder, CsrSigningKey, HashAlgorithm, RsaPadding, parse};

pub(crate) fn p256() -> CsrSigningKey {
    let scalar: Vec<u8> = (1..=32).collect();
    CsrSigningKey::P256(p256::ecdsa::SigningKey::from_slice(&scalar).unwrap())
}

pub(crate) fn p384() -> CsrSigningKey {
    let scalar: Vec<u8> = (1..=48).collect();
    CsrSigningKey::P384(p384::ecdsa::SigningKey::from_slice(&scalar).unwrap())
}

pub(crate) fn ed25519() -> CsrSigningKey {
    CsrSigningKey::Ed25519(ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]))
}

pub(crate) fn rsa2048(padding: RsaPadding, hash: HashAlgorithm) -> CsrSigningKey {
    let pem = include_str!("../tests/fixtures/keys/test-only-rsa2048.pk8.pem");
    CsrSigningKey::Rsa {
        key: rsa::RsaPrivateKey::from_pkcs8_pem(pem).unwrap(),
        padding,
        hash,
    }
}

pub(crate) fn build(builder: CsrBuilder) -> Csr {
    let pem = builder.build(&p256()).unwrap();
    parse(pem.as_bytes()).unwrap()
}

/// The DER of a built request, for tests that damage it.
pub(crate) fn request_der(builder: CsrBuilder) -> Vec<u8> {
    build(builder).der().to_vec()
}

/// Wraps DER (and optional extra text) as a `CERTIFICATE REQUEST` block.
pub(crate) fn wrap(der: &[u8]) -> String {
    let mut pem = String::new();
    crate::pem::write_block(&mut pem, crate::CERTIFICATE_REQUEST_LABEL, der);
    pem
}
