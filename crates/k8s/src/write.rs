//! Writes that carry what was read: [`Written`], the outcome every conditional write in this
//! crate answers, and [`delete_unchanged`].
//!
//! A controller acts on the object as it read it. Sending that object's resourceVersion (or
//! UID and resourceVersion as delete preconditions) makes the API server refuse the write if
//! anyone changed the object since; the caller then looks again instead of overwriting a
//! decision it never saw.

use kube::Resource;
use kube::api::{Api, DeleteParams, Preconditions};
use serde::de::DeserializeOwned;

use crate::error::ApiErrorKind;

/// The outcome of a write that carried the object as it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Written {
    /// The API server took it.
    Written,
    /// The object changed since it was read (409): someone else wrote first. Nothing was
    /// written; the watch brings their change.
    Conflict,
    /// The object is gone (404): deleted since it was read.
    Gone,
}

impl Written {
    /// Maps a write's result: 409 is [`Written::Conflict`], 404 [`Written::Gone`]; any other
    /// error stays an error.
    ///
    /// # Errors
    /// The write's error when it is neither 404 nor 409.
    pub fn from_result<T>(result: Result<T, kube::Error>) -> Result<Written, kube::Error> {
        match result {
            Ok(_) => Ok(Written::Written),
            Err(e) => match ApiErrorKind::of(&e) {
                ApiErrorKind::Conflict => Ok(Written::Conflict),
                ApiErrorKind::NotFound => Ok(Written::Gone),
                _ => Err(e),
            },
        }
    }
}

/// Deletes `object` only if it is still the one that was read: the same UID (not a new object
/// of the same name) at the same resourceVersion (not changed since). [`Written::Gone`]
/// (already deleted) and [`Written::Conflict`] (replaced or changed) mean someone else acted.
///
/// # Errors
/// The API error, other than 404 and 409.
pub async fn delete_unchanged<K>(api: &Api<K>, object: &K) -> Result<Written, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let meta = object.meta();
    let name = meta.name.clone().unwrap_or_default();
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone(),
        }),
        ..DeleteParams::default()
    };
    Written::from_result(api.delete(&name, &params).await)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::tests::api;

    #[test]
    fn outcomes() {
        assert_eq!(Written::from_result(Ok(())).unwrap(), Written::Written);
        assert_eq!(
            Written::from_result::<()>(Err(api(409))).unwrap(),
            Written::Conflict
        );
        assert_eq!(
            Written::from_result::<()>(Err(api(404))).unwrap(),
            Written::Gone
        );
        assert!(Written::from_result::<()>(Err(api(403))).is_err());
    }
}
