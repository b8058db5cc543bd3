//! nodeauth-runtime (work in progress).
#![forbid(unsafe_code)]
