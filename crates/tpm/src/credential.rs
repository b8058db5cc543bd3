//! TPM2_MakeCredential in pure Rust (TPM 2.0 Part 1, section 24; Part 3, section 12.6): protect
//! a secret so that only the TPM holding `ek` can recover it, and only for the object named
//! `ak_name` (TPM2_ActivateCredential checks the Name via the outer HMAC).

use aes::cipher::KeyIvInit;
use p256::elliptic_curve::Generate;
use p256::elliptic_curve::sec1::ToSec1Point;
use rand_core::CryptoRng;
use rsa::Oaep;
use zeroize::Zeroizing;

use crate::alg::{HashAlg, id};
use crate::error::CredentialError;
use crate::kdf::{hmac, kdfa, kdfe};
use crate::public::{Public, PublicKey, rsa_key, sec1_point};
use crate::wire::Writer;

/// The output of MakeCredential: what the agent passes to TPM2_ActivateCredential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialBlob {
    /// The body of TPM2B_ID_OBJECT (without its u16 size): `TPM2B(outerHMAC) || encIdentity`.
    pub id_object: Vec<u8>,
    /// The body of TPM2B_ENCRYPTED_SECRET (without its u16 size): the RSA-OAEP ciphertext or a
    /// marshalled TPMS_ECC_POINT.
    pub encrypted_secret: Vec<u8>,
}

/// Protects `secret` (at most the EK name-algorithm's digest size) for the TPM whose
/// endorsement key is `ek`, bound to the object named `ak_name`.
///
/// Supports storage EKs with a SHA-256/384/512 name algorithm and an AES-128/256-CFB symmetric
/// definition: RSA (OAEP, label `IDENTITY\0`) and ECC P-256/P-384 (one-pass ECDH + KDFe).
pub fn make_credential<R: CryptoRng + ?Sized>(
    ek: &Public,
    ak_name: &[u8],
    secret: &[u8],
    rng: &mut R,
) -> Result<CredentialBlob, CredentialError> {
    let hash = HashAlg::from_id(ek.name_alg).ok_or(CredentialError::UnsupportedEk(
        "name algorithm is not SHA-256/384/512",
    ))?;
    if secret.len() > hash.size() {
        return Err(CredentialError::SecretTooLong {
            len: secret.len(),
            max: hash.size(),
        });
    }
    let symmetric = match &ek.key {
        PublicKey::Rsa { symmetric, .. } | PublicKey::Ecc { symmetric, .. } => *symmetric,
    }
    .ok_or(CredentialError::UnsupportedEk(
        "not a storage key (symmetric algorithm is NULL)",
    ))?;
    if symmetric.algorithm != id::AES
        || symmetric.mode != id::CFB
        || !matches!(symmetric.key_bits, 128 | 256)
    {
        return Err(CredentialError::UnsupportedEk(
            "symmetric algorithm is not AES-128/256-CFB",
        ));
    }

    let (seed, encrypted_secret) = match &ek.key {
        PublicKey::Rsa {
            exponent, modulus, ..
        } => {
            let key = rsa_key(*exponent, modulus).map_err(|e| CredentialError::BadKey(e.into()))?;
            let mut seed = Zeroizing::new(vec![0u8; hash.size()]);
            rng.fill_bytes(&mut seed);
            let label: &[u8] = b"IDENTITY\0";
            let enc = match hash {
                HashAlg::Sha256 => {
                    key.encrypt(rng, Oaep::<sha2::Sha256>::new_with_label(label), &seed)
                }
                HashAlg::Sha384 => {
                    key.encrypt(rng, Oaep::<sha2::Sha384>::new_with_label(label), &seed)
                }
                HashAlg::Sha512 => {
                    key.encrypt(rng, Oaep::<sha2::Sha512>::new_with_label(label), &seed)
                }
            }
            .map_err(|e| CredentialError::BadKey(format!("RSA-OAEP: {e}")))?;
            (seed, enc)
        }
        PublicKey::Ecc { curve, x, y, .. } => {
            let point = sec1_point(*curve, x, y).map_err(|e| CredentialError::BadKey(e.into()))?;
            let (z, ephemeral) = match *curve {
                id::ECC_NIST_P256 => {
                    let pk = p256::PublicKey::from_sec1_bytes(&point)
                        .map_err(|_| CredentialError::BadKey("not a P-256 point".into()))?;
                    let e = <p256::ecdh::EphemeralSecret as Generate>::generate_from_rng(rng);
                    let z = Zeroizing::new(e.diffie_hellman(&pk).raw_secret_bytes().to_vec());
                    (
                        z,
                        e.public_key()
                            .as_affine()
                            .to_sec1_point(false)
                            .as_bytes()
                            .to_vec(),
                    )
                }
                id::ECC_NIST_P384 => {
                    let pk = p384::PublicKey::from_sec1_bytes(&point)
                        .map_err(|_| CredentialError::BadKey("not a P-384 point".into()))?;
                    let e = <p384::ecdh::EphemeralSecret as Generate>::generate_from_rng(rng);
                    let z = Zeroizing::new(e.diffie_hellman(&pk).raw_secret_bytes().to_vec());
                    (
                        z,
                        e.public_key()
                            .as_affine()
                            .to_sec1_point(false)
                            .as_bytes()
                            .to_vec(),
                    )
                }
                _ => {
                    return Err(CredentialError::UnsupportedEk(
                        "ECC curve is not P-256 or P-384",
                    ));
                }
            };
            // Uncompressed SEC1: 04 || x || y, coordinates of the field size.
            let size = (ephemeral.len().saturating_sub(1)) / 2;
            let ex = ephemeral.get(1..1 + size).unwrap_or_default();
            let ey = ephemeral.get(1 + size..).unwrap_or_default();
            let ek_x = point.get(1..1 + size).unwrap_or_default();
            let seed = kdfe(hash, &z, b"IDENTITY", ex, ek_x, (hash.size() * 8) as u32);
            let mut w = Writer::default();
            w.tpm2b(ex).tpm2b(ey);
            (seed, w.into_vec())
        }
    };

    // encIdentity = CFB(symKey, IV = 0, TPM2B_DIGEST(secret))
    let sym_key = kdfa(
        hash,
        &seed,
        b"STORAGE",
        ak_name,
        &[],
        u32::from(symmetric.key_bits),
    );
    let mut plain = Writer::default();
    plain.tpm2b(secret);
    let mut enc_identity = plain.into_vec();
    let iv = [0u8; 16];
    match symmetric.key_bits {
        128 => cfb_mode::Encryptor::<aes::Aes128>::new_from_slices(&sym_key, &iv)
            .map_err(|_| CredentialError::UnsupportedEk("AES-128 key setup"))?
            .encrypt(&mut enc_identity),
        _ => cfb_mode::Encryptor::<aes::Aes256>::new_from_slices(&sym_key, &iv)
            .map_err(|_| CredentialError::UnsupportedEk("AES-256 key setup"))?
            .encrypt(&mut enc_identity),
    }

    let hmac_key = kdfa(
        hash,
        &seed,
        b"INTEGRITY",
        &[],
        &[],
        (hash.size() * 8) as u32,
    );
    let outer_hmac = hmac(hash, &hmac_key, &[&enc_identity, ak_name]);
    let mut id_object = Writer::default();
    id_object.tpm2b(&outer_hmac).raw(&enc_identity);
    Ok(CredentialBlob {
        id_object: id_object.into_vec(),
        encrypted_secret,
    })
}
