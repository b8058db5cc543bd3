//! [`ApiErrorKind`]: what a failed API call means for the caller, in one place, so no program
//! matches on HTTP status codes itself.
//!
//! ```
//! use nodeauth_k8s::ApiErrorKind;
//!
//! let status = kube::core::Status::failure("csrs \"x\" not found", "NotFound").with_code(404);
//! let err = kube::Error::Api(status.boxed());
//! assert_eq!(ApiErrorKind::of(&err), ApiErrorKind::NotFound);
//! assert!(!ApiErrorKind::of(&err).is_retryable());
//! ```

/// What kind of failure a `kube::Error` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApiErrorKind {
    /// 404: the object (or the API) does not exist.
    NotFound,
    /// 409: a create found the name taken (AlreadyExists), or a write carried a
    /// resourceVersion or UID precondition that no longer holds (Conflict). Someone else wrote
    /// first; read again.
    Conflict,
    /// 410: the resourceVersion asked for is too old (a watch must list again).
    Gone,
    /// 401: the credentials were not accepted.
    Unauthorized,
    /// 403: authenticated, but not allowed.
    Forbidden,
    /// 422: the object was refused by validation.
    Invalid,
    /// 429 or 5xx: the API server is busy or failing; the same call may succeed later.
    Retryable,
    /// Any other status the API server answered with.
    Rejected(u16),
    /// No answer from the API server: connection, TLS or timeout.
    Transport,
    /// The client failed before or after talking to the API server (building the request,
    /// decoding the answer, its configuration).
    Client,
}

impl ApiErrorKind {
    /// Classifies `err`.
    pub fn of(err: &kube::Error) -> Self {
        match err {
            kube::Error::Api(status) => Self::from_code(status.code),
            kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::RustlsTls(_) => {
                ApiErrorKind::Transport
            }
            _ => ApiErrorKind::Client,
        }
    }

    /// Classifies an HTTP status code the API server answered with.
    pub fn from_code(code: u16) -> Self {
        match code {
            401 => ApiErrorKind::Unauthorized,
            403 => ApiErrorKind::Forbidden,
            404 => ApiErrorKind::NotFound,
            409 => ApiErrorKind::Conflict,
            410 => ApiErrorKind::Gone,
            422 => ApiErrorKind::Invalid,
            429 | 500..=599 => ApiErrorKind::Retryable,
            other => ApiErrorKind::Rejected(other),
        }
    }

    /// Whether the same call may succeed if simply tried again later (busy, failing or
    /// unreachable API server).
    pub fn is_retryable(self) -> bool {
        matches!(self, ApiErrorKind::Retryable | ApiErrorKind::Transport)
    }

    /// A short name for metrics labels and logs: `NotFound`, `Conflict`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            ApiErrorKind::NotFound => "NotFound",
            ApiErrorKind::Conflict => "Conflict",
            ApiErrorKind::Gone => "Gone",
            ApiErrorKind::Unauthorized => "Unauthorized",
            ApiErrorKind::Forbidden => "Forbidden",
            ApiErrorKind::Invalid => "Invalid",
            ApiErrorKind::Retryable => "Retryable",
            ApiErrorKind::Rejected(_) => "Rejected",
            ApiErrorKind::Transport => "Transport",
            ApiErrorKind::Client => "Client",
        }
    }
}

/// Whether `err` is the API server answering 404 Not Found.
pub fn is_not_found(err: &kube::Error) -> bool {
    ApiErrorKind::of(err) == ApiErrorKind::NotFound
}

/// Whether `err` is the API server answering 409 (AlreadyExists or Conflict).
pub fn is_conflict(err: &kube::Error) -> bool {
    ApiErrorKind::of(err) == ApiErrorKind::Conflict
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The API server answering `code` (also used by the write-outcome tests).
    pub(crate) fn api(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("x", "y")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn status_codes() {
        for (code, kind) in [
            (401, ApiErrorKind::Unauthorized),
            (403, ApiErrorKind::Forbidden),
            (404, ApiErrorKind::NotFound),
            (409, ApiErrorKind::Conflict),
            (410, ApiErrorKind::Gone),
            (422, ApiErrorKind::Invalid),
            (429, ApiErrorKind::Retryable),
            (500, ApiErrorKind::Retryable),
            (503, ApiErrorKind::Retryable),
            (599, ApiErrorKind::Retryable),
            (400, ApiErrorKind::Rejected(400)),
            (405, ApiErrorKind::Rejected(405)),
        ] {
            assert_eq!(ApiErrorKind::of(&api(code)), kind, "{code}");
        }
        assert!(is_not_found(&api(404)) && !is_not_found(&api(409)));
        assert!(is_conflict(&api(409)) && !is_conflict(&api(410)));
    }

    #[test]
    fn retryable_only_when_trying_again_can_help() {
        assert!(ApiErrorKind::Retryable.is_retryable());
        assert!(ApiErrorKind::Transport.is_retryable());
        for kind in [
            ApiErrorKind::NotFound,
            ApiErrorKind::Conflict,
            ApiErrorKind::Gone,
            ApiErrorKind::Forbidden,
            ApiErrorKind::Invalid,
            ApiErrorKind::Rejected(400),
            ApiErrorKind::Client,
        ] {
            assert!(!kind.is_retryable(), "{kind:?}");
        }
    }

    #[test]
    fn errors_without_an_answer() {
        let transport = kube::Error::Service("connection refused".into());
        assert_eq!(ApiErrorKind::of(&transport), ApiErrorKind::Transport);
        let decode = kube::Error::SerdeError(serde_json::from_str::<u8>("x").unwrap_err());
        assert_eq!(ApiErrorKind::of(&decode), ApiErrorKind::Client);
        assert_eq!(ApiErrorKind::Client.as_str(), "Client");
    }
}
