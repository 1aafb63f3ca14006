//! The policy enums of a service (spec names, in the specs' SCREAMING_CASE where they
//! use it): protocol, zonal and session affinity, connection tracking, algorithm,
//! isolation, preference and forwarding mode.

use serde::{Deserialize, Serialize};

/// L4 protocol of a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// TCP (IP protocol 6).
    #[default]
    Tcp,
    /// UDP (IP protocol 17).
    Udp,
}
impl Protocol {
    /// IANA protocol number.
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
        }
    }
    /// The name config files and `spillwayctl` use: `tcp`, `udp`.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

/// spec/zonal-affinity.md "Options". The short names without the `ZONAL_AFFINITY_` prefix
/// (`SPILL_CROSS_ZONE`) are accepted as aliases in files and live edits; the full names are
/// written back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[allow(non_camel_case_types, missing_docs)]
pub enum ZonalAffinity {
    #[default]
    #[serde(alias = "DISABLED")]
    ZONAL_AFFINITY_DISABLED,
    #[serde(alias = "STAY_WITHIN_ZONE")]
    ZONAL_AFFINITY_STAY_WITHIN_ZONE,
    #[serde(alias = "SPILL_CROSS_ZONE")]
    ZONAL_AFFINITY_SPILL_CROSS_ZONE,
}

/// spec/backend-selection.md "Session affinity": what a new connection hashes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[allow(non_camel_case_types, missing_docs)]
pub enum SessionAffinity {
    #[default]
    NONE,
    CLIENT_IP_PORT_PROTO,
    CLIENT_IP_PROTO,
    CLIENT_IP,
    CLIENT_IP_NO_DESTINATION,
}

/// spec/backend-selection.md "Connection tracking".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[allow(non_camel_case_types, missing_docs)]
pub enum TrackingMode {
    #[default]
    PER_CONNECTION,
    PER_SESSION,
}

/// spec/backend-selection.md `connection_persistence_on_unhealthy_backends`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[allow(non_camel_case_types, missing_docs)]
pub enum Persistence {
    #[default]
    DEFAULT_FOR_PROTOCOL,
    NEVER_PERSIST,
    ALWAYS_PERSIST,
}

/// spec/service-lb-policy.md "Algorithms".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[allow(non_camel_case_types, missing_docs)]
pub enum Algorithm {
    #[default]
    WATERFALL_BY_REGION,
    SPRAY_TO_REGION,
    WATERFALL_BY_ZONE,
}

/// spec/service-lb-policy.md "Traffic isolation".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[allow(non_camel_case_types, missing_docs)]
pub enum IsolationGranularity {
    REGION,
}

/// spec/service-lb-policy.md "Traffic isolation".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[allow(non_camel_case_types, missing_docs)]
pub enum IsolationMode {
    #[default]
    NEAREST,
    STRICT,
}

/// spec/service-lb-policy.md "Preferred backends".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[allow(non_camel_case_types, missing_docs)]
pub enum Preference {
    #[default]
    DEFAULT,
    PREFERRED,
}

/// How a chosen backend receives the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[allow(non_camel_case_types)]
pub enum ForwardingMode {
    /// L2 direct server return: rewrite the destination MAC only; backends hold the VIP.
    #[default]
    L2_DSR,
    /// IPv4-in-IPv4 (RFC 2003) to the backend address.
    IPIP,
    /// GUE (draft-ietf-intarea-gue) over UDP/IPv4 to the backend address.
    GUE,
}
