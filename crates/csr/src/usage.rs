//! Key usages as a Kubernetes CSR object spells them in `spec.usages`.

use core::{fmt, str::FromStr};

/// One `spec.usages` value (certificates.k8s.io/v1 `KeyUsage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[allow(missing_docs)] // each variant is named for its Kubernetes string, see `as_str`
pub enum Usage {
    Signing,
    DigitalSignature,
    ContentCommitment,
    KeyEncipherment,
    KeyAgreement,
    DataEncipherment,
    CertSign,
    CrlSign,
    EncipherOnly,
    DecipherOnly,
    Any,
    ServerAuth,
    ClientAuth,
    CodeSigning,
    EmailProtection,
    SMime,
    IpsecEndSystem,
    IpsecTunnel,
    IpsecUser,
    Timestamping,
    OcspSigning,
    MicrosoftSgc,
    NetscapeSgc,
}

const ALL: [Usage; 23] = [
    Usage::Signing,
    Usage::DigitalSignature,
    Usage::ContentCommitment,
    Usage::KeyEncipherment,
    Usage::KeyAgreement,
    Usage::DataEncipherment,
    Usage::CertSign,
    Usage::CrlSign,
    Usage::EncipherOnly,
    Usage::DecipherOnly,
    Usage::Any,
    Usage::ServerAuth,
    Usage::ClientAuth,
    Usage::CodeSigning,
    Usage::EmailProtection,
    Usage::SMime,
    Usage::IpsecEndSystem,
    Usage::IpsecTunnel,
    Usage::IpsecUser,
    Usage::Timestamping,
    Usage::OcspSigning,
    Usage::MicrosoftSgc,
    Usage::NetscapeSgc,
];

impl Usage {
    /// Every usage Kubernetes defines.
    pub const ALL: &'static [Usage] = &ALL;

    /// The exact string of the Kubernetes API, e.g. `"digital signature"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Usage::Signing => "signing",
            Usage::DigitalSignature => "digital signature",
            Usage::ContentCommitment => "content commitment",
            Usage::KeyEncipherment => "key encipherment",
            Usage::KeyAgreement => "key agreement",
            Usage::DataEncipherment => "data encipherment",
            Usage::CertSign => "cert sign",
            Usage::CrlSign => "crl sign",
            Usage::EncipherOnly => "encipher only",
            Usage::DecipherOnly => "decipher only",
            Usage::Any => "any",
            Usage::ServerAuth => "server auth",
            Usage::ClientAuth => "client auth",
            Usage::CodeSigning => "code signing",
            Usage::EmailProtection => "email protection",
            Usage::SMime => "s/mime",
            Usage::IpsecEndSystem => "ipsec end system",
            Usage::IpsecTunnel => "ipsec tunnel",
            Usage::IpsecUser => "ipsec user",
            Usage::Timestamping => "timestamping",
            Usage::OcspSigning => "ocsp signing",
            Usage::MicrosoftSgc => "microsoft sgc",
            Usage::NetscapeSgc => "netscape sgc",
        }
    }
}

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `spec.usages` string that Kubernetes does not define (matching is exact, as in the API).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown usage {0:?}")]
pub struct UnknownUsage(pub String);

impl FromStr for Usage {
    type Err = UnknownUsage;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ALL.iter()
            .copied()
            .find(|u| u.as_str() == s)
            .ok_or_else(|| UnknownUsage(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_round_trip() {
        for usage in Usage::ALL {
            assert_eq!(usage.as_str().parse::<Usage>(), Ok(*usage));
        }
        assert!("Digital Signature".parse::<Usage>().is_err());
    }
}
