//! nodeauth-csr (work in progress).
#![forbid(unsafe_code)]
