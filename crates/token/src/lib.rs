//! nodeauth-token (work in progress).
#![forbid(unsafe_code)]
