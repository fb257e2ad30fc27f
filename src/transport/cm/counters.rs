//! The CM's counters. The first four groups are the kernel's, per message type, as
//! `/sys/class/infiniband/<dev>/ports/<n>/cm_{tx_msgs,tx_retries,rx_msgs,rx_duplicates}/<msg>`
//! show them (`cm.c` `cm_counter_groups`); the rest name every reason a MAD is dropped or
//! answered without reaching a connection, so that hostile input is visible.

use crate::wire::cm::CmAttr;

/// Index of a CM attribute in the per-message counter arrays (the kernel's order, by ID).
pub(crate) fn attr_index(attr: CmAttr) -> Option<usize> {
    let v = attr as u16;
    (0x10..=0x1a).contains(&v).then(|| usize::from(v - 0x10))
}

/// The per-message counter names, in attribute-ID order, req (0x0010) to apr (0x001a): the
/// kernel's sysfs file names.
pub const MESSAGE_NAMES: [&str; 11] =
    ["req", "mra", "rej", "rep", "rtu", "dreq", "drep", "sidr_req", "sidr_rep", "lap", "apr"];

macro_rules! cm_counters {
    ($( $(#[$m:meta])* $name:ident ),* $(,)?) => {
        /// Counters of one CM endpoint.
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct CmCounters {
            /// MADs sent, first transmissions and retransmissions (`cm_tx_msgs`).
            pub tx_msgs: [u64; 11],
            /// Retransmissions (`cm_tx_retries`).
            pub tx_retries: [u64; 11],
            /// MADs received for the CM (`cm_rx_msgs`).
            pub rx_msgs: [u64; 11],
            /// Duplicates received (`cm_rx_duplicates`).
            pub rx_duplicates: [u64; 11],
            $( $(#[$m])* pub $name: u64, )*
        }

        impl CmCounters {
            /// Every counter as `(name, value)`: the per-message groups as
            /// `cm_tx_msgs.req` etc., then the named ones.
            pub fn iter(&self) -> impl Iterator<Item = (String, u64)> + '_ {
                let groups = [
                    ("cm_tx_msgs", &self.tx_msgs),
                    ("cm_tx_retries", &self.tx_retries),
                    ("cm_rx_msgs", &self.rx_msgs),
                    ("cm_rx_duplicates", &self.rx_duplicates),
                ];
                groups
                    .into_iter()
                    .flat_map(|(g, a)| MESSAGE_NAMES.iter().zip(a.iter()).map(move |(m, v)| (format!("{g}.{m}"), *v)))
                    .chain([$( (stringify!($name).to_string(), self.$name), )*])
            }
        }
    };
}

cm_counters! {
    /// MADs whose UD payload is not exactly 256 bytes (dropped).
    rx_bad_length,
    /// MADs with a base version other than 1 (dropped, as `validate_mad` does).
    rx_bad_base_version,
    /// Subnet management MADs on the GSI QP (dropped).
    rx_smp_on_gsi,
    /// CM-class MADs whose method is not Send, other than ClassPortInfo (dropped).
    rx_bad_method,
    /// Get/Set MADs no agent takes, answered with GetResp status 0x000c.
    rx_unsupported_answered,
    /// Other MADs no agent takes: another class, CM class version other than 2, responses
    /// (dropped).
    rx_no_agent,
    /// CM Sends with an attribute the CM does not define, ClassPortInfo included (dropped).
    rx_unknown_attr,
    /// CM messages naming no connection of ours (dropped; a DREQ still gets a DREP).
    rx_no_connection,
    /// CM messages for a connection in a state that does not take them (dropped).
    rx_wrong_state,
    /// DREQs whose Remote QPN is not the connection's QP (ignored, as Linux does).
    rx_dreq_wrong_qpn,
    /// LAP and APR, which Linux ignores on RoCE ports.
    rx_lap_apr_ignored,
    /// REQs for a service nobody listens on, answered with REJ 8.
    req_no_listener,
    /// REQs or REPs naming a QP of a live connection from the same CA, answered with REJ 10
    /// (stale connection), the old connection getting a DREQ.
    stale_conn_rejected,
    /// REQs dropped because the listener's backlog of unanswered requests is full (the peer
    /// retries; Linux's ucma does the same when its backlog is exhausted).
    req_backlog_full,
    /// REQs or SIDR_REQs dropped because the endpoint holds its maximum of connections.
    req_no_resources,
    /// REQs with a partition key the port does not have, answered with REJ 12.
    req_bad_pkey,
    /// SIDR_REQs for a service nobody listens on, answered with SIDR_REP status 1.
    sidr_no_listener,
    /// Duplicate SIDR_REQs of a request already answered (its SIDR_REP was lost): the same
    /// SIDR_REP is sent again instead of a second request reaching the application.
    sidr_rep_resent,
    /// Connection establishments (ESTABLISHED reached, either side).
    established,
    /// Requests that timed out after every retry (REQ, REP, DREQ, SIDR_REQ).
    send_timeouts,
}
