//! `kubectl-nodeauth`: the nodeauth admin CLI, usable as `kubectl nodeauth ...`.
//!
//! Each command family lives in its own module; this file only wires them together.
//! Exit codes are uniform across commands: 0 success, 1 "checked and found wanting"
//! (an invalid CSR, a bad signature), 2 unusable input or bad arguments.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bootstrap_kubeconfig;
mod cluster_info;
mod csr;
mod csr_decide;
mod token;

/// Administer nodeauth: inspect CSRs, manage bootstrap tokens and the signed cluster-info.
#[derive(Debug, Parser)]
#[command(name = "kubectl-nodeauth", bin_name = "kubectl nodeauth", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Inspect and validate CertificateSigningRequests.
    #[command(subcommand)]
    Csr(csr::CsrCommand),
    /// Generate, create, list and delete bootstrap tokens.
    #[command(subcommand)]
    Token(token::TokenCommand),
    /// Print the `sha256:<hex>` CA pin of every certificate in a PEM file (or - for stdin).
    CaHash(token::CaHashArgs),
    /// Publish, sign and verify the kube-public/cluster-info discovery document.
    #[command(subcommand)]
    ClusterInfo(cluster_info::ClusterInfoCommand),
    /// Write the kubeconfig a node agent bootstraps with (bootstrap token, ServiceAccount token).
    #[command(subcommand)]
    BootstrapKubeconfig(bootstrap_kubeconfig::BootstrapKubeconfigCommand),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) if err.use_stderr() => {
            // Usage errors quote the offending argument, which may be a token: redact secrets.
            #[allow(clippy::print_stderr)]
            {
                eprint!("{}", redact_tokens(&err.render().to_string()));
            }
            return ExitCode::from(2);
        }
        Err(err) => {
            // --help and --version.
            let _ = err.print();
            return ExitCode::SUCCESS;
        }
    };
    match cli.command {
        Command::Csr(cmd) => csr::run(cmd),
        Command::Token(cmd) => token::run(cmd),
        Command::CaHash(args) => token::run_ca_hash(args),
        Command::ClusterInfo(cmd) => cluster_info::run(cmd),
        Command::BootstrapKubeconfig(cmd) => bootstrap_kubeconfig::run(cmd),
    }
}

/// Replaces the secret half of anything shaped like a bootstrap token (`[a-z0-9]{6}.[a-z0-9]{16}`,
/// not part of a longer word) with `<redacted>`.
fn redact_tokens(text: &str) -> String {
    let b = text.as_bytes();
    let tok = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let is_tok = |j: usize| b.get(j).is_some_and(|c| tok(*c));
        let at_boundary = i == 0 || !is_tok(i - 1);
        let fits = (i..i + 6).all(is_tok)
            && b.get(i + 6) == Some(&b'.')
            && (i + 7..i + 23).all(is_tok)
            && !is_tok(i + 23);
        if at_boundary && fits {
            out.push_str(text.get(i..i + 7).unwrap_or_default());
            out.push_str("<redacted>");
            i += 23;
        } else {
            let ch = text.get(i..).and_then(|t| t.chars().next()).unwrap_or('?');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::redact_tokens;

    #[test]
    fn token_secrets_in_usage_errors_are_redacted() {
        let e = "error: unexpected argument 'abcdef.0123456789abcdef' found";
        assert_eq!(
            redact_tokens(e),
            "error: unexpected argument 'abcdef.<redacted>' found"
        );
        // Not a token: left alone (too long, or part of a longer word).
        let long = "xabcdef.0123456789abcdef and abcdef.0123456789abcdefg";
        assert_eq!(redact_tokens(long), long);
        assert_eq!(
            redact_tokens("ünïcode abcdef.0123456789abcdef"),
            "ünïcode abcdef.<redacted>"
        );
    }
}
