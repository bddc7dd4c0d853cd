//! Peer identity: the hello that binds a connection between OSDs to the
//! OSD on its far end.
//!
//! Every OSD → OSD connection (PG messages and heartbeats alike) opens with
//! a [`PeerHello`]: the sender names its OSD id, the address it serves on,
//! its map epoch and (empty until cryptographic authentication lands) an
//! authenticator. The receiver checks the claim against its map
//! ([`check_hello`]) and binds the connection's session to that id; from
//! then on a peer message is judged by the connection it arrived on, and one
//! whose `from` names another OSD is refused and logged. The sender waits
//! for the answer before it sends anything else on the connection, so no
//! message overtakes the hello, and checks that the answer names the OSD it
//! meant to reach.
//!
//! What this proves without cryptography: the peer claims an id the map
//! gives the address it says it serves on, and connects from that address's
//! host (the sender binds its socket to its serving IP). It does not stop a
//! process on that host from lying; `auth` is where a signed ticket will
//! go (a later issue), and a hello carrying one would be checked here too.

use cairn_proto::limits::HELLO_AUTH_BYTES_MAX;
use cairn_proto::map::OsdEndpoint;
use cairn_proto::peer::{HELLO_VERSION, PeerHello};
use cairn_types::OsdId;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

/// Why a hello is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HelloRefused {
    #[error("hello version {0} is not {HELLO_VERSION}")]
    Version(u16),
    #[error("an authenticator of {0} bytes (at most {HELLO_AUTH_BYTES_MAX})")]
    AuthTooLong(usize),
    #[error("osd.{0} is not in the map")]
    UnknownOsd(u32),
    #[error("osd.{osd} serves on {mapped} in the map, not {claimed}")]
    WrongAddress {
        osd: u32,
        mapped: String,
        claimed: String,
    },
    #[error("osd.{osd} serves on {mapped}, but this connection comes from {source_ip}")]
    WrongSource {
        osd: u32,
        mapped: String,
        source_ip: IpAddr,
    },
    #[error("this connection already belongs to osd.{bound}, not osd.{claimed}")]
    Rebind { bound: u64, claimed: u32 },
}

impl HelloRefused {
    /// Whether a newer map could make the claim good (the receiver then
    /// refreshes its map and judges again).
    #[must_use]
    pub fn map_may_be_stale(&self) -> bool {
        matches!(
            self,
            HelloRefused::UnknownOsd(_)
                | HelloRefused::WrongAddress { .. }
                | HelloRefused::WrongSource { .. }
        )
    }
}

/// Judges `hello`, arriving from `source`, against the map's endpoints.
///
/// # Errors
/// The first way the claim disagrees with the map or the connection.
pub fn check_hello(
    endpoints: &BTreeMap<OsdId, OsdEndpoint>,
    hello: &PeerHello,
    source: SocketAddr,
) -> Result<(), HelloRefused> {
    if hello.version != HELLO_VERSION {
        return Err(HelloRefused::Version(hello.version));
    }
    if hello.auth.len() > HELLO_AUTH_BYTES_MAX {
        return Err(HelloRefused::AuthTooLong(hello.auth.len()));
    }
    let endpoint = endpoints
        .get(&hello.osd)
        .ok_or(HelloRefused::UnknownOsd(hello.osd.0))?;
    if endpoint.addr != hello.addr {
        return Err(HelloRefused::WrongAddress {
            osd: hello.osd.0,
            mapped: endpoint.addr.clone(),
            claimed: hello.addr.clone(),
        });
    }
    // A wildcard address says nothing about the host; an unparsable one
    // cannot be compared either (the map only holds what OSDs booted with).
    if let Ok(mapped) = endpoint.addr.parse::<SocketAddr>()
        && !mapped.ip().is_unspecified()
        && mapped.ip() != source.ip()
    {
        return Err(HelloRefused::WrongSource {
            osd: hello.osd.0,
            mapped: endpoint.addr.clone(),
            source_ip: source.ip(),
        });
    }
    Ok(())
}

/// The source IP an OSD serving on `serve_addr` connects to peers from:
/// its serving IP, unless that is a wildcard.
#[must_use]
pub fn source_ip(serve_addr: SocketAddr) -> Option<IpAddr> {
    (!serve_addr.ip().is_unspecified()).then_some(serve_addr.ip())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_types::Epoch;
    use serde_bytes::ByteBuf;

    fn endpoints() -> BTreeMap<OsdId, OsdEndpoint> {
        [
            (1, "127.0.0.1:6801"),
            (2, "127.0.0.2:6802"),
            (3, "0.0.0.0:6803"),
        ]
        .into_iter()
        .map(|(id, addr)| {
            (
                OsdId(id),
                OsdEndpoint {
                    addr: addr.to_owned(),
                    capacity_bytes: 0,
                },
            )
        })
        .collect()
    }

    fn hello(osd: u32, addr: &str) -> PeerHello {
        PeerHello {
            version: HELLO_VERSION,
            osd: OsdId(osd),
            addr: addr.to_owned(),
            epoch: Epoch(5),
            auth: ByteBuf::new(),
        }
    }

    fn from(ip: &str) -> SocketAddr {
        SocketAddr::new(ip.parse().expect("ip"), 40_000)
    }

    #[test]
    fn a_claim_must_match_the_map_and_the_connection() {
        let map = endpoints();
        assert_eq!(
            check_hello(&map, &hello(1, "127.0.0.1:6801"), from("127.0.0.1")),
            Ok(())
        );
        assert_eq!(
            check_hello(&map, &hello(3, "0.0.0.0:6803"), from("127.0.0.9")),
            Ok(()),
            "a wildcard address cannot be checked against the source"
        );
        assert_eq!(
            check_hello(&map, &hello(9, "127.0.0.1:6801"), from("127.0.0.1")),
            Err(HelloRefused::UnknownOsd(9))
        );
        let wrong_addr = check_hello(&map, &hello(1, "127.0.0.1:6802"), from("127.0.0.1"));
        assert!(matches!(
            wrong_addr,
            Err(HelloRefused::WrongAddress { osd: 1, .. })
        ));
        // osd.2's claim made from another host's address: someone else.
        let wrong_source = check_hello(&map, &hello(2, "127.0.0.2:6802"), from("127.0.0.1"));
        assert!(matches!(
            wrong_source,
            Err(HelloRefused::WrongSource { osd: 2, .. })
        ));
        assert!(wrong_source.expect_err("refused").map_may_be_stale());
        let mut future = hello(1, "127.0.0.1:6801");
        future.version = HELLO_VERSION + 1;
        assert_eq!(
            check_hello(&map, &future, from("127.0.0.1")),
            Err(HelloRefused::Version(HELLO_VERSION + 1))
        );
        let mut long = hello(1, "127.0.0.1:6801");
        long.auth = ByteBuf::from(vec![0; HELLO_AUTH_BYTES_MAX + 1]);
        assert!(matches!(
            check_hello(&map, &long, from("127.0.0.1")),
            Err(HelloRefused::AuthTooLong(_))
        ));
    }

    #[test]
    fn the_source_ip_is_the_serving_ip_unless_a_wildcard() {
        assert_eq!(
            source_ip("127.0.0.3:6800".parse().expect("addr")),
            Some("127.0.0.3".parse().expect("ip"))
        );
        assert_eq!(source_ip("0.0.0.0:6800".parse().expect("addr")), None);
    }
}
