//! `kubectl nodeauth token ...` and `ca-hash`: flags and wiring; the work is in
//! `nodeauth-token` and `kubectl_nodeauth::token_admin`.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kubectl_nodeauth::kube_client;
use kubectl_nodeauth::token_admin::{self, CreateOptions, DEFAULT_GROUP};
use nodeauth_token::{BootstrapToken, Timestamp, parse_id_or_token, pin};

/// Exit code for unusable input (malformed token, bad flag values).
const EXIT_USAGE: u8 = 2;
/// Exit code for an operation that was attempted and failed.
const EXIT_FAILED: u8 = 1;

/// Writes a line to stdout; a closed pipe is not worth a panic.
pub(crate) fn out(line: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

/// Writes a line to stderr.
pub(crate) fn err(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Reports an error (with its causes on one line) and returns `code`.
pub(crate) fn fail(e: &anyhow::Error, code: u8) -> ExitCode {
    err(&format!("error: {e:#}"));
    ExitCode::from(code)
}

/// Parses a token argument, or reports which rule it breaks (never echoing it) and exits 2.
pub(crate) fn parse_token_arg(s: &str) -> Result<BootstrapToken, ExitCode> {
    BootstrapToken::parse(s).map_err(|e| {
        err(&format!("error: malformed bootstrap token: {e}"));
        ExitCode::from(EXIT_USAGE)
    })
}

/// A token-ish command-line value as it may be shown (errors, `Debug`): an id-sized value
/// without a `.` as is; otherwise at most the part before the `.`, never anything that may be
/// a secret (a full token, or a secret pasted alone).
pub(crate) fn redact_arg(s: &str) -> String {
    match s.split_once('.') {
        Some((id, _)) if id.chars().count() <= nodeauth_token::TOKEN_ID_LEN => {
            format!("{id:?}.<redacted>")
        }
        Some(_) => "<redacted>".into(),
        None if s.chars().count() <= nodeauth_token::TOKEN_ID_LEN => format!("{s:?}"),
        None => "<redacted>".into(),
    }
}

/// Debug-prints an already redacted value as is.
pub(crate) struct Shown(pub(crate) String);

impl std::fmt::Debug for Shown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Runs a future on a small runtime (the pure crates need none; only API calls do).
pub(crate) fn block_on<F: std::future::Future>(f: F) -> std::io::Result<F::Output> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(f))
}

/// Where to reach kube-apiserver.
#[derive(Debug, Clone, clap::Args)]
pub struct KubeArgs {
    /// Kubeconfig file(s) to use (several joined like $KUBECONFIG are merged). Defaults to
    /// $KUBECONFIG, then ~/.kube/config, then the in-cluster service account.
    #[arg(long, env = "KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
}

/// Token commands: kubeadm `token` parity, against the cluster in your kubeconfig.
#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Print a new random token. Nothing is stored; pass it to `token create` to store it.
    Generate,
    /// Create a bootstrap token Secret in kube-system and print the token.
    ///
    /// Anyone holding a token with the authentication usage can ask to become a node: keep the
    /// TTL short and delete tokens you no longer need.
    Create(CreateArgs),
    /// List bootstrap tokens. Prints the full tokens, like kubeadm.
    List(ListArgs),
    /// Delete bootstrap tokens, given by id (abcdef) or full token (abcdef.0123456789abcdef).
    Delete(DeleteArgs),
}

/// Arguments of `token create`. `Debug` redacts the token.
#[derive(clap::Args)]
pub struct CreateArgs {
    /// The token to store (id.secret, [a-z0-9]{6}.[a-z0-9]{16}); generated when omitted.
    pub token: Option<String>,
    /// Lifetime, as a Go duration (24h, 1h30m, 90s); 0 means the token never expires.
    #[arg(long, default_value = "24h", env = "NODEAUTH_TOKEN_TTL")]
    pub ttl: String,
    /// What the token may be used for: signing (cluster-info discovery) and/or authentication
    /// (TLS bootstrap).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "signing,authentication",
        env = "NODEAUTH_TOKEN_USAGES"
    )]
    pub usages: Vec<String>,
    /// Extra groups the token authenticates as (each system:bootstrappers:[a-z0-9:-]*[a-z0-9]).
    /// Defaults to system:bootstrappers:nodeauth:default-node-token when the authentication
    /// usage is set; pass an empty value for none.
    #[arg(long, value_delimiter = ',', env = "NODEAUTH_TOKEN_GROUPS")]
    pub groups: Option<Vec<String>>,
    /// A human-readable note on what the token is for.
    #[arg(long, default_value = "", env = "NODEAUTH_TOKEN_DESCRIPTION")]
    pub description: String,
    /// Print a complete `kubeadm join` command (server, token, CA pins) instead of the token.
    #[arg(long)]
    pub print_join_command: bool,
    #[command(flatten)]
    pub kube: KubeArgs,
}

impl std::fmt::Debug for CreateArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreateArgs")
            .field(
                "token",
                &self.token.as_deref().map(|t| Shown(redact_arg(t))),
            )
            .field("ttl", &self.ttl)
            .field("usages", &self.usages)
            .field("groups", &self.groups)
            .field("description", &self.description)
            .field("print_join_command", &self.print_join_command)
            .field("kube", &self.kube)
            .finish()
    }
}

/// Output formats of `token list`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum OutputFormat {
    /// kubeadm's table.
    Table,
    /// JSON objects (kubeadm's output.kubeadm.k8s.io/v1alpha3 BootstrapToken).
    Json,
    /// YAML documents.
    Yaml,
}

/// Arguments of `token list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Output format.
    #[arg(
        short,
        long,
        value_enum,
        default_value = "table",
        env = "NODEAUTH_OUTPUT"
    )]
    pub output: OutputFormat,
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// Arguments of `token delete`. `Debug` redacts full tokens.
#[derive(clap::Args)]
pub struct DeleteArgs {
    /// Token ids or full tokens.
    #[arg(required = true, value_name = "ID|TOKEN")]
    pub tokens: Vec<String>,
    #[command(flatten)]
    pub kube: KubeArgs,
}

impl std::fmt::Debug for DeleteArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeleteArgs")
            .field(
                "tokens",
                &self
                    .tokens
                    .iter()
                    .map(|t| Shown(redact_arg(t)))
                    .collect::<Vec<_>>(),
            )
            .field("kube", &self.kube)
            .finish()
    }
}

/// Arguments of `ca-hash`.
#[derive(Debug, clap::Args)]
pub struct CaHashArgs {
    /// PEM file with one or more certificates, or - for standard input.
    pub file: String,
}

/// Runs a token command.
pub fn run(cmd: TokenCommand) -> ExitCode {
    match cmd {
        TokenCommand::Generate => match BootstrapToken::generate() {
            Ok(t) => {
                out(t.expose().as_str());
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e.into(), EXIT_FAILED),
        },
        TokenCommand::Create(args) => run_create(args),
        TokenCommand::List(args) => run_list(args),
        TokenCommand::Delete(args) => run_delete(args),
    }
}

/// The create options from flags; `Err` is the exit code after reporting.
fn create_options(args: &CreateArgs) -> Result<CreateOptions, ExitCode> {
    let token = match &args.token {
        Some(t) => Some(parse_token_arg(t)?),
        None => None,
    };
    let usage_err = |e: anyhow::Error| fail(&e, EXIT_USAGE);
    let ttl = token_admin::parse_ttl(&args.ttl).map_err(|e| usage_err(e.context("--ttl")))?;
    let usages = token_admin::parse_usages(args.usages.iter().map(String::as_str))
        .map_err(|e| usage_err(e.context("--usages")))?;
    let extra_groups = match &args.groups {
        Some(groups) => token_admin::parse_groups(groups.iter().map(String::as_str))
            .map_err(|e| usage_err(anyhow::Error::from(e).context("--groups")))?,
        None if usages.contains(&nodeauth_token::secret::Usage::Authentication) => {
            vec![DEFAULT_GROUP.to_owned()]
        }
        None => Vec::new(),
    };
    Ok(CreateOptions {
        token,
        ttl,
        usages,
        extra_groups,
        description: args.description.clone(),
    })
}

fn default_kubeconfig_path(kube: &KubeArgs) -> Option<PathBuf> {
    kube.kubeconfig
        .as_deref()
        .and_then(|p| std::env::split_paths(p.as_os_str()).find(|p| !p.as_os_str().is_empty()))
        .or_else(|| std::env::home_dir().map(|h| h.join(".kube").join("config")))
}

fn run_create(args: CreateArgs) -> ExitCode {
    let opts = match create_options(&args) {
        Ok(o) => o,
        Err(code) => return code,
    };
    let record = match token_admin::build_record(opts, Timestamp::now()) {
        Ok(r) => r,
        Err(e) => return fail(&e, EXIT_USAGE),
    };
    // Work out the join command before writing anything, so a bad kubeconfig leaves no token behind.
    let join = if args.print_join_command {
        let path = default_kubeconfig_path(&args.kube);
        let bytes = path
            .as_deref()
            .ok_or_else(|| anyhow::anyhow!("no kubeconfig to take the join command from"))
            .and_then(read_input);
        match bytes.and_then(|b| token_admin::join_command(&b, &record.token)) {
            Ok(cmd) => Some(cmd),
            Err(e) => return fail(&e, EXIT_USAGE),
        }
    } else {
        None
    };
    let result = block_on(async {
        let client = kube_client::client(args.kube.kubeconfig.as_deref()).await?;
        token_admin::create_token(&client, &record).await
    });
    match result {
        Ok(Ok(())) => {
            match join {
                Some(cmd) => out(&cmd),
                None => out(record.token.expose().as_str()),
            }
            ExitCode::SUCCESS
        }
        Ok(Err(e)) => fail(&e, EXIT_FAILED),
        Err(e) => fail(&e.into(), EXIT_FAILED),
    }
}

fn run_list(args: ListArgs) -> ExitCode {
    let result = block_on(async {
        let client = kube_client::client(args.kube.kubeconfig.as_deref()).await?;
        token_admin::list_tokens(&client).await
    });
    let entries = match result {
        Ok(Ok(entries)) => entries,
        Ok(Err(e)) => return fail(&e, EXIT_FAILED),
        Err(e) => return fail(&e.into(), EXIT_FAILED),
    };
    let mut records = Vec::new();
    for entry in entries {
        match entry {
            Ok(r) => records.push(r),
            Err(e) => err(&format!("warning: skipping invalid token secret: {e}")),
        }
    }
    records.sort_by(|a, b| a.token.id().cmp(b.token.id()));
    let rendered = match args.output {
        OutputFormat::Table => Ok(token_admin::render_table(&records, Timestamp::now())),
        OutputFormat::Json => token_admin::render_json(&records),
        OutputFormat::Yaml => token_admin::render_yaml(&records),
    };
    match rendered {
        Ok(s) => {
            let _ = std::io::stdout().lock().write_all(s.as_bytes());
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e, EXIT_FAILED),
    }
}

fn run_delete(args: DeleteArgs) -> ExitCode {
    // Validate every argument before deleting anything.
    let mut ids = Vec::new();
    for arg in &args.tokens {
        match parse_id_or_token(arg) {
            Ok(id) => ids.push(id),
            Err(e) => {
                err(&format!(
                    "error: {} is neither a token id nor a bootstrap token: {e}",
                    redact_arg(arg)
                ));
                return ExitCode::from(EXIT_USAGE);
            }
        }
    }
    let result = block_on(async {
        let client = kube_client::client(args.kube.kubeconfig.as_deref()).await?;
        for id in &ids {
            token_admin::delete_token(&client, id).await?;
            out(&format!("bootstrap token {:?} deleted", id.as_str()));
        }
        anyhow::Ok(())
    });
    match result {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => fail(&e, EXIT_FAILED),
        Err(e) => fail(&e.into(), EXIT_FAILED),
    }
}

/// Reads a file, or standard input for `-`.
pub(crate) fn read_input(path: &Path) -> anyhow::Result<Vec<u8>> {
    use anyhow::Context as _;
    if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .lock()
            .read_to_end(&mut buf)
            .context("cannot read standard input")?;
        Ok(buf)
    } else {
        std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
    }
}

/// Runs `ca-hash`: one `sha256:<hex>` line per certificate.
pub fn run_ca_hash(args: CaHashArgs) -> ExitCode {
    let pem = match read_input(Path::new(&args.file)) {
        Ok(b) => b,
        Err(e) => return fail(&e, EXIT_USAGE),
    };
    match pin::pins_from_pem(&pem) {
        Ok(pins) => {
            for p in pins {
                out(&p.to_string());
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(&anyhow::Error::from(e).context(args.file), EXIT_USAGE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: TokenCommand,
    }

    fn parse(args: &[&str]) -> TokenCommand {
        Cli::try_parse_from(std::iter::once("token").chain(args.iter().copied()))
            .unwrap()
            .cmd
    }

    #[test]
    fn create_defaults_match_kubeadm() {
        let TokenCommand::Create(args) = parse(&["create"]) else {
            panic!("not create")
        };
        let opts = create_options(&args).unwrap();
        assert!(opts.token.is_none());
        assert_eq!(opts.ttl, Some(jiff::SignedDuration::from_hours(24)));
        assert_eq!(opts.usages.len(), 2);
        assert_eq!(opts.extra_groups, [DEFAULT_GROUP]);
    }

    #[test]
    fn create_flags() {
        let TokenCommand::Create(args) = parse(&[
            "create",
            "abcdef.0123456789abcdef",
            "--ttl",
            "0",
            "--usages",
            "signing",
            "--description",
            "d",
            "--print-join-command",
        ]) else {
            panic!("not create")
        };
        assert!(args.print_join_command);
        let opts = create_options(&args).unwrap();
        assert_eq!(opts.ttl, None);
        assert!(
            opts.extra_groups.is_empty(),
            "no default groups without authentication"
        );
        assert_eq!(opts.token.unwrap().id().as_str(), "abcdef");

        let TokenCommand::Create(args) = parse(&[
            "create",
            "--groups",
            "system:bootstrappers:a,system:bootstrappers:b",
        ]) else {
            panic!("not create")
        };
        assert_eq!(create_options(&args).unwrap().extra_groups.len(), 2);
    }

    #[test]
    fn malformed_inputs_exit_2() {
        for args in [
            &["create", "ABCDEF.0123456789abcdef"][..],
            &["create", "--ttl", "1d"],
            &["create", "--usages", "signing,bogus"],
            &["create", "--groups", "system:masters"],
        ] {
            let TokenCommand::Create(a) = parse(args) else {
                panic!("not create")
            };
            assert_eq!(
                create_options(&a).err(),
                Some(ExitCode::from(2)),
                "{args:?}"
            );
        }
    }

    #[test]
    fn debug_and_errors_redact_secrets() {
        let TokenCommand::Create(a) = parse(&["create", "abcdef.0123456789abcdef"]) else {
            panic!("not create")
        };
        let debug = format!("{a:?}");
        assert!(!debug.contains("0123456789abcdef"), "{debug}");
        assert!(debug.contains("\"abcdef\".<redacted>"), "{debug}");
        let TokenCommand::Delete(d) = parse(&[
            "delete",
            "bcdefg.0123456789abcdef",
            "0123456789abcdef",
            "abcdef",
        ]) else {
            panic!("not delete")
        };
        let debug = format!("{d:?}");
        assert!(!debug.contains("0123456789abcdef"), "{debug}");
        assert!(debug.contains("\"abcdef\""), "{debug}");
        assert_eq!(
            redact_arg("ABCDEF.0123456789abcdef"),
            "\"ABCDEF\".<redacted>"
        );
        assert_eq!(redact_arg("0123456789.abcdef"), "<redacted>");
        assert_eq!(redact_arg("abc"), "\"abc\"");
    }

    #[test]
    fn list_and_delete_parse() {
        let TokenCommand::List(l) = parse(&["list", "-o", "yaml"]) else {
            panic!("not list")
        };
        assert!(matches!(l.output, OutputFormat::Yaml));
        let TokenCommand::Delete(d) = parse(&["delete", "abcdef", "bcdefg.0123456789abcdef"])
        else {
            panic!("not delete")
        };
        assert_eq!(d.tokens.len(), 2);
        assert!(Cli::try_parse_from(["token", "delete"]).is_err());
    }
}
