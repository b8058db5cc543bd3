//! Kubeconfig files for the identities a test uses.

use base64ct::{Base64, Encoding};

/// Who a kubeconfig authenticates as.
#[derive(Clone)]
pub enum Credential {
    /// A client certificate and key, PEM.
    ClientCert {
        /// The certificate, PEM.
        cert_pem: String,
        /// The key, PEM.
        key_pem: String,
    },
    /// A bearer token (bootstrap token, service-account token).
    Token(String),
    /// Certificate and key files on disk (what a kubelet's rotated `kubelet-client-current.pem` is).
    ClientCertFiles {
        /// Path of the certificate file.
        cert: String,
        /// Path of the key file (may equal `cert`).
        key: String,
    },
    /// A client-go exec credential plugin (`client.authentication.k8s.io/v1`).
    Exec {
        /// The command.
        command: String,
        /// Its arguments.
        args: Vec<String>,
    },
    /// No credentials (anonymous).
    None,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ClientCert { .. } => f.write_str("ClientCert(<redacted>)"),
            Self::Token(_) => f.write_str("Token(<redacted>)"),
            Self::ClientCertFiles { cert, key } => f
                .debug_struct("ClientCertFiles")
                .field("cert", cert)
                .field("key", key)
                .finish(),
            Self::Exec { command, args } => f
                .debug_struct("Exec")
                .field("command", command)
                .field("args", args)
                .finish(),
            Self::None => f.write_str("None"),
        }
    }
}

/// Renders a kubeconfig with one cluster, one user and one current context.
pub fn render(server: &str, ca_pem: &str, user: &str, cred: &Credential) -> String {
    let user_body = match cred {
        Credential::ClientCert { cert_pem, key_pem } => format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            Base64::encode_string(cert_pem.as_bytes()),
            Base64::encode_string(key_pem.as_bytes())
        ),
        Credential::Token(t) => format!("    token: {t}\n"),
        Credential::ClientCertFiles { cert, key } => {
            format!("    client-certificate: {cert}\n    client-key: {key}\n")
        }
        Credential::Exec { command, args } => {
            let mut s = format!(
                "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: {command}\n      interactiveMode: Never\n      provideClusterInfo: false\n"
            );
            if !args.is_empty() {
                s.push_str("      args:\n");
                for a in args {
                    s.push_str(&format!(
                        "      - {}\n",
                        serde_json::Value::String(a.clone())
                    ));
                }
            }
            s
        }
        Credential::None => "    {}\n".to_string(),
    };
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: nodeauth-testenv
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: {user}
  user:
{user_body}contexts:
- name: {user}@nodeauth-testenv
  context:
    cluster: nodeauth-testenv
    user: {user}
current-context: {user}@nodeauth-testenv
",
        ca = Base64::encode_string(ca_pem.as_bytes()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_kubeconfig_kube_can_read() {
        let y = render(
            "https://127.0.0.1:6443",
            "CA",
            "alice",
            &Credential::Exec {
                command: "/bin/agent".into(),
                args: vec!["credential".into(), "--x=1".into()],
            },
        );
        let kc: kube::config::Kubeconfig = serde_yaml_from(&y);
        assert_eq!(
            kc.current_context.as_deref(),
            Some("alice@nodeauth-testenv")
        );
        let exec = kc.auth_infos[0]
            .auth_info
            .as_ref()
            .unwrap()
            .exec
            .as_ref()
            .unwrap();
        assert_eq!(exec.command.as_deref(), Some("/bin/agent"));
        assert_eq!(
            exec.args.as_ref().unwrap(),
            &vec!["credential".to_string(), "--x=1".into()]
        );
    }

    fn serde_yaml_from(y: &str) -> kube::config::Kubeconfig {
        kube::config::Kubeconfig::from_yaml(y).expect("valid kubeconfig")
    }

    #[test]
    fn debug_never_shows_credentials() {
        let c = Credential::Token("abcdef.0123456789abcdef".into());
        assert!(!format!("{c:?}").contains("0123456789abcdef"));
    }
}
