//! Parse errors: each names what is wrong.

use der::{Decode, Encode, asn1::Utf8StringRef};
use x509_cert::request::CertReq;

use super::*;
use crate::{CsrBuilder, DerError, HashAlgorithm, KeyAlgorithm, RsaPadding, oids, test_support::*};

fn node() -> CsrBuilder {
    CsrBuilder::kubelet_client("node-1")
}

/// Replaces the outer SEQUENCE header (`30 81 len` or `30 82 hi lo`) of `der`.
fn with_outer_header(der: &[u8], header: &[u8]) -> Vec<u8> {
    let header_len = match der[1] {
        0x81 => 3,
        0x82 => 4,
        other => panic!("unexpected length byte {other:#x}"),
    };
    let mut out = header.to_vec();
    out.extend_from_slice(&der[header_len..]);
    out
}

#[test]
fn no_pem() {
    assert_eq!(parse(b""), Err(ParseError::NoPem));
    assert_eq!(parse(b"\n \r\n\t\n"), Err(ParseError::NoPem));
    assert_eq!(
        parse(&[0xff, 0xfe]),
        Err(ParseError::TextOutsidePem { line: 1 })
    );
}

#[test]
fn first_block_must_be_a_request() {
    let mut pem = String::new();
    crate::pem::write_block(&mut pem, "CERTIFICATE", b"x");
    pem.push_str(&wrap(&request_der(node())));
    assert_eq!(
        parse(pem.as_bytes()),
        Err(ParseError::WrongFirstBlock {
            label: "CERTIFICATE".into()
        })
    );
}

#[test]
fn bad_base64() {
    let pem = wrap(&request_der(node()));
    let (first, rest) = pem.split_once('\n').unwrap();
    let pem = format!("{first}\n*{}", &rest[1..]);
    assert!(matches!(
        parse(pem.as_bytes()),
        Err(ParseError::BadBase64 { line: 1, .. })
    ));
}

#[test]
fn strict_der() {
    let der = request_der(node());
    let len = der.len() - if der[1] == 0x81 { 3 } else { 4 };
    let [hi, lo] = u16::try_from(len).unwrap().to_be_bytes();

    let mut ber = with_outer_header(&der, &[0x30, 0x80]);
    ber.extend_from_slice(&[0, 0]);
    assert!(
        matches!(
            parse(wrap(&ber).as_bytes()),
            Err(ParseError::Der(DerError::NotCanonical { .. }))
        ),
        "indefinite length"
    );

    let long_form = with_outer_header(&der, &[0x30, 0x83, 0x00, hi, lo]);
    let res = parse(wrap(&long_form).as_bytes());
    assert!(
        matches!(res, Err(ParseError::Der(DerError::NotCanonical { .. }))),
        "non-minimal length: {res:?}"
    );

    let mut trailing = der.clone();
    trailing.push(0);
    assert_eq!(
        parse(wrap(&trailing).as_bytes()),
        Err(ParseError::Der(DerError::TrailingBytes { remaining: 1 }))
    );

    let truncated = &der[..der.len() - 1];
    assert_eq!(
        parse(wrap(truncated).as_bytes()),
        Err(ParseError::Der(DerError::Truncated))
    );

    assert!(matches!(
        parse(wrap(&[0x02, 0x01, 0x00]).as_bytes()),
        Err(ParseError::Der(DerError::Malformed { .. }))
    ));
}

#[test]
fn non_canonical_boolean_is_refused() {
    // An extension whose `critical` BOOLEAN is 0x01 instead of 0xFF.
    let der = request_der(
        node()
            .extension(
                oids::PROVIDER_ID,
                true,
                Utf8StringRef::new("x").unwrap().to_der().unwrap(),
            )
            .unwrap(),
    );
    let pos = der
        .windows(3)
        .position(|w| w == [0x01, 0x01, 0xff])
        .unwrap();
    let mut bad = der.clone();
    bad[pos + 2] = 0x01;
    assert!(
        matches!(
            parse(wrap(&bad).as_bytes()),
            Err(ParseError::Der(DerError::NotCanonical { .. }))
        ),
        "{:?}",
        parse(wrap(&bad).as_bytes())
    );
}

#[test]
fn second_request_block() {
    let one = wrap(&request_der(node()));
    let two = format!("{one}\n{one}");
    assert_eq!(
        parse(two.as_bytes()),
        Err(ParseError::SecondRequest {
            line: 1 + one.lines().count() + 1
        })
    );
}

#[test]
fn attestation_blocks() {
    let key = p256();
    let pem = node().attestation("tpm", b"\x00\x01").build(&key).unwrap();
    let csr = parse(pem.as_bytes()).unwrap();
    assert_eq!(csr.attestation_provider(), Some("tpm"));
    assert_eq!(csr.attestation_data(), Some(&[0u8, 1][..]));

    let doubled = node()
        .attestation("tpm", b"")
        .attestation("tpm", b"")
        .build(&key)
        .unwrap();
    assert_eq!(
        parse(doubled.as_bytes()),
        Err(ParseError::DuplicateAttestationBlock {
            label: ATTESTATION_PROVIDER_LABEL.into()
        })
    );

    let mut not_text = wrap(&request_der(node()));
    crate::pem::write_block(&mut not_text, ATTESTATION_PROVIDER_LABEL, &[0xff]);
    assert_eq!(
        parse(not_text.as_bytes()),
        Err(ParseError::AttestationProviderNotText)
    );

    let mut other = pem.clone();
    crate::pem::write_block(&mut other, "SOMETHING ELSE", b"z");
    let csr = parse(other.as_bytes()).unwrap();
    assert_eq!(
        csr.trailing_block("SOMETHING ELSE")
            .map(|b| b.data.as_slice()),
        Some(&b"z"[..])
    );
    assert_eq!(csr.trailing_blocks().len(), 3);
}

#[test]
fn extension_errors() {
    let dup = node()
        .provider_id("a")
        .extension(
            oids::PROVIDER_ID,
            false,
            Utf8StringRef::new("b").unwrap().to_der().unwrap(),
        )
        .unwrap();
    let pem = dup.build(&p256()).unwrap();
    assert_eq!(
        parse(pem.as_bytes()),
        Err(ParseError::DuplicateExtension {
            oid: oids::PROVIDER_ID
        })
    );

    // ProviderID must be a UTF8String, not e.g. a PrintableString.
    let printable = der::asn1::PrintableStringRef::new("a")
        .unwrap()
        .to_der()
        .unwrap();
    let pem = node()
        .extension(oids::PROVIDER_ID, false, printable)
        .unwrap()
        .build(&p256())
        .unwrap();
    assert!(matches!(
        parse(pem.as_bytes()),
        Err(ParseError::MalformedExtension {
            name: "providerID",
            ..
        })
    ));

    // An IP SAN of 5 bytes.
    let san = [0x30, 0x07, 0x87, 0x05, 1, 2, 3, 4, 5].to_vec();
    let pem = node()
        .extension(oids::SUBJECT_ALT_NAME, false, san)
        .unwrap()
        .build(&p256())
        .unwrap();
    let err = parse(pem.as_bytes()).unwrap_err();
    assert!(err.to_string().contains("iPAddress of 5 bytes"), "{err}");
}

#[test]
fn multiple_extension_requests() {
    // Re-encode a request with its extensionRequest attribute carrying two values.
    let der = request_der(node().provider_id("a"));
    let mut req = CertReq::from_der(&der).unwrap();
    let mut attr = req.info.attributes.iter().next().unwrap().clone();
    let extra = der::asn1::Any::encode_from(&Vec::<x509_cert::ext::Extension>::new()).unwrap();
    attr.values.insert(extra).unwrap();
    req.info.attributes = der::asn1::SetOfVec::try_from(vec![attr]).unwrap();
    let pem = wrap(&req.to_der().unwrap());
    assert_eq!(
        parse(pem.as_bytes()),
        Err(ParseError::MultipleExtensionRequests)
    );
}

#[test]
fn subject_value_types() {
    // A commonName whose value is an INTEGER.
    let der = request_der(node());
    let mut req = CertReq::from_der(&der).unwrap();
    let mut rdns = x509_cert::name::RdnSequence::default();
    let mut rdn = x509_cert::name::RelativeDistinguishedName::default();
    rdn.insert(x509_cert::attr::AttributeTypeAndValue {
        oid: oids::COMMON_NAME,
        value: der::asn1::Any::encode_from(&5u8).unwrap(),
    })
    .unwrap();
    rdns.push(rdn);
    req.info.subject = x509_cert::name::Name::from_der(&rdns.to_der().unwrap()).unwrap();
    let pem = wrap(&req.to_der().unwrap());
    assert_eq!(
        parse(pem.as_bytes()),
        Err(ParseError::SubjectValueNotString {
            oid: oids::COMMON_NAME
        })
    );
}

#[test]
fn signature_verification_per_key_type() {
    let keys = [
        p256(),
        p384(),
        ed25519(),
        rsa2048(RsaPadding::Pkcs1v15, HashAlgorithm::Sha256),
        rsa2048(RsaPadding::Pkcs1v15, HashAlgorithm::Sha384),
        rsa2048(RsaPadding::Pss, HashAlgorithm::Sha512),
    ];
    for key in &keys {
        let pem = node().build(key).unwrap();
        let mut csr = parse(pem.as_bytes()).unwrap();
        assert_eq!(csr.verify_signature(), Ok(()), "{key:?}");
        if let Some(sig) = csr.signature_bytes_mut().and_then(|s| s.first_mut()) {
            *sig ^= 0x40;
        }
        assert!(csr.verify_signature().is_err(), "{key:?}");
    }
    let rsa = parse(node().build(&keys[3]).unwrap().as_bytes()).unwrap();
    assert_eq!(
        (rsa.public_key().algorithm.clone(), rsa.public_key().bits),
        (KeyAlgorithm::Rsa, Some(2048))
    );
}

#[test]
fn key_mismatch_is_reported() {
    // An ECDSA signature algorithm over an Ed25519 key.
    let der = request_der(node());
    let mut req = CertReq::from_der(&der).unwrap();
    let ed = parse(node().build(&ed25519()).unwrap().as_bytes()).unwrap();
    req.info.public_key =
        x509_cert::spki::SubjectPublicKeyInfoOwned::from_der(&ed.public_key().spki_der).unwrap();
    let csr = parse(wrap(&req.to_der().unwrap()).as_bytes()).unwrap();
    assert!(matches!(
        csr.verify_signature(),
        Err(crate::SignatureError::KeyMismatch { .. })
    ));
}

#[test]
fn debug_does_not_dump_bytes() {
    let key = p256();
    let text = format!(
        "{key:?} {:?}",
        parse(
            node()
                .attestation("p", &[9; 64])
                .build(&key)
                .unwrap()
                .as_bytes()
        )
        .unwrap()
    );
    assert!(text.contains("P256(..)"));
    assert!(text.contains("data_len: 64"));
    assert!(!text.contains("9, 9, 9"));
}
