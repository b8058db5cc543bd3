//! Exit codes, and the failure that carries one.

use nodeauth_agent::AgentError;
use nodeauth_agent::csr::CsrError;
use nodeauth_agent::discovery::DiscoveryError;

/// Exit codes (stable; the systemd unit and scripts rely on them).
pub(crate) mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// Any other failure (I/O, the API server unreachable, ...).
    pub const FAILURE: u8 = 1;
    /// Bad arguments.
    pub const USAGE: u8 = 2;
    /// Discovery could not verify the cluster (bad signature, unpinned CA, changed content,
    /// credentials in a discovery file).
    pub const DISCOVERY_VERIFICATION: u8 = 3;
    /// The CSR was denied (by an approver or an admin). Asking again will not help: fix the
    /// cause, delete the CSR, then retry.
    pub const CSR_DENIED: u8 = 4;
    /// The signer failed the CSR.
    pub const CSR_FAILED: u8 = 5;
    /// Timed out: discovery (cluster unreachable) or the CSR was not issued in time.
    pub const TIMED_OUT: u8 = 6;
}

/// A failure with its exit code and a one-line message.
pub(crate) struct Fail(pub(crate) u8, pub(crate) String);

impl From<AgentError> for Fail {
    fn from(e: AgentError) -> Self {
        let code = match &e {
            AgentError::Csr(CsrError::Denied { .. }) => exit::CSR_DENIED,
            AgentError::Csr(CsrError::Failed { .. }) => exit::CSR_FAILED,
            AgentError::Csr(CsrError::TimedOut { .. }) => exit::TIMED_OUT,
            _ => exit::FAILURE,
        };
        let hint = match &e {
            AgentError::Csr(CsrError::Denied { name, .. }) => format!(
                " — not retrying; fix the cause, then `kubectl delete csr {name}` and run again"
            ),
            _ => String::new(),
        };
        Fail(code, format!("{e}{hint}"))
    }
}

impl From<DiscoveryError> for Fail {
    fn from(e: DiscoveryError) -> Self {
        let code = if e.is_verification_failure() {
            exit::DISCOVERY_VERIFICATION
        } else if matches!(e, DiscoveryError::TimedOut { .. }) {
            exit::TIMED_OUT
        } else {
            exit::FAILURE
        };
        Fail(code, format!("discovery failed: {e}"))
    }
}
