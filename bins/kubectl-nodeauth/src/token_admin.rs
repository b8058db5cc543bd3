//! Bootstrap token operations against kube-apiserver (`token create/list/delete`) and their
//! output, with kubeadm's behaviour and formats.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use anyhow::{Context as _, bail};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Secret as K8sSecret;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use nodeauth_token::expiration::format_expiration;
use nodeauth_token::kubeconfig::ClusterInfo;
use nodeauth_token::secret::{
    Expiration, GroupError, SECRET_NAMESPACE, SECRET_TYPE, Usage, validate_extra_group,
};
use nodeauth_token::{BootstrapToken, SecretError, TokenId, TokenRecord};
use serde::Serialize;

use crate::kube_client::{is_already_exists, is_not_found, secret_from_k8s, secret_to_k8s};

/// The extra group `token create` gives a token unless told otherwise.
pub const DEFAULT_GROUP: &str = "system:bootstrappers:nodeauth:default-node-token";
/// The usages `token create` gives a token unless told otherwise.
pub const DEFAULT_USAGES: &[&str] = &["signing", "authentication"];

/// What `token create` should write.
#[derive(Debug, Clone)]
pub struct CreateOptions {
    /// The token to store; generated if `None`.
    pub token: Option<BootstrapToken>,
    /// Lifetime from now; `None` = never expires.
    pub ttl: Option<SignedDuration>,
    /// Usages.
    pub usages: BTreeSet<Usage>,
    /// Extra groups (only meaningful with the authentication usage).
    pub extra_groups: Vec<String>,
    /// Free-form description.
    pub description: String,
}

/// Parses a Go-style duration (`24h`, `1h30m`, `90s`, `1.5h`, `0`); `0` means no expiry.
///
/// Deliberately not `nodeauth_runtime::parse_duration` (the controllers' flag parser): `--ttl`
/// must accept what `kubeadm token create --ttl` accepts — Go's `time.ParseDuration`, with
/// fractions and mixed units (`1.5h30m`) and a bare `0` for a token that never expires — which
/// that parser does not, and mapping `0` to "no expiry" is this flag's own meaning.
pub fn parse_ttl(s: &str) -> anyhow::Result<Option<SignedDuration>> {
    if s == "0" {
        return Ok(None);
    }
    let mut rest = s;
    let mut total = 0f64;
    if rest.is_empty() {
        bail!("invalid duration {s:?}: empty");
    }
    if rest.starts_with('-') {
        bail!(
            "invalid duration {s:?}: a TTL cannot be negative (use 0 for a token that never expires)"
        );
    }
    rest = rest.strip_prefix('+').unwrap_or(rest);
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..n]
            .parse()
            .map_err(|_| anyhow::anyhow!("invalid duration {s:?}: expected a number"))?;
        rest = &rest[n..];
        let u = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit_secs = match &rest[..u] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => bail!("invalid duration {s:?}: missing unit (ns, us, ms, s, m, h)"),
            other => bail!("invalid duration {s:?}: unknown unit {other:?} (ns, us, ms, s, m, h)"),
        };
        rest = &rest[u..];
        total += number * unit_secs;
    }
    let d = SignedDuration::try_from_secs_f64(total)
        .map_err(|_| anyhow::anyhow!("invalid duration {s:?}: too large"))?;
    Ok(if d.is_zero() { None } else { Some(d) })
}

/// Parses `--usages` values (kubeadm accepts only `signing` and `authentication`).
pub fn parse_usages<'a>(
    values: impl IntoIterator<Item = &'a str>,
) -> anyhow::Result<BTreeSet<Usage>> {
    values
        .into_iter()
        .filter(|v| !v.is_empty())
        .map(|v| Usage::parse_known(v).map_err(anyhow::Error::from))
        .collect()
}

/// Validates `--groups` values.
pub fn parse_groups<'a>(
    values: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<String>, GroupError> {
    values
        .into_iter()
        .filter(|v| !v.is_empty())
        .map(|g| validate_extra_group(g).map(|()| g.to_owned()))
        .collect()
}

/// Builds the record `token create` stores, checking kubeadm's rules (groups need the
/// authentication usage).
pub fn build_record(opts: CreateOptions, now: Timestamp) -> anyhow::Result<TokenRecord> {
    if !opts.extra_groups.is_empty() && !opts.usages.contains(&Usage::Authentication) {
        bail!("token groups cannot be specified unless --usages includes \"authentication\"");
    }
    let token = match opts.token {
        Some(t) => t,
        None => BootstrapToken::generate()?,
    };
    let expiration = match opts.ttl {
        None => Expiration::Never,
        // Whole seconds, as kubeadm writes them.
        Some(ttl) => Expiration::At(
            now.checked_add(ttl)
                .ok()
                .and_then(|at| Timestamp::from_second(at.as_second()).ok())
                .context("the TTL puts the expiration out of range")?,
        ),
    };
    Ok(TokenRecord {
        token,
        description: opts.description,
        expiration,
        usages: opts.usages,
        extra_groups: opts.extra_groups,
    })
}

fn secrets(client: &kube::Client) -> Api<K8sSecret> {
    Api::namespaced(client.clone(), SECRET_NAMESPACE)
}

/// Stores a new token Secret; fails if a token with that id already exists.
pub async fn create_token(client: &kube::Client, record: &TokenRecord) -> anyhow::Result<()> {
    let secret = secret_to_k8s(&record.to_secret());
    match secrets(client)
        .create(&PostParams::default(), &secret)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_already_exists(&e) => {
            bail!(
                "a token with id {:?} already exists",
                record.token.id().as_str()
            )
        }
        Err(e) => Err(anyhow::Error::from(e).context(format!(
            "cannot create bootstrap token {:?}",
            record.token.id().as_str()
        ))),
    }
}

/// Lists every bootstrap token Secret, each validated (invalid ones as their error).
pub async fn list_tokens(
    client: &kube::Client,
) -> anyhow::Result<Vec<Result<TokenRecord, SecretError>>> {
    let list = secrets(client)
        .list(&ListParams::default().fields(&format!("type={SECRET_TYPE}")))
        .await
        .context("cannot list bootstrap tokens")?;
    Ok(list
        .items
        .iter()
        .map(|s| TokenRecord::from_secret(&secret_from_k8s(s)))
        .collect())
}

/// Deletes the token with the given id; a missing token is an error (as kubeadm).
pub async fn delete_token(client: &kube::Client, id: &TokenId) -> anyhow::Result<()> {
    match secrets(client)
        .delete(&id.secret_name(), &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => bail!("bootstrap token {:?} not found", id.as_str()),
        Err(e) => Err(anyhow::Error::from(e)
            .context(format!("cannot delete bootstrap token {:?}", id.as_str()))),
    }
}

/// kubeadm's compact duration: `45s`, `12m`, `23h`, `6d`, `1y`, `<invalid>` when in the past.
pub fn short_human_duration(d: SignedDuration) -> String {
    let secs = d.as_secs();
    if secs < -1 {
        "<invalid>".into()
    } else if secs < 0 {
        "0s".into()
    } else if secs < 60 {
        format!("{secs}s")
    } else if secs / 60 < 60 {
        format!("{}m", secs / 60)
    } else if secs / 3600 < 24 {
        format!("{}h", secs / 3600)
    } else if secs / 3600 < 24 * 365 {
        format!("{}d", secs / 3600 / 24)
    } else {
        format!("{}y", secs / 3600 / 24 / 365)
    }
}

fn usages_str(r: &TokenRecord) -> String {
    r.usages
        .iter()
        .map(Usage::name)
        .collect::<Vec<_>>()
        .join(",")
}

fn or_none(s: String) -> String {
    if s.is_empty() { "<none>".into() } else { s }
}

/// Renders `token list` as kubeadm's table. Prints full tokens: the user asked for them.
/// Returns an empty string for no tokens (kubeadm prints no header then).
pub fn render_table(records: &[TokenRecord], now: Timestamp) -> String {
    if records.is_empty() {
        return String::new();
    }
    let mut rows: Vec<[String; 6]> = vec![[
        "TOKEN".into(),
        "TTL".into(),
        "EXPIRES".into(),
        "USAGES".into(),
        "DESCRIPTION".into(),
        "EXTRA GROUPS".into(),
    ]];
    for r in records {
        let (ttl, expires) = match r.expiration {
            Expiration::Never => ("<forever>".to_owned(), "<never>".to_owned()),
            Expiration::At(at) => (
                short_human_duration(at.duration_since(now)),
                format_expiration(at),
            ),
        };
        rows.push([
            r.token.expose().to_string(),
            format!("{ttl:<9}"),
            expires,
            format!("{:<22}", or_none(usages_str(r))),
            format!("{:<56}", or_none(r.description.clone())),
            or_none(r.extra_groups.join(",")),
        ]);
    }
    // Go's tabwriter as kubeadm configures it (min width 10, padding 3; the last cell is free),
    // and as kubeadm uses it: a new tabwriter per token, flushed after each, so the header is
    // aligned with the first row only and every other row by itself.
    let mut out = String::new();
    let mut start = 0;
    while start < rows.len() {
        let end = if start == 0 { 2 } else { start + 1 };
        let block = rows.get(start..end.min(rows.len())).unwrap_or_default();
        let widths: Vec<usize> = (0..5)
            .map(|c| {
                block
                    .iter()
                    .map(|row| row.get(c).map_or(0, |cell| cell.chars().count()) + 3)
                    .max()
                    .unwrap_or(0)
                    .max(10)
            })
            .collect();
        for row in block {
            for (cell, width) in row.iter().zip(&widths) {
                let _ = write!(out, "{cell:<width$}");
            }
            out.push_str(&row[5]);
            out.push('\n');
        }
        start += block.len();
    }
    out
}

/// One token in kubeadm's `output.kubeadm.k8s.io/v1alpha3` shape (for `-o json|yaml`).
///
/// Serializing it prints the full token (the user asked for it); `Debug` redacts the secret.
#[derive(Serialize)]
pub struct OutputToken {
    kind: &'static str,
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    token: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    usages: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    groups: Vec<String>,
}

impl std::fmt::Debug for OutputToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let id = self.token.split('.').next().unwrap_or_default();
        f.debug_struct("OutputToken")
            .field("token", &format_args!("{id}.<redacted>"))
            .field("description", &self.description)
            .field("expires", &self.expires)
            .field("usages", &self.usages)
            .field("groups", &self.groups)
            .finish()
    }
}

impl From<&TokenRecord> for OutputToken {
    fn from(r: &TokenRecord) -> Self {
        Self {
            kind: "BootstrapToken",
            api_version: "output.kubeadm.k8s.io/v1alpha3",
            token: r.token.expose().to_string(),
            description: r.description.clone(),
            expires: match r.expiration {
                Expiration::Never => None,
                Expiration::At(at) => Some(format_expiration(at)),
            },
            usages: r.usages.iter().map(|u| u.name().to_owned()).collect(),
            groups: r.extra_groups.clone(),
        }
    }
}

/// Renders tokens as JSON objects, one after the other, indented by four spaces (as kubeadm's
/// printer, `json.MarshalIndent(obj, "", "    ")`).
pub fn render_json(records: &[TokenRecord]) -> anyhow::Result<String> {
    let mut out = Vec::new();
    for r in records {
        let mut ser = serde_json::Serializer::with_formatter(
            &mut out,
            serde_json::ser::PrettyFormatter::with_indent(b"    "),
        );
        OutputToken::from(r).serialize(&mut ser)?;
        out.push(b'\n');
    }
    Ok(String::from_utf8(out)?)
}

/// Renders tokens as YAML documents separated by `---`, as kubeadm's printer does
/// (sigs.k8s.io/yaml: the JSON object's keys sorted, the timestamp quoted).
pub fn render_yaml(records: &[TokenRecord]) -> anyhow::Result<String> {
    let docs = records
        .iter()
        .map(|r| {
            let serde_json::Value::Object(fields) = serde_json::to_value(OutputToken::from(r))?
            else {
                anyhow::bail!("a token did not serialize to an object");
            };
            let sorted: BTreeMap<String, serde_json::Value> = fields.into_iter().collect();
            let yaml = serde_yaml::to_string(&sorted)?;
            // go-yaml quotes strings a YAML 1.1 reader would take for a timestamp; serde_yaml
            // does not. `expires` is a top-level key, so it can only start a line as itself.
            Ok(match r.expiration {
                Expiration::At(at) => {
                    let ts = format_expiration(at);
                    yaml.replace(
                        &format!("\nexpires: {ts}\n"),
                        &format!("\nexpires: \"{ts}\"\n"),
                    )
                }
                Expiration::Never => yaml,
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(docs.join("---\n"))
}

/// The `kubeadm join` command for a worker, built from an admin kubeconfig's cluster: its
/// server (without `https://`), the token, and one CA pin per CA certificate.
pub fn join_command(admin_kubeconfig: &[u8], token: &BootstrapToken) -> anyhow::Result<String> {
    let info = ClusterInfo::from_admin_kubeconfig(admin_kubeconfig)
        .context("cannot derive the join command from the kubeconfig")?;
    let pins = info
        .ca_pins()
        .context("cannot pin the kubeconfig's certificate-authority-data")?;
    let server = info.server.strip_prefix("https://").unwrap_or(&info.server);
    let mut cmd = format!("kubeadm join {server} --token {}", token.expose().as_str());
    for pin in pins {
        let _ = write!(cmd, " --discovery-token-ca-cert-hash {pin}");
    }
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2030-01-01T00:00:00Z".parse().unwrap()
    }

    #[test]
    fn ttl_parsing() {
        assert_eq!(parse_ttl("0").unwrap(), None);
        assert_eq!(parse_ttl("0s").unwrap(), None);
        assert_eq!(
            parse_ttl("24h").unwrap(),
            Some(SignedDuration::from_hours(24))
        );
        assert_eq!(
            parse_ttl("1h30m").unwrap(),
            Some(SignedDuration::from_mins(90))
        );
        assert_eq!(
            parse_ttl("1.5h").unwrap(),
            Some(SignedDuration::from_mins(90))
        );
        assert_eq!(
            parse_ttl("90s").unwrap(),
            Some(SignedDuration::from_secs(90))
        );
        for bad in ["", "24", "1d", "-1h", "h", "1h x"] {
            assert!(parse_ttl(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn usages_and_groups() {
        assert_eq!(
            parse_usages(["signing", "authentication"]).unwrap(),
            [Usage::Signing, Usage::Authentication].into()
        );
        let err = parse_usages(["signing", "nope"]).unwrap_err().to_string();
        assert!(err.contains("\"nope\""), "{err}");
        assert!(parse_groups(["system:bootstrappers:a", ""]).is_ok());
        assert!(parse_groups(["system:masters"]).is_err());
    }

    fn opts() -> CreateOptions {
        CreateOptions {
            token: Some(BootstrapToken::parse("abcdef.0123456789abcdef").unwrap()),
            ttl: Some(SignedDuration::from_hours(24)),
            usages: [Usage::Signing, Usage::Authentication].into(),
            extra_groups: vec![DEFAULT_GROUP.into()],
            description: String::new(),
        }
    }

    #[test]
    fn builds_kubeadm_secret() {
        let record = build_record(opts(), now()).unwrap();
        let s = record.to_secret();
        assert_eq!(s.name, "bootstrap-token-abcdef");
        assert_eq!(
            s.get("expiration"),
            Some(b"2030-01-02T00:00:00Z".as_slice())
        );
        assert_eq!(s.get("auth-extra-groups"), Some(DEFAULT_GROUP.as_bytes()));
        assert_eq!(s.get("usage-bootstrap-signing"), Some(b"true".as_slice()));
        let forever = build_record(
            CreateOptions {
                ttl: None,
                ..opts()
            },
            now(),
        )
        .unwrap();
        assert!(forever.to_secret().get("expiration").is_none());
        let generated = build_record(
            CreateOptions {
                token: None,
                ..opts()
            },
            now(),
        )
        .unwrap();
        assert_ne!(generated.token.id().as_str(), "abcdef");
        let groups_without_auth = CreateOptions {
            usages: [Usage::Signing].into(),
            ..opts()
        };
        assert!(build_record(groups_without_auth, now()).is_err());
    }

    #[test]
    fn table_like_kubeadm() {
        let a = build_record(opts(), now()).unwrap();
        let b = build_record(
            CreateOptions {
                token: Some(BootstrapToken::parse("zzzzzz.0123456789abcdef").unwrap()),
                ttl: None,
                usages: BTreeSet::new(),
                extra_groups: vec![],
                description: "worker pool".into(),
            },
            now(),
        )
        .unwrap();
        let table = render_table(&[a, b], now() + SignedDuration::from_mins(30));
        let want = "\
TOKEN                     TTL         EXPIRES                USAGES                   DESCRIPTION                                                EXTRA GROUPS
abcdef.0123456789abcdef   23h         2030-01-02T00:00:00Z   authentication,signing   <none>                                                     system:bootstrappers:nodeauth:default-node-token
zzzzzz.0123456789abcdef   <forever>   <never>   <none>                   worker pool                                                <none>
";
        assert_eq!(table, want);
        assert_eq!(render_table(&[], now()), "");
        // A long description widens only its own row, as kubeadm's per-token tabwriter does.
        let long = build_record(
            CreateOptions {
                token: Some(BootstrapToken::parse("yyyyyy.0123456789abcdef").unwrap()),
                description: "d".repeat(60),
                ..opts()
            },
            now(),
        )
        .unwrap();
        let a = build_record(opts(), now()).unwrap();
        let table = render_table(&[a.clone(), long, a], now() + SignedDuration::from_mins(30));
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[1], lines[3]);
        assert_eq!(lines[2].len(), lines[1].len() + 4);
    }

    #[test]
    fn human_durations() {
        let h = |s| short_human_duration(SignedDuration::from_secs(s));
        assert_eq!(h(-5), "<invalid>");
        assert_eq!(h(-1), "0s");
        assert_eq!(h(59), "59s");
        assert_eq!(h(3599), "59m");
        assert_eq!(h(86_399), "23h");
        assert_eq!(h(86_400 * 3), "3d");
        assert_eq!(h(86_400 * 800), "2y");
    }

    #[test]
    fn json_and_yaml() {
        let r = build_record(opts(), now()).unwrap();
        let json = render_json(std::slice::from_ref(&r)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["kind"], "BootstrapToken");
        assert_eq!(v["token"], "abcdef.0123456789abcdef");
        assert_eq!(v["expires"], "2030-01-02T00:00:00Z");
        assert_eq!(
            v["usages"],
            serde_json::json!(["authentication", "signing"])
        );
        let debug = format!("{:?}", OutputToken::from(&r));
        assert!(!debug.contains("0123456789abcdef"), "{debug}");
        assert!(debug.contains("abcdef.<redacted>"), "{debug}");
        let yaml = render_yaml(&[r.clone(), r]).unwrap();
        assert_eq!(yaml.matches("---").count(), 1);
        assert!(yaml.contains("token: abcdef.0123456789abcdef"), "{yaml}");
        assert!(
            yaml.starts_with("apiVersion: output.kubeadm.k8s.io/v1alpha3\nexpires: \"2030-01-02T00:00:00Z\"\ngroups:\n"),
            "{yaml}"
        );
    }

    #[test]
    fn join_command_pins_the_ca() {
        let ca = include_bytes!("../../../crates/token/tests/data/kubeadm-keypins-test.pem");
        let kubeconfig = ClusterInfo {
            name: "k".into(),
            server: "https://10.0.0.1:6443".into(),
            certificate_authority_data: ca.to_vec(),
        }
        .to_yaml();
        let token = BootstrapToken::parse("abcdef.0123456789abcdef").unwrap();
        assert_eq!(
            join_command(kubeconfig.as_bytes(), &token).unwrap(),
            "kubeadm join 10.0.0.1:6443 --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash sha256:345959acb2c3b2feb87d281961c893f62a314207ef02599f1cc4a5fb255480b3"
        );
    }
}
