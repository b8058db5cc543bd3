//! The operations, named exactly as on the Go side, over the same input files.
//!
//! Rows whose name ends in ` [ring]` (or ` [aws-lc-rs]`, feature `aws-lc`) run the same
//! operation with that signature backend instead of RustCrypto (what nodeauth uses); they are
//! compared with the same Go row.

use std::fs;
use std::hint::black_box;
use std::path::Path;

use anyhow::{Context, Result, anyhow};
use nodeauth_csr::parse;
use nodeauth_token::{BootstrapToken, jws};

use crate::fast::{self, Sign};
use crate::inputs::KEY_TYPES;
use crate::issue;
use crate::timing::{Loop, Sample};

/// The message the `sign/ca-<kt>` rows sign: the size of a kubelet client certificate's
/// TBSCertificate (~ 450 bytes), so the row isolates the CA's signature from the encoding.
const TBS_LEN: usize = 450;

/// Measures every operation whose name contains `filter`, calling `emit` after each.
pub fn run(
    dir: &Path,
    filter: &str,
    l: Loop,
    mut emit: impl FnMut(&Sample) -> Result<()>,
) -> Result<()> {
    let read = |name: &str| {
        fs::read(dir.join(name)).with_context(|| format!("reading {}", dir.join(name).display()))
    };
    let read_str = |name: &str| -> Result<String> {
        String::from_utf8(read(name)?).with_context(|| format!("{name} is not UTF-8"))
    };
    let mut measure = |op: &str, f: &mut dyn FnMut() -> Result<()>| -> Result<()> {
        if op.contains(filter) {
            emit(&l.measure(op, f)?)?;
        }
        Ok(())
    };

    // CSR parse + self-signature check (what upstream's signer does before issuing).
    for kt in KEY_TYPES {
        let pem = read(&format!("csr-{kt}.pem"))?;
        measure(&format!("csr/parse+verify/{kt}"), &mut || {
            let csr = parse(black_box(&pem))?;
            csr.verify_signature_with(nodeauth_csr::VerifyBackend::RustCrypto)?;
            black_box(csr);
            Ok(())
        })?;
        // nodeauth-csr's own aws-lc-rs backend (what the approver and signer binaries use).
        #[cfg(feature = "aws-lc")]
        measure(&format!("csr/parse+verify/{kt} [aws-lc-rs]"), &mut || {
            let csr = parse(black_box(&pem))?;
            csr.verify_signature_with(nodeauth_csr::VerifyBackend::AwsLc)?;
            black_box(csr);
            Ok(())
        })?;
        // Parsing alone, to tell the parser's share from the signature check's.
        measure(&format!("csr/parse/{kt}"), &mut || {
            black_box(parse(black_box(&pem))?);
            Ok(())
        })?;
        macro_rules! fast_verify {
            ($b:path) => {{
                use $b as b;
                let alg = b::verification_algorithm(kt)?;
                measure(&format!("csr/parse+verify/{kt}{}", b::SUFFIX), &mut || {
                    let csr = parse(black_box(&pem))?;
                    b::verify(&csr, alg)?;
                    black_box(csr);
                    Ok(())
                })?;
            }};
        }
        fast_verify!(crate::fast::ring_backend);
    }

    // Issuance of a kubelet client certificate for the P-256 request by a CA of each type.
    let subject = parse(&read("csr-p256.pem")?)?;
    let backends = [
        ("", nodeauth_issuer::SigningBackend::RustCrypto),
        #[cfg(feature = "aws-lc")]
        (" [aws-lc-rs]", nodeauth_issuer::SigningBackend::AwsLc),
    ];
    for kt in KEY_TYPES {
        for (suffix, backend) in &backends {
            let op = format!("issue/ca-{kt}{suffix}");
            match issue::issuer(
                &read_str(&format!("ca-{kt}.crt"))?,
                &read_str(&format!("ca-{kt}.key"))?,
                *backend,
            ) {
                Some(issuer) => {
                    let mut issue = issuer?;
                    measure(&op, &mut || {
                        black_box(issue(black_box(&subject))?);
                        Ok(())
                    })?;
                }
                None => eprintln!(
                    "{op}: nodeauth-issuer is not wired in (benches/src/bin/micro/issue.rs); skipped"
                ),
            }
        }
    }

    // The CA's signature alone, both backends: what an issuer pays per certificate at least.
    let tbs = vec![0x5a_u8; TBS_LEN];
    for kt in KEY_TYPES {
        let key_pem = read_str(&format!("ca-{kt}.key"))?;
        let mut sign = rustcrypto_signer(kt, &key_pem)?;
        measure(&format!("sign/ca-{kt}"), &mut || {
            black_box(sign(black_box(&tbs))?);
            Ok(())
        })?;
        let mut fast: Vec<(&str, Sign)> = vec![(
            fast::ring_backend::SUFFIX,
            fast::ring_backend::signer(kt, &key_pem)?,
        )];
        #[cfg(feature = "aws-lc")]
        fast.push((
            fast::aws_lc_backend::SUFFIX,
            fast::aws_lc_backend::signer(kt, &key_pem)?,
        ));
        for (suffix, sign) in &mut fast {
            measure(&format!("sign/ca-{kt}{suffix}"), &mut || {
                black_box(sign(black_box(&tbs))?);
                Ok(())
            })?;
        }
    }

    // Detached JWS over cluster-info, and token parsing.
    let token_str = read_str("token")?;
    let token_str = token_str.trim();
    let token = BootstrapToken::parse(token_str).map_err(|e| anyhow!("token: {e}"))?;
    let content = read("kubeconfig")?;
    let sig = jws::sign(&content, &token);
    measure("jws/sign", &mut || {
        black_box(jws::sign(black_box(&content), black_box(&token)));
        Ok(())
    })?;
    measure("jws/verify", &mut || {
        jws::verify(
            black_box(sig.as_str()),
            black_box(&content),
            black_box(&token),
        )?;
        Ok(())
    })?;
    measure("token/parse", &mut || {
        black_box(BootstrapToken::parse(black_box(token_str))?);
        Ok(())
    })?;
    Ok(())
}

/// The CA key with RustCrypto (the crates nodeauth-csr uses), hashing and signing `msg`.
fn rustcrypto_signer(kt: &str, pem: &str) -> Result<Sign> {
    use p256::pkcs8::DecodePrivateKey;
    use signature::{SignatureEncoding, Signer};
    Ok(match kt {
        "p256" => {
            let k = p256::ecdsa::SigningKey::from_pkcs8_pem(pem)?;
            Box::new(move |m| Ok(Signer::<p256::ecdsa::DerSignature>::try_sign(&k, m)?.to_vec()))
        }
        "p384" => {
            let k = p384::ecdsa::SigningKey::from_pkcs8_pem(pem)?;
            Box::new(move |m| Ok(Signer::<p384::ecdsa::DerSignature>::try_sign(&k, m)?.to_vec()))
        }
        "ed25519" => {
            let k = ed25519_dalek::SigningKey::from_pkcs8_pem(pem)?;
            Box::new(move |m| Ok(k.try_sign(m)?.to_vec()))
        }
        "rsa2048" => {
            let k = rsa::pkcs1v15::SigningKey::<sha2::Sha256>::new(
                rsa::RsaPrivateKey::from_pkcs8_pem(pem)?,
            );
            Box::new(move |m| Ok(k.try_sign(m)?.to_vec()))
        }
        other => return Err(anyhow!("unknown key type {other}")),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn quick() -> Loop {
        Loop {
            warmup: Duration::ZERO,
            batch: Duration::ZERO,
            batches: 1,
            quick: true,
        }
    }

    #[test]
    fn every_operation_runs_on_generated_inputs_and_a_bad_signature_fails() {
        let dir = std::env::temp_dir().join(format!("nodeauth-micro-test-{}", std::process::id()));
        crate::inputs::generate(&dir).unwrap();
        let mut ops = vec![];
        run(&dir, "", quick(), |s| {
            ops.push(s.op.clone());
            Ok(())
        })
        .unwrap();
        for kt in KEY_TYPES {
            for op in [
                format!("csr/parse+verify/{kt}"),
                format!("csr/parse+verify/{kt} [ring]"),
                format!("csr/parse/{kt}"),
                format!("issue/ca-{kt}"),
                format!("sign/ca-{kt}"),
                format!("sign/ca-{kt} [ring]"),
            ] {
                assert!(ops.contains(&op), "{op} missing from {ops:?}");
            }
        }
        for op in ["jws/sign", "jws/verify", "token/parse"] {
            assert!(ops.iter().any(|o| o == op), "{op} missing from {ops:?}");
        }

        // A request whose signature no longer verifies must fail its row, not time an error.
        let csr = parse(&fs::read(dir.join("csr-p256.pem")).unwrap()).unwrap();
        let mut der = csr.der().to_vec();
        *der.last_mut().unwrap() ^= 1;
        let pem =
            pem_rfc7468::encode_string("CERTIFICATE REQUEST", pem_rfc7468::LineEnding::LF, &der)
                .unwrap();
        fs::write(dir.join("csr-p256.pem"), pem).unwrap();
        for filter in ["csr/parse+verify/p256", "csr/parse+verify/p256 [ring]"] {
            let err = run(&dir, filter, quick(), |_| Ok(())).unwrap_err();
            assert!(err.to_string().contains(filter), "{err}");
        }
        fs::remove_dir_all(&dir).unwrap();
    }
}
