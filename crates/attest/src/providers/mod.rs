//! Built-in providers: [`insecure`] (no proof; bootstrap client certificates only) and, behind the
//! `null-provider` cargo feature, `null` (accepts everything; tests only).

pub mod insecure;
#[cfg(feature = "null-provider")]
pub mod null;
