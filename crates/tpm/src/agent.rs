//! The node side on tss-esapi 7.7 (feature `esapi`; links Debian's libtss2 3.x): read the EK
//! certificate from NV, use the EK, create a restricted signing AK, answer the credential
//! challenge with TPM2_ActivateCredential, and produce nonce-bound TPM2_Quote evidence.
//!
//! TPM2_Certify of the CSR key ([`TpmAgent::certify_p256`]): a public-only object loaded with
//! TPM2_LoadExternal has neither authValue nor authPolicy available (swtpm answers
//! TPM_RC_AUTH_UNAVAILABLE, with or without a policy), so the agent loads the CSR key *with its
//! private part* (it holds the key) into the null hierarchy, certifies it with the AK, and
//! flushes it. The TPM then attests the key's Name, which the verifier checks against the CSR's
//! SubjectPublicKeyInfo.
//!
//! Everything the TPM returns is re-marshalled with the TSS's own marshalling, so the verifier
//! sees exactly the bytes the TPM signed.

use std::str::FromStr;

use tss_esapi::abstraction::{AsymmetricAlgorithmSelection, ak};
use tss_esapi::attributes::SessionAttributesBuilder;
use tss_esapi::constants::SessionType;
use tss_esapi::handles::{AuthHandle, KeyHandle, ObjectHandle, PersistentTpmHandle, TpmHandle};
use tss_esapi::interface_types::algorithm::{HashingAlgorithm, SignatureSchemeAlgorithm};
use tss_esapi::interface_types::ecc::EccCurve;
use tss_esapi::interface_types::key_bits::RsaKeyBits;
use tss_esapi::interface_types::session_handles::{AuthSession, PolicySession};
use tss_esapi::structures::{
    Data, Digest, DigestList, EncryptedSecret, IdObject, PcrSelectionListBuilder, PcrSlot, Private,
    SignatureScheme, SymmetricDefinition,
};
use tss_esapi::traits::Marshall;
use tss_esapi::{Context, TctiNameConf};

use crate::alg::HashAlg;
use crate::evidence::{ActivationRequest, PcrValue, TpmEvidence};
use crate::public::Public;
use crate::verifier::{Challenge, binding};

/// TCG EK Credential Profile 2.5, B.6: PolicyC for SHA-384 (PolicyAuthorizeNV), the second
/// branch of the high-range EK templates' PolicyOR (branch A is PolicySecret(endorsement),
/// computed by the TPM itself).
const POLICY_C_SHA384: [u8; 48] = [
    0xd6, 0x03, 0x2c, 0xe6, 0x1f, 0x2f, 0xb3, 0xc2, 0x40, 0xeb, 0x3c, 0xf6, 0xa3, 0x32, 0x37, 0xef,
    0x2b, 0x6a, 0x16, 0xf4, 0x29, 0x3c, 0x22, 0xb4, 0x55, 0xe2, 0x61, 0xcf, 0xfd, 0x21, 0x7a, 0xd5,
    0xb4, 0x94, 0x7c, 0x2d, 0x73, 0xe6, 0x30, 0x05, 0xee, 0xd2, 0xdc, 0x2b, 0x35, 0x93, 0xd1, 0x65,
];

/// An agent-side failure.
#[derive(Debug, thiserror::Error)]
pub enum TpmDeviceError {
    /// A TPM or TSS call failed.
    #[error("{op}: {source}")]
    Tss {
        /// What was being done.
        op: &'static str,
        /// The TSS error.
        source: tss_esapi::Error,
    },
    /// Anything else (unexpected data from the TPM, unusable input).
    #[error("{0}")]
    Other(String),
}

fn tss(op: &'static str) -> impl FnOnce(tss_esapi::Error) -> TpmDeviceError {
    move |source| TpmDeviceError::Tss { op, source }
}

/// The evidence of a TPM2_Quote or TPM2_Certify answer (`attest`, `signature`) by `ak` for the
/// challenge `ticket`, bound to the CSR key `csr_spki_der`: `certified_public` is the Certify's,
/// `pcrs` the Quote's.
fn signed_evidence(
    ticket: &[u8],
    ak: &Ak,
    (attest, signature): (
        tss_esapi::structures::Attest,
        tss_esapi::structures::Signature,
    ),
    csr_spki_der: &[u8],
    certified_public: Option<Vec<u8>>,
    pcrs: Vec<PcrValue>,
) -> Result<TpmEvidence, TpmDeviceError> {
    Ok(TpmEvidence {
        ticket: ticket.to_vec(),
        ak_public: ak.public.clone(),
        attest: attest.marshall().map_err(tss("marshalling TPMS_ATTEST"))?,
        signature: signature
            .marshall()
            .map_err(tss("marshalling TPMT_SIGNATURE"))?,
        bound_key_sha256: sha256(csr_spki_der),
        certified_public,
        pcrs,
    })
}

/// Which endorsement key to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EkKind {
    /// RSA-2048 EK (template L-1), persisted at 0x81010001, certificate at NV 0x01c00002.
    Rsa2048,
    /// ECC P-384 EK (template H-3), persisted at 0x81010016, certificate at NV 0x01c00016.
    EccP384,
}

impl EkKind {
    fn persistent_handle(self) -> u32 {
        match self {
            Self::Rsa2048 => 0x8101_0001,
            Self::EccP384 => 0x8101_0016,
        }
    }
    fn selection(self) -> AsymmetricAlgorithmSelection {
        match self {
            Self::Rsa2048 => AsymmetricAlgorithmSelection::Rsa(RsaKeyBits::Rsa2048),
            Self::EccP384 => AsymmetricAlgorithmSelection::Ecc(EccCurve::NistP384),
        }
    }
}

/// Which attestation key to create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AkKind {
    /// RSA-2048, RSASSA-SHA256.
    Rsa2048,
    /// ECC P-256, ECDSA-SHA256.
    EccP256,
}

/// A loaded endorsement key.
#[derive(Debug)]
pub struct Ek {
    handle: KeyHandle,
    /// Its TPMT_PUBLIC.
    pub public: Vec<u8>,
    parsed: Public,
}

/// A loaded attestation key.
#[derive(Debug)]
pub struct Ak {
    handle: KeyHandle,
    /// Its TPMT_PUBLIC.
    pub public: Vec<u8>,
    /// Its private blob (to reload it later under the same EK).
    pub private: Private,
}

/// A TPM session for the node agent. Transient objects it loads (AKs) are flushed when it is
/// dropped (tss-esapi's `Context` flushes the handles it created) — which matters on a TPM
/// without a resource manager (`/dev/tpm0`, a bare swtpm): it keeps them after the process
/// exits and has room for only a few. Tested in `tests/swtpm.rs`.
#[derive(Debug)]
pub struct TpmAgent {
    ctx: Context,
}

impl TpmAgent {
    /// Connects with a TCTI string, e.g. `swtpm:host=127.0.0.1,port=2321` or `device:/dev/tpmrm0`.
    pub fn connect(tcti: &str) -> Result<Self, TpmDeviceError> {
        let conf = TctiNameConf::from_str(tcti).map_err(tss("parsing the TCTI"))?;
        let ctx = Context::new(conf).map_err(tss("opening the TPM"))?;
        Ok(Self { ctx })
    }

    /// Reads the EK certificate (DER) from its NV index.
    pub fn ek_certificate(&mut self, kind: EkKind) -> Result<Vec<u8>, TpmDeviceError> {
        let der = tss_esapi::abstraction::ek::retrieve_ek_pubcert(&mut self.ctx, kind.selection())
            .map_err(tss("reading the EK certificate from NV"))?;
        // NV indices are often padded beyond the DER certificate: keep the SEQUENCE only.
        Ok(trim_der(&der).to_vec())
    }

    /// Uses the EK persisted by the manufacturer (or `swtpm_setup`).
    pub fn persisted_ek(&mut self, kind: EkKind) -> Result<Ek, TpmDeviceError> {
        let handle =
            PersistentTpmHandle::new(kind.persistent_handle()).map_err(tss("EK handle"))?;
        let obj = self
            .ctx
            .execute_without_session(|ctx| ctx.tr_from_tpm_public(TpmHandle::Persistent(handle)))
            .map_err(tss("opening the persisted EK"))?;
        let handle = KeyHandle::from(obj);
        let (public, _, _) = self
            .ctx
            .read_public(handle)
            .map_err(tss("reading the EK public area"))?;
        let public = public
            .marshall()
            .map_err(tss("marshalling the EK public area"))?;
        let parsed = Public::parse(&public)
            .map_err(|e| TpmDeviceError::Other(format!("EK public area: {e}")))?;
        Ok(Ek {
            handle,
            public,
            parsed,
        })
    }

    /// Creates and loads a restricted signing AK under the EK.
    pub fn create_ak(&mut self, ek: &Ek, kind: AkKind) -> Result<Ak, TpmDeviceError> {
        let (alg, scheme) = match kind {
            AkKind::Rsa2048 => (
                AsymmetricAlgorithmSelection::Rsa(RsaKeyBits::Rsa2048),
                SignatureSchemeAlgorithm::RsaSsa,
            ),
            AkKind::EccP256 => (
                AsymmetricAlgorithmSelection::Ecc(EccCurve::NistP256),
                SignatureSchemeAlgorithm::EcDsa,
            ),
        };
        let created = ak::create_ak_2(
            &mut self.ctx,
            ek.handle,
            HashingAlgorithm::Sha256,
            alg,
            scheme,
            None,
            None,
        )
        .map_err(tss("creating the AK"))?;
        let public = created
            .out_public
            .marshall()
            .map_err(tss("marshalling the AK public area"))?;
        let handle = ak::load_ak(
            &mut self.ctx,
            ek.handle,
            None,
            created.out_private.clone(),
            created.out_public,
        )
        .map_err(tss("loading the AK"))?;
        Ok(Ak {
            handle,
            public,
            private: created.out_private,
        })
    }

    /// The first message to the approver.
    pub fn activation_request(
        &self,
        node_name: &str,
        ek: &Ek,
        ek_certificate: Option<Vec<u8>>,
        ak: &Ak,
    ) -> ActivationRequest {
        ActivationRequest {
            node_name: node_name.to_owned(),
            ek_public: ek.public.clone(),
            ek_certificate,
            ek_intermediates: Vec::new(),
            ak_public: ak.public.clone(),
        }
    }

    /// Answers a credential challenge: TPM2_ActivateCredential, authorizing the AK with its
    /// (empty) password and the EK with its policy (PolicySecret(endorsement), plus PolicyOR
    /// for the high-range templates).
    pub fn activate_credential(
        &mut self,
        ek: &Ek,
        ak: &Ak,
        challenge: &Challenge,
    ) -> Result<Vec<u8>, TpmDeviceError> {
        let id_object =
            IdObject::try_from(challenge.blob.id_object.clone()).map_err(tss("credential blob"))?;
        let secret = EncryptedSecret::try_from(challenge.blob.encrypted_secret.clone())
            .map_err(tss("encrypted secret"))?;
        let ek_hash = match HashAlg::from_id(ek.parsed.name_alg) {
            Some(HashAlg::Sha384) => HashingAlgorithm::Sha384,
            Some(HashAlg::Sha512) => HashingAlgorithm::Sha512,
            _ => HashingAlgorithm::Sha256,
        };
        let (attrs, mask) = SessionAttributesBuilder::new().build();
        let policy = self
            .ctx
            .start_auth_session(
                None,
                None,
                None,
                SessionType::Policy,
                SymmetricDefinition::AES_128_CFB,
                ek_hash,
            )
            .map_err(tss("starting the EK policy session"))?
            .ok_or_else(|| TpmDeviceError::Other("no policy session returned".into()))?;
        self.ctx
            .tr_sess_set_attributes(policy, attrs, mask)
            .map_err(tss("policy session attributes"))?;
        let policy_session = PolicySession::try_from(policy).map_err(tss("policy session"))?;
        let result = (|| {
            self.ctx
                .execute_with_session(Some(AuthSession::Password), |ctx| {
                    ctx.policy_secret(
                        policy_session,
                        AuthHandle::Endorsement,
                        Default::default(),
                        Default::default(),
                        Default::default(),
                        None,
                    )
                })
                .map_err(tss("PolicySecret(endorsement)"))?;
            let branch_a = self
                .ctx
                .execute_without_session(|ctx| ctx.policy_get_digest(policy_session))
                .map_err(tss("PolicyGetDigest"))?;
            if branch_a.as_slice() != ek.parsed.auth_policy.as_slice()
                && ek_hash == HashingAlgorithm::Sha384
            {
                let mut list = DigestList::new();
                list.add(branch_a).map_err(tss("policy list"))?;
                list.add(Digest::try_from(POLICY_C_SHA384.as_slice()).map_err(tss("policy C"))?)
                    .map_err(tss("policy list"))?;
                self.ctx
                    .execute_without_session(|ctx| ctx.policy_or(policy_session, list))
                    .map_err(tss("PolicyOR"))?;
            }
            self.ctx
                .set_sessions((Some(AuthSession::Password), Some(policy), None));
            let out = self
                .ctx
                .activate_credential(ak.handle, ek.handle, id_object, secret);
            self.ctx.clear_sessions();
            out.map_err(tss("ActivateCredential"))
        })();
        let _ =
            self.ctx
                .flush_context(ObjectHandle::from(tss_esapi::handles::SessionHandle::from(
                    policy,
                )));
        Ok(result?.as_slice().to_vec())
    }

    /// TPM2_Quote of SHA-256 PCRs `pcrs` by the AK with the nonce-bound extraData, plus the
    /// PCR values. (PCRs can change between the read and the quote; the verifier then reports
    /// a digest mismatch and the agent retries.)
    pub fn quote(
        &mut self,
        ak: &Ak,
        ticket: &[u8],
        csr_spki_der: &[u8],
        pcrs: &[u8],
    ) -> Result<TpmEvidence, TpmDeviceError> {
        let nonce = crate::ticket::nonce_unverified(ticket)
            .map_err(|e| TpmDeviceError::Other(format!("ticket: {e}")))?;
        let slots = pcrs
            .iter()
            .map(|i| PcrSlot::try_from(1u32 << (i % 24)).map_err(tss("PCR index")))
            .collect::<Result<Vec<_>, _>>()?;
        let selection = PcrSelectionListBuilder::new()
            .with_selection(HashingAlgorithm::Sha256, &slots)
            .build()
            .map_err(tss("PCR selection"))?;
        let mut values = Vec::new();
        let mut sorted = pcrs.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        for &i in &sorted {
            let one = PcrSelectionListBuilder::new()
                .with_selection(
                    HashingAlgorithm::Sha256,
                    &[PcrSlot::try_from(1u32 << (i % 24)).map_err(tss("PCR index"))?],
                )
                .build()
                .map_err(tss("PCR selection"))?;
            let (_, _, digests) = self
                .ctx
                .execute_without_session(|ctx| ctx.pcr_read(one))
                .map_err(tss("PCR_Read"))?;
            let v = digests
                .value()
                .first()
                .ok_or_else(|| TpmDeviceError::Other(format!("PCR {i} not returned")))?;
            values.push(PcrValue {
                bank: crate::alg::id::SHA256,
                index: i,
                value: v.as_slice().to_vec(),
            });
        }
        let extra =
            Data::try_from(binding(&nonce, csr_spki_der).to_vec()).map_err(tss("extraData"))?;
        let (attest, signature) = self
            .ctx
            .execute_with_session(Some(AuthSession::Password), |ctx| {
                ctx.quote(ak.handle, extra, SignatureScheme::Null, selection)
            })
            .map_err(tss("Quote"))?;
        signed_evidence(ticket, ak, (attest, signature), csr_spki_der, None, values)
    }

    /// TPM2_Certify of the CSR's P-256 key by the AK with the nonce-bound extraData.
    ///
    /// The key is loaded with TPM2_LoadExternal, public and sensitive parts (empty authValue,
    /// `sign | userWithAuth`, ECDSA-SHA256, null hierarchy), certified under password sessions
    /// for both the key and the AK, then flushed.
    pub fn certify_p256(
        &mut self,
        ak: &Ak,
        ticket: &[u8],
        csr_key: &p256::SecretKey,
    ) -> Result<TpmEvidence, TpmDeviceError> {
        use crate::alg::id;
        use crate::public::{ObjectAttributes, PublicKey};
        use tss_esapi::interface_types::resource_handles::Hierarchy;
        use tss_esapi::structures::{EccParameter, Sensitive};
        use tss_esapi::traits::UnMarshall;

        let nonce = crate::ticket::nonce_unverified(ticket)
            .map_err(|e| TpmDeviceError::Other(format!("ticket: {e}")))?;
        let csr_spki_der = spki::EncodePublicKey::to_public_key_der(&csr_key.public_key())
            .map_err(|e| TpmDeviceError::Other(format!("CSR key: {e}")))?;
        let point =
            p256::elliptic_curve::sec1::ToSec1Point::to_sec1_point(&csr_key.public_key(), false);
        let (Some(x), Some(y)) = (point.x(), point.y()) else {
            return Err(TpmDeviceError::Other("CSR key: not an affine point".into()));
        };
        let public = Public::new(
            id::SHA256,
            ObjectAttributes(ObjectAttributes::SIGN | ObjectAttributes::USER_WITH_AUTH),
            Vec::new(),
            PublicKey::ecdsa_p256(x.to_vec(), y.to_vec()),
        );
        let tss_public = tss_esapi::structures::Public::unmarshall(public.as_bytes())
            .map_err(tss("unmarshalling the CSR key's public area"))?;
        let scalar = zeroize::Zeroizing::new(csr_key.to_bytes().to_vec());
        let sensitive = Sensitive::Ecc {
            auth_value: Default::default(),
            seed_value: Default::default(),
            sensitive: EccParameter::try_from(scalar.to_vec())
                .map_err(tss("the CSR key's private scalar"))?,
        };
        let key = self
            .ctx
            .execute_without_session(|ctx| {
                ctx.load_external(sensitive, tss_public, Hierarchy::Null)
            })
            .map_err(tss(
                "LoadExternal of the CSR key (public and private parts)",
            ))?;
        let extra = Data::try_from(binding(&nonce, csr_spki_der.as_bytes()).to_vec())
            .map_err(tss("extraData"));
        let result = extra.and_then(|extra| {
            self.ctx.set_sessions((
                Some(AuthSession::Password),
                Some(AuthSession::Password),
                None,
            ));
            let out = self.ctx.certify(
                ObjectHandle::from(key),
                ak.handle,
                extra,
                SignatureScheme::Null,
            );
            self.ctx.clear_sessions();
            out.map_err(tss("Certify of the CSR key by the AK"))
        });
        let _ = self.ctx.flush_context(ObjectHandle::from(key));
        signed_evidence(
            ticket,
            ak,
            result?,
            csr_spki_der.as_bytes(),
            Some(public.as_bytes().to_vec()),
            Vec::new(),
        )
    }

    /// Unloads an AK now (dropping the agent does it too).
    pub fn flush_ak(&mut self, ak: Ak) -> Result<(), TpmDeviceError> {
        self.ctx
            .flush_context(ObjectHandle::from(ak.handle))
            .map_err(tss("flushing the AK"))
    }

    /// How many transient objects the TPM has loaded (TPM2_GetCapability of the transient
    /// handle range): all of them, not only this agent's.
    pub fn loaded_transient_objects(&mut self) -> Result<usize, TpmDeviceError> {
        use tss_esapi::constants::CapabilityType;
        use tss_esapi::structures::CapabilityData;
        const TRANSIENT_FIRST: u32 = 0x8000_0000;
        let (data, _) = self
            .ctx
            .get_capability(CapabilityType::Handles, TRANSIENT_FIRST, 64)
            .map_err(tss("TPM2_GetCapability(handles)"))?;
        Ok(match data {
            CapabilityData::Handles(list) => list
                .into_inner()
                .iter()
                .filter(|h| u32::from(**h) >> 24 == 0x80)
                .count(),
            _ => 0,
        })
    }

    /// The underlying tss-esapi context, for operations this type does not wrap.
    pub fn context(&mut self) -> &mut Context {
        &mut self.ctx
    }
}

fn sha256(b: &[u8]) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(b).into()
}

/// The leading DER SEQUENCE of `b` (long-form lengths up to 4 bytes), or `b` unchanged.
fn trim_der(b: &[u8]) -> &[u8] {
    let (Some(&0x30), Some(&l0)) = (b.first(), b.get(1)) else {
        return b;
    };
    let (len, hdr) = if l0 < 0x80 {
        (usize::from(l0), 2)
    } else {
        let n = usize::from(l0 & 0x7f);
        if n == 0 || n > 4 {
            return b;
        }
        let Some(bytes) = b.get(2..2 + n) else {
            return b;
        };
        (
            bytes.iter().fold(0usize, |a, x| (a << 8) | usize::from(*x)),
            2 + n,
        )
    };
    b.get(..hdr + len).unwrap_or(b)
}
