//! `kubectl nodeauth bootstrap-kubeconfig ...`: the kubeconfig a node agent bootstraps with,
//! for each kind of bootstrap credential the seeds use.
//!
//! - `token`: a bootstrap token (seed 003) — an existing one, or a new one created here.
//! - `service-account`: a short-lived TokenRequest token for a node-bootstrapper ServiceAccount
//!   (seed 000's worker path), bound to `system:node-bootstrapper`.
//! - `client-cert`: a short-lived client certificate from a dedicated bootstrap CA that
//!   kube-apiserver trusts for client authentication (`--client-ca-file`); revoked wholesale by
//!   removing that CA from the bundle. Issued locally: nothing is created in the cluster.
//!
//! The cluster entry (server, CA) is taken from the admin kubeconfig's current context. The
//! output holds a credential: it is written with mode 0600 (or to stdout with `-o -`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use kube::api::{Api, ObjectMeta, PostParams};
use kubectl_nodeauth::token_admin::{self, CreateOptions, DEFAULT_GROUP};
use nodeauth_k8s::error::is_conflict;
use nodeauth_token::kubeconfig::ClusterInfo;
use nodeauth_token::secret::Usage;

use crate::token::{block_on, err, fail, out, parse_token_arg};

/// The kinds of bootstrap kubeconfig.
#[derive(Debug, clap::Subcommand)]
pub enum BootstrapKubeconfigCommand {
    /// Authenticate with a bootstrap token (given with --token, or created with --create).
    Token(TokenArgs),
    /// Authenticate with a TokenRequest token of a node-bootstrapper ServiceAccount.
    ServiceAccount(ServiceAccountArgs),
    /// Authenticate with a short-lived client certificate from a bootstrap CA that
    /// kube-apiserver trusts for client authentication (add it to --client-ca-file). The
    /// identity is `system:bootstrap:<name>` in group `system:bootstrappers` (+ --groups): the
    /// requester the documented approval policy's `bootstrap` section covers. Bind
    /// `system:node-bootstrapper` to the group so it may create CSRs.
    ClientCert(ClientCertArgs),
}

/// Options every kind takes.
#[derive(Debug, clap::Args)]
pub struct Common {
    /// Admin kubeconfig: the cluster entry to use and the credentials to create objects with.
    #[arg(long, env = "KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: PathBuf,
    /// Where to write the bootstrap kubeconfig (mode 0600); `-` for standard output.
    #[arg(short = 'o', long, value_name = "FILE", default_value = "-")]
    pub output: PathBuf,
}

/// Arguments of `bootstrap-kubeconfig token`. `Debug` never shows the token.
#[derive(clap::Args)]
pub struct TokenArgs {
    #[command(flatten)]
    common: Common,
    /// An existing bootstrap token (id.secret). Prefer the environment variable.
    #[arg(
        long,
        env = "NODEAUTH_TOKEN",
        hide_env_values = true,
        conflicts_with = "create"
    )]
    token: Option<String>,
    /// Create a new token (usages signing,authentication; --ttl; --groups).
    #[arg(long)]
    create: bool,
    /// TTL of a created token (Go duration; 0 = never).
    #[arg(long, default_value = "24h")]
    ttl: String,
    /// Extra group of a created token.
    #[arg(long, default_value = DEFAULT_GROUP)]
    groups: Vec<String>,
}

impl std::fmt::Debug for TokenArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenArgs")
            .field("common", &self.common)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("create", &self.create)
            .finish_non_exhaustive()
    }
}

/// Arguments of `bootstrap-kubeconfig service-account`.
#[derive(Debug, clap::Args)]
pub struct ServiceAccountArgs {
    #[command(flatten)]
    common: Common,
    /// The ServiceAccount's namespace (must exist).
    #[arg(long, default_value = "nodeauth-system")]
    namespace: String,
    /// The ServiceAccount (created if missing).
    #[arg(long, default_value = "node-bootstrapper")]
    name: String,
    /// Token lifetime in seconds (TokenRequest; at least 600).
    #[arg(long, default_value_t = 3600, value_parser = clap::value_parser!(i64).range(600..))]
    duration_seconds: i64,
    /// Also bind the auto-approval role for node client CSRs
    /// (`system:certificates.k8s.io:certificatesigningrequests:nodeclient`).
    #[arg(long)]
    auto_approve: bool,
}

/// Arguments of `bootstrap-kubeconfig client-cert`.
#[derive(Debug, clap::Args)]
pub struct ClientCertArgs {
    #[command(flatten)]
    common: Common,
    /// The bootstrap CA certificate (PEM; P-256, P-384, RSA or Ed25519 key).
    #[arg(long, value_name = "FILE")]
    ca_cert: PathBuf,
    /// The bootstrap CA's private key (PEM, PKCS#8 or SEC1/PKCS#1).
    #[arg(long, value_name = "FILE")]
    ca_key: PathBuf,
    /// The bootstrap identity's name: the certificate's CN is `system:bootstrap:<name>`.
    /// Default: `cert-` and six random characters.
    #[arg(long)]
    name: Option<String>,
    /// Groups besides `system:bootstrappers` (the certificate's O attributes).
    #[arg(long, default_value = DEFAULT_GROUP)]
    groups: Vec<String>,
    /// Certificate lifetime (Go duration, at least 10m): how long the kubeconfig can bootstrap.
    #[arg(long, default_value = "1h")]
    ttl: String,
}

/// Runs a bootstrap-kubeconfig command.
pub fn run(cmd: BootstrapKubeconfigCommand) -> ExitCode {
    let result = block_on(async move {
        match cmd {
            BootstrapKubeconfigCommand::Token(a) => token(a).await,
            BootstrapKubeconfigCommand::ServiceAccount(a) => service_account(a).await,
            BootstrapKubeconfigCommand::ClientCert(a) => client_cert(a),
        }
    });
    match result {
        Ok(Ok(code)) => code,
        Ok(Err(e)) => fail(&e, 1),
        Err(e) => fail(&anyhow::Error::from(e), 1),
    }
}

fn cluster(common: &Common) -> anyhow::Result<ClusterInfo> {
    let bytes = std::fs::read(&common.kubeconfig)
        .with_context(|| format!("cannot read {}", common.kubeconfig.display()))?;
    ClusterInfo::from_admin_kubeconfig(&bytes)
        .with_context(|| format!("no usable cluster in {}", common.kubeconfig.display()))
}

fn emit(path: &Path, yaml: &str) -> anyhow::Result<()> {
    if path.as_os_str() == "-" {
        out(yaml.trim_end());
        return Ok(());
    }
    nodeauth_certstore::write_private(path, yaml.as_bytes())?;
    err(&format!(
        "bootstrap kubeconfig written to {}",
        path.display()
    ));
    Ok(())
}

async fn token(a: TokenArgs) -> anyhow::Result<ExitCode> {
    let info = cluster(&a.common)?;
    let token = match (&a.token, a.create) {
        (Some(t), _) => match parse_token_arg(t) {
            Ok(t) => t,
            Err(code) => return Ok(code),
        },
        (None, true) => {
            let client = kubectl_nodeauth::kube_client::client(Some(&a.common.kubeconfig)).await?;
            let record = token_admin::build_record(
                CreateOptions {
                    token: None,
                    ttl: token_admin::parse_ttl(&a.ttl)?,
                    usages: [Usage::Signing, Usage::Authentication].into(),
                    extra_groups: a.groups.clone(),
                    description: "bootstrap kubeconfig (kubectl nodeauth bootstrap-kubeconfig)"
                        .into(),
                },
                jiff::Timestamp::now(),
            )?;
            token_admin::create_token(&client, &record).await?;
            err(&format!(
                "bootstrap token {:?} created",
                record.token.id().as_str()
            ));
            record.token
        }
        (None, false) => {
            err("error: give --token (or NODEAUTH_TOKEN), or --create");
            return Ok(ExitCode::from(2));
        }
    };
    let yaml = nodeauth_token::kubeconfig::bootstrap_token_kubeconfig(&info, &token);
    emit(&a.common.output, &yaml)?;
    Ok(ExitCode::SUCCESS)
}

async fn bind(
    client: &kube::Client,
    name: &str,
    role: &str,
    subject: Subject,
) -> anyhow::Result<()> {
    let crb = ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: role.into(),
        },
        subjects: Some(vec![subject]),
    };
    match Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &crb)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_conflict(&e) => Ok(()),
        Err(e) => {
            Err(anyhow::Error::from(e).context(format!("cannot create ClusterRoleBinding {name}")))
        }
    }
}

async fn service_account(a: ServiceAccountArgs) -> anyhow::Result<ExitCode> {
    let info = cluster(&a.common)?;
    let client = kubectl_nodeauth::kube_client::client(Some(&a.common.kubeconfig)).await?;
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &a.namespace);
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(a.name.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    match sas.create(&PostParams::default(), &sa).await {
        Ok(_) => {}
        Err(e) if is_conflict(&e) => {}
        Err(e) => {
            return Err(anyhow::Error::from(e).context(format!(
                "cannot create ServiceAccount {}/{}",
                a.namespace, a.name
            )));
        }
    }
    let subject = Subject {
        api_group: None,
        kind: "ServiceAccount".into(),
        name: a.name.clone(),
        namespace: Some(a.namespace.clone()),
    };
    let base = format!("nodeauth:bootstrap:{}:{}", a.namespace, a.name);
    bind(&client, &base, "system:node-bootstrapper", subject.clone()).await?;
    if a.auto_approve {
        bind(
            &client,
            &format!("{base}:nodeclient"),
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            subject,
        )
        .await?;
    }
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(a.duration_seconds),
            ..Default::default()
        }),
        ..Default::default()
    };
    let issued = sas
        .create_token_request(&a.name, &PostParams::default(), &request)
        .await
        .with_context(|| format!("cannot request a token for {}/{}", a.namespace, a.name))?;
    let token = issued
        .status
        .and_then(|s| s.token)
        .filter(|t| !t.is_empty())
        .context("the TokenRequest returned no token")?;
    let user = format!("system:serviceaccount:{}:{}", a.namespace, a.name);
    let yaml = nodeauth_token::kubeconfig::bearer_token_kubeconfig(&info, &user, &token);
    emit(&a.common.output, &yaml)?;
    Ok(ExitCode::SUCCESS)
}

fn client_cert(a: ClientCertArgs) -> anyhow::Result<ExitCode> {
    use nodeauth_csr::{CsrBuilder, CsrSigningKey};
    use nodeauth_issuer::{CertificateAuthority, IssuePolicy, OsRandomSerials};

    let info = cluster(&a.common)?;
    let read = |p: &Path| std::fs::read(p).with_context(|| format!("cannot read {}", p.display()));
    let ca = CertificateAuthority::from_pem(&read(&a.ca_cert)?, &read(&a.ca_key)?).with_context(
        || {
            format!(
                "--ca-cert {} / --ca-key {}",
                a.ca_cert.display(),
                a.ca_key.display()
            )
        },
    )?;
    let ttl = token_admin::parse_ttl(&a.ttl)
        .context("--ttl")?
        .context("--ttl: a bootstrap certificate must expire (0 is not allowed)")?;
    let seconds = ttl.as_secs();
    if seconds < 600 {
        anyhow::bail!("--ttl {}: at least 10m", a.ttl);
    }
    let name = match &a.name {
        Some(n) => n.clone(),
        None => {
            let token =
                nodeauth_token::BootstrapToken::generate().context("generating a random name")?;
            format!("cert-{}", token.id().as_str())
        }
    };
    let user = format!("system:bootstrap:{name}");
    let key = CsrSigningKey::generate_p256()?;
    let mut builder = CsrBuilder::new()
        .common_name(&user)
        .organization("system:bootstrappers");
    for g in a.groups.iter().filter(|g| *g != "system:bootstrappers") {
        builder = builder.organization(g);
    }
    let csr = nodeauth_csr::parse(builder.build(&key)?.as_bytes())?;
    let usages = nodeauth_issuer::parse_usages(&["digital signature", "client auth"])?;
    let policy = IssuePolicy {
        max_duration: std::time::Duration::from_secs(seconds.unsigned_abs()),
        min_duration: std::time::Duration::from_secs(600),
        ..IssuePolicy::default()
    };
    let issued = nodeauth_issuer::issue(
        &ca,
        &csr,
        &usages,
        Some(seconds),
        &policy,
        jiff::Timestamp::now(),
        &mut OsRandomSerials,
    )
    .context("issuing the bootstrap certificate")?;
    let key_pem = key.to_pkcs8_pem()?;
    let yaml =
        nodeauth_token::kubeconfig::client_cert_kubeconfig(&info, &user, &issued.pem, &key_pem);
    emit(&a.common.output, &yaml)?;
    err(&format!(
        "{user} (groups system:bootstrappers{}) until {}; kube-apiserver must trust {} for client certificates",
        a.groups
            .iter()
            .filter(|g| *g != "system:bootstrappers")
            .map(|g| format!(", {g}"))
            .collect::<String>(),
        issued.not_after,
        a.ca_cert.display()
    ));
    Ok(ExitCode::SUCCESS)
}
