//! Verifications per second for one TPM attestation: the EK certificate chain (RSA-2048 EK
//! certificate from swtpm's local CA, captured once) and the verification of quote evidence
//! signed by a P-256 ECDSA AK (the AK is simulated in software so the benchmark needs no TPM).
//!
//! Run: `cargo bench -p nodeauth-benches --bench tpm`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // benchmark and fuzz harnesses: fixed inputs, and a panic is the finding
use std::hint::black_box;
use std::time::SystemTime;

use criterion::{Criterion, criterion_group, criterion_main};
use nodeauth_tpm::alg::{HashAlg, id};
use nodeauth_tpm::*;
use p256::ecdsa::SigningKey;
use p256::ecdsa::signature::hazmat::PrehashSigner;
use p256::elliptic_curve::sec1::ToSec1Point;
use spki::EncodePublicKey;

/// swtpm local CA (intermediate, then root), as written by `swtpm_setup`.
const ISSUER_PEM: &str = r"-----BEGIN CERTIFICATE-----
MIIEKjCCApKgAwIBAgIUQyye9SUTSyqlNrbPTLd3xCwevCAwDQYJKoZIhvcNAQEL
BQAwHzEdMBsGA1UEAxMUc3d0cG0tbG9jYWxjYS1yb290Y2EwIBcNMjYxMTIyMDQz
NTE1WhgPOTk5OTEyMzEyMzU5NTlaMBgxFjAUBgNVBAMTDXN3dHBtLWxvY2FsY2Ew
ggGiMA0GCSqGSIb3DQEBAQUAA4IBjwAwggGKAoIBgQDUR3bcsLSxpVR2Ag+4WWlN
BdHQV6R13mauCea9mPE9zdi/CYPWC3F0zfp4JN616gsUz+1r2jgJg55SMXFug/KP
o1mTCZ/Uu8ukgTklcIHvDpsAmCoOzThRrRw5e0qhND5eRQYdeObRXRkuTSSnbZuU
prFfZ3nXl8XT252B8Zq0082/ivrIff2R5zWX0CLNBAdbU6k1s0nuG45OApDMg0Vv
wAtxLufMNzfXmbWXew0Q9GlsKgxSfMEmF7z/dRxAvprR7lQ7aYlClguVX+FNNluK
UUT5P7Rfk/a+Xti/9CxcAAYV4Egw4tOTnqAY5VsDQN3k9K2ikXRSUSL2kottm+pP
yXgpQgI6JOP3QHeDz/U6jexaIA2+6juLQNem0XMuse8uJTjeofqQKT6rq1MT3GSD
9gPaWJWIyUiZEh2PhqSgpiYOyKg4XxY6SeOSVVm1QsuTTi/2F5R2xbCf18Kfbj/c
WXOTzdYsJIyIZCvP+yjs8KnShLcNz8IkiUHYVuMTRoMCAwEAAaNjMGEwDwYDVR0T
AQH/BAUwAwEB/zAOBgNVHQ8BAf8EBAMCAgQwHQYDVR0OBBYEFIaRaZDyzQ37W0yc
pyzGTd8TBN1UMB8GA1UdIwQYMBaAFJQua9sUnrXYNfPko6XqvqI484l2MA0GCSqG
SIb3DQEBCwUAA4IBgQCCPDxAVhyaOHUqXs7HG6wS5oCFJTgysDmvjrJ+tVdcgaVv
wcct2dKoZgjsXIAeN5RngMbIJXG/F349v/GZGIuYvckIKtFZmUrWayyMedRnYpSl
mU5MXZ3jLHHvXnqEnLv+R3AvcP+B2P3Gfon5GZpi/vAtqxUUguKbseiHXRpIykWt
Rztvq8OnNGBdGJnGN+vmcfBzi27aHvbccfxw5cXBSF0Pkvqc81b17RmMKSLZA9CP
vrveU0cbIbVY9YP+NpsxOqUjWVR3rfhQmCXCK5z1CvVt2+kvNCOUpG0oMSAVdAOd
kj9U8zMvVacFi4pKUeivyuwPE17Q++antMwoZNl+benK9SHDpcZnBd6t/mMh0kYD
KoJ06oSqHLqHbwlH7LTl5reJq/7LaMLEAtTLDNSr+4ebD1rzvvH9D+0VmVMU+nSr
E07BjENxF3rnK2A/gJJcUPk6EglCxY7dMbVH18lPltt/wsZiWqmxfAob+PN/DWuw
MEwQ5Hw95krHE/DQA44=
-----END CERTIFICATE-----
";
const ROOT_PEM: &str = r"-----BEGIN CERTIFICATE-----
MIIEEDCCAnigAwIBAgIUO8wOuefyLg9k32ACPRZITtWCTUEwDQYJKoZIhvcNAQEL
BQAwHzEdMBsGA1UEAxMUc3d0cG0tbG9jYWxjYS1yb290Y2EwIBcNMjYxMTIyMDQz
NTE1WhgPOTk5OTEyMzEyMzU5NTlaMB8xHTAbBgNVBAMTFHN3dHBtLWxvY2FsY2Et
cm9vdGNhMIIBojANBgkqhkiG9w0BAQEFAAOCAY8AMIIBigKCAYEAvY/uaglorczZ
6Y1Gzzh5GDs+WKHarIyiCBfcvcE3r27ghC+co3TzGCTTbb0+3Cmu6PggW81rn4uU
8vr5GaCHRjH/JWMLzPxdNJ2GDhASTEoopEwixCVZ/fAUcu2eIWhTcVT1O5y01hnW
nNA4cZYXTt3UyXN372ic+cEf0J9pONH5OxUXViIEkVaZ1oArK0TZy9n6ikOV24qY
8C7EwG9unR7XDqXr9PjjEPKnRuLyGiiYeUFrlfo0xNWBLnykDuS92QjK6Bhd5rlo
mJimo8MnA9AK2F0IHRS8uzYaApa68X36LVZpQ/5qsq+kMiWnN/IcZD3SJn2TunfX
JS3RJF0TdUJqtnSi1cU6OYim0Zp6UVJCaUkktdgm52QcpvAkMxsDQvK/skiUGneu
CIwPyWSGvtzuGOq9ixenUggZE8dHTjwBg6IjR8EBgfQJpy0dvcgg4PLE9GkvjlXv
ms233hk03a3SFrO+IwibRJ1EF1QsLYTJksv5Oc6KcihLqogQiEGXAgMBAAGjQjBA
MA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0PAQH/BAQDAgIEMB0GA1UdDgQWBBSULmvb
FJ612DXz5KOl6r6iOPOJdjANBgkqhkiG9w0BAQsFAAOCAYEApRUSxfqbuO2Ul2yS
uCqnV+3HoUzocH6TwznfZJjL/vXNPK8gLrWG5Y6k+9MMbJyxNRSVlPDL2sQa0S6w
dEGlJO7km8QjEN/BVHYqZyyNmDci935r5GA/B20IVzxoYqVFswYlIQoVtD06ajJi
qaPdecACMEZFP4ldzx0wmgRbVL11IrOmEW6MLtmEalu2wmByXwfJ9YT57YanCYLa
qbMQuRRbh7cGJUHFc5qf62i+1wKVQ6GVVyC1dWa6guQSeJyk3BAuvMjg9dx1cnlL
ohhT4O4BPWUJcmVOLbKRpZcT89s2XVoMqtnFMmOdAP/dEJLKATofwk5s4nrc2jwW
JWuFORKhTTZmqyWl+X71GflqCsp8weu7tOgxtpCWREBUlpRndOGB20UOo3+f7lZ0
Z/LLoGC0i3pG770uy0p6mCL2ivqByoSiOK74oBsTcMQaR9WfUG31JCuoMAZOiRht
HW04TXF3Xmd2IdqO5sTVRdGqGS4Xs2ZBYgLuzNlEraSljDpY
-----END CERTIFICATE-----
";
/// The EK certificate (DER, hex) and the EK's TPMT_PUBLIC (hex) from the same swtpm.
const EK_CERT_HEX: &[&str] = &[
    "308203f43082025ca003020102020102300d06092a864886f70d01010b05003018311630140603550403130d73777470",
    "6d2d6c6f63616c63613020170d3236313132323034333531355a180f39393939313233313233353935395a3012311030",
    "0e06035504031307756e6b6e6f776e30820122300d06092a864886f70d01010105000382010f003082010a0282010100",
    "cb9f808bdf09dc01a85fc25507d02128fc7e898f6aff04bf5c3ec2ff7b648687a538343b5c68972e37eae7055b63744f",
    "31fbbac634eef0e80e2e6f07555590eee0b0b288a52ac8793860d9903fb8e4d7b3d0f613dee86809131510995f486662",
    "7ea6fa199d94de00f2b11f3679a9d4fb2e337c6960f07d2cdb236922e88015ff53305bbb7570011d951f493770a18998",
    "50ba5c218ed8f44f70ee33cd59f23fe3c882e98ff1415777aff0e7c4e7bdd54c931e47577359727b06252e798c287f26",
    "15ef988561fc28c1f0e5e3ec660ddfde802bd0f6cbbcff11fb3070defa79c9d34474eef5ff0ad2599934d28193a34054",
    "05f2527216b2b4ed9baf98b7d3e5c74d0203010001a381cc3081c930100603551d250409300706056781050801305206",
    "03551d110101ff04483046a444304231163014060567810502010c0b69643a30303030313031343110300e0605678105",
    "02020c05737774706d31163014060567810502030c0b69643a3230313931303233300c0603551d130101ff0402300030",
    "220603551d09041b3019301706056781050210310e300c0c03322e30020100020200a4301f0603551d23041830168014",
    "86916990f2cd0dfb5b4c9ca72cc64ddf1304dd54300e0603551d0f0101ff040403020520300d06092a864886f70d0101",
    "0b050003820181005bef19a795406b5ce59a05e30f03aafe574c6e2f9ed1c41e9e9954f57fc38199628453a3e4de931c",
    "c582d85a0e7241056948e638b5e1d505e6a896644e70d34aa20fbe4662257426e2149cf8184a0a2779c3422d1912c6ca",
    "0d7d529725609d1688268e5ee720bc822f24ab00d881f49c8969019d817df528460b09d196719f683617df67851f6acf",
    "ad4b571abb17854ebbd42f899177d21cb20e67d1a11c84be1b17c99f2d18f3047efcb3b6ee0c48564c799a30fcb70d61",
    "480466ddbf7df527e87d003409c9904cde3bd3412959818858e594746213dc8104de82577e170f72b0f926eb57339f6c",
    "f71665831911aa6a93233ea5f1f756713a3b2c11249987acde8689cac5f4a8c084a5b343d0ac50aafcd4fd5e8fa41388",
    "3e70927bdb4f5361ca00ed188b023aa66666b7d799833217af182c816f7a710b4fc1b4a680b423dad14fd871dc2bf223",
    "79dce25bc01f99d50f69f314b78caefbe85b47d8d46cf08b9533411c71981e143eec6be9aa0debf86973c5fcd9ee5666",
    "f8fc77f2f299e89f",
];
const EK_PUBLIC_HEX: &[&str] = &[
    "0001000b000300b20020837197674484b3f81a90cc8d46a5d724fd52d76e06520b64f2a1da1b331469aa000600800043",
    "00100800000000000100cb9f808bdf09dc01a85fc25507d02128fc7e898f6aff04bf5c3ec2ff7b648687a538343b5c68",
    "972e37eae7055b63744f31fbbac634eef0e80e2e6f07555590eee0b0b288a52ac8793860d9903fb8e4d7b3d0f613dee8",
    "6809131510995f4866627ea6fa199d94de00f2b11f3679a9d4fb2e337c6960f07d2cdb236922e88015ff53305bbb7570",
    "011d951f493770a1899850ba5c218ed8f44f70ee33cd59f23fe3c882e98ff1415777aff0e7c4e7bdd54c931e47577359",
    "727b06252e798c287f2615ef988561fc28c1f0e5e3ec660ddfde802bd0f6cbbcff11fb3070defa79c9d34474eef5ff0a",
    "d2599934d28193a3405405f2527216b2b4ed9baf98b7d3e5c74d",
];

fn unhex(parts: &[&str]) -> Vec<u8> {
    let s: String = parts.concat();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn fixture(now: SystemTime) -> (TpmVerifier, Public, Vec<u8>, TpmEvidence, Vec<u8>) {
    let mut ca = EkCaBundle::new();
    ca.add_pem(ISSUER_PEM).unwrap().add_pem(ROOT_PEM).unwrap();
    let key = TicketKey::new([5; 32]);
    // Stateless checks only (check_evidence): one evidence can be checked repeatedly; the
    // records (nonce, binding, clock) are the store's, measured by no benchmark here.
    let verifier = TpmVerifier::new(VerifierConfig::new(ca, key.clone()));
    let ek_public = Public::parse(&unhex(EK_PUBLIC_HEX)).unwrap();
    let ek_cert = unhex(EK_CERT_HEX);

    // A software AK with a restricted-signing-key public area.
    let ak_key = SigningKey::from_slice(&[7; 32]).unwrap();
    let point = ak_key.verifying_key().as_affine().to_sec1_point(false);
    let attrs = ObjectAttributes::FIXED_TPM
        | ObjectAttributes::FIXED_PARENT
        | ObjectAttributes::SENSITIVE_DATA_ORIGIN
        | ObjectAttributes::USER_WITH_AUTH
        | ObjectAttributes::RESTRICTED
        | ObjectAttributes::SIGN;
    let ak = Public::new(
        id::SHA256,
        ObjectAttributes(attrs),
        Vec::new(),
        PublicKey::ecdsa_p256(point.x().unwrap().to_vec(), point.y().unwrap().to_vec()),
    );
    let nonce = [9; 32];
    // Issued at `now`; the benchmark checks against that same `now`, so it never expires.
    let ticket = ticket::issue(
        &key,
        "worker-1",
        &EkFingerprint::of_spki(&ek_public.spki_der().unwrap()),
        &ak.name().unwrap(),
        &nonce,
        now,
        std::time::Duration::from_secs(900),
    )
    .unwrap();
    let csr_spki = p256::SecretKey::from_slice(&[3; 32])
        .unwrap()
        .public_key()
        .to_public_key_der()
        .unwrap()
        .as_bytes()
        .to_vec();
    let pcr0 = vec![0u8; 32];
    let attest = Attest {
        magic: TPM_GENERATED_VALUE,
        attest_type: ST_ATTEST_QUOTE,
        qualified_signer: ak.name().unwrap(),
        extra_data: binding(&nonce, &csr_spki).to_vec(),
        clock_info: ClockInfo {
            clock: 1,
            reset_count: 1,
            restart_count: 0,
            safe: true,
        },
        firmware_version: 1,
        attested: Attested::Quote {
            pcr_select: vec![PcrSelection::of(id::SHA256, &[0])],
            pcr_digest: HashAlg::Sha256.digest(&[&pcr0]),
        },
    }
    .to_bytes();
    let sig: p256::ecdsa::Signature = ak_key
        .sign_prehash(&HashAlg::Sha256.digest(&[&attest]))
        .unwrap();
    let (r, s) = sig.split_bytes();
    let evidence = TpmEvidence {
        ticket: ticket.text.into_bytes(),
        ak_public: ak.as_bytes().to_vec(),
        attest,
        signature: Signature::Ecdsa {
            hash: id::SHA256,
            r: r.to_vec(),
            s: s.to_vec(),
        }
        .to_bytes(),
        bound_key_sha256: [0; 32],
        certified_public: None,
        pcrs: vec![PcrValue {
            bank: id::SHA256,
            index: 0,
            value: pcr0,
        }],
    };
    (verifier, ek_public, ek_cert, evidence, csr_spki)
}

fn bench(c: &mut Criterion) {
    let now = SystemTime::now();
    let (verifier, ek_public, ek_cert, evidence, csr_spki) = fixture(now);
    let expected = ExpectedAttestation {
        node_name: "worker-1",
        machine: "m-1",
        csr_spki_der: &csr_spki,
        now,
    };
    verifier
        .check_ek(&ek_public, Some(&ek_cert), &[], None, now)
        .expect("EK chain");
    verifier
        .check_evidence(&evidence, &expected)
        .expect("evidence");

    let mut g = c.benchmark_group("tpm");
    g.bench_function("ek_chain", |b| {
        b.iter(|| {
            verifier
                .check_ek(
                    black_box(&ek_public),
                    Some(black_box(&ek_cert)),
                    &[],
                    None,
                    now,
                )
                .unwrap()
        })
    });
    g.bench_function("evidence_quote_p256", |b| {
        b.iter(|| {
            verifier
                .check_evidence(black_box(&evidence), &expected)
                .unwrap()
        })
    });
    g.bench_function("one_attestation", |b| {
        b.iter(|| {
            verifier
                .check_ek(
                    black_box(&ek_public),
                    Some(black_box(&ek_cert)),
                    &[],
                    None,
                    now,
                )
                .unwrap();
            verifier
                .check_evidence(black_box(&evidence), &expected)
                .unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
