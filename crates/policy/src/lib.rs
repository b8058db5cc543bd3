//! The approval policy engine: facts about a node CSR in, an explained decision out.
//!
//! Pure: no I/O and no clock. The caller looks up the Node, the inventory Machines, the
//! SubjectAccessReview answers, the attestation outcome and duplicates, and passes them in as a
//! [`Context`] (with `now`); the CSR object becomes [`CsrFacts`] (feature `k8s`: from the
//! Kubernetes objects). A [`Policy`] (YAML, see [`Policy::from_yaml`]) says which signers and
//! requesters it covers and which [`Rule`]s a covered CSR must pass; a [`PolicySet`] is an
//! ordered list of them in which the first covering policy decides.
//!
//! [`Policy::evaluate`] runs **every** rule (no short-circuit) and returns a [`Decision`]: the
//! [`Verdict`] and each rule's [`RuleResult`] with a stable code and a message, so a denial
//! lists all its reasons. [`Verdict::Abstain`] means "not mine": the signer or requester is not
//! covered, or the policy never denies (the `kcm` preset, like upstream) and a rule failed.
//! Rule order never changes the verdict or the set of results (property-tested).
//!
//! # Policies in YAML
//!
//! ```yaml
//! name: serving                      # reported in every decision; unique within a set
//! signers: [kubernetes.io/kubelet-serving, "cluster.x-k8s.io/kubelet-serving-*"]
//! requesters:                        # optional; covered when any entry matches (default: all)
//!   usernames: [system:serviceaccount:ns:sa]
//!   usernamePrefixes: ["system:node:"]
//!   groups: [system:nodes]
//! onFailure: deny                    # or abstain (never deny, like upstream)
//! rules:
//!   - rule: csrProfile
//!   - rule: sansWithinNodeAddresses
//! ```
//!
//! Unknown fields are errors naming the field; settings that cannot work (an empty list, a
//! regular expression that does not compile, a bad CIDR) are [`PolicyError::Invalid`] naming
//! the rule (`rules[3] (sansDnsMatch).pattern ...`). Patterns are compiled once, at load.
//!
//! # Rules
//!
//! | YAML | checks | code(s) |
//! |---|---|---|
//! | `{rule: csrProfile, verifySignature: true}` | the CSR crate's signer profile (subject, SANs, key, usages, extensions, self-signature unless `false`) | `csr.profile`, or each violation's code (`sans.dns`, `usages.not_allowed`, ...) |
//! | `{rule: cnMatchesUsername}` | CN == `spec.username` | `subject.cn_matches_username` |
//! | `{rule: requesterGroup, anyOf: [g, ...]}` | the requester is in one of the groups | `requester.group` |
//! | `{rule: nodeMustNotExist}` / `{rule: nodeMustExist}` | the named Node does not / does exist | `node.must_not_exist` / `node.must_exist` |
//! | `{rule: sansWithinNodeAddresses}` | DNS SANs among the Node's Hostname/InternalDNS/ExternalDNS, IP SANs among InternalIP/ExternalIP (the node writes these: only narrows) | `sans.within_node_addresses` |
//! | `{rule: sansFromTrustedSources, nodeName: true, machineAddresses: false, cidrs: [..], dnsPatterns: [..]}` | every DNS/IP SAN from a fact the node cannot write: its own name, its Machine's addresses, operator-declared ranges | `sans.trusted_source` |
//! | `{rule: maxDurationSeconds, max: N}` | `expirationSeconds` present and ≤ N | `duration.max` |
//! | `{rule: subjectAccessReview, kind: nodeClient\|selfNodeClient\|nodeClientOrSelf}` | upstream's SAR recognizers | `sar.nodeclient`, `sar.selfnodeclient`, `sar.nodeclient_or_self` |
//! | `{rule: attestation, required: B, providers: [p, ...]}` | a verified attestation (by one of `providers`, seed 001's `authorizedAttestors`; empty: any but `insecure`, which must be named); a rejected one always fails; the `insecure` provider only ever passes for a kubelet client bootstrap, never a renewal (requester is a node) or another signer | `attestation` |
//! | `{rule: supersededByNewer}` | the node itself asking: no newer pending CSR of its own; a shared credential asking: no older pending CSR for the same name (first wins) | `dedup.superseded` / `dedup.older_pending` |
//! | `{rule: machineMustExist}` | exactly one Machine matches the node | `machine.must_exist` |
//! | `{rule: machineNotLinked}` | its `nodeRef` is empty or this node | `machine.not_linked` |
//! | `{rule: machineBootstrapReady}` | Cluster API `bootstrapReady` is true | `machine.bootstrap_ready` |
//! | `{rule: machineCreatedWithin, seconds: N, clockSkewSeconds: 10}` | CSR created in [Machine − skew, Machine + N] | `machine.created_within` |
//! | `{rule: sansWithinMachineAddresses}` | as for the Node, against the Machine's `status.addresses` | `sans.within_machine_addresses` |
//! | `{rule: providerIdMatchesMachine}` | the CSR's ProviderID extension and the attested provider ID, when present (one must be), equal the Machine's `spec.providerID` | `machine.provider_id` |
//! | `{rule: sansDnsMatch, pattern: RE}` | every DNS SAN matches `^(?:RE)$`, case-insensitive | `sans.dns_match` |
//! | `{rule: sansHostnamePrefix, prefix: P}` | every DNS SAN's first label starts with P (default: the node name) | `sans.hostname_prefix` |
//! | `{rule: sansIpInCidrs, cidrs: [10.0.0.0/8, ...]}` | every IP SAN inside one CIDR | `sans.ip_in_cidrs` |
//! | `{rule: sansMaxCount, max: N}` | at most N SANs of all kinds | `sans.max_count` |
//! | `{rule: keyAlgorithm, allowed: [ecdsaP256, ecdsaP384, ed25519, rsa], minRsaBits: N}` | key type allowed; RSA at least N bits | `key.algorithm` |
//!
//! Every policy also gets `sans.never_issued` for a request with DNS or IP SANs, whatever its
//! rules: no wildcard, no kube-apiserver name (`kubernetes`, `kubernetes.default`,
//! `kubernetes.default.svc[.<domain>]`, its certificate's SANs), no loopback, link-local,
//! unspecified, multicast or broadcast address, nothing in the Service range (unknown range: IP
//! SANs fail), nothing another Node or Machine holds ([`Context::san_holders`]). A policy that
//! covers a serving signer must have `sansFromTrustedSources` or `sansWithinMachineAddresses`.
//!
//! Machine rules find the node's Machine among [`Context::machines`] with
//! [`MachineFacts::matches_node`] (nodeRef, or a Hostname/InternalDNS address equal to the node
//! name); none or several matching fails every Machine rule with that reason.
//! Abstentions for coverage use [`CODE_SIGNER_NOT_COVERED`], [`CODE_REQUESTER_NOT_COVERED`] and,
//! in a set, [`CODE_NO_POLICY_COVERS`].
//!
//! # Presets
//!
//! [`PolicySet::preset`] knows them all; [`Policy::preset`] the single policies.
//!
//! - `kcm` ([`Policy::kcm`]): upstream kube-controller-manager's sarapprove; never denies.
//! - `serving` ([`Policy::serving`]): kubelet serving certificates, SANs within the Node's
//!   addresses, no DNS lookups.
//! - `openshift` = `openshift-client`, `openshift-renewal`, `openshift-serving`: OpenShift's
//!   machine approver (seed 000 and its documented checks); we deny where it leaves pending.
//! - `capi` = `capi-client`, `capi-renewal`, `capi-serving`: seed 001's core checks plus
//!   attestation (required for client certificates) and the Machine's provider ID.
//!
//! Each preset is a policy file, `presets/<name>.yaml` in this crate, embedded and parsed by
//! [`PolicySet::from_yaml`] like any other; its comments (shown in [`PolicySet::preset`]) say
//! where it differs from its anchor and who can write the facts each rule reads.
//!
//! # Decisions as output
//!
//! A [`Decision`] serializes (serde, e.g. JSON for `kubectl nodeauth csr explain -o json`) as
//! `{"policy": "name" | null, "verdict": "Approve" | "Deny" | "Abstain", "reasons": [{"code",
//! "passed", "message"}]}`; [`Decision::condition_reason`] and
//! [`Decision::condition_message`] (bounded to [`MAX_CONDITION_MESSAGE_BYTES`]) are what the
//! approver writes into the CSR's condition.
//!
//! Speed (`cargo bench -p nodeauth-benches --bench policy`: 10 000 varied CSRs through the
//! `openshift` + `kcm` set, facts preloaded), measured in the benchmark thread's CPU time on
//! this shared 2-core machine: about 2.4 µs per decision, **~416 k decisions/s per core**
//! without the signature check; ~355 µs (~2.8 k/s) with P-256 verification, which dominates.
//!
//! # Example
//!
//! ```
//! use nodeauth_csr::{CsrBuilder, CsrSigningKey, parse};
//! use nodeauth_policy::{ClusterFacts, Cidr, Context, CsrFacts, NodeFacts, Policy, Verdict};
//!
//! // A kubelet asks for a serving certificate for its name, its IP, another name, and the
//! // kube-apiserver's in-cluster name; it listed them all in its own Node.status.addresses.
//! let key = CsrSigningKey::generate_p256()?;
//! let pem = CsrBuilder::kubelet_serving("worker-1")
//!     .dns_name("worker-1")
//!     .dns_name("evil.example.com")
//!     .dns_name("kubernetes.default.svc")
//!     .ip_address("10.0.0.5".parse()?)
//!     .build(&key)?;
//! let facts = CsrFacts {
//!     signer_name: "kubernetes.io/kubelet-serving".into(),
//!     username: "system:node:worker-1".into(),
//!     uid: "".into(),
//!     groups: vec!["system:nodes".into(), "system:authenticated".into()],
//!     extra: Default::default(),
//!     usages: vec!["digital signature".into(), "server auth".into()],
//!     expiration_seconds: None,
//!     created_at: "2025-01-01T00:00:00Z".parse()?,
//!     request: parse(pem.as_bytes())?,
//! };
//! let mut context = Context::empty("2025-01-01T00:00:05Z".parse()?);
//! context.cluster = ClusterFacts {
//!     service_cidrs: Some(vec![Cidr::new("10.96.0.0/12")]),
//!     ..ClusterFacts::default()
//! };
//! let addresses = ["worker-1", "evil.example.com", "kubernetes.default.svc"];
//! context.node = Some(NodeFacts {
//!     name: "worker-1".into(),
//!     addresses: addresses
//!         .iter()
//!         .map(|a| ("Hostname".to_owned(), a.to_string()))
//!         .chain([("InternalIP".to_owned(), "10.0.0.5".to_owned())])
//!         .collect(),
//! });
//!
//! // The node wrote those addresses itself: they narrow, but only the node's own name is a
//! // trusted source in the `serving` preset, and kube-apiserver's names are never issued.
//! let decision = Policy::serving().evaluate(&facts, &context);
//! assert_eq!(decision.verdict, Verdict::Deny);
//! let failed: Vec<_> = decision.failures().map(|r| r.code).collect();
//! assert_eq!(failed, ["sans.trusted_source", "sans.never_issued"]);
//! let message = decision.condition_message();
//! assert!(message.contains("DNS:evil.example.com"), "{message}");
//! assert!(message.contains("IP:10.0.0.5"), "{message}");
//! assert!(message.contains("DNS:kubernetes.default.svc (a name of kube-apiserver"), "{message}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]
// Evaluation must not panic: no unwrap, expect, panic or slice indexing outside tests.

mod engine;
mod facts;
#[cfg(feature = "k8s")]
pub mod k8s;
mod policy;
mod presets;
mod set;

pub use engine::{
    CODE_NODE_MUST_NOT_EXIST, CODE_OLDER_PENDING, CODE_REQUESTER_NOT_COVERED,
    CODE_SIGNER_NOT_COVERED, CODE_SUPERSEDED, Decision, MAX_CONDITION_MESSAGE_BYTES, RuleResult,
    Verdict,
};
pub use facts::{
    AttestationSummary, ClusterFacts, Context, CsrFacts, MachineFacts, MachineKind,
    NameReservation, NodeFacts, SanHolder, SarAnswers, dns_eq,
};
pub use policy::{
    Cidr, DEFAULT_CLOCK_SKEW_SECONDS, DnsPattern, KeyFamily, MAX_PATTERN_LEN,
    OPENSHIFT_NODE_BOOTSTRAPPER, OPENSHIFT_NODE_BOOTSTRAPPER_GROUP, OnFailure, Policy, Requesters,
    Rule, SarKind,
};
pub use set::{CODE_NO_POLICY_COVERS, PolicySet};

/// Errors reading or checking a policy document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// The YAML is malformed or does not match the schema (unknown fields are named).
    #[error("invalid policy YAML: {0}")]
    Yaml(String),
    /// The document parses but makes no sense.
    #[error("invalid policy {policy:?}: {reason}")]
    Invalid {
        /// The policy's name.
        policy: String,
        /// What is wrong.
        reason: String,
    },
}
