//! The TPM key derivation functions (TPM 2.0 Part 1, section 11.4.10): KDFa (SP 800-108 counter
//! mode with HMAC) and KDFe (SP 800-56A concatenation KDF).

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Sha256, Sha384, Sha512};
use zeroize::Zeroizing;

use crate::alg::HashAlg;

fn hmac_parts(hash: HashAlg, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    fn run<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        // HMAC accepts keys of any length, so this never fails.
        let Ok(mut m) = <M as KeyInit>::new_from_slice(key) else {
            return Vec::new();
        };
        for p in parts {
            m.update(p);
        }
        m.finalize().into_bytes().to_vec()
    }
    match hash {
        HashAlg::Sha256 => run::<Hmac<Sha256>>(key, parts),
        HashAlg::Sha384 => run::<Hmac<Sha384>>(key, parts),
        HashAlg::Sha512 => run::<Hmac<Sha512>>(key, parts),
    }
}

/// HMAC over the concatenation of `parts`.
pub fn hmac(hash: HashAlg, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    hmac_parts(hash, key, parts)
}

/// KDFa(hash, key, label, contextU, contextV, bits): the concatenation of
/// `HMAC(key, [i]32 || label || 0x00 || contextU || contextV || [bits]32)` for i = 1, 2, ...,
/// truncated to `bits` (a multiple of 8 here). `label` is given without its terminating zero.
pub fn kdfa(
    hash: HashAlg,
    key: &[u8],
    label: &[u8],
    context_u: &[u8],
    context_v: &[u8],
    bits: u32,
) -> Zeroizing<Vec<u8>> {
    let want = (bits as usize).div_ceil(8);
    let mut out = Zeroizing::new(Vec::with_capacity(want + hash.size()));
    let mut counter: u32 = 1;
    while out.len() < want {
        let block = hmac_parts(
            hash,
            key,
            &[
                &counter.to_be_bytes(),
                label,
                &[0],
                context_u,
                context_v,
                &bits.to_be_bytes(),
            ],
        );
        out.extend_from_slice(&block);
        counter = counter.wrapping_add(1);
    }
    out.truncate(want);
    out
}

/// KDFe(hash, Z, use, partyUInfo, partyVInfo, bits): the concatenation of
/// `H([i]32 || Z || use || 0x00 || partyUInfo || partyVInfo)` for i = 1, 2, ..., truncated to
/// `bits`. `label` (the "use") is given without its terminating zero.
pub fn kdfe(
    hash: HashAlg,
    z: &[u8],
    label: &[u8],
    party_u: &[u8],
    party_v: &[u8],
    bits: u32,
) -> Zeroizing<Vec<u8>> {
    let want = (bits as usize).div_ceil(8);
    let mut out = Zeroizing::new(Vec::with_capacity(want + hash.size()));
    let mut counter: u32 = 1;
    while out.len() < want {
        out.extend_from_slice(&hash.digest(&[
            &counter.to_be_bytes(),
            z,
            label,
            &[0],
            party_u,
            party_v,
        ]));
        counter = counter.wrapping_add(1);
    }
    out.truncate(want);
    out
}
