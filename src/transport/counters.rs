//! Per-QP counters, named after kernel rxe's hw_counters (`rxe_hw_counters.c`) so that the
//! names users already read in `/sys/class/infiniband/*/ports/1/hw_counters` mean the same
//! here. A few softroce-only counters follow them.

macro_rules! counters {
    ($( $(#[$m:meta])* $name:ident ),* $(,)?) => {
        /// Counters of one QP (the device sums them).
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct Counters {
            $( $(#[$m])* pub $name: u64, )*
        }

        impl Counters {
            /// Every counter as `(name, value)`, in rxe's order, then softroce's own.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
                [$( (stringify!($name), self.$name), )*].into_iter()
            }
            /// Adds every counter of `other` to `self`.
            pub fn add(&mut self, other: &Counters) {
                $( self.$name += other.$name; )*
            }
        }
    };
}

counters! {
    /// Packets built for transmission.
    sent_pkts,
    /// Packets accepted by a QP (after the engine's ICRC, QPN and address checks).
    rcvd_pkts,
    /// Requests with a PSN before the expected one (RC responder).
    duplicate_request,
    /// PSN-sequence NAKs sent (once per gap).
    out_of_seq_request,
    /// RNR NAKs received.
    rcvd_rnr_err,
    /// RNR NAKs sent.
    send_rnr_err,
    /// PSN-sequence NAKs received that advanced the acknowledged PSN.
    rcvd_seq_err,
    /// ACKs not sent on their own because a later cumulative ACK covered them (softroce's
    /// meaning; rxe counts completer back-pressure under this name).
    ack_deferred,
    /// Requests that failed because the transport retry count was exhausted.
    retry_exceeded_err,
    /// Requests that failed because the RNR retry count was exhausted.
    retry_rnr_exceeded_err,
    /// Go-back-N retransmissions started (timeouts, sequence NAKs, implied NAKs).
    completer_retry_err,
    /// Packets the engine failed to send.
    send_err,
    /// Times the port went down.
    link_downed,
    /// SEND work requests completed (any status).
    rdma_sends,
    /// Receive completions with success.
    rdma_recvs,
    /// Local ACK timeouts that expired with requests outstanding.
    local_ack_timeout_err,
    /// NAKs sent other than PSN-sequence and RNR (invalid request, access, operational).
    send_nak_err,
    /// Duplicate READ requests answered again from the responder resources.
    duplicate_read_replayed,
    /// Duplicate atomics answered with the saved original value.
    duplicate_atomic_replayed,
    /// Packets a QP dropped: wrong state or type, out-of-window responses, ghost ACKs,
    /// duplicates nothing answers.
    rcvd_dropped,
    /// UD packets dropped because their Q_Key is not the QP's.
    rcvd_qkey_err,
    /// UC/UD messages dropped because no receive WQE was posted (RC answers with an RNR NAK).
    rcvd_no_wqe_drop,
    /// UC packets dropped with the message they belong to: a PSN gap, an opcode out of
    /// sequence, a bad R_Key or length (the receiver resynchronises at the next First/Only).
    uc_msg_dropped,
    /// Local ACK timeouts avoided (softroce's own): the timer expired when the engine had
    /// been kept from running for part of the interval, was postponed by that part instead
    /// of retrying (and taking one of `retry_cnt`), and the peer answered before the new
    /// expiry.
    local_ack_timeout_stalled,
    /// Go-back-N retransmissions started early by the requester's probe (softroce's own):
    /// nothing was acknowledged for a few measured round trips, long before the local ACK
    /// timeout (a lost retransmission, a lost NAK, lost last packets of a burst). Not counted
    /// in `completer_retry_err` and not taken from `retry_cnt`.
    probe_retransmit,
    /// READ responses that arrived beyond a gap in the response stream and made the
    /// requester ask again for the missing part at once (softroce's own; each is also a
    /// `completer_retry_err`).
    rcvd_read_gap,
    /// Tail probes sent (softroce's own): after two measured round trips without an
    /// acknowledgement, the oldest unacknowledged SEND/WRITE packet resent alone, with
    /// AckReq. Not a retry and not a go-back-N: one packet that the responder answers.
    tail_probe,
    /// Go-back-N retransmissions started by the answer to a tail probe (softroce's own): the
    /// responder acknowledged exactly the probed packet, so what was sent after it was lost.
    /// Not counted in `completer_retry_err` or `probe_retransmit`.
    tail_probe_retransmit,
    /// Plain ACKs held back, by an application thread's poll or the engine thread, to leave
    /// with the QP's next packet (softroce's own; `DeviceConfig::hold_acks`).
    ack_held,
}
