//! Policy engine decisions per second on 10 000 varied CSRs with their facts preloaded: the
//! `openshift` preset set followed by `kcm` (bootstrap, renewal and serving CSRs; different node
//! names, 0 to 6 SANs, Machines and Nodes in the context, about a fifth failing a rule), once
//! with `verifySignature: false` (no crypto: the engine alone) and once with the self-signature
//! verified (P-256).
//! Goal: at least 200 000 decisions/s per core without crypto.
//!
//! Each setting is measured twice: in wall-clock time (criterion's default) and in the
//! benchmark thread's CPU time (`policy/decide cpu-time ...`), which is the per-core figure
//! even when other processes share the cores.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)] // benchmark and fuzz harnesses: fixed inputs, and a panic is the finding
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};

use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use nodeauth_csr::{CsrBuilder, CsrSigningKey, parse};
use nodeauth_policy::{
    Context, CsrFacts, MachineFacts, MachineKind, NodeFacts, OPENSHIFT_NODE_BOOTSTRAPPER,
    PolicySet, Rule, SarAnswers, Verdict,
};

const CSRS: usize = 10_000;
const KEYS: usize = 16;

fn time(s: &str) -> jiff::Timestamp {
    s.parse().expect("time")
}

fn addresses(node: &str, ip: IpAddr) -> Vec<(String, String)> {
    vec![
        ("Hostname".into(), node.into()),
        ("InternalDNS".into(), node.into()),
        ("InternalDNS".into(), format!("{node}.cluster.internal")),
        ("InternalIP".into(), ip.to_string()),
    ]
}

/// One CSR and its context. Kinds rotate: OpenShift bootstrap (failing: the Node exists),
/// kubeadm bootstrap for kcm (failing: the nodeclient review says no, so kcm abstains), renewal
/// (failing: another node's name), serving, twice as often (failing: a SAN outside the
/// addresses).
fn case(i: usize, key: &CsrSigningKey) -> (CsrFacts, Context) {
    let node = format!("worker-{i}");
    let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + u32::try_from(i).expect("i")));
    // One CSR in five of every kind breaks a rule.
    let failing = (i / 5).is_multiple_of(5);
    let created = time("2025-01-01T01:00:00Z");
    let mut ctx = Context::empty(time("2025-01-01T01:00:05Z"));
    // The approver always knows the Service range (node IPs here are 10.0.x.x, outside it).
    ctx.cluster.service_cidrs = Some(vec![nodeauth_policy::Cidr::new("10.96.0.0/12")]);
    let machine = MachineFacts {
        kind: MachineKind::OpenShift,
        namespace: "openshift-machine-api".into(),
        name: format!("cluster-{node}"),
        node_ref: None,
        bootstrap_ready: None,
        addresses: addresses(&node, ip),
        provider_id: Some(format!("aws:///us-east-1a/i-{i:08x}")),
        created_at: time("2025-01-01T00:55:00Z"),
    };
    // A few Machines of other nodes next to this one.
    for j in 1..=3 {
        let other = format!("worker-{}", i + j * CSRS);
        ctx.machines.push(MachineFacts {
            name: format!("cluster-{other}"),
            node_ref: Some(other.clone()),
            addresses: addresses(&other, ip),
            ..machine.clone()
        });
    }
    let node_facts = NodeFacts {
        name: node.clone(),
        addresses: addresses(&node, ip),
    };
    let (signer, username, groups, usages, pem) = match i % 5 {
        0 => {
            ctx.machines.push(machine);
            if failing {
                ctx.node = Some(node_facts);
            }
            (
                nodeauth_csr::KUBE_APISERVER_CLIENT_KUBELET,
                OPENSHIFT_NODE_BOOTSTRAPPER.to_owned(),
                vec![
                    "system:serviceaccounts:openshift-machine-config-operator".to_owned(),
                    "system:serviceaccounts".to_owned(),
                    "system:authenticated".to_owned(),
                ],
                vec!["digital signature", "client auth"],
                CsrBuilder::kubelet_client(&node).build(key),
            )
        }
        1 => {
            ctx.sar = SarAnswers {
                nodeclient: Some(!failing),
                selfnodeclient: None,
            };
            (
                nodeauth_csr::KUBE_APISERVER_CLIENT_KUBELET,
                "system:bootstrap:abcdef".to_owned(),
                vec![
                    "system:bootstrappers".to_owned(),
                    "system:bootstrappers:kubeadm:default-node-token".to_owned(),
                ],
                vec!["digital signature", "key encipherment", "client auth"],
                CsrBuilder::kubelet_client(&node).build(key),
            )
        }
        2 => {
            ctx.node = Some(node_facts);
            ctx.machines.push(MachineFacts {
                node_ref: Some(node.clone()),
                ..machine
            });
            (
                nodeauth_csr::KUBE_APISERVER_CLIENT_KUBELET,
                if failing {
                    format!("system:node:{node}-x")
                } else {
                    format!("system:node:{node}")
                },
                vec!["system:nodes".to_owned(), "system:authenticated".to_owned()],
                vec!["digital signature", "client auth"],
                CsrBuilder::kubelet_client(&node).build(key),
            )
        }
        _ => {
            ctx.node = Some(node_facts);
            ctx.machines.push(MachineFacts {
                node_ref: Some(node.clone()),
                ..machine
            });
            let mut builder = CsrBuilder::kubelet_serving(&node).ip_address(ip);
            for dns in [node.clone(), format!("{node}.cluster.internal")]
                .into_iter()
                .take(i % 3)
            {
                builder = builder.dns_name(dns);
            }
            if failing {
                builder = builder.dns_name("kubernetes.default.svc");
            }
            (
                nodeauth_csr::KUBELET_SERVING,
                format!("system:node:{node}"),
                vec!["system:nodes".to_owned(), "system:authenticated".to_owned()],
                vec!["digital signature", "server auth"],
                builder.build(key),
            )
        }
    };
    let pem = pem.expect("build");
    let facts = CsrFacts {
        signer_name: signer.to_owned(),
        username,
        uid: format!("uid-{i}"),
        groups,
        extra: Default::default(),
        usages: usages.into_iter().map(str::to_owned).collect(),
        expiration_seconds: None,
        created_at: created,
        request: parse(pem.as_bytes()).expect("parse"),
    };
    (facts, ctx)
}

fn policies(verify_signature: bool) -> PolicySet {
    let mut set = PolicySet::preset("openshift").expect("openshift");
    set.extend(PolicySet::preset("kcm").expect("kcm"))
        .expect("unique");
    let policies = set
        .into_policies()
        .into_iter()
        .map(|mut p| {
            for rule in &mut p.rules {
                if let Rule::CsrProfile { .. } = rule {
                    *rule = Rule::CsrProfile { verify_signature };
                }
            }
            p
        })
        .collect();
    PolicySet::new(policies).expect("valid")
}

/// The CPU time this thread has used.
fn thread_cpu_time() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(Duration::from)
        .expect("CLOCK_THREAD_CPUTIME_ID")
}

/// Criterion measurement in thread CPU time instead of wall-clock time.
struct ThreadCpuTime;

impl Measurement for ThreadCpuTime {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        thread_cpu_time()
    }

    fn end(&self, started: Duration) -> Duration {
        thread_cpu_time().saturating_sub(started)
    }

    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }

    fn zero(&self) -> Duration {
        Duration::ZERO
    }

    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        let wall: &'static WallTime = &WallTime;
        wall.formatter()
    }
}

struct Inputs {
    cases: Vec<(CsrFacts, Context)>,
    fast: PolicySet,
    full: PolicySet,
}

fn inputs() -> &'static Inputs {
    static INPUTS: std::sync::OnceLock<Inputs> = std::sync::OnceLock::new();
    INPUTS.get_or_init(|| {
        let keys: Vec<CsrSigningKey> = (0..KEYS)
            .map(|_| CsrSigningKey::generate_p256().expect("key"))
            .collect();
        let cases: Vec<(CsrFacts, Context)> = (0..CSRS).map(|i| case(i, &keys[i % KEYS])).collect();
        let fast = policies(false);
        let full = policies(true);
        // Sanity: the mix is what the header says, and both settings agree on every CSR.
        let mut counts = [0usize; 3];
        for (facts, ctx) in &cases {
            let decision = fast.evaluate(facts, ctx);
            assert_eq!(decision.verdict, full.evaluate(facts, ctx).verdict);
            counts[match decision.verdict {
                Verdict::Approve => 0,
                Verdict::Deny => 1,
                Verdict::Abstain => 2,
            }] += 1;
        }
        assert_eq!(counts, [8_000, 1_600, 400], "approve, deny, abstain");
        Inputs { cases, fast, full }
    })
}

fn decide<M: Measurement>(c: &mut Criterion<M>, group: &str) {
    let inputs = inputs();
    let mut group = c.benchmark_group(group);
    group.throughput(Throughput::Elements(1));
    for (name, set) in [
        ("no signature check", &inputs.fast),
        ("P-256 signature verified", &inputs.full),
    ] {
        group.bench_function(name, |b| {
            let mut i = 0;
            b.iter(|| {
                let (facts, ctx) = &inputs.cases[i % CSRS];
                i += 1;
                black_box(set.evaluate(black_box(facts), black_box(ctx)))
            });
        });
    }
    group.finish();
}

fn wall_clock(c: &mut Criterion) {
    decide(c, "policy/decide (10k varied CSRs)");
}

fn cpu_time(c: &mut Criterion<ThreadCpuTime>) {
    decide(c, "policy/decide cpu-time (10k varied CSRs)");
}

criterion_group!(wall, wall_clock);
criterion_group! {
    name = cpu;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = cpu_time
}
criterion_main!(wall, cpu);
