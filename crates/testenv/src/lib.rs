//! nodeauth-testenv (work in progress).
#![forbid(unsafe_code)]
