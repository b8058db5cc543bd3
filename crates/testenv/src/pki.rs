//! Throwaway PKI for a test control plane, generated in Rust (rcgen) at start-up.
//!
//! - `cluster CA`: signs the apiserver's serving certificate and the harness's client
//!   certificates (admin as `system:masters`, `system:node:<name>`, anything a test asks for).
//! - `kcm signer CA`: handed to upstream kube-controller-manager as its cluster-signing CA, so the
//!   certificates it issues authenticate (it is in the apiserver's client CA bundle).
//! - A service-account signing key.
//!
//! The apiserver's `--client-ca-file` is a bundle file that the apiserver reloads when it changes;
//! [`crate::ControlPlane::trust_client_ca`] appends a test signer's CA to it.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

use crate::Error;

/// A certificate and its private key, both PEM.
#[derive(Clone)]
pub struct CertPair {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The PKCS#8 private key, PEM.
    pub key_pem: String,
}

impl std::fmt::Debug for CertPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertPair")
            .field("cert_pem", &format_args!("{} bytes", self.cert_pem.len()))
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// A CA that can issue leaf certificates.
pub struct Ca {
    pair: CertPair,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").field("pair", &self.pair).finish()
    }
}

fn rc(what: &str) -> impl FnOnce(rcgen::Error) -> Error + '_ {
    move |e| Error::Other(format!("generating {what}: {e}"))
}

impl Ca {
    /// A new self-signed ECDSA P-256 CA with this common name, valid for ten years.
    pub fn new(common_name: &str) -> Result<Self, Error> {
        let key = KeyPair::generate().map_err(rc(common_name))?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(rc(common_name))?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2040, 1, 1);
        let cert = params.self_signed(&key).map_err(rc(common_name))?;
        let pair = CertPair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        };
        Ok(Self {
            pair,
            issuer: Issuer::new(params, key),
        })
    }

    /// Loads a CA from PEM (as written by [`Ca::pair`]).
    pub fn from_pem(pair: &CertPair) -> Result<Self, Error> {
        let key = KeyPair::from_pem(&pair.key_pem).map_err(rc("CA key from PEM"))?;
        let issuer = Issuer::from_ca_cert_pem(&pair.cert_pem, key).map_err(rc("CA from PEM"))?;
        Ok(Self {
            pair: pair.clone(),
            issuer,
        })
    }

    /// The CA's certificate and key.
    pub fn pair(&self) -> &CertPair {
        &self.pair
    }

    /// Issues a client certificate (`CN=common_name`, one `O` per organization).
    pub fn issue_client(
        &self,
        common_name: &str,
        organizations: &[&str],
    ) -> Result<CertPair, Error> {
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name);
        for o in organizations {
            dn.push(DnType::OrganizationName, *o);
        }
        self.issue(dn, vec![], vec![ExtendedKeyUsagePurpose::ClientAuth])
    }

    /// Issues a serving certificate for these DNS names and IP addresses.
    pub fn issue_server(
        &self,
        common_name: &str,
        dns: &[&str],
        ips: &[IpAddr],
    ) -> Result<CertPair, Error> {
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name);
        let mut sans = Vec::new();
        for d in dns {
            sans.push(SanType::DnsName((*d).try_into().map_err(rc("a DNS SAN"))?));
        }
        sans.extend(ips.iter().map(|ip| SanType::IpAddress(*ip)));
        self.issue(dn, sans, vec![ExtendedKeyUsagePurpose::ServerAuth])
    }

    fn issue(
        &self,
        dn: DistinguishedName,
        sans: Vec<SanType>,
        eku: Vec<ExtendedKeyUsagePurpose>,
    ) -> Result<CertPair, Error> {
        let key = KeyPair::generate().map_err(rc("a leaf key"))?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(rc("leaf"))?;
        params.distinguished_name = dn;
        params.subject_alt_names = sans;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = eku;
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2040, 1, 1);
        let cert = params.signed_by(&key, &self.issuer).map_err(rc("leaf"))?;
        Ok(CertPair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// Every credential file a control plane needs, written under one directory.
pub struct Pki {
    /// Signs the apiserver serving cert and the harness's client certs.
    pub cluster_ca: Ca,
    /// kube-controller-manager's cluster-signing CA.
    pub kcm_signer_ca: Ca,
    /// The apiserver's serving certificate (127.0.0.1, localhost, kubernetes.default...).
    pub apiserver: CertPair,
    /// `CN=nodeauth-admin, O=system:masters`.
    pub admin: CertPair,
    /// Service-account token signing key (PKCS#8 PEM, ECDSA P-256).
    pub service_account_key_pem: String,
    /// Its public key (SubjectPublicKeyInfo PEM): what `--service-account-key-file` accepts.
    pub service_account_public_pem: String,
    dir: PathBuf,
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pki")
            .field("cluster_ca", &self.cluster_ca)
            .field("kcm_signer_ca", &self.kcm_signer_ca)
            .field("apiserver", &self.apiserver)
            .field("admin", &self.admin)
            .field("service_account_key_pem", &"<redacted>")
            .field("dir", &self.dir)
            .finish()
    }
}

impl Pki {
    /// Generates a fresh PKI and writes it to `dir`.
    pub fn generate(dir: &Path) -> Result<Self, Error> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let cluster_ca = Ca::new("nodeauth-testenv-ca")?;
        let kcm_signer_ca = Ca::new("nodeauth-testenv-kcm-signer")?;
        let apiserver = cluster_ca.issue_server(
            "kube-apiserver",
            &[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            &[
                IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            ],
        )?;
        let admin = cluster_ca.issue_client("nodeauth-admin", &["system:masters"])?;
        let sa = KeyPair::generate().map_err(rc("service-account key"))?;
        let pki = Self {
            cluster_ca,
            kcm_signer_ca,
            apiserver,
            admin,
            service_account_key_pem: sa.serialize_pem(),
            service_account_public_pem: sa.public_key_pem(),
            dir: dir.to_path_buf(),
        };
        pki.write()?;
        Ok(pki)
    }

    fn write(&self) -> Result<(), Error> {
        let files = [
            ("ca.crt", self.cluster_ca.pair().cert_pem.as_str()),
            ("ca.key", self.cluster_ca.pair().key_pem.as_str()),
            (
                "kcm-signer.crt",
                self.kcm_signer_ca.pair().cert_pem.as_str(),
            ),
            ("kcm-signer.key", self.kcm_signer_ca.pair().key_pem.as_str()),
            ("apiserver.crt", self.apiserver.cert_pem.as_str()),
            ("apiserver.key", self.apiserver.key_pem.as_str()),
            ("sa.key", self.service_account_key_pem.as_str()),
            ("sa.pub", self.service_account_public_pem.as_str()),
        ];
        for (name, content) in files {
            write_private(&self.dir.join(name), content.as_bytes())?;
        }
        let bundle = format!(
            "{}{}",
            self.cluster_ca.pair().cert_pem,
            self.kcm_signer_ca.pair().cert_pem
        );
        write_private(&self.client_ca_bundle_path(), bundle.as_bytes())
    }

    /// Where a file of this PKI lives (`ca.crt`, `apiserver.key`, ...).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The apiserver's `--client-ca-file` bundle.
    pub fn client_ca_bundle_path(&self) -> PathBuf {
        self.dir.join("client-ca-bundle.crt")
    }
}

/// Writes a file readable only by its owner.
pub fn write_private(path: &Path, content: &[u8]) -> Result<(), Error> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    std::io::Write::write_all(&mut f, content)
        .map_err(|e| Error::io(format!("writing {}", path.display()), e))
}
