//! How a request gets its attestation: [`RequestAttestation`] is called once per CSR, with the
//! key that CSR will carry, and returns the attested PEM.
//!
//! A plain [`Attestor`] (e.g. `insecure`) needs nothing but the key; the TPM provider (feature
//! `tpm`, module `crate::tpm`) first fetches a fresh single-use ticket from the approver's
//! attestation endpoint and certifies that very key in the TPM, which is why attestation happens
//! per request and not once per process.

use nodeauth_attest::{Attestor, attested_csr};
use nodeauth_csr::{CsrBuilder, CsrSigningKey};

use crate::csr::PrepareError;

/// A boxed future, as returned by [`RequestAttestation::attested_pem`] (attest's, re-exported).
pub use nodeauth_attest::BoxFuture;

/// Attests one certificate request.
pub trait RequestAttestation: Send + Sync {
    /// The provider name (`insecure`, `tpm`, ...).
    fn provider(&self) -> &str;

    /// The PEM of `builder`'s CSR signed by `key`, with the provider's ProviderID and
    /// attestation blocks for `node_name`.
    ///
    /// # Errors
    /// A [`PrepareError`] naming what failed.
    fn attested_pem<'a>(
        &'a self,
        builder: CsrBuilder,
        key: &'a CsrSigningKey,
        node_name: &'a str,
    ) -> BoxFuture<'a, Result<String, PrepareError>>;
}

/// Every challenge-free [`Attestor`] attests requests directly.
impl<A: Attestor + Send + Sync> RequestAttestation for A {
    fn provider(&self) -> &str {
        Attestor::provider(self)
    }

    fn attested_pem<'a>(
        &'a self,
        builder: CsrBuilder,
        key: &'a CsrSigningKey,
        node_name: &'a str,
    ) -> BoxFuture<'a, Result<String, PrepareError>> {
        let pem = attested_csr(builder, key, node_name, self, None, None).map_err(Into::into);
        Box::pin(std::future::ready(pem))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeauth_attest::providers::insecure::InsecureAttestor;

    #[tokio::test]
    async fn a_plain_attestor_attests_with_the_given_key() {
        let key = CsrSigningKey::generate_p256().unwrap();
        let insecure = InsecureAttestor::new("kind://n1");
        let a: &dyn RequestAttestation = &insecure;
        assert_eq!(a.provider(), "insecure");
        let pem = a
            .attested_pem(CsrBuilder::kubelet_client("n1"), &key, "n1")
            .await
            .unwrap();
        let csr = nodeauth_csr::parse(pem.as_bytes()).unwrap();
        assert_eq!(csr.public_key().spki_der, key.public_key_der().unwrap());
        assert!(pem.contains("ATTESTATION"), "{pem}");
    }
}
