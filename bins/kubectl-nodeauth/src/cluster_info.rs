//! `kubectl nodeauth cluster-info ...`: publish the discovery document; sign and verify it
//! offline for debugging.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kubectl_nodeauth::cluster_info_admin::{self, PublishOutcome};
use kubectl_nodeauth::kube_client;
use nodeauth_token::jws;

use crate::token::{Shown, block_on, err, fail, out, parse_token_arg, read_input, redact_arg};

/// cluster-info commands.
#[derive(Debug, clap::Subcommand)]
pub enum ClusterInfoCommand {
    /// Create or update kube-public/cluster-info from an admin kubeconfig.
    ///
    /// Only the current context's cluster (server and embedded CA) is published; users,
    /// contexts and credentials are stripped. The same kubeconfig is used to reach the cluster.
    /// The bootstrap signer adds the jws-kubeconfig-<id> signatures.
    Publish(PublishArgs),
    /// Print the detached JWS of a file's exact bytes, as the bootstrap signer computes it.
    Sign(SignArgs),
    /// Check a detached JWS over a file's exact bytes: exit 0 if valid, 1 if not.
    Verify(VerifyArgs),
}

/// Arguments of `cluster-info publish`.
#[derive(Debug, clap::Args)]
pub struct PublishArgs {
    /// Admin kubeconfig: the source of the published cluster entry and the credentials used to
    /// write it. Must embed certificate-authority-data.
    #[arg(long, env = "KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: PathBuf,
    /// Print the document that would be published and change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Arguments of `cluster-info sign`. `Debug` redacts the token.
#[derive(clap::Args)]
pub struct SignArgs {
    /// The bootstrap token (id.secret). Prefer the environment variable: arguments are visible
    /// to other users of the machine.
    #[arg(long, env = "NODEAUTH_TOKEN", hide_env_values = true)]
    pub token: String,
    /// The cluster-info kubeconfig whose exact bytes are signed (- for standard input).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: PathBuf,
}

/// Arguments of `cluster-info verify`. `Debug` redacts the token.
#[derive(clap::Args)]
pub struct VerifyArgs {
    /// The bootstrap token (id.secret). Prefer the environment variable.
    #[arg(long, env = "NODEAUTH_TOKEN", hide_env_values = true)]
    pub token: String,
    /// The cluster-info kubeconfig whose exact bytes were signed (- for standard input).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: PathBuf,
    /// The detached JWS (the value of jws-kubeconfig-<id>).
    #[arg(long, value_name = "JWS")]
    pub signature: String,
}

impl std::fmt::Debug for SignArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignArgs")
            .field("token", &Shown(redact_arg(&self.token)))
            .field("kubeconfig", &self.kubeconfig)
            .finish()
    }
}

impl std::fmt::Debug for VerifyArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifyArgs")
            .field("token", &Shown(redact_arg(&self.token)))
            .field("kubeconfig", &self.kubeconfig)
            .field("signature", &self.signature)
            .finish()
    }
}

/// Runs a cluster-info command.
pub fn run(cmd: ClusterInfoCommand) -> ExitCode {
    match cmd {
        ClusterInfoCommand::Publish(args) => run_publish(&args),
        ClusterInfoCommand::Sign(args) => run_sign(&args),
        ClusterInfoCommand::Verify(args) => run_verify(&args),
    }
}

fn run_publish(args: &PublishArgs) -> ExitCode {
    let document = match read_input(&args.kubeconfig)
        .and_then(|b| cluster_info_admin::cluster_info_document(&b))
    {
        Ok(d) => d,
        Err(e) => return fail(&e, 2),
    };
    if args.dry_run {
        out(document.trim_end());
        return ExitCode::SUCCESS;
    }
    let result = block_on(async {
        let client = kube_client::client(Some(&args.kubeconfig)).await?;
        cluster_info_admin::publish(&client, &document).await
    });
    match result {
        Ok(Ok(outcome)) => {
            out(match outcome {
                PublishOutcome::Created => "kube-public/cluster-info created",
                PublishOutcome::Updated => "kube-public/cluster-info updated",
                PublishOutcome::Unchanged => "kube-public/cluster-info unchanged",
            });
            ExitCode::SUCCESS
        }
        Ok(Err(e)) => fail(&e, 1),
        Err(e) => fail(&e.into(), 1),
    }
}

fn read_content(path: &Path) -> Result<Vec<u8>, ExitCode> {
    read_input(path).map_err(|e| fail(&e, 2))
}

fn run_sign(args: &SignArgs) -> ExitCode {
    let token = match parse_token_arg(&args.token) {
        Ok(t) => t,
        Err(code) => return code,
    };
    match read_content(&args.kubeconfig) {
        Ok(content) => {
            out(jws::sign(&content, &token).as_str());
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

fn run_verify(args: &VerifyArgs) -> ExitCode {
    let token = match parse_token_arg(&args.token) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let content = match read_content(&args.kubeconfig) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match jws::verify(args.signature.trim_end_matches('\n'), &content, &token) {
        Ok(()) => {
            out("valid");
            ExitCode::SUCCESS
        }
        Err(e) => {
            err(&format!("invalid: {e}"));
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: ClusterInfoCommand,
    }

    #[test]
    fn sign_and_verify_a_file() {
        let dir = std::env::temp_dir().join(format!("nodeauth-ci-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("cluster-info.yaml");
        std::fs::write(&file, b"apiVersion: v1\n").unwrap();
        let token = "abcdef.0123456789abcdef";
        let sig = jws::sign(
            b"apiVersion: v1\n",
            &nodeauth_token::BootstrapToken::parse(token).unwrap(),
        );
        let f = file.to_str().unwrap();
        let verify = |signature: &str| {
            let cli = Cli::try_parse_from([
                "x",
                "verify",
                "--token",
                token,
                "--kubeconfig",
                f,
                "--signature",
                signature,
            ])
            .unwrap();
            run(cli.cmd)
        };
        assert_eq!(verify(sig.as_str()), ExitCode::SUCCESS);
        let bad = format!("{}A", sig.as_str());
        assert_eq!(verify(&bad), ExitCode::from(1));
        let cli = Cli::try_parse_from(["x", "sign", "--token", "abcdef.short", "--kubeconfig", f])
            .unwrap();
        assert_eq!(run(cli.cmd), ExitCode::from(2));
        let cli = Cli::try_parse_from(["x", "sign", "--token", token, "--kubeconfig", f]).unwrap();
        let debug = format!("{:?}", cli.cmd);
        assert!(!debug.contains("0123456789abcdef"), "{debug}");
        assert_eq!(run(cli.cmd), ExitCode::SUCCESS);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
