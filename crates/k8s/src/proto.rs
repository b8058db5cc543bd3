//! kube-apiserver's protobuf encoding, for the writes a controller makes once per node: a
//! CSR's approval and certificate, and a Lease.
//!
//! Every Kubernetes component talks to kube-apiserver in protobuf where the type has one (the
//! built-in types do; client-go's `--kube-api-content-type` default). kube-rs speaks JSON only,
//! and JSON costs kube-apiserver more CPU to decode and to encode, on the machine every
//! controller shares. So the hot writes go out in protobuf and ask for protobuf back: the
//! request is built by `kube::core::Request` as usual, [`send`] swaps its JSON body for the
//! protobuf envelope, and the reply's body is read (the connection goes back to the pool) and
//! dropped, since a write's caller only needs to know how it went ([`crate::Written`]). Errors
//! come back as the same `kube::Error::Api` a JSON call gives.
//!
//! The wire format (kube-apiserver's `runtime/serializer/protobuf`): the four bytes `k8s\0`,
//! then a `runtime.Unknown` message whose `typeMeta` names the type and whose `raw` holds the
//! object's own message. The messages below carry every field the JSON form of the same object
//! carries but `metadata.managedFields`: kube-apiserver keeps the stored ones when a write
//! sends none (and always on a subresource). Times go out as whole seconds and `MicroTime`s as
//! whole microseconds, exactly what the JSON form can say, as client-go does.
//!
//! ```
//! use k8s_openapi::api::coordination::v1::Lease;
//! use kube::api::ObjectMeta;
//! use nodeauth_k8s::proto::{self, Protobuf};
//!
//! let lease = Lease {
//!     metadata: ObjectMeta { name: Some("a".into()), ..Default::default() },
//!     ..Default::default()
//! };
//! let body = lease.to_protobuf();
//! assert_eq!(&body[..4], b"k8s\0");
//! assert_eq!(proto::type_of(&body).unwrap(), ("coordination.k8s.io/v1".into(), "Lease".into()));
//! ```

use std::collections::BTreeMap;

use http_body_util::BodyExt as _;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use prost::Message as _;

/// kube-apiserver's media type for protobuf.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// What every protobuf body begins with.
const MAGIC: &[u8; 4] = b"k8s\0";

/// A type kube-apiserver also reads in protobuf.
pub trait Protobuf: k8s_openapi::Resource {
    /// The whole body of a write: the envelope around this object.
    fn to_protobuf(&self) -> Vec<u8>;
}

impl Protobuf for CertificateSigningRequest {
    fn to_protobuf(&self) -> Vec<u8> {
        envelope::<Self>(&wire::Csr::from(self))
    }
}

impl Protobuf for Lease {
    fn to_protobuf(&self) -> Vec<u8> {
        envelope::<Self>(&wire::Lease::from(self))
    }
}

fn envelope<K: k8s_openapi::Resource>(object: &impl prost::Message) -> Vec<u8> {
    let unknown = wire::Unknown {
        type_meta: Some(wire::TypeMeta {
            api_version: Some(K::API_VERSION.to_owned()),
            kind: Some(K::KIND.to_owned()),
        }),
        raw: Some(object.encode_to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut body = Vec::with_capacity(MAGIC.len() + unknown.encoded_len());
    body.extend_from_slice(MAGIC);
    unknown.encode(&mut body).unwrap_or_default(); // a Vec grows: encoding into it cannot fail
    body
}

/// Why a protobuf body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// It does not begin with `k8s\0`.
    #[error("not a Kubernetes protobuf body (it does not begin with k8s\\0)")]
    NoMagic,
    /// The envelope or the object inside is not valid protobuf.
    #[error("invalid protobuf: {0}")]
    Invalid(#[from] prost::DecodeError),
}

/// The `apiVersion` and `kind` a protobuf body names.
///
/// # Errors
/// [`DecodeError`] when `body` is not a Kubernetes protobuf envelope.
pub fn type_of(body: &[u8]) -> Result<(String, String), DecodeError> {
    let unknown = unwrap(body)?;
    let meta = unknown.type_meta.unwrap_or_default();
    Ok((
        meta.api_version.unwrap_or_default(),
        meta.kind.unwrap_or_default(),
    ))
}

fn unwrap(body: &[u8]) -> Result<wire::Unknown, DecodeError> {
    let rest = body.strip_prefix(MAGIC).ok_or(DecodeError::NoMagic)?;
    Ok(wire::Unknown::decode(rest)?)
}

/// A `metav1.Status` from an error response's body, protobuf or JSON; one naming the HTTP
/// code and the body's text when it is neither (a proxy's page, say).
///
/// # Example
/// ```
/// let status = nodeauth_k8s::proto::status_from(409, b"not a Status");
/// assert_eq!(status.code, 409);
/// assert_eq!(status.message, "not a Status");
/// ```
pub fn status_from(code: u16, body: &[u8]) -> kube::core::Status {
    if let Ok(unknown) = unwrap(body)
        && let Ok(s) = wire::Status::decode(unknown.raw.as_deref().unwrap_or_default())
    {
        let mut status = kube::core::Status::failure(
            s.message.as_deref().unwrap_or_default(),
            s.reason.as_deref().unwrap_or_default(),
        );
        status.code = s
            .code
            .and_then(|c| u16::try_from(c).ok())
            .filter(|c| *c != 0)
            .unwrap_or(code);
        return status;
    }
    if let Ok(mut status) = serde_json::from_slice::<kube::core::Status>(body) {
        if status.code == 0 {
            status.code = code;
        }
        return status;
    }
    let text = String::from_utf8_lossy(body);
    kube::core::Status::failure(text.trim(), "").with_code(code)
}

/// Sends `request` (a write built by `kube::core::Request` for `object`'s type) with
/// `object` in protobuf as its body, asking for protobuf back. The reply's body is read to
/// its end and dropped.
///
/// # Errors
/// `kube::Error::Api` with kube-apiserver's `Status` when it refuses the write; the
/// transport's error when there is no reply.
pub async fn send<K: Protobuf>(
    client: &kube::Client,
    request: http::Request<Vec<u8>>,
    object: &K,
) -> Result<(), kube::Error> {
    let (mut parts, _json) = request.into_parts();
    let media = http::HeaderValue::from_static(MEDIA_TYPE);
    parts
        .headers
        .insert(http::header::CONTENT_TYPE, media.clone());
    parts.headers.insert(http::header::ACCEPT, media);
    let request = http::Request::from_parts(parts, kube::client::Body::from(object.to_protobuf()));
    let response = client.send(request).await?;
    let code = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    if code.is_client_error() || code.is_server_error() {
        return Err(kube::Error::Api(status_from(code.as_u16(), &body).boxed()));
    }
    Ok(())
}

/// Replaces `object` (as read: its name and resourceVersion) through `api`'s `subresource`,
/// in protobuf (the reply's object is not read back).
///
/// # Errors
/// As [`send`]: 409 when the object changed since it was read, 404 when it is gone.
pub async fn replace_subresource<K: Protobuf + kube::Resource + Clone>(
    api: &kube::Api<K>,
    subresource: &str,
    object: &K,
) -> Result<(), kube::Error> {
    let name = object.meta().name.as_deref().unwrap_or_default();
    let request = kube::core::Request::new(api.resource_url())
        .replace_subresource(
            subresource,
            name,
            &kube::api::PostParams::default(),
            Vec::new(),
        )
        .map_err(kube::Error::BuildRequest)?;
    send(&api.clone().into_client(), request, object).await
}

/// Creates `object` through `api`, in protobuf (the reply's object is not read back).
///
/// # Errors
/// As [`send`]: 409 `AlreadyExists` when the name is taken.
pub async fn create<K: Protobuf + kube::Resource + Clone>(
    api: &kube::Api<K>,
    object: &K,
) -> Result<(), kube::Error> {
    let request = kube::core::Request::new(api.resource_url())
        .create(&kube::api::PostParams::default(), Vec::new())
        .map_err(kube::Error::BuildRequest)?;
    send(&api.clone().into_client(), request, object).await
}

fn time(t: &meta::Time) -> wire::Time {
    wire::Time {
        seconds: Some(t.0.as_second()),
        nanos: Some(0),
    }
}

fn micro_time(t: &meta::MicroTime) -> wire::Time {
    wire::Time {
        seconds: Some(t.0.as_second()),
        nanos: Some(t.0.subsec_microsecond() * 1000),
    }
}

impl From<&meta::ObjectMeta> for wire::ObjectMeta {
    fn from(m: &meta::ObjectMeta) -> Self {
        wire::ObjectMeta {
            name: m.name.clone(),
            generate_name: m.generate_name.clone(),
            namespace: m.namespace.clone(),
            self_link: m.self_link.clone(),
            uid: m.uid.clone(),
            resource_version: m.resource_version.clone(),
            generation: m.generation,
            creation_timestamp: m.creation_timestamp.as_ref().map(time),
            deletion_timestamp: m.deletion_timestamp.as_ref().map(time),
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            labels: m.labels.clone().unwrap_or_default(),
            annotations: m.annotations.clone().unwrap_or_default(),
            owner_references: m
                .owner_references
                .iter()
                .flatten()
                .map(|o| wire::OwnerReference {
                    kind: Some(o.kind.clone()),
                    name: Some(o.name.clone()),
                    uid: Some(o.uid.clone()),
                    api_version: Some(o.api_version.clone()),
                    controller: o.controller,
                    block_owner_deletion: o.block_owner_deletion,
                })
                .collect(),
            finalizers: m.finalizers.clone().unwrap_or_default(),
        }
    }
}

impl From<&CertificateSigningRequest> for wire::Csr {
    fn from(csr: &CertificateSigningRequest) -> Self {
        let spec = &csr.spec;
        wire::Csr {
            metadata: Some((&csr.metadata).into()),
            spec: Some(wire::CsrSpec {
                request: Some(spec.request.0.clone()),
                username: spec.username.clone(),
                uid: spec.uid.clone(),
                groups: spec.groups.clone().unwrap_or_default(),
                usages: spec.usages.clone().unwrap_or_default(),
                extra: spec
                    .extra
                    .iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), wire::ExtraValue { items: v.clone() }))
                    .collect::<BTreeMap<_, _>>(),
                signer_name: Some(spec.signer_name.clone()),
                expiration_seconds: spec.expiration_seconds,
            }),
            status: csr.status.as_ref().map(|s| wire::CsrStatus {
                conditions: s
                    .conditions
                    .iter()
                    .flatten()
                    .map(|c| wire::CsrCondition {
                        type_: Some(c.type_.clone()),
                        status: Some(c.status.clone()),
                        reason: c.reason.clone(),
                        message: c.message.clone(),
                        last_update_time: c.last_update_time.as_ref().map(time),
                        last_transition_time: c.last_transition_time.as_ref().map(time),
                    })
                    .collect(),
                certificate: s.certificate.as_ref().map(|c| c.0.clone()),
            }),
        }
    }
}

impl From<&Lease> for wire::Lease {
    fn from(lease: &Lease) -> Self {
        wire::Lease {
            metadata: Some((&lease.metadata).into()),
            spec: lease.spec.as_ref().map(|s| wire::LeaseSpec {
                holder_identity: s.holder_identity.clone(),
                lease_duration_seconds: s.lease_duration_seconds,
                acquire_time: s.acquire_time.as_ref().map(micro_time),
                renew_time: s.renew_time.as_ref().map(micro_time),
                lease_transitions: s.lease_transitions,
                strategy: s.strategy.clone(),
                preferred_holder: s.preferred_holder.clone(),
            }),
        }
    }
}

/// The messages, field numbers as in kube-apiserver's `generated.proto` files
/// (`k8s.io/api/certificates/v1`, `k8s.io/api/coordination/v1`,
/// `k8s.io/apimachinery/pkg/apis/meta/v1`, `k8s.io/apimachinery/pkg/runtime`).
mod wire {
    use std::collections::BTreeMap;

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TypeMeta {
        #[prost(string, optional, tag = "1")]
        pub api_version: Option<String>,
        #[prost(string, optional, tag = "2")]
        pub kind: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Unknown {
        #[prost(message, optional, tag = "1")]
        pub type_meta: Option<TypeMeta>,
        #[prost(bytes = "vec", optional, tag = "2")]
        pub raw: Option<Vec<u8>>,
        #[prost(string, optional, tag = "3")]
        pub content_encoding: Option<String>,
        #[prost(string, optional, tag = "4")]
        pub content_type: Option<String>,
    }

    /// `metav1.Time` and `metav1.MicroTime` (both a `Timestamp`).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Time {
        #[prost(int64, optional, tag = "1")]
        pub seconds: Option<i64>,
        #[prost(int32, optional, tag = "2")]
        pub nanos: Option<i32>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct OwnerReference {
        #[prost(string, optional, tag = "1")]
        pub kind: Option<String>,
        #[prost(string, optional, tag = "3")]
        pub name: Option<String>,
        #[prost(string, optional, tag = "4")]
        pub uid: Option<String>,
        #[prost(string, optional, tag = "5")]
        pub api_version: Option<String>,
        #[prost(bool, optional, tag = "6")]
        pub controller: Option<bool>,
        #[prost(bool, optional, tag = "7")]
        pub block_owner_deletion: Option<bool>,
    }

    /// Without `managedFields` (17): see the module docs.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ObjectMeta {
        #[prost(string, optional, tag = "1")]
        pub name: Option<String>,
        #[prost(string, optional, tag = "2")]
        pub generate_name: Option<String>,
        #[prost(string, optional, tag = "3")]
        pub namespace: Option<String>,
        #[prost(string, optional, tag = "4")]
        pub self_link: Option<String>,
        #[prost(string, optional, tag = "5")]
        pub uid: Option<String>,
        #[prost(string, optional, tag = "6")]
        pub resource_version: Option<String>,
        #[prost(int64, optional, tag = "7")]
        pub generation: Option<i64>,
        #[prost(message, optional, tag = "8")]
        pub creation_timestamp: Option<Time>,
        #[prost(message, optional, tag = "9")]
        pub deletion_timestamp: Option<Time>,
        #[prost(int64, optional, tag = "10")]
        pub deletion_grace_period_seconds: Option<i64>,
        #[prost(btree_map = "string, string", tag = "11")]
        pub labels: BTreeMap<String, String>,
        #[prost(btree_map = "string, string", tag = "12")]
        pub annotations: BTreeMap<String, String>,
        #[prost(message, repeated, tag = "13")]
        pub owner_references: Vec<OwnerReference>,
        #[prost(string, repeated, tag = "14")]
        pub finalizers: Vec<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ExtraValue {
        #[prost(string, repeated, tag = "1")]
        pub items: Vec<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct CsrSpec {
        #[prost(bytes = "vec", optional, tag = "1")]
        pub request: Option<Vec<u8>>,
        #[prost(string, optional, tag = "2")]
        pub username: Option<String>,
        #[prost(string, optional, tag = "3")]
        pub uid: Option<String>,
        #[prost(string, repeated, tag = "4")]
        pub groups: Vec<String>,
        #[prost(string, repeated, tag = "5")]
        pub usages: Vec<String>,
        #[prost(btree_map = "string, message", tag = "6")]
        pub extra: BTreeMap<String, ExtraValue>,
        #[prost(string, optional, tag = "7")]
        pub signer_name: Option<String>,
        #[prost(int32, optional, tag = "8")]
        pub expiration_seconds: Option<i32>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct CsrCondition {
        #[prost(string, optional, tag = "1")]
        pub type_: Option<String>,
        #[prost(string, optional, tag = "2")]
        pub reason: Option<String>,
        #[prost(string, optional, tag = "3")]
        pub message: Option<String>,
        #[prost(message, optional, tag = "4")]
        pub last_update_time: Option<Time>,
        #[prost(message, optional, tag = "5")]
        pub last_transition_time: Option<Time>,
        #[prost(string, optional, tag = "6")]
        pub status: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct CsrStatus {
        #[prost(message, repeated, tag = "1")]
        pub conditions: Vec<CsrCondition>,
        #[prost(bytes = "vec", optional, tag = "2")]
        pub certificate: Option<Vec<u8>>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Csr {
        #[prost(message, optional, tag = "1")]
        pub metadata: Option<ObjectMeta>,
        #[prost(message, optional, tag = "2")]
        pub spec: Option<CsrSpec>,
        #[prost(message, optional, tag = "3")]
        pub status: Option<CsrStatus>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LeaseSpec {
        #[prost(string, optional, tag = "1")]
        pub holder_identity: Option<String>,
        #[prost(int32, optional, tag = "2")]
        pub lease_duration_seconds: Option<i32>,
        #[prost(message, optional, tag = "3")]
        pub acquire_time: Option<Time>,
        #[prost(message, optional, tag = "4")]
        pub renew_time: Option<Time>,
        #[prost(int32, optional, tag = "5")]
        pub lease_transitions: Option<i32>,
        #[prost(string, optional, tag = "6")]
        pub strategy: Option<String>,
        #[prost(string, optional, tag = "7")]
        pub preferred_holder: Option<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Lease {
        #[prost(message, optional, tag = "1")]
        pub metadata: Option<ObjectMeta>,
        #[prost(message, optional, tag = "2")]
        pub spec: Option<LeaseSpec>,
    }

    /// `metav1.Status`, the fields an error needs (its list metadata and details are skipped).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Status {
        #[prost(string, optional, tag = "2")]
        pub status: Option<String>,
        #[prost(string, optional, tag = "3")]
        pub message: Option<String>,
        #[prost(string, optional, tag = "4")]
        pub reason: Option<String>,
        #[prost(int32, optional, tag = "6")]
        pub code: Option<i32>,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequestCondition, CertificateSigningRequestSpec,
        CertificateSigningRequestStatus,
    };
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use proptest::prelude::*;

    use super::*;

    fn object<M: prost::Message + Default>(body: &[u8]) -> M {
        let unknown = unwrap(body).unwrap();
        M::decode(unknown.raw.as_deref().unwrap()).unwrap()
    }

    fn at(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn a_csr_goes_out_whole_but_its_managed_fields() {
        let csr = CertificateSigningRequest {
            metadata: meta::ObjectMeta {
                name: Some("csr-1".into()),
                uid: Some("u-1".into()),
                resource_version: Some("42".into()),
                creation_timestamp: Some(meta::Time(at("2026-11-29T01:02:03.999Z"))),
                labels: Some(BTreeMap::from([("l".into(), "v".into())])),
                annotations: Some(BTreeMap::from([("a".into(), "b".into())])),
                finalizers: Some(vec!["example.com/keep".into()]),
                owner_references: Some(vec![meta::OwnerReference {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    name: "owner".into(),
                    uid: "u-owner".into(),
                    controller: Some(true),
                    block_owner_deletion: None,
                }]),
                managed_fields: Some(vec![meta::ManagedFieldsEntry {
                    manager: Some("kubelet".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            spec: CertificateSigningRequestSpec {
                request: ByteString(b"-----BEGIN CERTIFICATE REQUEST-----".to_vec()),
                signer_name: "kubernetes.io/kube-apiserver-client-kubelet".into(),
                expiration_seconds: Some(3600),
                usages: Some(vec!["client auth".into()]),
                username: Some("system:bootstrap:abcdef".into()),
                uid: Some("u-2".into()),
                groups: Some(vec!["system:bootstrappers".into()]),
                extra: Some(BTreeMap::from([("k".into(), vec!["x".into(), "y".into()])])),
            },
            status: Some(CertificateSigningRequestStatus {
                conditions: Some(vec![CertificateSigningRequestCondition {
                    type_: "Approved".into(),
                    status: "True".into(),
                    reason: Some("R".into()),
                    message: Some("M".into()),
                    last_update_time: Some(meta::Time(at("2026-11-29T01:02:04.5Z"))),
                    last_transition_time: Some(meta::Time(at("2026-11-29T01:02:05Z"))),
                }]),
                certificate: Some(ByteString(b"PEM".to_vec())),
            }),
        };
        let body = csr.to_protobuf();
        assert_eq!(
            type_of(&body).unwrap(),
            (
                "certificates.k8s.io/v1".to_owned(),
                "CertificateSigningRequest".to_owned()
            )
        );
        let wire: wire::Csr = object(&body);
        let m = wire.metadata.unwrap();
        assert_eq!(m.name.as_deref(), Some("csr-1"));
        assert_eq!(m.uid.as_deref(), Some("u-1"));
        assert_eq!(m.resource_version.as_deref(), Some("42"));
        // Whole seconds, as the JSON form says it.
        let created = m.creation_timestamp.unwrap();
        assert_eq!(
            (created.seconds, created.nanos),
            (Some(at("2026-11-29T01:02:03Z").as_second()), Some(0))
        );
        assert_eq!(m.labels["l"], "v");
        assert_eq!(m.annotations["a"], "b");
        assert_eq!(m.finalizers, ["example.com/keep"]);
        let owner = &m.owner_references[0];
        assert_eq!(
            (
                owner.api_version.as_deref(),
                owner.kind.as_deref(),
                owner.name.as_deref(),
                owner.uid.as_deref(),
                owner.controller,
                owner.block_owner_deletion
            ),
            (
                Some("v1"),
                Some("ConfigMap"),
                Some("owner"),
                Some("u-owner"),
                Some(true),
                None
            )
        );
        let spec = wire.spec.unwrap();
        assert_eq!(
            spec.request.as_deref(),
            Some(&b"-----BEGIN CERTIFICATE REQUEST-----"[..])
        );
        assert_eq!(
            spec.signer_name.as_deref(),
            Some("kubernetes.io/kube-apiserver-client-kubelet")
        );
        assert_eq!(spec.expiration_seconds, Some(3600));
        assert_eq!(spec.usages, ["client auth"]);
        assert_eq!(spec.username.as_deref(), Some("system:bootstrap:abcdef"));
        assert_eq!(spec.uid.as_deref(), Some("u-2"));
        assert_eq!(spec.groups, ["system:bootstrappers"]);
        assert_eq!(spec.extra["k"].items, ["x", "y"]);
        let status = wire.status.unwrap();
        assert_eq!(status.certificate.as_deref(), Some(&b"PEM"[..]));
        let c = &status.conditions[0];
        assert_eq!(
            (
                c.type_.as_deref(),
                c.status.as_deref(),
                c.reason.as_deref(),
                c.message.as_deref()
            ),
            (Some("Approved"), Some("True"), Some("R"), Some("M"))
        );
        assert_eq!(
            c.last_update_time.as_ref().map(|t| (t.seconds, t.nanos)),
            Some((Some(at("2026-11-29T01:02:04Z").as_second()), Some(0)))
        );
        // No field 17 (managedFields) anywhere in the object's message.
        let raw = unwrap(&body).unwrap().raw.unwrap();
        let meta_bytes = wire::Csr::decode(&raw[..])
            .unwrap()
            .metadata
            .unwrap()
            .encode_to_vec();
        assert!(!contains_field(&meta_bytes, 17), "managedFields went out");
    }

    /// Whether a message's top-level fields include `field` (a length-delimited one).
    fn contains_field(mut bytes: &[u8], field: u32) -> bool {
        use prost::encoding::{DecodeContext, decode_key, skip_field};
        while !bytes.is_empty() {
            let (tag, wire_type) = decode_key(&mut bytes).unwrap();
            if tag == field {
                return true;
            }
            skip_field(wire_type, tag, &mut bytes, DecodeContext::default()).unwrap();
        }
        false
    }

    #[test]
    fn a_lease_keeps_microseconds() {
        let lease = Lease {
            metadata: meta::ObjectMeta {
                name: Some("node-a".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some("csr-1".into()),
                lease_duration_seconds: Some(60),
                acquire_time: Some(meta::MicroTime(at("2026-11-29T01:02:03.123456789Z"))),
                renew_time: None,
                lease_transitions: Some(2),
                strategy: None,
                preferred_holder: Some("p".into()),
            }),
        };
        let body = lease.to_protobuf();
        let wire: wire::Lease = object(&body);
        assert_eq!(wire.metadata.unwrap().namespace.as_deref(), Some("ns"));
        let spec = wire.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("csr-1"));
        assert_eq!(spec.lease_duration_seconds, Some(60));
        assert_eq!(spec.lease_transitions, Some(2));
        assert_eq!(spec.preferred_holder.as_deref(), Some("p"));
        assert_eq!(spec.renew_time, None);
        let t = spec.acquire_time.unwrap();
        assert_eq!(
            (t.seconds, t.nanos),
            (
                Some(at("2026-11-29T01:02:03Z").as_second()),
                Some(123_456_000)
            )
        );
    }

    #[test]
    fn errors_read_in_protobuf_json_or_neither() {
        let status = wire::Status {
            status: Some("Failure".into()),
            message: Some("the object has been modified".into()),
            reason: Some("Conflict".into()),
            code: Some(409),
        };
        let unknown = wire::Unknown {
            type_meta: Some(wire::TypeMeta {
                api_version: Some("v1".into()),
                kind: Some("Status".into()),
            }),
            raw: Some(status.encode_to_vec()),
            ..Default::default()
        };
        let mut body = MAGIC.to_vec();
        body.extend(unknown.encode_to_vec());
        let s = status_from(500, &body);
        assert_eq!(
            (s.code, s.reason.as_str(), s.message.as_str()),
            (409, "Conflict", "the object has been modified")
        );

        let json = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"gone","reason":"NotFound","code":404}"#;
        let s = status_from(404, json);
        assert_eq!((s.code, s.reason.as_str()), (404, "NotFound"));

        // A JSON Status without a code takes the reply's.
        let s = status_from(503, br#"{"kind":"Status","message":"later"}"#);
        assert_eq!((s.code, s.message.as_str()), (503, "later"));

        let s = status_from(502, b" Bad Gateway\n");
        assert_eq!((s.code, s.message.as_str()), (502, "Bad Gateway"));
    }

    #[test]
    fn a_body_without_the_magic_is_refused() {
        assert!(matches!(type_of(b"{}"), Err(DecodeError::NoMagic)));
        assert!(matches!(
            type_of(b"k8s\0\xff"),
            Err(DecodeError::Invalid(_))
        ));
    }

    /// The fuzz target's seeds (`fuzz/fuzz_targets/k8s_proto_reply.rs`: the HTTP code in two
    /// bytes, then the body) read as the replies they stand for.
    #[test]
    fn the_fuzz_seeds_read_as_what_they_are() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/proto-replies");
        for (file, code, reason) in [
            ("conflict-409.bin", 409, "Conflict"),
            ("not-found-404.json.bin", 404, "NotFound"),
            ("proxy-502.txt.bin", 502, ""),
        ] {
            let bytes = std::fs::read(dir.join(file)).unwrap();
            let (head, body) = bytes.split_at(2);
            assert_eq!(u16::from_be_bytes([head[0], head[1]]), code, "{file}");
            let status = status_from(code, body);
            assert_eq!(
                (status.code, status.reason.as_str()),
                (code, reason),
                "{file}"
            );
            assert!(!status.message.is_empty(), "{file}");
        }
        assert_eq!(
            type_of(&std::fs::read(dir.join("conflict-409.bin")).unwrap()[2..]).unwrap(),
            ("v1".to_owned(), "Status".to_owned())
        );
    }

    proptest! {
        /// Whatever comes back as an error body, it reads as a Status with a code.
        #[test]
        fn any_error_body_gives_a_status(code in 400u16..600, body in proptest::collection::vec(any::<u8>(), 0..256)) {
            let status = status_from(code, &body);
            prop_assert!(status.code != 0);
            let _ = type_of(&body);
            let mut framed = MAGIC.to_vec();
            framed.extend(&body);
            let _ = status_from(code, &framed);
            let _ = type_of(&framed);
        }

        /// A CSR's labels, annotations and condition texts go out as they are.
        #[test]
        fn any_csr_text_goes_out_as_is(
            labels in proptest::collection::btree_map("[a-z./]{1,12}", ".{0,16}", 0..4),
            reason in ".{0,24}",
            message in ".{0,64}",
            request in proptest::collection::vec(any::<u8>(), 0..128),
        ) {
            let csr = CertificateSigningRequest {
                metadata: meta::ObjectMeta {
                    labels: Some(labels.clone()),
                    annotations: Some(labels.clone()),
                    ..Default::default()
                },
                spec: CertificateSigningRequestSpec {
                    request: ByteString(request.clone()),
                    ..Default::default()
                },
                status: Some(CertificateSigningRequestStatus {
                    conditions: Some(vec![CertificateSigningRequestCondition {
                        reason: Some(reason.clone()),
                        message: Some(message.clone()),
                        ..Default::default()
                    }]),
                    certificate: None,
                }),
            };
            let wire: wire::Csr = object(&csr.to_protobuf());
            let m = wire.metadata.unwrap();
            prop_assert_eq!(&m.labels, &labels);
            prop_assert_eq!(&m.annotations, &labels);
            prop_assert_eq!(wire.spec.unwrap().request, Some(request));
            let c = &wire.status.unwrap().conditions[0];
            prop_assert_eq!(c.reason.as_deref(), Some(reason.as_str()));
            prop_assert_eq!(c.message.as_deref(), Some(message.as_str()));
        }
    }
}
