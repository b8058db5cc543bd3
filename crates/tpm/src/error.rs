//! Errors. Each says which field or check failed and what was found, so an operator reading a
//! rejected CSR's condition knows what to fix.

/// A TPM structure could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The input ended inside a field.
    #[error("{field}: needs {needed} bytes, only {left} left")]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes that were left.
        left: usize,
    },
    /// A size-prefixed buffer is larger than its type allows.
    #[error("{field}: size {size} exceeds the maximum {max}")]
    TooLarge {
        /// The field being read.
        field: &'static str,
        /// The declared size.
        size: usize,
        /// The largest size allowed.
        max: usize,
    },
    /// Bytes were left after the structure ended.
    #[error("{structure}: {extra} trailing bytes after the structure")]
    TrailingBytes {
        /// The structure that was parsed.
        structure: &'static str,
        /// How many bytes were left over.
        extra: usize,
    },
    /// A selector or enumeration field holds a value this crate does not handle.
    #[error("{field}: unsupported value {value:#06x}")]
    Unsupported {
        /// The field.
        field: &'static str,
        /// The value found.
        value: u32,
    },
    /// A field's value is inconsistent with another field or with the specification.
    #[error("{field}: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// The attestation key's `TPMT_PUBLIC` does not meet the AK policy (TPM 2.0 Part 1, section 27:
/// a restricted signing key that never leaves this TPM).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AkPolicyError {
    /// A required object attribute is clear.
    #[error("AK attribute {0} must be set")]
    MissingAttribute(&'static str),
    /// A forbidden object attribute is set.
    #[error("AK attribute {0} must be clear (the AK must not be a decryption key)")]
    ForbiddenAttribute(&'static str),
    /// SHA-1 is used where a hash is named.
    #[error("AK {field} is SHA-1, which is not accepted")]
    Sha1 {
        /// Which field names SHA-1.
        field: &'static str,
    },
    /// A hash algorithm other than SHA-256/384/512.
    #[error("AK {field} uses unsupported hash algorithm {id:#06x}")]
    UnsupportedHash {
        /// Which field.
        field: &'static str,
        /// The TPM_ALG_ID.
        id: u16,
    },
    /// RSA modulus too small.
    #[error("AK RSA key is {bits} bits; at least 2048 are required")]
    WeakRsaKey {
        /// The modulus size.
        bits: u16,
    },
    /// ECC curve other than P-256 or P-384.
    #[error("AK ECC curve {curve:#06x} is not accepted (P-256 or P-384 required)")]
    UnsupportedCurve {
        /// The TPM_ECC_CURVE.
        curve: u16,
    },
    /// The AK's scheme is not a signing scheme this verifier can check.
    #[error("AK signing scheme {scheme:#06x} is not accepted (RSASSA, RSAPSS or ECDSA required)")]
    UnsupportedScheme {
        /// The TPM_ALG_ID of the scheme.
        scheme: u16,
    },
    /// The AK's public key is malformed (e.g. not a point on the curve).
    #[error("AK public key is malformed: {0}")]
    BadKey(&'static str),
}

/// The EK certificate does not chain to the configured CA bundle.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    /// A certificate could not be decoded.
    #[error("{which}: not a DER X.509 certificate: {detail}")]
    Malformed {
        /// Which certificate.
        which: String,
        /// The decoder's message.
        detail: String,
    },
    /// No configured CA certificate is named as this certificate's issuer and verifies its
    /// signature.
    #[error("no configured CA issued {subject} (issuer {issuer})")]
    UnknownIssuer {
        /// The certificate's subject.
        subject: String,
        /// The issuer it names.
        issuer: String,
    },
    /// The issuer named matches a CA certificate, but the signature does not verify under its key.
    #[error("signature on {subject} does not verify under {issuer}'s key")]
    BadSignature {
        /// The certificate's subject.
        subject: String,
        /// The issuer whose key was tried.
        issuer: String,
    },
    /// The signature algorithm is not supported.
    #[error("{subject}: unsupported signature algorithm {oid}")]
    UnsupportedAlgorithm {
        /// The certificate's subject.
        subject: String,
        /// The algorithm's OID.
        oid: String,
    },
    /// A certificate is outside its validity period at `now`.
    #[error(
        "{subject} is not valid at the verification time (valid {not_before} .. {not_after} unix seconds)"
    )]
    NotValidNow {
        /// The certificate's subject.
        subject: String,
        /// notBefore, seconds since the Unix epoch.
        not_before: u64,
        /// notAfter, seconds since the Unix epoch.
        not_after: u64,
    },
    /// An issuing certificate is not a CA (basicConstraints cA is not true).
    #[error("{subject} issued a certificate but is not a CA")]
    NotCa {
        /// The CA certificate's subject.
        subject: String,
    },
    /// The chain is longer than the limit.
    #[error("chain longer than {0} certificates")]
    TooLong(usize),
    /// The certificate chains to a configured CA but is not an EK certificate by the TCG EK
    /// Credential Profile (e.g. a TLS certificate from a CA that also issues EK certificates).
    #[error("EK certificate: {0}")]
    NotEkProfile(EkProfileError),
}

/// How an EK certificate departs from the TCG EK Credential Profile for TPM 2.0 (section 3.2:
/// an end-entity certificate whose key usage fits the EK's algorithm, marked as an EK
/// certificate). Each variant names the field and what it held.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EkProfileError {
    /// basicConstraints says cA: a CA certificate is not an EK certificate.
    #[error("basicConstraints has cA true; an EK certificate is an end-entity certificate")]
    IsCa,
    /// extendedKeyUsage names a purpose of another kind of certificate.
    #[error(
        "extendedKeyUsage contains {name} ({oid}); an EK certificate must carry tcg-kp-EKCertificate 2.23.133.8.1"
    )]
    ForbiddenPurpose {
        /// The purpose's name (serverAuth, clientAuth, anyExtendedKeyUsage).
        name: &'static str,
        /// Its OID.
        oid: &'static str,
    },
    /// extendedKeyUsage is present but lacks the EK purpose.
    #[error(
        "extendedKeyUsage [{}] lacks tcg-kp-EKCertificate 2.23.133.8.1",
        found.join(", ")
    )]
    MissingEkPurpose {
        /// The purposes it does name.
        found: Vec<String>,
    },
    /// There is no keyUsage extension (the profile requires it).
    #[error("keyUsage is absent; an {algorithm} EK certificate must assert {needed}")]
    KeyUsageMissing {
        /// `RSA` or `ECC`.
        algorithm: &'static str,
        /// The bit it must assert.
        needed: &'static str,
    },
    /// keyUsage lacks the bit the EK's algorithm needs.
    #[error(
        "keyUsage lacks {needed}, which an {algorithm} EK certificate must assert (TCG EK Credential Profile)"
    )]
    KeyUsageLacks {
        /// `RSA` or `ECC`.
        algorithm: &'static str,
        /// The bit it must assert: keyEncipherment (RSA) or keyAgreement (ECC).
        needed: &'static str,
    },
    /// keyUsage asserts a CA bit.
    #[error("keyUsage asserts {bit}; an EK certificate must not")]
    KeyUsageCaBit {
        /// keyCertSign or cRLSign.
        bit: &'static str,
    },
    /// The subject key is neither RSA nor EC.
    #[error(
        "subjectPublicKeyInfo algorithm {oid} is neither rsaEncryption nor id-ecPublicKey (a TPM 2.0 EK is RSA or ECC)"
    )]
    UnsupportedKeyAlgorithm {
        /// The algorithm OID.
        oid: String,
    },
    /// Nothing marks the certificate as an EK certificate.
    #[error(
        "neither extendedKeyUsage tcg-kp-EKCertificate (2.23.133.8.1) nor a subjectAltName directoryName with tpmManufacturer (2.23.133.2.1) is present; nothing marks it as an EK certificate"
    )]
    NotMarkedAsEk,
    /// An extension the profile check reads could not be decoded.
    #[error("{extension} cannot be decoded: {detail}")]
    BadExtension {
        /// The extension's name.
        extension: &'static str,
        /// The decoder's message.
        detail: String,
    },
}

/// Making a credential (the server half of credential activation) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    /// The EK's public area cannot be used as a credential-protection key.
    #[error("EK cannot protect a credential: {0}")]
    UnsupportedEk(&'static str),
    /// The secret is longer than the EK's name-algorithm digest.
    #[error("credential secret is {len} bytes; at most {max} allowed")]
    SecretTooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The EK public key is not usable (RSA encryption or ECC point decoding failed).
    #[error("EK public key: {0}")]
    BadKey(String),
}
