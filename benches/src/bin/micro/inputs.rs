//! The inputs both sides read: one directory, written here with nodeauth's own code (keys and
//! CSRs with nodeauth-csr, the token and cluster-info with nodeauth-token) and rcgen for the
//! self-signed CA certificates.
//!
//! | file | content |
//! |---|---|
//! | `csr-<kt>.pem` | a kubelet client CSR (`system:node:bench-node`) with a `<kt>` key |
//! | `ca-<kt>.crt`, `ca-<kt>.key` | a self-signed CA and its PKCS #8 key of type `<kt>` |
//! | `token` | a bootstrap token |
//! | `kubeconfig` | a cluster-info document (the RSA CA embedded, as kubeadm's default) |
//! | `kubeconfig.jws` | our detached JWS of it (the Go side checks upstream computes the same) |
//!
//! `<kt>` is one of [`KEY_TYPES`].

use std::fs;
use std::path::Path;

use anyhow::{Context, Result, anyhow};
use getrandom::SysRng;
use nodeauth_csr::{CsrBuilder, CsrSigningKey, HashAlgorithm, RsaPadding};
use nodeauth_token::{BootstrapToken, jws, kubeconfig::ClusterInfo};
use rand_core::UnwrapErr;

/// The key types of the CSRs and CAs, as named in the inputs directory and the op names.
pub const KEY_TYPES: [&str; 4] = ["p256", "p384", "rsa2048", "ed25519"];

/// The node every CSR asks for.
pub const NODE_NAME: &str = "bench-node";

/// A fresh key of type `kt`.
pub fn new_key(kt: &str) -> Result<CsrSigningKey> {
    Ok(match kt {
        "p256" => CsrSigningKey::generate_p256()?,
        "p384" => loop {
            let mut seed = [0u8; 48];
            getrandom::fill(&mut seed).map_err(|e| anyhow!("random: {e}"))?;
            if let Ok(k) = p384::ecdsa::SigningKey::from_slice(&seed) {
                break CsrSigningKey::P384(k);
            }
        },
        "ed25519" => {
            let mut seed = [0u8; 32];
            getrandom::fill(&mut seed).map_err(|e| anyhow!("random: {e}"))?;
            CsrSigningKey::Ed25519(ed25519_dalek::SigningKey::from_bytes(&seed))
        }
        "rsa2048" => CsrSigningKey::Rsa {
            key: rsa::RsaPrivateKey::new(&mut UnwrapErr(SysRng), 2048)?,
            padding: RsaPadding::Pkcs1v15,
            hash: HashAlgorithm::Sha256,
        },
        other => return Err(anyhow!("unknown key type {other}")),
    })
}

/// Writes every input into `dir` (created if missing; existing files are replaced).
pub fn generate(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let write = |name: &str, data: &[u8]| {
        fs::write(dir.join(name), data).with_context(|| format!("writing {name}"))
    };
    let mut rsa_ca = String::new();
    for kt in KEY_TYPES {
        let key = new_key(kt)?;
        write(
            &format!("csr-{kt}.pem"),
            CsrBuilder::kubelet_client(NODE_NAME)
                .build(&key)?
                .as_bytes(),
        )?;

        let ca_key = new_key(kt)?;
        let ca_pem = ca_key.to_pkcs8_pem()?;
        let kp = rcgen::KeyPair::from_pem(&ca_pem)
            .with_context(|| format!("loading the {kt} CA key into rcgen"))?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("nodeauth-bench-ca-{kt}"));
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2040, 1, 1);
        let cert = params.self_signed(&kp)?.pem();
        write(&format!("ca-{kt}.crt"), cert.as_bytes())?;
        write(&format!("ca-{kt}.key"), ca_pem.as_bytes())?;
        if kt == "rsa2048" {
            rsa_ca = cert;
        }
    }

    let token = BootstrapToken::generate()?;
    write(
        "token",
        format!("{}.{}\n", token.id().as_str(), token.secret().expose_str()).as_bytes(),
    )?;
    let kubeconfig = ClusterInfo {
        name: String::new(),
        server: "https://10.0.0.1:6443".to_owned(),
        certificate_authority_data: rsa_ca.into_bytes(),
    }
    .to_yaml();
    write("kubeconfig", kubeconfig.as_bytes())?;
    write(
        "kubeconfig.jws",
        jws::sign(kubeconfig.as_bytes(), &token).as_str().as_bytes(),
    )?;
    Ok(())
}
