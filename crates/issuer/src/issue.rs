//! Issuing: validity, usages, the certificate itself, and [`Signer`] (validate, then issue).

use core::time::Duration;

use der::Decode;
use der::asn1::{Ia5String, OctetString};
use nodeauth_csr::{Csr, SignatureCheck, SignerProfile, Usage, oids};
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::{
    AuthorityKeyIdentifier, BasicConstraints, ExtendedKeyUsage, KeyUsage, KeyUsages,
    SubjectAltName, SubjectKeyIdentifier,
};
use x509_cert::name::Name;
use x509_cert::request::CertReq;
use x509_cert::serial_number::SerialNumber;

use crate::ca::CertificateAuthority;
use crate::encode::{self, Tbs, build_err};
use crate::error::{IssueError, SignError};

/// How long and how issued certificates live, and what `status.certificate` holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuePolicy {
    /// The longest lifetime, and the lifetime when `spec.expirationSeconds` is absent
    /// (upstream `--cluster-signing-duration`, default 8760 h).
    pub max_duration: Duration,
    /// The shortest lifetime a request may ask for (upstream: 10 min).
    pub min_duration: Duration,
    /// NotBefore is `now - backdate`, for clock skew (upstream: 5 min).
    pub backdate: Duration,
    /// Lifetimes of at least this long also end `backdate` early, so that they last exactly
    /// the lifetime from NotBefore; shorter ones keep the full lifetime from now (upstream: 8 h).
    pub short_threshold: Duration,
    /// Append the CA certificate and its chain (the rest of the CA file) after the leaf.
    pub append_chain: bool,
}

impl Default for IssuePolicy {
    fn default() -> Self {
        Self {
            max_duration: Duration::from_secs(8760 * 3600),
            min_duration: Duration::from_secs(600),
            backdate: Duration::from_secs(300),
            short_threshold: Duration::from_secs(8 * 3600),
            append_chain: false,
        }
    }
}

/// The lifetime a request gets: `expiration_seconds` capped at `max_duration` and floored at
/// `min_duration`; `max_duration` when absent.
pub fn lifetime(policy: &IssuePolicy, expiration_seconds: Option<i64>) -> Duration {
    match expiration_seconds {
        None => policy.max_duration,
        Some(secs) => {
            let requested = Duration::from_secs(u64::try_from(secs).unwrap_or(0));
            if requested > policy.max_duration {
                policy.max_duration
            } else if requested < policy.min_duration {
                policy.min_duration
            } else {
                requested
            }
        }
    }
}

/// NotBefore and NotAfter of a certificate issued at `now` (whole seconds), as upstream's
/// signer computes them, clamped to the CA's NotAfter.
///
/// # Errors
/// [`IssueError::CaExpired`] when the CA's NotAfter is not after `now`;
/// [`IssueError::CaNotYetValid`] when `now` is before the CA's NotBefore.
pub fn validity(
    policy: &IssuePolicy,
    expiration_seconds: Option<i64>,
    now: jiff::Timestamp,
    ca_not_before: jiff::Timestamp,
    ca_not_after: jiff::Timestamp,
) -> Result<(jiff::Timestamp, jiff::Timestamp), IssueError> {
    let range = |e: jiff::Error| IssueError::TimeOutOfRange(e.to_string());
    let now = jiff::Timestamp::from_second(now.as_second()).map_err(range)?;
    if now >= ca_not_after {
        return Err(IssueError::CaExpired {
            not_after: ca_not_after,
        });
    }
    if now < ca_not_before {
        return Err(IssueError::CaNotYetValid {
            not_before: ca_not_before,
        });
    }
    let ttl = lifetime(policy, expiration_seconds);
    let signed = |d: Duration| jiff::SignedDuration::try_from(d).map_err(range);
    let not_before = now.checked_sub(signed(policy.backdate)?).map_err(range)?;
    let not_after = if ttl < policy.short_threshold {
        now.checked_add(signed(ttl)?).map_err(range)?
    } else {
        now.checked_add(signed(ttl)?)
            .and_then(|t| t.checked_sub(signed(policy.backdate).unwrap_or_default()))
            .map_err(range)?
    };
    Ok((not_before, not_after.min(ca_not_after)))
}

/// Where serial numbers come from.
pub trait SerialSource {
    /// 16 bytes for the next serial (read as an unsigned big-endian integer; zero is bumped to 1).
    ///
    /// # Errors
    /// When no serial can be produced.
    fn next_serial(&mut self) -> Result<[u8; 16], IssueError>;
}

/// Random serials from the operating system's generator (upstream: uniform in `[0, 2^128)`).
#[derive(Debug, Clone, Copy, Default)]
pub struct OsRandomSerials;

impl SerialSource for OsRandomSerials {
    fn next_serial(&mut self) -> Result<[u8; 16], IssueError> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|e| IssueError::Serial(e.to_string()))?;
        Ok(bytes)
    }
}

/// What one issuance produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedCertificate {
    /// What goes into `status.certificate`: the leaf `CERTIFICATE` block, then, with
    /// [`IssuePolicy::append_chain`], the CA certificate and its chain.
    pub pem: String,
    /// The leaf's DER.
    pub der: Vec<u8>,
    /// The serial number, lowercase hex without leading zeros.
    pub serial_hex: String,
    /// The subject, RFC 4514 style (as it appears in the CSR).
    pub subject: String,
    /// NotBefore.
    pub not_before: jiff::Timestamp,
    /// NotAfter.
    pub not_after: jiff::Timestamp,
}

fn key_usages(
    usages: &[Usage],
) -> Result<(KeyUsage, Vec<const_oid::ObjectIdentifier>), IssueError> {
    use const_oid::db::rfc5280 as r;
    let mut ku = KeyUsage(Default::default());
    let mut eku = Vec::new();
    let mut push = |oid| {
        if !eku.contains(&oid) {
            eku.push(oid);
        }
    };
    for usage in usages {
        match usage {
            Usage::Signing | Usage::DigitalSignature => ku.0 |= KeyUsages::DigitalSignature,
            Usage::ContentCommitment => ku.0 |= KeyUsages::NonRepudiation,
            Usage::KeyEncipherment => ku.0 |= KeyUsages::KeyEncipherment,
            Usage::KeyAgreement => ku.0 |= KeyUsages::KeyAgreement,
            Usage::DataEncipherment => ku.0 |= KeyUsages::DataEncipherment,
            Usage::EncipherOnly => ku.0 |= KeyUsages::EncipherOnly,
            Usage::DecipherOnly => ku.0 |= KeyUsages::DecipherOnly,
            Usage::CertSign | Usage::CrlSign => {
                return Err(IssueError::CaUsage(usage.as_str().to_owned()));
            }
            Usage::Any => push(r::ANY_EXTENDED_KEY_USAGE),
            Usage::ServerAuth => push(oids::KP_SERVER_AUTH),
            Usage::ClientAuth => push(oids::KP_CLIENT_AUTH),
            Usage::CodeSigning => push(r::ID_KP_CODE_SIGNING),
            Usage::EmailProtection | Usage::SMime => push(r::ID_KP_EMAIL_PROTECTION),
            Usage::IpsecEndSystem => {
                push(const_oid::ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.3.5"))
            }
            Usage::IpsecTunnel => {
                push(const_oid::ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.3.6"))
            }
            Usage::IpsecUser => push(const_oid::ObjectIdentifier::new_unwrap("1.3.6.1.5.5.7.3.7")),
            Usage::Timestamping => push(r::ID_KP_TIME_STAMPING),
            Usage::OcspSigning => push(r::ID_KP_OCSP_SIGNING),
            Usage::MicrosoftSgc => push(const_oid::ObjectIdentifier::new_unwrap(
                "1.3.6.1.4.1.311.10.3.3",
            )),
            Usage::NetscapeSgc => push(const_oid::ObjectIdentifier::new_unwrap(
                "2.16.840.1.113730.4.1",
            )),
        }
    }
    Ok((ku, eku))
}

/// Parses `spec.usages` strings.
///
/// # Errors
/// [`IssueError::UnknownUsage`] for a string Kubernetes does not define.
pub fn parse_usages<S: AsRef<str>>(usages: &[S]) -> Result<Vec<Usage>, IssueError> {
    usages
        .iter()
        .map(|u| {
            u.as_ref()
                .parse::<Usage>()
                .map_err(|_| IssueError::UnknownUsage(u.as_ref().to_owned()))
        })
        .collect()
}

/// Issues a certificate for a parsed request. The caller has validated it (see [`Signer`]).
///
/// The certificate carries: a serial from `serials`; the request's subject and public key;
/// its DNS, IP, email and URI SANs (every other requested extension is dropped); critical
/// `basicConstraints CA:false`; key usage (critical, when any) and extended key usage from
/// `usages`; subject and authority key identifiers; validity per [`validity`].
///
/// # Errors
/// An [`IssueError`].
pub fn issue(
    ca: &CertificateAuthority,
    csr: &Csr,
    usages: &[Usage],
    expiration_seconds: Option<i64>,
    policy: &IssuePolicy,
    now: jiff::Timestamp,
    serials: &mut dyn SerialSource,
) -> Result<IssuedCertificate, IssueError> {
    let (not_before, not_after) = validity(
        policy,
        expiration_seconds,
        now,
        ca.not_before(),
        ca.not_after(),
    )?;
    let (ku, eku) = key_usages(usages)?;
    let request = CertReq::from_der(csr.der()).map_err(build_err)?;
    let subject: Name = request.info.subject;
    let spki = request.info.public_key;

    let mut extensions = Vec::with_capacity(6);
    let sans = &csr.extensions().subject_alt_names;
    let mut names = Vec::new();
    for dns in &sans.dns {
        names.push(GeneralName::DnsName(
            Ia5String::new(dns).map_err(build_err)?,
        ));
    }
    for ip in &sans.ip {
        let bytes = match ip {
            std::net::IpAddr::V4(v4) => v4.octets().to_vec(),
            std::net::IpAddr::V6(v6) => v6.octets().to_vec(),
        };
        names.push(GeneralName::IpAddress(
            OctetString::new(bytes).map_err(build_err)?,
        ));
    }
    for email in &sans.email {
        names.push(GeneralName::Rfc822Name(
            Ia5String::new(email).map_err(build_err)?,
        ));
    }
    for uri in &sans.uri {
        names.push(GeneralName::UniformResourceIdentifier(
            Ia5String::new(uri).map_err(build_err)?,
        ));
    }
    if !ku.0.is_empty() {
        extensions.push(encode::extension(oids::KEY_USAGE, true, &ku)?);
    }
    if !eku.is_empty() {
        extensions.push(encode::extension(
            oids::EXT_KEY_USAGE,
            false,
            &ExtendedKeyUsage(eku),
        )?);
    }
    extensions.push(encode::extension(
        oids::BASIC_CONSTRAINTS,
        true,
        &BasicConstraints {
            ca: false,
            path_len_constraint: None,
        },
    )?);
    extensions.push(encode::extension(
        const_oid::db::rfc5280::ID_CE_SUBJECT_KEY_IDENTIFIER,
        false,
        &SubjectKeyIdentifier(OctetString::new(encode::key_identifier(&spki)).map_err(build_err)?),
    )?);
    extensions.push(encode::extension(
        const_oid::db::rfc5280::ID_CE_AUTHORITY_KEY_IDENTIFIER,
        false,
        &AuthorityKeyIdentifier {
            key_identifier: Some(OctetString::new(ca.key_id().to_vec()).map_err(build_err)?),
            authority_cert_issuer: None,
            authority_cert_serial_number: None,
        },
    )?);
    if !names.is_empty() {
        // RFC 5280 4.2.1.6: critical when the subject is empty.
        let critical = subject.is_empty();
        extensions.push(encode::extension(
            oids::SUBJECT_ALT_NAME,
            critical,
            &SubjectAltName(names),
        )?);
    }

    let mut serial_bytes = serials.next_serial()?;
    if serial_bytes.iter().all(|b| *b == 0)
        && let Some(last) = serial_bytes.last_mut()
    {
        *last = 1;
    }
    let serial = SerialNumber::new(&serial_bytes).map_err(build_err)?;
    let algorithm = ca.algorithm();
    let tbs = Tbs {
        serial: &serial,
        algorithm: &algorithm,
        issuer: &ca.subject,
        not_before,
        not_after,
        subject: &subject,
        spki: &spki,
        extensions: &extensions,
    }
    .to_der()?;
    let signature = ca.sign(&tbs)?;
    let der = encode::assemble(&tbs, &algorithm, &signature)?;
    let mut pem = encode::pem("CERTIFICATE", &der)?;
    if policy.append_chain {
        pem.push_str(ca.bundle_pem());
    }
    let serial_hex = serial
        .as_bytes()
        .iter()
        .skip_while(|b| **b == 0)
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(IssuedCertificate {
        pem,
        der,
        serial_hex,
        subject: subject.to_string(),
        not_before,
        not_after,
    })
}

/// One signer name's complete signing step: parse `spec.request`, validate it against the
/// signer's profile (every violation), then issue with the CA and policy.
#[derive(Debug)]
pub struct Signer {
    /// The signer name (`spec.signerName`).
    pub name: String,
    /// The rules requests must meet.
    pub profile: SignerProfile,
    /// The CA that signs.
    pub ca: CertificateAuthority,
    /// Lifetimes and chain.
    pub policy: IssuePolicy,
}

impl Signer {
    /// Signs a CSR object: `spec.request` bytes, `spec.usages`, `spec.expirationSeconds`.
    ///
    /// # Errors
    /// [`SignError::Parse`], [`SignError::Validation`] (with every violation) or
    /// [`SignError::Issue`]; [`SignError::is_permanent`] and [`SignError::condition_reason`]
    /// say what to write into the object.
    pub fn sign<S: AsRef<str>>(
        &self,
        request: &[u8],
        usages: &[S],
        expiration_seconds: Option<i64>,
        now: jiff::Timestamp,
        serials: &mut dyn SerialSource,
    ) -> Result<IssuedCertificate, SignError> {
        let csr = nodeauth_csr::parse(request)?;
        let violations = self
            .profile
            .validate_with(&csr, Some(usages), SignatureCheck::Verify);
        if !violations.is_empty() {
            return Err(SignError::Validation(violations));
        }
        let usages = parse_usages(usages)?;
        Ok(issue(
            &self.ca,
            &csr,
            &usages,
            expiration_seconds,
            &self.policy,
            now,
            serials,
        )?)
    }
}
