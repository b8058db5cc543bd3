//! `kubectl nodeauth csr ...`: flags, I/O and rendering; parsing and rules live in `nodeauth-csr`.

use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;

use nodeauth_csr::{Csr, SignatureCheck, SignerRegistry, parse};
use serde::Serialize;

/// CSR commands.
#[derive(Debug, clap::Subcommand)]
pub enum CsrCommand {
    /// Show what a CSR (the PEM of `spec.request`) asks for, and check it against a signer's rules.
    ///
    /// Exit status: 0 parsed (and valid for --signer when given), 1 parsed but violates the
    /// signer's rules, 2 not a usable CSR or bad arguments.
    Inspect(InspectArgs),
    /// Evaluate a CSR object offline with the approver's policy engine and print the decision
    /// with every rule's result.
    ///
    /// Exit status: 0 approve, 1 deny, 3 abstain (no policy covers it, or a policy that never
    /// denies found a failure), 2 unusable input or bad arguments.
    Explain(crate::csr_decide::ExplainArgs),
    /// Approve a pending CSR by hand, with a reason and message kept on it. Refuses a CSR that
    /// is already decided, and a concurrent decision (resourceVersion precondition).
    Approve(crate::csr_decide::DecideArgs),
    /// Deny a pending CSR by hand, with a reason and message kept on it.
    Deny(crate::csr_decide::DecideArgs),
}

/// Arguments of `csr inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// Validate for this signer (`spec.signerName`), e.g. kubernetes.io/kube-apiserver-client-kubelet
    /// or cluster.x-k8s.io/kubelet-serving-<provider>.
    #[arg(long, value_name = "NAME")]
    signer: Option<String>,
    /// The CSR object's `spec.usages`, comma-separated, e.g. "digital signature,client auth".
    /// Without it the usage rules are not checked.
    #[arg(long, value_name = "U1,U2,...", requires = "signer")]
    usages: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Text)]
    output: Format,
    /// PEM file holding the request (and any attestation blocks after it), or - for stdin.
    #[arg(value_name = "FILE|-")]
    file: PathBuf,
}

/// Output formats.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Format {
    Text,
    Json,
    Yaml,
}

const EXIT_INVALID: u8 = 1;
const EXIT_UNUSABLE: u8 = 2;

/// Runs a `csr` subcommand.
pub fn run(cmd: CsrCommand) -> ExitCode {
    match cmd {
        CsrCommand::Inspect(args) => inspect(&args),
        CsrCommand::Explain(args) => crate::csr_decide::explain(&args),
        CsrCommand::Approve(args) => crate::csr_decide::decide(&args, true),
        CsrCommand::Deny(args) => crate::csr_decide::decide(&args, false),
    }
}

fn fail(message: &str) -> ExitCode {
    let _ = writeln!(std::io::stderr().lock(), "error: {message}");
    ExitCode::from(EXIT_UNUSABLE)
}

fn read_input(file: &PathBuf) -> std::io::Result<Vec<u8>> {
    if file.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin().lock().read_to_end(&mut buf)?;
        Ok(buf)
    } else {
        std::fs::read(file)
    }
}

fn inspect(args: &InspectArgs) -> ExitCode {
    let registry = SignerRegistry::builtin();
    let profile = match &args.signer {
        None => None,
        Some(name) => match registry.profile(name) {
            Some(profile) => Some((name.as_str(), profile)),
            None => {
                return fail(&format!(
                    "unknown signer {name:?} (known: {})",
                    registry.names().join(", ")
                ));
            }
        },
    };
    let usages: Option<Vec<String>> = args.usages.as_deref().map(|list| {
        list.split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(str::to_owned)
            .collect()
    });

    let bytes = match read_input(&args.file) {
        Ok(bytes) => bytes,
        Err(err) => return fail(&format!("cannot read {}: {err}", args.file.display())),
    };
    let csr = match parse(&bytes) {
        Ok(csr) => csr,
        Err(err) => return fail(&format!("not a usable CSR: {err}")),
    };

    let signature = csr.verify_signature();
    let validation = profile.map(|(signer, profile)| {
        let violations = profile.validate_with(&csr, usages.as_deref(), SignatureCheck::Verify);
        ValidationView {
            signer: signer.to_owned(),
            valid: violations.is_empty(),
            usages_checked: usages.is_some(),
            violations: violations
                .into_iter()
                .map(|v| ViolationView {
                    code: v.code.as_str(),
                    message: v.message,
                })
                .collect(),
        }
    });
    let valid = validation.as_ref().is_none_or(|v| v.valid);
    let view = View::new(&csr, signature.err().map(|e| e.to_string()), validation);

    let rendered = match args.output {
        Format::Json => serde_json::to_string_pretty(&view)
            .map(|s| s + "\n")
            .map_err(|e| e.to_string()),
        Format::Yaml => serde_yaml::to_string(&view).map_err(|e| e.to_string()),
        Format::Text => Ok(view.text()),
    };
    match rendered {
        Ok(text) => {
            let _ = std::io::stdout().lock().write_all(text.as_bytes());
        }
        Err(err) => return fail(&format!("cannot render output: {err}")),
    }
    if valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_INVALID)
    }
}

/// The stable JSON/YAML document (field names documented in crates/csr/README.md).
#[derive(Debug, Serialize)]
struct View {
    subject: SubjectView,
    public_key: PublicKeyView,
    signature_algorithm: String,
    signature_valid: bool,
    signature_error: Option<String>,
    sans: SansView,
    provider_id: Option<String>,
    attestation: Option<AttestationView>,
    extensions: Vec<ExtensionView>,
    trailing_blocks: Vec<BlockView>,
    validation: Option<ValidationView>,
}

#[derive(Debug, Serialize)]
struct SubjectView {
    common_name: Option<String>,
    organizations: Vec<String>,
    rdns: Vec<Vec<AttributeView>>,
}

#[derive(Debug, Serialize)]
struct AttributeView {
    oid: String,
    value: String,
}

#[derive(Debug, Serialize)]
struct PublicKeyView {
    algorithm: String,
    bits: Option<u32>,
}

#[derive(Debug, Serialize)]
struct SansView {
    dns: Vec<String>,
    ip: Vec<String>,
    email: Vec<String>,
    uri: Vec<String>,
    other: Vec<String>,
}

#[derive(Debug, Serialize)]
struct AttestationView {
    provider: Option<String>,
    data_len: Option<usize>,
}

#[derive(Debug, Serialize)]
struct ExtensionView {
    oid: String,
    critical: bool,
}

#[derive(Debug, Serialize)]
struct BlockView {
    label: String,
    len: usize,
}

#[derive(Debug, Serialize)]
struct ValidationView {
    signer: String,
    valid: bool,
    usages_checked: bool,
    violations: Vec<ViolationView>,
}

#[derive(Debug, Serialize)]
struct ViolationView {
    code: &'static str,
    message: String,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl View {
    fn new(csr: &Csr, signature_error: Option<String>, validation: Option<ValidationView>) -> Self {
        let subject = csr.subject();
        let ext = csr.extensions();
        let sans = &ext.subject_alt_names;
        let attestation = match (csr.attestation_provider(), csr.attestation_data()) {
            (None, None) => None,
            (provider, data) => Some(AttestationView {
                provider: provider.map(str::to_owned),
                data_len: data.map(<[u8]>::len),
            }),
        };
        View {
            subject: SubjectView {
                common_name: subject.common_name().map(str::to_owned),
                organizations: subject.organizations.clone(),
                rdns: subject
                    .rdns
                    .iter()
                    .map(|rdn| {
                        rdn.attributes
                            .iter()
                            .map(|a| AttributeView {
                                oid: a.oid.to_string(),
                                value: match &a.value {
                                    nodeauth_csr::NameValue::Text(text) => text.clone(),
                                    nodeauth_csr::NameValue::Der(der) => format!("#{}", hex(der)),
                                },
                            })
                            .collect()
                    })
                    .collect(),
            },
            public_key: PublicKeyView {
                algorithm: csr.public_key().algorithm.name(),
                bits: csr.public_key().bits,
            },
            signature_algorithm: nodeauth_csr::signature_algorithm_name(csr.signature_algorithm()),
            signature_valid: signature_error.is_none(),
            signature_error,
            sans: SansView {
                dns: sans.dns.clone(),
                ip: sans.ip.iter().map(ToString::to_string).collect(),
                email: sans.email.clone(),
                uri: sans.uri.clone(),
                other: sans.other.iter().map(ToString::to_string).collect(),
            },
            provider_id: csr.provider_id().map(str::to_owned),
            attestation,
            extensions: ext
                .list
                .iter()
                .map(|e| ExtensionView {
                    oid: e.oid.to_string(),
                    critical: e.critical,
                })
                .collect(),
            trailing_blocks: csr
                .trailing_blocks()
                .iter()
                .map(|b| BlockView {
                    label: b.label.clone(),
                    len: b.data.len(),
                })
                .collect(),
            validation,
        }
    }

    fn text(&self) -> String {
        let mut out = String::new();
        let mut line = |key: &str, value: &str| {
            out.push_str(&format!("{key:<16}{value}\n"));
        };
        let none = || "(none)".to_owned();
        let list = |items: &[String]| {
            if items.is_empty() {
                none()
            } else {
                items.join(", ")
            }
        };
        line(
            "Common name:",
            self.subject
                .common_name
                .as_deref()
                .unwrap_or("(none or several)"),
        );
        line("Organizations:", &list(&self.subject.organizations));
        let bits = self
            .public_key
            .bits
            .map(|b| format!(" ({b} bits)"))
            .unwrap_or_default();
        line(
            "Public key:",
            &format!("{}{bits}", self.public_key.algorithm),
        );
        let signature = match &self.signature_error {
            None => format!("valid ({})", self.signature_algorithm),
            Some(err) => format!("NOT VALID: {err}"),
        };
        line("Signature:", &signature);
        line("DNS names:", &list(&self.sans.dns));
        line("IP addresses:", &list(&self.sans.ip));
        if !self.sans.email.is_empty() {
            line("Emails:", &list(&self.sans.email));
        }
        if !self.sans.uri.is_empty() {
            line("URIs:", &list(&self.sans.uri));
        }
        if !self.sans.other.is_empty() {
            line("Other names:", &list(&self.sans.other));
        }
        line(
            "Provider ID:",
            self.provider_id.as_deref().unwrap_or("(none)"),
        );
        let attestation = match &self.attestation {
            None => none(),
            Some(a) => format!(
                "provider {}, {} bytes of data",
                a.provider.as_deref().unwrap_or("(missing)"),
                a.data_len
                    .map_or_else(|| "no".to_owned(), |n| n.to_string())
            ),
        };
        line("Attestation:", &attestation);
        let extensions: Vec<String> = self
            .extensions
            .iter()
            .map(|e| {
                if e.critical {
                    format!("{} (critical)", e.oid)
                } else {
                    e.oid.clone()
                }
            })
            .collect();
        line("Extensions:", &list(&extensions));
        let others: Vec<String> = self
            .trailing_blocks
            .iter()
            .filter(|b| !b.label.starts_with("KUBELET AUTHENTICATOR ATTESTATION"))
            .map(|b| format!("{} ({} bytes)", b.label, b.len))
            .collect();
        if !others.is_empty() {
            line("Other blocks:", &list(&others));
        }
        if let Some(v) = &self.validation {
            let verdict = if v.valid {
                "VALID".to_owned()
            } else {
                format!("INVALID ({} violations)", v.violations.len())
            };
            let usages = if v.usages_checked {
                ""
            } else {
                " (usages not checked: no --usages)"
            };
            line("Signer:", &format!("{}: {verdict}{usages}", v.signer));
            for violation in &v.violations {
                out.push_str(&format!("  - {}: {}\n", violation.code, violation.message));
            }
        }
        out
    }
}
