//! The counters a device reports (`Device::counters`, the run directory's counters file,
//! `softroce counters`): the sum of its QPs' and its receive path's.

use crate::transport::Counters;

/// The directory where devices publish their counters (see [`crate::engine::rundir`]):
/// `$SOFTROCE_RUN_DIR`, else `/run/softroce` for root, else `$XDG_RUNTIME_DIR/softroce`, else
/// `/tmp/softroce-<uid>`.
pub fn counters_dir() -> std::path::PathBuf {
    crate::engine::rundir::run_dir_path()
}

/// Datagrams dropped as not RoCEv2 for the device, by reason, in the order the receive
/// filter checks them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JunkCounters {
    /// Fewer bytes than a BTH and an ICRC.
    pub short: u64,
    /// A BTH transport version other than 0.
    pub tver: u64,
    /// A P_Key outside the default partition.
    pub pkey: u64,
    /// A reserved opcode.
    pub opcode: u64,
    /// Shorter than the opcode's headers and the ICRC.
    pub truncated: u64,
    /// A pad count that does not fit, or a pad on an opcode without payload.
    pub pad: u64,
    /// A length that is not a multiple of 4.
    pub unaligned: u64,
}

impl JunkCounters {
    pub(crate) fn from_array(a: [u64; 7]) -> JunkCounters {
        let [short, tver, pkey, opcode, truncated, pad, unaligned] = a;
        JunkCounters { short, tver, pkey, opcode, truncated, pad, unaligned }
    }
}

/// Device counters: rxe's hw_counters names plus the receive path's drops.
#[derive(Debug, Clone, Default)]
pub struct DeviceCounters {
    /// Summed QP counters.
    pub qp: Counters,
    /// Packets dropped for a bad ICRC.
    pub rcvd_icrc_err: u64,
    /// Packets dropped because they are not RoCEv2 for this device: they did not parse, or
    /// carry a transport version other than 0 or a P_Key outside the default partition (the
    /// sum of `rcvd_junk`'s counts and the other parse failures).
    pub rcvd_malformed: u64,
    /// `rcvd_malformed` by reason. With a kernel socket filter (UDP and raw backends) the
    /// engine sees a random 1 in 64 of what the filter drops, so these count that sample
    /// (the total the kernel dropped is in `rcvd_socket_drops`).
    pub rcvd_junk: JunkCounters,
    /// Packets for a QP that does not exist.
    pub rcvd_unknown_qp: u64,
    /// Packets from an address the QP is not connected to.
    pub rcvd_bad_source: u64,
    /// ICRCs that matched only with an IPv4 identification other than the one predicted.
    pub icrc_unexpected_id: u64,
    /// Packets the backend failed to send (listed once, under `send_err`, with the QPs'
    /// own send failures).
    pub send_err: u64,
    /// Packets received with ECN Congestion Experienced (mlx5 calls it
    /// `np_ecn_marked_roce_packets`).
    pub rcvd_ecn_ce: u64,
    /// Packets the kernel dropped on the device's receive socket: the socket was full (the
    /// engine fell behind its peers), or, UDP backend, its filter rejected the datagram as
    /// not RoCEv2 for this device (UDP backend: the socket's `drops` in `/proc/net/udp`; raw
    /// backend: the packet socket's `tp_drops`, which counts only the first kind). Without
    /// junk on the wire and on a lossless path this stays 0.
    pub rcvd_socket_drops: u64,
    /// Raw backend: frames shorter than their headers say, or longer than a receive slot.
    pub rcvd_frame_truncated: u64,
    /// Raw backend: VLAN-tagged frames (softroce serves the untagged interface).
    pub rcvd_vlan_tagged: u64,
    /// Raw backend: bad IP version, IHL, total length or IPv4 header checksum; fragments.
    pub rcvd_ip_hdr_err: u64,
    /// Raw backend: IPv6 packets with an extension header before UDP.
    pub rcvd_ipv6_ext_hdr: u64,
    /// Raw backend: a UDP length that disagrees with the IP length.
    pub rcvd_udp_len_err: u64,
    /// Raw backend: frames that passed the socket filter but are not RoCEv2 to this device.
    pub rcvd_not_for_us: u64,
    /// Raw backend: packets dropped because the next hop's MAC was not resolved yet.
    pub send_neigh_unresolved: u64,
    /// QP1: packets other than UD SEND Only (dropped).
    pub rcvd_mad_bad_opcode: u64,
    /// QP1: packets whose P_Key does not match the port's (0xffff), as rxe's `check_keys`.
    /// The receive filter drops such packets for every QP first (`rcvd_junk.pkey`), so this
    /// stays 0 unless that check is bypassed.
    pub rcvd_mad_bad_pkey: u64,
    /// QP1: packets whose Q_Key is not the GSI's 0x80010000.
    pub rcvd_mad_bad_qkey: u64,
    /// QP1: MADs the CM sent to an address no device address can reach (not sent).
    pub send_mad_no_route: u64,
    /// Packets an engine received for a QP of another engine of the device and passed on
    /// ([`DeviceConfig::engine_threads`](crate::engine::config::DeviceConfig::engine_threads); 0 with one engine).
    pub rcvd_forwarded: u64,
    /// Packets dropped because the owning engine had too many passed-on packets waiting.
    pub rcvd_forward_dropped: u64,
    /// Sends (each a run of packets) that left from the RoCE port instead of the QP's UDP
    /// source port, which another socket held; their ICRC covers the port they left from.
    pub send_port_fallback: u64,
    /// What fault injection did ([`DeviceConfig::faults`](crate::engine::config::DeviceConfig::faults); all 0 without).
    pub faults: crate::engine::injector::FaultCounters,
    /// The IB CM's counters (messages, retries, duplicates, every drop and refusal).
    pub cm: crate::transport::cm::CmCounters,
    /// A shared address ([`DeviceConfig::share`](crate::engine::config::DeviceConfig::share)): how many devices share it now (this one
    /// included; 0 for an unshared device).
    pub share_members: u64,
    /// Shared address: datagrams this device received for another member and passed on
    /// (while the kernel's steering is renewed; MADs for another member's CM).
    pub share_passed_on: u64,
    /// Shared address: datagrams another member passed on to this one.
    pub share_passed_in: u64,
    /// Shared address: datagrams that could not be passed on (the member's connection full
    /// or gone).
    pub share_pass_dropped: u64,
    /// Shared address: packets for a QP of a member that has gone (dropped, also counted in
    /// `rcvd_unknown_qp`).
    pub share_gone_qp: u64,
    /// Shared address: times this device renewed the kernel's steering (after members came
    /// or went).
    pub share_steerings: u64,
    /// Shared address: probe rounds that found the group incomplete and were repeated.
    pub share_probe_retries: u64,
}

impl DeviceCounters {
    /// One device's counters from its engines' parts: the one part that carries the
    /// device-wide counters (the IB CM's engine) plus every other engine's QP counters.
    pub(crate) fn combine(
        base: DeviceCounters,
        others: impl IntoIterator<Item = DeviceCounters>,
    ) -> DeviceCounters {
        let mut total = base;
        for p in others {
            total.qp.add(&p.qp);
        }
        total
    }

    /// The counters that are not zero, as `name=value` separated by spaces: the one-line
    /// post-mortem the tools and examples print.
    pub fn nonzero_summary(&self) -> String {
        self.iter().filter(|(_, v)| *v > 0).map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
    }

    /// Every counter as `(name, value)`.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        // One `send_err`, as rxe has: the QPs' failures (no route) and the backend's.
        let qp = self.qp.iter().map(|(k, v)| if k == "send_err" { (k, v + self.send_err) } else { (k, v) });
        qp.chain([
            ("rcvd_icrc_err", self.rcvd_icrc_err),
            ("rcvd_malformed", self.rcvd_malformed),
            ("rcvd_junk_short", self.rcvd_junk.short),
            ("rcvd_junk_tver", self.rcvd_junk.tver),
            ("rcvd_junk_pkey", self.rcvd_junk.pkey),
            ("rcvd_junk_opcode", self.rcvd_junk.opcode),
            ("rcvd_junk_truncated", self.rcvd_junk.truncated),
            ("rcvd_junk_pad", self.rcvd_junk.pad),
            ("rcvd_junk_unaligned", self.rcvd_junk.unaligned),
            ("rcvd_unknown_qp", self.rcvd_unknown_qp),
            ("rcvd_bad_source", self.rcvd_bad_source),
            ("icrc_unexpected_id", self.icrc_unexpected_id),
            ("rcvd_ecn_ce", self.rcvd_ecn_ce),
            ("rcvd_socket_drops", self.rcvd_socket_drops),
            ("rcvd_frame_truncated", self.rcvd_frame_truncated),
            ("rcvd_vlan_tagged", self.rcvd_vlan_tagged),
            ("rcvd_ip_hdr_err", self.rcvd_ip_hdr_err),
            ("rcvd_ipv6_ext_hdr", self.rcvd_ipv6_ext_hdr),
            ("rcvd_udp_len_err", self.rcvd_udp_len_err),
            ("rcvd_not_for_us", self.rcvd_not_for_us),
            ("send_neigh_unresolved", self.send_neigh_unresolved),
            ("rcvd_mad_bad_opcode", self.rcvd_mad_bad_opcode),
            ("rcvd_mad_bad_pkey", self.rcvd_mad_bad_pkey),
            ("rcvd_mad_bad_qkey", self.rcvd_mad_bad_qkey),
            ("send_mad_no_route", self.send_mad_no_route),
            ("rcvd_forwarded", self.rcvd_forwarded),
            ("rcvd_forward_dropped", self.rcvd_forward_dropped),
            ("send_port_fallback", self.send_port_fallback),
            ("share_members", self.share_members),
            ("share_passed_on", self.share_passed_on),
            ("share_passed_in", self.share_passed_in),
            ("share_pass_dropped", self.share_pass_dropped),
            ("share_gone_qp", self.share_gone_qp),
            ("share_steerings", self.share_steerings),
            ("share_probe_retries", self.share_probe_retries),
        ])
        .chain(self.faults.iter())
    }
}
