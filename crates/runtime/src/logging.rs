//! Process-wide logging through `tracing-subscriber`.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::util::SubscriberInitExt;

use crate::args::LogFormat;
use crate::error::LoggingError;

/// Installs the global tracing subscriber: lines on stderr, in `format`, filtered by `filter`
/// (EnvFilter syntax such as `info` or `info,kube=warn`).
///
/// Call it once, first thing in `main`. Logging can only be set up once per process: a second
/// call returns [`LoggingError::AlreadyInitialised`] and leaves the first subscriber in place;
/// it never panics.
///
/// # Errors
/// [`LoggingError::InvalidFilter`] if `filter` does not parse, [`LoggingError::AlreadyInitialised`]
/// if a global subscriber is already installed.
pub fn init_logging(format: LogFormat, filter: &str) -> Result<(), LoggingError> {
    let env_filter = EnvFilter::try_new(filter).map_err(|source| LoggingError::InvalidFilter {
        filter: filter.to_owned(),
        source,
    })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(env_filter)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder.finish().try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .finish()
            .try_init(),
    };
    result.map_err(|_| LoggingError::AlreadyInitialised)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_filter_is_refused_before_anything_is_installed() {
        let err = init_logging(LogFormat::Text, "info,=[").unwrap_err();
        assert!(matches!(err, LoggingError::InvalidFilter { .. }), "{err}");
    }

    #[test]
    fn a_second_init_is_an_error_not_a_panic() {
        // The first call may lose a race with another test that also installs a subscriber;
        // either way exactly one succeeds and the rest report AlreadyInitialised.
        let first = init_logging(LogFormat::Json, "debug");
        let second = init_logging(LogFormat::Text, "info");
        assert!(matches!(second, Err(LoggingError::AlreadyInitialised)));
        if let Err(e) = first {
            assert!(matches!(e, LoggingError::AlreadyInitialised));
        }
        tracing::info!(
            token = "<redacted>",
            "logging works after a refused second init"
        );
    }
}
