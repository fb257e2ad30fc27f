//! The messages members of a shared address exchange over their connections (`SOCK_SEQPACKET`
//! unix sockets, so one message is one record): pure encoding and decoding, no I/O.
//!
//! - `Hello`: the first message of a member that connects to another: its slot.
//! - `Packet`: a datagram that reached this member but belongs to the other (a QP or a CM
//!   connection of the other's), with what the UDP socket told about it.
//! - `Listen`: this member now listens (or no longer listens) for connection requests to a
//!   service ID on an address, so that REQs and SIDR_REQs that reach another member are
//!   passed on to it.
//!
//! Decoding never panics; anything malformed is `None` (the receiver counts and drops it).

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// A member message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Msg<'a> {
    /// The sender's slot on the address.
    Hello {
        /// The slot.
        slot: u8,
    },
    /// A datagram passed on.
    Packet {
        /// Its source address and port.
        src: SocketAddr,
        /// The local address it was sent to.
        dst: IpAddr,
        /// The local port it was sent to.
        dst_port: u16,
        /// ECN bits of its IP header.
        ecn: u8,
        /// The UDP payload (BTH through ICRC).
        payload: &'a [u8],
    },
    /// The sender listens (`on`) or stopped listening on a service ID at an address.
    Listen {
        /// The service ID.
        service_id: u64,
        /// The listener's address (unspecified: every address of the device).
        addr: IpAddr,
        /// Listening or not.
        on: bool,
    },
}

const HELLO: u8 = 1;
const PACKET: u8 = 2;
const LISTEN: u8 = 3;

/// Bytes of a `Packet` message before its payload.
pub(crate) const PACKET_HEADER_LEN: usize = 1 + 17 + 2 + 17 + 2 + 1;

fn put_ip(out: &mut Vec<u8>, ip: IpAddr) {
    match ip {
        IpAddr::V4(v4) => {
            out.push(4);
            out.extend_from_slice(&v4.to_ipv6_mapped().octets());
        }
        IpAddr::V6(v6) => {
            out.push(6);
            out.extend_from_slice(&v6.octets());
        }
    }
}

fn get_ip(b: &[u8]) -> Option<IpAddr> {
    let (&fam, rest) = b.split_first()?;
    let o: [u8; 16] = rest.get(..16)?.try_into().ok()?;
    let v6 = Ipv6Addr::from(o);
    match fam {
        4 => v6.to_ipv4_mapped().map(IpAddr::V4),
        6 => Some(IpAddr::V6(v6)),
        _ => None,
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

impl Msg<'_> {
    /// Appends the encoding to `out` (cleared first).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        match self {
            Msg::Hello { slot } => {
                out.push(HELLO);
                out.push(*slot);
            }
            Msg::Packet { src, dst, dst_port, ecn, payload } => {
                out.push(PACKET);
                put_ip(out, src.ip());
                out.extend_from_slice(&src.port().to_be_bytes());
                put_ip(out, *dst);
                out.extend_from_slice(&dst_port.to_be_bytes());
                out.push(*ecn);
                out.extend_from_slice(payload);
            }
            Msg::Listen { service_id, addr, on } => {
                out.push(LISTEN);
                out.extend_from_slice(&service_id.to_be_bytes());
                put_ip(out, *addr);
                out.push(u8::from(*on));
            }
        }
    }

    /// Decodes one message.
    pub fn decode(b: &[u8]) -> Option<Msg<'_>> {
        let (&kind, rest) = b.split_first()?;
        match kind {
            HELLO if rest.len() == 1 => Some(Msg::Hello { slot: rest[0] }),
            PACKET if b.len() >= PACKET_HEADER_LEN => {
                let src = SocketAddr::new(get_ip(&b[1..18])?, u16_at(b, 18)?);
                let dst = get_ip(&b[20..37])?;
                let dst_port = u16_at(b, 37)?;
                let ecn = b[39] & 3;
                Some(Msg::Packet { src, dst, dst_port, ecn, payload: &b[PACKET_HEADER_LEN..] })
            }
            LISTEN if rest.len() == 8 + 17 + 1 => {
                let service_id = u64::from_be_bytes(rest[..8].try_into().ok()?);
                let addr = get_ip(&rest[8..25])?;
                let on = match rest[25] {
                    0 => false,
                    1 => true,
                    _ => return None,
                };
                Some(Msg::Listen { service_id, addr, on })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_comes_back_as_it_was() {
        let payload = [7u8; 300];
        let msgs = [
            Msg::Hello { slot: 63 },
            Msg::Packet {
                src: "10.0.0.2:49152".parse().unwrap(),
                dst: "10.0.0.1".parse().unwrap(),
                dst_port: 4791,
                ecn: 3,
                payload: &payload,
            },
            Msg::Packet {
                src: "[fe80::1]:55410".parse().unwrap(),
                dst: "fe80::2".parse().unwrap(),
                dst_port: 4791,
                ecn: 0,
                payload: &[],
            },
            Msg::Listen { service_id: 0x0106_1c06, addr: std::net::Ipv4Addr::UNSPECIFIED.into(), on: true },
            Msg::Listen { service_id: 7, addr: "::1".parse().unwrap(), on: false },
        ];
        let mut buf = Vec::new();
        for m in &msgs {
            m.encode(&mut buf);
            assert_eq!(Msg::decode(&buf).as_ref(), Some(m));
            // Every strict prefix of a fixed-size message is refused; none panics.
            for n in 0..buf.len() {
                let _ = Msg::decode(&buf[..n]);
            }
        }
    }

    #[test]
    fn garbage_is_refused_without_panic() {
        assert_eq!(Msg::decode(&[]), None);
        assert_eq!(Msg::decode(&[9, 1, 2]), None);
        assert_eq!(Msg::decode(&[HELLO]), None);
        assert_eq!(Msg::decode(&[HELLO, 1, 2]), None);
        let mut bad_family = vec![PACKET, 5];
        bad_family.resize(PACKET_HEADER_LEN, 0);
        assert_eq!(Msg::decode(&bad_family), None);
    }
}
