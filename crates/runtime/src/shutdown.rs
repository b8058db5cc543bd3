//! One shutdown signal for the whole process.

use tokio_util::sync::CancellationToken;

use crate::error::Error;

/// The process-wide "stop now" signal: a [`CancellationToken`] fired by SIGTERM or SIGINT
/// (see [`Shutdown::on_signals`]) or by [`Shutdown::trigger`].
///
/// Clones share one token. Hand [`Shutdown::token`] (or a child of it) to anything that must
/// stop: kube's `Controller::graceful_shutdown_on`, servers, loops.
#[derive(Debug, Clone, Default)]
pub struct Shutdown {
    token: CancellationToken,
}

impl Shutdown {
    /// A shutdown signal that fires only on [`Shutdown::trigger`].
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// A shutdown signal that also fires on the first SIGTERM (what the kubelet sends) or
    /// SIGINT (Ctrl-C). Must be called inside a Tokio runtime.
    ///
    /// Once installed, the handlers replace the default "terminate at once" action for the
    /// rest of the process, so a second signal does not kill it; the shutdown timeout of
    /// [`crate::ControllerRuntime::run`] bounds how long stopping can take.
    ///
    /// # Errors
    /// [`Error::Signal`] if a handler cannot be installed.
    pub fn on_signals() -> Result<Self, Error> {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).map_err(|source| Error::Signal {
            signal: "SIGTERM",
            source,
        })?;
        let mut int = signal(SignalKind::interrupt()).map_err(|source| Error::Signal {
            signal: "SIGINT",
            source,
        })?;
        let shutdown = Self::new();
        let token = shutdown.token.clone();
        tokio::spawn(async move {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
                () = token.cancelled() => return,
            };
            tracing::info!(signal = name, "shutdown requested");
            token.cancel();
        });
        Ok(shutdown)
    }

    /// Requests shutdown. Idempotent.
    pub fn trigger(&self) {
        self.token.cancel();
    }

    /// Whether shutdown has been requested.
    #[must_use]
    pub fn is_triggered(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Completes when shutdown is requested.
    pub async fn requested(&self) {
        self.token.cancelled().await;
    }

    /// The underlying token. Cancelling it is the same as [`Shutdown::trigger`].
    #[must_use]
    pub fn token(&self) -> CancellationToken {
        self.token.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn trigger_wakes_every_clone() {
        let a = Shutdown::new();
        let b = a.clone();
        let child = a.token().child_token();
        assert!(!b.is_triggered());
        a.trigger();
        b.requested().await;
        assert!(child.is_cancelled());
    }
}
