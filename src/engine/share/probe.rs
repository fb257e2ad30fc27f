//! How a member learns which index the kernel gave each socket of the `SO_REUSEPORT` group.
//!
//! The kernel numbers a group's sockets in the order they joined and, when one leaves, moves
//! the last one into its place; no system call tells a socket its index. Every steering
//! program sends a datagram for QP number `PROBE_BASE + i` to socket `i`
//! ([`super::steer`]). So the member that renews the steering sends one probe per index from
//! a socket of its own on the address; the engine that owns each socket answers with its
//! slot and engine number and the probe's nonce. Index `i` past the group falls back to the
//! kernel's hash, so the first index answered by a socket already seen is the group's size;
//! an index nobody answers (a socket whose process is dying, an engine that did not run)
//! makes the round incomplete, and it is tried again.
//!
//! Probes are 36 bytes: a BTH (QP number `PROBE_BASE + i`), [`MAGIC`], a 16-byte nonce.
//! Answers go back to the probe's source only when it is the address itself, and the member
//! takes only answers that carry its nonce, which nobody else has seen.

use std::io;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

use super::steer::SocketMap;
use super::{MAX_SOCKETS, PROBE_BASE, Share};

/// After the BTH of a probe.
const MAGIC: &[u8; 8] = b"SRSHPRB1";
/// At the start of an answer.
const ANSWER_MAGIC: &[u8; 8] = b"SRSHANS1";
const PROBE_LEN: usize = 12 + 8 + 16;
const ANSWER_LEN: usize = 8 + 16 + 2 + 1 + 2;

/// The probe for socket `index`.
pub(crate) fn probe(index: u16, nonce: &[u8; 16]) -> [u8; PROBE_LEN] {
    let mut p = [0u8; PROBE_LEN];
    p[0] = 0x64; // UD SEND Only: nothing that could be taken for a connected QP's packet
    p[2..4].copy_from_slice(&0xffffu16.to_be_bytes());
    p[5..8].copy_from_slice(&(PROBE_BASE + u32::from(index)).to_be_bytes()[1..]);
    p[12..20].copy_from_slice(MAGIC);
    p[20..36].copy_from_slice(nonce);
    p
}

/// The answer to `payload` if it is a probe: `(nonce, index, slot, engine)` encoded.
pub(crate) fn answer(payload: &[u8], slot: u8, engine: u16) -> Option<[u8; ANSWER_LEN]> {
    if payload.len() != PROBE_LEN || &payload[12..20] != MAGIC {
        return None;
    }
    let qpn = u32::from_be_bytes([0, payload[5], payload[6], payload[7]]);
    let index = qpn.checked_sub(PROBE_BASE)? as u16;
    let mut a = [0u8; ANSWER_LEN];
    a[..8].copy_from_slice(ANSWER_MAGIC);
    a[8..24].copy_from_slice(&payload[20..36]);
    a[24..26].copy_from_slice(&index.to_be_bytes());
    a[26] = slot;
    a[27..29].copy_from_slice(&engine.to_be_bytes());
    Some(a)
}

/// `(index, slot, engine)` of an answer carrying `nonce`.
fn parse_answer(a: &[u8], nonce: &[u8; 16]) -> Option<(usize, u8, u16)> {
    if a.len() != ANSWER_LEN || &a[..8] != ANSWER_MAGIC || &a[8..24] != nonce {
        return None;
    }
    Some((usize::from(u16::from_be_bytes([a[24], a[25]])), a[26], u16::from_be_bytes([a[27], a[28]])))
}

/// What the answers to probes `0..answers.len()` say about the group: its numbering, or
/// `None` if it cannot be told yet (an index unanswered before the group's end), or
/// `Some(Err(()))` when every probe was answered by a different socket (the group may be
/// bigger: probe more).
fn analyse(answers: &[Option<(u8, u16)>]) -> Option<Result<SocketMap, ()>> {
    let mut owners = Vec::new();
    for a in answers {
        let o = (*a)?;
        if owners.contains(&o) {
            return Some(Ok(SocketMap { owners }));
        }
        owners.push(o);
    }
    Some(Err(()))
}

/// One probe round after another (at most a few) until the numbering of address `i`'s group
/// is known.
pub(crate) fn discover(share: &Share, i: usize) -> io::Result<SocketMap> {
    let to = share.addr(i);
    let mut from = to;
    from.set_port(0);
    let sock = UdpSocket::bind(from)?;
    sock.set_read_timeout(Some(Duration::from_millis(5)))?;
    let mut n = 64usize.min(MAX_SOCKETS);
    let mut nap = Duration::from_millis(5);
    let closed = || io::Error::new(io::ErrorKind::Interrupted, "the device closed");
    for _ in 0..8 {
        if share.is_closed() {
            return Err(closed());
        }
        let nonce: [u8; 16] = std::array::from_fn(|_| crate::engine::random::u32() as u8);
        for i in 0..n {
            sock.send_to(&probe(i as u16, &nonce), to)?;
        }
        let mut answers: Vec<Option<(u8, u16)>> = vec![None; n];
        let until = Instant::now() + Duration::from_millis(300);
        let mut buf = [0u8; 64];
        while Instant::now() < until && answers.iter().any(Option::is_none) {
            match sock.recv_from(&mut buf) {
                Ok((len, _)) => {
                    if let Some((i, s, e)) = parse_answer(&buf[..len], &nonce)
                        && i < n
                    {
                        answers[i] = Some((s, e));
                    }
                }
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    if share.is_closed() {
                        return Err(closed());
                    }
                    // Stop waiting once the group's end is certain.
                    if let Some(Ok(_)) = analyse(&answers) {
                        break;
                    }
                }
                Err(e) => return Err(e),
            }
        }
        match analyse(&answers) {
            Some(Ok(map)) if map.is_complete() && map.owners.iter().any(|(s, _)| *s == share.slot) => {
                return Ok(map);
            }
            Some(Err(())) if n < MAX_SOCKETS => n = (n * 2).min(MAX_SOCKETS),
            _ => {}
        }
        share.counters.probe_retries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        std::thread::sleep(nap);
        nap = (nap * 2).min(Duration::from_millis(200));
    }
    Err(io::Error::new(io::ErrorKind::TimedOut, "the group's sockets did not all answer"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_is_answered_with_its_nonce_and_index() {
        let nonce = [9u8; 16];
        let p = probe(37, &nonce);
        let a = answer(&p, 5, 2).unwrap();
        assert_eq!(parse_answer(&a, &nonce), Some((37, 5, 2)));
        assert_eq!(parse_answer(&a, &[8u8; 16]), None, "another round's answer");
        assert!(answer(&p[..30], 5, 2).is_none());
        let mut not_probe = p;
        not_probe[12] ^= 1;
        assert!(answer(&not_probe, 5, 2).is_none());
        let mut low_qpn = p;
        low_qpn[5] = 0;
        assert!(answer(&low_qpn, 5, 2).is_none());
    }

    #[test]
    fn the_group_ends_where_a_socket_answers_twice() {
        let a = |s, e| Some((s, e));
        let answers = [a(1, 0), a(0, 0), a(0, 1), a(0, 0), a(1, 0)];
        assert_eq!(analyse(&answers), Some(Ok(SocketMap { owners: vec![(1, 0), (0, 0), (0, 1)] })));
        // An unanswered index before the end: not yet.
        assert_eq!(analyse(&[a(1, 0), None, a(1, 0)]), None);
        // Every probe a different socket: there may be more.
        assert_eq!(analyse(&[a(1, 0), a(2, 0)]), Some(Err(())));
    }
}
