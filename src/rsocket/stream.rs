//! The stream protocol of one connected rsocket, without I/O: the credit and sequence state
//! machine of rdma-core 44's `rsocket.c`, counter for counter, so that the peer — rdma-core on
//! kernel rxe, or this code — sees exactly the messages it expects.
//!
//! Memory is behind [`Region`] (the socket's registered buffers, or plain vectors in the
//! tests); work requests come out as [`Post`]s ([`Stream::poll_post`]) for the I/O layer to
//! hand to the QP, and completions go in through [`Stream::on_send_complete`] and
//! [`Stream::on_recv`].
//!
//! # How data flows
//!
//! Each side's receive buffer is two halves. The connection data gives the peer the first
//! half; a credit update (an RDMA WRITE WITH IMMEDIATE of an [`RsSge`] into the peer's *target
//! SGL*, two entries used in turn) gives it the next half once that half is free. The sender
//! writes data into the current half with RDMA WRITE WITH IMMEDIATE (immediate: [`op::DATA`]
//! and the length) and moves to the other entry when a half is used up; the receiver reads
//! its buffer as a ring, in the order the messages arrived.
//!
//! Messages are counted too: the peer's receive queue holds `rq_size` receives, so the
//! sender may have at most `sseq_comp - sseq_no` messages unread; each credit update carries
//! the new limit (messages read + `rq_size`). Updates are sent when half the buffer or half
//! the queue has been consumed. Credit updates, control messages and keep-alives use four
//! reserved send slots of their own (`ctrl_seqno` / `ctrl_max_seqno`).
//!
//! # Hostile peers
//!
//! A peer can only make this side fail, never read or write outside its buffers: a data
//! message longer than what was granted, an unknown operation, or more unread messages than
//! the receive queue holds puts the stream in [`ERROR`] with `EPROTO`
//! ([`Stream::protocol_errors`] counts them). Credit updates are taken at their word; a peer
//! that names bad addresses only gets its own writes refused.

use std::collections::VecDeque;

use super::proto::*;

/// The stream is connected (its QP can carry messages).
pub const CONNECTED: u32 = 0x0100;
/// This side may still send.
pub const WRITABLE: u32 = 0x0200;
/// This side may still receive.
pub const READABLE: u32 = 0x0400;
/// The connection ended in order.
pub const DISCONNECTED: u32 = 0x1000;
/// The connection failed ([`Stream::err`] says why).
pub const ERROR: u32 = 0x2000;

/// Memory the protocol reads and writes: the send buffer, the receive buffer, the target
/// SGL and iomap table.
pub trait Region {
    /// Copies `dst.len()` bytes at `off` into `dst` (inside the region: the caller checks).
    fn read(&self, off: usize, dst: &mut [u8]);
    /// Copies `src` to `off`.
    fn write(&self, off: usize, src: &[u8]);
}

/// The sizes a stream works with (rdma-core's per-socket options).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Send queue size (`RDMA_SQSIZE`).
    pub sq_size: u16,
    /// Receive queue size (`RDMA_RQSIZE`): the credits this side grants.
    pub rq_size: u16,
    /// Send buffer bytes (`SO_SNDBUF` × 2).
    pub sbuf_size: u32,
    /// Receive buffer bytes (`SO_RCVBUF` × 2; even).
    pub rbuf_size: u32,
    /// Sends up to this many bytes go inline (`RDMA_INLINE`).
    pub sq_inline: u32,
    /// Entries of this side's iomap table (`RDMA_IOMAPSIZE`).
    pub target_iomap_size: u16,
}

/// Where the peer may write: this side's target SGL (with the iomap table after it) and its
/// receive buffer, as addresses and rkeys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalBufs {
    /// The target SGL's address.
    pub target_addr: u64,
    /// Its rkey.
    pub target_rkey: u32,
    /// The receive buffer's address.
    pub rbuf_addr: u64,
    /// Its rkey.
    pub rbuf_rkey: u32,
}

/// The byte length of the target region: [`SGL_SIZE`] entries, then the iomap table.
pub fn target_len(iomap_size: u16) -> usize {
    SGE_LEN * SGL_SIZE as usize + IOMAP_LEN * iomap_size as usize
}

/// The connection data this side sends (rdma-core's `rs_format_conn_data`).
pub fn conn_data(cfg: &Config, local: &LocalBufs) -> ConnData {
    ConnData {
        version: VERSION,
        flags: CONN_FLAG_IOMAP | if cfg!(target_endian = "big") { CONN_FLAG_NET } else { 0 },
        credits: cfg.rq_size,
        target_iomap_size: value_to_scale(u32::from(cfg.target_iomap_size), 8) as u8,
        target_sgl: RsSge { addr: local.target_addr, key: local.target_rkey, length: SGL_SIZE },
        data_buf: RsSge { addr: local.rbuf_addr, key: local.rbuf_rkey, length: cfg.rbuf_size >> 1 },
    }
}

/// Where the bytes of a [`Post`] come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Src {
    /// Nothing (a zero-length write: control messages, keep-alives, bare credit updates).
    Empty,
    /// Copied into the work request (`IBV_SEND_INLINE`).
    Inline(Vec<u8>),
    /// From the send buffer: one or two (offset, length) pieces (the second when the ring
    /// wraps).
    Ring([(u32, u32); 2], usize),
}

/// A work request for the I/O layer: an RDMA WRITE (with immediate data, or without).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Post {
    /// The work request id to post it with (give it back to [`Stream::on_send_complete`]).
    pub wr_id: u64,
    /// The peer's address.
    pub addr: u64,
    /// The peer's rkey.
    pub rkey: u32,
    /// The immediate data ([`Msg::encode`]); `None` for a plain WRITE.
    pub imm: Option<u32>,
    /// The bytes.
    pub src: Src,
}

impl Post {
    /// The number of bytes written.
    pub fn len(&self) -> usize {
        match &self.src {
            Src::Empty => 0,
            Src::Inline(v) => v.len(),
            Src::Ring(p, n) => p[..*n].iter().map(|x| x.1 as usize).sum(),
        }
    }
    /// True for a zero-length write.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One connected stream's protocol state (rdma-core's `struct rsocket`, stream part).
#[derive(Debug)]
pub struct Stream {
    cfg: Config,
    local: LocalBufs,
    /// [`CONNECTED`], [`READABLE`], [`WRITABLE`], [`DISCONNECTED`], [`ERROR`].
    pub state: u32,
    /// Why the stream failed (an errno), for `SO_ERROR`; 0 when it did not.
    pub err: i32,
    /// Write the peer's memory big-endian.
    peer_big: bool,

    // Sending.
    sseq_no: u16,
    sseq_comp: u16,
    sqe_avail: u32,
    sbuf_bytes_avail: u32,
    /// Where the next ring copy goes.
    sbuf_cursor: u32,
    /// The peer's receive buffer pieces we may write (rdma-core's `target_sgl`, cached here
    /// from the credit updates as their completions arrive).
    target: [RsSge; SGL_SIZE as usize],
    target_idx: usize,
    /// The entry of our target SGL the peer's next credit update writes.
    credit_idx: usize,
    ctrl_seqno: u32,
    ctrl_max_seqno: u32,
    /// The peer's target SGL (our credit updates go there, entry `remote_sge` in turn) and
    /// its iomap table.
    remote_sgl: RsSge,
    remote_sge: u32,
    /// The peer's iomap table: address, rkey, entries.
    pub remote_iomap: RsSge,

    // Receiving.
    rseq_no: u16,
    rseq_comp: u16,
    /// The lengths of the data messages received and not yet read.
    rmsgs: VecDeque<u32>,
    queued: u64,
    rbuf_offset: u32,
    rbuf_bytes_avail: u32,
    rbuf_free_offset: u32,

    out: VecDeque<Post>,
    protocol_errors: u64,
}

impl Stream {
    /// A stream once both sides' connection data are known (rdma-core's `rs_init_bufs`, then
    /// `rs_save_conn_data` of the peer's).
    pub fn new(cfg: Config, local: LocalBufs, peer: &ConnData) -> Stream {
        let remote_sgl = peer.target_sgl;
        let remote_iomap = if peer.flags & CONN_FLAG_IOMAP != 0 {
            RsSge {
                addr: remote_sgl.addr.wrapping_add(SGE_LEN as u64 * u64::from(remote_sgl.length)),
                key: remote_sgl.key,
                length: scale_to_value(u32::from(peer.target_iomap_size), 8),
            }
        } else {
            RsSge::default()
        };
        Stream {
            cfg,
            local,
            state: CONNECTED | READABLE | WRITABLE,
            err: 0,
            peer_big: peer.peer_is_big_endian(),
            sseq_no: 0,
            sseq_comp: peer.credits,
            sqe_avail: u32::from(cfg.sq_size).saturating_sub(QP_CTRL_SIZE),
            sbuf_bytes_avail: cfg.sbuf_size,
            sbuf_cursor: 0,
            target: [peer.data_buf, RsSge::default()],
            target_idx: 0,
            credit_idx: 1,
            ctrl_seqno: 0,
            ctrl_max_seqno: QP_CTRL_SIZE,
            remote_sgl,
            remote_sge: 1,
            remote_iomap,
            rseq_no: 0,
            rseq_comp: cfg.rq_size >> 1,
            rmsgs: VecDeque::new(),
            queued: 0,
            rbuf_offset: 0,
            rbuf_bytes_avail: cfg.rbuf_size >> 1,
            rbuf_free_offset: cfg.rbuf_size >> 1,
            out: VecDeque::new(),
            protocol_errors: 0,
        }
    }

    /// The sizes.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The next work request to post, if any.
    pub fn poll_post(&mut self) -> Option<Post> {
        self.out.pop_front()
    }

    /// Protocol violations seen from the peer.
    pub fn protocol_errors(&self) -> u64 {
        self.protocol_errors
    }

    /// Whether the stream is connected.
    pub fn connected(&self) -> bool {
        self.state & CONNECTED != 0
    }

    /// Fails the stream (a failed work request, a QP error): errno `err`.
    pub fn fail(&mut self, err: i32) {
        if self.connected() {
            self.state = ERROR;
            self.err = err;
        }
    }

    fn protocol_error(&mut self) {
        self.protocol_errors += 1;
        self.fail(libc::EPROTO);
    }

    // ---- sending ----------------------------------------------------------------------

    /// Whether a data transfer may start now (rdma-core's `rs_can_send`): a send slot, 2 KiB
    /// of send buffer, a message credit and room in the peer's current buffer piece.
    pub fn can_send(&self) -> bool {
        self.sqe_avail > 0
            && self.sbuf_bytes_avail >= SNDLOWAT
            && self.sseq_no != self.sseq_comp
            && self.target[self.target_idx].length != 0
    }

    /// For a waiting sender: it can send, or never will (`rs_conn_can_send`).
    pub fn can_send_or_closed(&self) -> bool {
        self.can_send() || self.state & WRITABLE == 0
    }

    /// Copies `src` into a post's bytes: inline when small, else into the send ring
    /// (`sbuf`), wrapping into a second piece at its end.
    fn stage(&mut self, src: &[u8], sbuf: &impl Region) -> Src {
        let len = src.len() as u32;
        if len <= self.cfg.sq_inline {
            return Src::Inline(src.to_vec());
        }
        let cur = self.sbuf_cursor;
        let left = self.cfg.sbuf_size - cur;
        if len <= left {
            sbuf.write(cur as usize, src);
            self.sbuf_cursor = if len < left { cur + len } else { 0 };
            Src::Ring([(cur, len), (0, 0)], 1)
        } else {
            sbuf.write(cur as usize, &src[..left as usize]);
            sbuf.write(0, &src[left as usize..]);
            self.sbuf_cursor = len - left;
            Src::Ring([(cur, left), (0, len - left)], 2)
        }
    }

    /// The size of the next transfer of a send call (`rsend`'s overlap: 2 KiB first, then
    /// twice the last, up to 64 KiB), before the buffer limits.
    fn next_xfer(olen: &mut u32, left: usize) -> u32 {
        if (*olen as usize) < left {
            let x = *olen;
            if *olen < MAX_TRANSFER {
                *olen <<= 1;
            }
            x
        } else {
            left as u32
        }
    }

    /// Sends as much of `data` as the credits allow now; the number of bytes taken. `olen`
    /// carries the transfer size across the calls of one `rsend` (start it at
    /// [`OLAP_START_SIZE`]).
    pub fn send(&mut self, data: &[u8], olen: &mut u32, sbuf: &impl Region) -> usize {
        let mut done = 0;
        while done < data.len() && self.can_send() && self.state & WRITABLE != 0 {
            let xfer = Self::next_xfer(olen, data.len() - done)
                .min(self.sbuf_bytes_avail)
                .min(self.target[self.target_idx].length);
            let src = self.stage(&data[done..done + xfer as usize], sbuf);
            self.write_data(src, xfer);
            done += xfer as usize;
        }
        done
    }

    /// `rs_write_data`: one data message into the current piece of the peer's buffer.
    fn write_data(&mut self, src: Src, len: u32) {
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= 1;
        self.sbuf_bytes_avail -= len;
        let t = &mut self.target[self.target_idx];
        let (addr, rkey) = (t.addr, t.key);
        t.addr = t.addr.wrapping_add(u64::from(len));
        t.length -= len;
        if t.length == 0 {
            self.target_idx = (self.target_idx + 1) % SGL_SIZE as usize;
        }
        let imm = Msg::new(op::DATA, len).encode();
        self.out.push_back(Post { wr_id: u64::from(imm), addr, rkey, imm: Some(imm), src });
    }

    /// Whether a control message may be sent (one of the reserved slots is free).
    pub fn ctrl_avail(&self) -> bool {
        self.ctrl_seqno != self.ctrl_max_seqno
    }

    /// `rs_give_credits`: half the buffer or half the queue consumed since the last update.
    fn give_credits(&self) -> bool {
        (self.rbuf_bytes_avail >= (self.cfg.rbuf_size >> 1)
            || (self.rseq_no as i16).wrapping_sub(self.rseq_comp as i16) >= 0)
            && self.ctrl_avail()
            && self.connected()
    }

    /// Sends a credit update if one is due (`rs_update_credits`).
    pub fn update_credits(&mut self) {
        if !self.give_credits() {
            return;
        }
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        let half = self.cfg.rbuf_size >> 1;
        self.rseq_comp = self.rseq_no.wrapping_add(self.cfg.rq_size >> 1);
        let imm = Msg::new(op::SGL, u32::from(self.rseq_no) + u32::from(self.cfg.rq_size)).encode();
        if self.rbuf_bytes_avail >= half {
            let sge = RsSge {
                addr: self.local.rbuf_addr + u64::from(self.rbuf_free_offset),
                key: self.local.rbuf_rkey,
                length: half,
            };
            let addr = self.remote_sgl.addr.wrapping_add(u64::from(self.remote_sge) * SGE_LEN as u64);
            self.out.push_back(Post {
                wr_id: u64::from(imm),
                addr,
                rkey: self.remote_sgl.key,
                imm: Some(imm),
                src: Src::Inline(sge.to_bytes(self.peer_big).to_vec()),
            });
            self.rbuf_bytes_avail -= half;
            self.rbuf_free_offset += half;
            if self.rbuf_free_offset >= self.cfg.rbuf_size {
                self.rbuf_free_offset = 0;
            }
            self.remote_sge = (self.remote_sge + 1) % self.remote_sgl.length;
        } else {
            self.out.push_back(Post {
                wr_id: u64::from(imm),
                addr: 0,
                rkey: 0,
                imm: Some(imm),
                src: Src::Empty,
            });
        }
    }

    /// Sends control message `code` ([`ctrl`]) if a control slot is free; whether it did.
    pub fn send_ctrl(&mut self, code: u32) -> bool {
        if !(self.connected() && self.ctrl_avail()) {
            return false;
        }
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        let imm = Msg::new(op::CTRL, code).encode();
        self.out.push_back(Post { wr_id: u64::from(imm), addr: 0, rkey: 0, imm: Some(imm), src: Src::Empty });
        true
    }

    /// A keep-alive: a zero-length RDMA WRITE without immediate data, which the peer's
    /// hardware acknowledges and its application never sees (`tcp_svc_send_keepalive`).
    pub fn keepalive(&mut self) -> bool {
        if !(self.connected() && self.ctrl_avail()) {
            return false;
        }
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        let wr_id = u64::from(Msg::new(op::CTRL, ctrl::KEEPALIVE).encode());
        self.out.push_back(Post { wr_id, addr: 0, rkey: 0, imm: None, src: Src::Empty });
        true
    }

    /// Sends iomap entry `index` to the peer's table (`rs_write_iomap`); false when it cannot
    /// now (wait for [`Stream::can_send`]).
    pub fn send_iomap(&mut self, index: u32, iom: RsIomap) -> bool {
        if !self.can_send() || index >= self.remote_iomap.length {
            return false;
        }
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= 1;
        self.sbuf_bytes_avail -= IOMAP_LEN as u32;
        let imm = Msg::new(op::IOMAP_SGL, index).encode();
        let addr = self.remote_iomap.addr.wrapping_add(u64::from(index) * IOMAP_LEN as u64);
        self.out.push_back(Post {
            wr_id: u64::from(imm),
            addr,
            rkey: self.remote_iomap.key,
            imm: Some(imm),
            src: Src::Inline(iom.to_bytes(self.peer_big).to_vec()),
        });
        true
    }

    /// The peer's iomap entry that covers `offset`, read from this side's target region
    /// (`rs_find_iomap`: the peer writes its entries there).
    pub fn find_iomap(&self, offset: u64, target: &impl Region) -> Option<RsIomap> {
        (0..self.cfg.target_iomap_size as usize).find_map(|i| {
            let mut b = [0u8; IOMAP_LEN];
            target.read(SGE_LEN * SGL_SIZE as usize + i * IOMAP_LEN, &mut b);
            let e = RsIomap::from_bytes(&b, cfg!(target_endian = "big"));
            (offset >= e.offset && offset - e.offset < u64::from(e.sge.length)).then_some(e)
        })
    }

    /// Writes as much of `data` as the credits allow straight into the peer's memory at
    /// `offset` of its iomap (`riowrite`); the number of bytes taken (0 when no entry covers
    /// `offset`).
    pub fn write_direct(
        &mut self,
        data: &[u8],
        offset: u64,
        olen: &mut u32,
        sbuf: &impl Region,
        target: &impl Region,
    ) -> usize {
        let mut done = 0;
        let mut iom: Option<RsIomap> = None;
        while done < data.len() && self.can_send() && self.state & WRITABLE != 0 {
            let off = offset + done as u64;
            let e = match iom {
                Some(e) if off >= e.offset && off - e.offset < u64::from(e.sge.length) => e,
                _ => match self.find_iomap(off, target) {
                    Some(e) => e,
                    None => break,
                },
            };
            iom = Some(e);
            let room = u64::from(e.sge.length) - (off - e.offset);
            let xfer = Self::next_xfer(olen, data.len() - done).min(self.sbuf_bytes_avail).min(room as u32);
            let src = self.stage(&data[done..done + xfer as usize], sbuf);
            self.sqe_avail -= 1;
            self.sbuf_bytes_avail -= xfer;
            let wr_id = u64::from(Msg::new(op::WRITE, xfer).encode());
            let addr = e.sge.addr.wrapping_add(off - e.offset);
            self.out.push_back(Post { wr_id, addr, rkey: e.sge.key, imm: None, src });
            done += xfer as usize;
        }
        done
    }

    /// A send completion (`rs_poll_cq`, send side).
    pub fn on_send_complete(&mut self, wr_id: u64, ok: bool) {
        let m = Msg::decode(wr_id as u32);
        match m.op {
            op::SGL => self.ctrl_max_seqno = self.ctrl_max_seqno.wrapping_add(1),
            op::CTRL => {
                self.ctrl_max_seqno = self.ctrl_max_seqno.wrapping_add(1);
                if m.data == ctrl::DISCONNECT {
                    self.state = DISCONNECTED;
                }
            }
            op::IOMAP_SGL => {
                self.sqe_avail += 1;
                self.sbuf_bytes_avail += IOMAP_LEN as u32;
            }
            _ => {
                self.sqe_avail += 1;
                self.sbuf_bytes_avail += m.data;
            }
        }
        if !ok {
            self.fail(libc::EIO);
        }
    }

    /// Whether every send posted has completed, or the stream is no longer connected
    /// (`rs_conn_all_sends_done`).
    pub fn all_sends_done(&self) -> bool {
        self.ctrl_max_seqno.wrapping_sub(self.ctrl_seqno).wrapping_add(self.sqe_avail)
            == u32::from(self.cfg.sq_size)
            || !self.connected()
    }

    // ---- receiving --------------------------------------------------------------------

    /// A receive completion (`rs_poll_cq`, receive side): `imm` is its immediate data,
    /// `byte_len` how many bytes the RDMA WRITE carried, `target` this side's target region.
    /// Returns whether the receive was used (repost one).
    pub fn on_recv(&mut self, imm: Option<u32>, byte_len: u32, ok: bool, target: &impl Region) -> bool {
        if !ok {
            // A flushed receive: the QP is in error (if it was not taken there on purpose, the
            // connection is gone).
            if self.state & (DISCONNECTED | ERROR) == 0 && self.connected() {
                self.fail(libc::ECONNRESET);
            }
            return false;
        }
        let Some(imm) = imm else {
            // rsockets on RoCE always use immediate data (a SEND is iWARP's fallback, which
            // this side never asks for).
            self.protocol_error();
            return true;
        };
        let m = Msg::decode(imm);
        match m.op {
            op::SGL => {
                self.sseq_comp = m.data as u16;
                if byte_len as usize >= SGE_LEN {
                    let mut b = [0u8; SGE_LEN];
                    target.read(self.credit_idx * SGE_LEN, &mut b);
                    self.target[self.credit_idx] = RsSge::from_bytes(&b, cfg!(target_endian = "big"));
                    self.credit_idx = (self.credit_idx + 1) % SGL_SIZE as usize;
                }
            }
            op::IOMAP_SGL | op::WRITE => {}
            op::CTRL => match m.data {
                ctrl::DISCONNECT => self.state = DISCONNECTED,
                ctrl::SHUTDOWN => {
                    if self.state & WRITABLE != 0 {
                        self.state &= !READABLE;
                    } else {
                        self.state = DISCONNECTED;
                    }
                }
                _ => {}
            },
            op::DATA => {
                let granted = u64::from(self.cfg.rbuf_size - self.rbuf_bytes_avail);
                if self.queued + u64::from(m.data) > granted || self.rmsgs.len() > self.cfg.rq_size as usize {
                    self.protocol_error();
                } else {
                    self.rmsgs.push_back(m.data);
                    self.queued += u64::from(m.data);
                }
            }
            _ => self.protocol_error(),
        }
        true
    }

    /// Whether data waits to be read.
    pub fn have_data(&self) -> bool {
        !self.rmsgs.is_empty()
    }

    /// For a waiting reader: data, or there never will be (`rs_conn_have_rdata`).
    pub fn have_data_or_closed(&self) -> bool {
        self.have_data() || self.state & READABLE == 0
    }

    /// Copies up to `dst.len()` received bytes out of the receive ring `rbuf` (consuming
    /// them unless `peek`); the number copied.
    pub fn recv(&mut self, dst: &mut [u8], peek: bool, rbuf: &impl Region) -> usize {
        let size = self.cfg.rbuf_size as usize;
        let mut offset = self.rbuf_offset as usize;
        let mut done = 0;
        let mut head = 0;
        while done < dst.len() {
            let Some(&msg) = self.rmsgs.get(head) else { break };
            let take = (dst.len() - done).min(msg as usize);
            // The ring: up to the end, then from the start.
            let first = take.min(size - offset);
            rbuf.read(offset, &mut dst[done..done + first]);
            if first < take {
                rbuf.read(0, &mut dst[done + first..done + take]);
            }
            offset = (offset + take) % size;
            done += take;
            if peek {
                if take < msg as usize {
                    break;
                }
                head += 1;
                continue;
            }
            self.rbuf_bytes_avail += take as u32;
            self.queued -= take as u64;
            if take < msg as usize {
                self.rmsgs[0] -= take as u32;
            } else {
                self.rmsgs.pop_front();
                self.rseq_no = self.rseq_no.wrapping_add(1);
            }
        }
        if !peek {
            self.rbuf_offset = offset as u32;
        }
        done
    }

    // ---- ending -----------------------------------------------------------------------

    /// `rshutdown`'s first step: the state after `how` (`SHUT_RD`, `SHUT_WR`, `SHUT_RDWR`)
    /// and the control message to tell the peer, if any.
    pub fn shutdown(&mut self, how: i32) -> Option<u32> {
        if !self.connected() {
            return None;
        }
        match how {
            libc::SHUT_RDWR => {
                self.state &= !(READABLE | WRITABLE);
                Some(ctrl::DISCONNECT)
            }
            libc::SHUT_WR => {
                self.state &= !WRITABLE;
                Some(if self.state & READABLE != 0 { ctrl::SHUTDOWN } else { ctrl::DISCONNECT })
            }
            _ => {
                self.state &= !READABLE;
                if self.state & WRITABLE != 0 { None } else { Some(ctrl::DISCONNECT) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Two streams joined by a simulated RC link: posts become completions on both sides,
    //! RDMA writes land in the other side's regions, in order, as a QP delivers them.

    use std::cell::RefCell;

    use super::*;

    struct Mem(RefCell<Vec<u8>>);
    impl Region for Mem {
        fn read(&self, off: usize, dst: &mut [u8]) {
            dst.copy_from_slice(&self.0.borrow()[off..off + dst.len()]);
        }
        fn write(&self, off: usize, src: &[u8]) {
            self.0.borrow_mut()[off..off + src.len()].copy_from_slice(src);
        }
    }

    /// One side: its stream, its buffers at made-up addresses.
    struct Side {
        s: Stream,
        sbuf: Mem,
        rbuf: Mem,
        target: Mem,
        local: LocalBufs,
        /// Receive completions (imm, byte_len) not yet handed to the stream.
        cq: VecDeque<(Option<u32>, u32)>,
        /// Receives posted.
        rq: u32,
    }

    const TARGET: u64 = 0x10_0000;
    const RBUF: u64 = 0x20_0000;

    fn side(cfg: Config, base: u64) -> (Config, LocalBufs) {
        let local = LocalBufs {
            target_addr: base + TARGET,
            target_rkey: base as u32 | 1,
            rbuf_addr: base + RBUF,
            rbuf_rkey: base as u32 | 2,
        };
        (cfg, local)
    }

    fn cfg(rbuf: u32, rq: u16) -> Config {
        Config {
            sq_size: 64,
            rq_size: rq,
            sbuf_size: rbuf,
            rbuf_size: rbuf,
            sq_inline: 64,
            target_iomap_size: 2,
        }
    }

    struct Pair {
        a: Side,
        b: Side,
    }

    impl Pair {
        fn new(ca: Config, cb: Config) -> Pair {
            let (ca, la) = side(ca, 0xA000_0000);
            let (cb, lb) = side(cb, 0xB000_0000);
            let (da, db) = (conn_data(&ca, &la), conn_data(&cb, &lb));
            // Through the wire encoding, as the CM carries it.
            let da = ConnData::parse(&da.emit()).unwrap();
            let db = ConnData::parse(&db.emit()).unwrap();
            let mk = |c: Config, l: LocalBufs, peer: &ConnData| Side {
                s: Stream::new(c, l, peer),
                sbuf: Mem(RefCell::new(vec![0; c.sbuf_size as usize])),
                rbuf: Mem(RefCell::new(vec![0; c.rbuf_size as usize])),
                target: Mem(RefCell::new(vec![0; target_len(c.target_iomap_size)])),
                local: l,
                cq: VecDeque::new(),
                rq: u32::from(c.rq_size),
            };
            Pair { a: mk(ca, la, &db), b: mk(cb, lb, &da) }
        }

        /// Delivers `from`'s posts to `to` (the RDMA writes land, receives complete, sends
        /// complete); a write to memory the receiver never granted panics the test. Returns
        /// how many posts moved.
        fn deliver(from: &mut Side, to: &mut Side) -> usize {
            let mut n = 0;
            while let Some(p) = from.s.poll_post() {
                n += 1;
                let bytes = match &p.src {
                    Src::Empty => Vec::new(),
                    Src::Inline(v) => v.clone(),
                    Src::Ring(pieces, k) => {
                        let mut v = Vec::new();
                        for &(off, len) in &pieces[..*k] {
                            let mut b = vec![0; len as usize];
                            from.sbuf.read(off as usize, &mut b);
                            v.extend(b);
                        }
                        v
                    }
                };
                if !bytes.is_empty() {
                    if p.rkey == to.local.rbuf_rkey {
                        let off = (p.addr - to.local.rbuf_addr) as usize;
                        to.rbuf.write(off, &bytes);
                    } else {
                        assert_eq!(p.rkey, to.local.target_rkey, "a write to an unknown rkey");
                        let off = (p.addr - to.local.target_addr) as usize;
                        to.target.write(off, &bytes);
                    }
                }
                if let Some(imm) = p.imm {
                    assert!(to.rq > 0, "receiver not ready (RNR)");
                    to.rq -= 1;
                    to.cq.push_back((Some(imm), bytes.len() as u32));
                }
                from.s.on_send_complete(p.wr_id, true);
            }
            n
        }

        /// The receiver takes its completions and reposts.
        fn poll(x: &mut Side) {
            while let Some((imm, len)) = x.cq.pop_front() {
                if x.s.on_recv(imm, len, true, &x.target) && x.s.connected() {
                    x.rq += 1;
                }
            }
            x.s.update_credits();
        }

        /// Runs both sides until nothing moves.
        fn settle(&mut self) {
            loop {
                Self::poll(&mut self.a);
                Self::poll(&mut self.b);
                let n = Self::deliver(&mut self.a, &mut self.b) + Self::deliver(&mut self.b, &mut self.a);
                if n == 0 && self.a.cq.is_empty() && self.b.cq.is_empty() {
                    return;
                }
            }
        }
    }

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
    }

    /// A sends `total` bytes in `chunk`-sized calls, B reads in `read`-sized calls; every byte
    /// arrives in order.
    fn transfer(p: &mut Pair, total: usize, chunk: usize, read: usize) {
        let data = pattern(total, 7);
        let mut sent = 0;
        let mut got = Vec::new();
        let mut stalls = 0;
        while got.len() < total {
            let mut progress = false;
            if sent < total {
                let mut olen = OLAP_START_SIZE;
                let end = (sent + chunk).min(total);
                let n = p.a.s.send(&data[sent..end], &mut olen, &p.a.sbuf);
                sent += n;
                progress |= n > 0;
            }
            p.settle();
            let mut buf = vec![0; read];
            let n = p.b.s.recv(&mut buf, false, &p.b.rbuf);
            got.extend_from_slice(&buf[..n]);
            progress |= n > 0;
            p.b.s.update_credits();
            p.settle();
            stalls = if progress { 0 } else { stalls + 1 };
            assert!(stalls < 3, "no progress: sent {sent}, got {}: {:?}", got.len(), p.a.s);
        }
        assert_eq!(got, data);
        assert!(p.a.s.all_sends_done());
    }

    #[test]
    fn data_arrives_in_order_through_many_buffer_turns() {
        let mut p = Pair::new(cfg(8192, 16), cfg(8192, 16));
        p.settle();
        // 1 MiB through an 8 KiB buffer: hundreds of credit updates and ring wraps.
        transfer(&mut p, 1 << 20, 3000, 1000);
        assert_eq!((p.a.s.protocol_errors(), p.b.s.protocol_errors()), (0, 0));
    }

    #[test]
    fn small_messages_are_limited_by_message_credits() {
        let mut p = Pair::new(cfg(1 << 16, 16), cfg(1 << 16, 16));
        p.settle();
        // 100-byte sends: the 16 receives (not the buffer) limit what is in flight.
        let mut olen = OLAP_START_SIZE;
        let mut sent = 0;
        while p.a.s.send(&[1; 100], &mut olen, &p.a.sbuf) == 100 {
            sent += 1;
            assert!(sent <= 16);
        }
        assert_eq!(sent, 16, "the peer's receive queue size");
        p.settle();
        assert!(!p.a.s.can_send(), "no credit until B reads");
        let mut buf = [0u8; 800];
        assert_eq!(p.b.s.recv(&mut buf, false, &p.b.rbuf), 800);
        p.b.s.update_credits();
        p.settle();
        assert!(p.a.s.can_send(), "reading half the queue returns credits");
    }

    #[test]
    fn large_sends_inline_small_ones_and_copy_the_rest() {
        let mut p = Pair::new(cfg(1 << 17, 64), cfg(1 << 17, 64));
        p.settle();
        let mut olen = OLAP_START_SIZE;
        assert_eq!(p.a.s.send(&[9; 64], &mut olen, &p.a.sbuf), 64);
        let post = p.a.s.poll_post().unwrap();
        assert_eq!(post.src, Src::Inline(vec![9; 64]));
        assert_eq!(post.imm, Some(Msg::new(op::DATA, 64).encode()));
        let mut olen = OLAP_START_SIZE;
        assert_eq!(p.a.s.send(&[5; 10000], &mut olen, &p.a.sbuf), 10000);
        // 2 KiB, 4 KiB, then the rest (the overlap schedule).
        let lens: Vec<usize> = std::iter::from_fn(|| p.a.s.poll_post()).map(|x| x.len()).collect();
        assert_eq!(lens, [2048, 4096, 10000 - 6144]);
    }

    #[test]
    fn peek_leaves_the_data() {
        let mut p = Pair::new(cfg(8192, 16), cfg(8192, 16));
        p.settle();
        let mut olen = OLAP_START_SIZE;
        p.a.s.send(b"hello", &mut olen, &p.a.sbuf);
        p.a.s.send(b" world", &mut olen, &p.a.sbuf);
        p.settle();
        let mut buf = [0u8; 32];
        assert_eq!(p.b.s.recv(&mut buf, true, &p.b.rbuf), 11);
        assert_eq!(&buf[..11], b"hello world");
        assert_eq!(p.b.s.recv(&mut buf[..3], false, &p.b.rbuf), 3);
        assert_eq!(p.b.s.recv(&mut buf, true, &p.b.rbuf), 8);
        assert_eq!(&buf[..8], b"lo world");
    }

    #[test]
    fn shutdown_and_disconnect() {
        let mut p = Pair::new(cfg(8192, 16), cfg(8192, 16));
        p.settle();
        // A: SHUT_WR — B may still send, A still read.
        let c = p.a.s.shutdown(libc::SHUT_WR).unwrap();
        assert_eq!(c, ctrl::SHUTDOWN);
        assert!(p.a.s.send_ctrl(c));
        p.settle();
        assert_eq!(p.b.s.state & (READABLE | WRITABLE), WRITABLE);
        assert!(p.b.s.have_data_or_closed(), "B reads the end of the stream");
        let mut olen = OLAP_START_SIZE;
        assert_eq!(p.b.s.send(b"bye", &mut olen, &p.b.sbuf), 3);
        p.settle();
        let mut buf = [0u8; 8];
        assert_eq!(p.a.s.recv(&mut buf, false, &p.a.rbuf), 3);
        // B closes: DISCONNECT; both sides end up disconnected once it completes.
        assert_eq!(p.b.s.shutdown(libc::SHUT_RDWR), Some(ctrl::DISCONNECT));
        assert!(p.b.s.send_ctrl(ctrl::DISCONNECT));
        p.settle();
        assert_eq!(p.a.s.state, DISCONNECTED);
        assert_eq!(p.b.s.state, DISCONNECTED);
        assert!(p.b.s.all_sends_done());
    }

    #[test]
    fn data_beyond_the_grant_is_a_protocol_error() {
        let mut p = Pair::new(cfg(8192, 16), cfg(8192, 16));
        p.settle();
        // A hostile sender claims more than the 8 KiB B ever granted.
        let t = Mem(RefCell::new(vec![0; 64]));
        assert!(p.b.s.on_recv(Some(Msg::new(op::DATA, 8193).encode()), 8193, true, &t));
        assert_eq!((p.b.s.state, p.b.s.err, p.b.s.protocol_errors()), (ERROR, libc::EPROTO, 1));
        // ... and reading afterwards copies nothing.
        let mut buf = [0u8; 16];
        assert_eq!(p.b.s.recv(&mut buf, false, &p.b.rbuf), 0);
    }

    #[test]
    fn unknown_operations_and_missing_immediates_are_protocol_errors() {
        for (imm, len) in [(Some(Msg::new(1, 5).encode()), 5), (Some(Msg::new(5, 0).encode()), 0), (None, 0)]
        {
            let mut p = Pair::new(cfg(8192, 16), cfg(8192, 16));
            let t = Mem(RefCell::new(vec![0; 64]));
            p.b.s.on_recv(imm, len, true, &t);
            assert_eq!(p.b.s.err, libc::EPROTO, "{imm:?}");
        }
    }

    #[test]
    fn a_peer_that_grants_nothing_stops_the_sender_without_harm() {
        let mut p = Pair::new(cfg(8192, 16), cfg(8192, 16));
        // B never polls (no credit update): A fills B's first half and stops.
        let mut olen = OLAP_START_SIZE;
        let n = p.a.s.send(&[3; 20000], &mut olen, &p.a.sbuf);
        assert_eq!(n, 4096, "the half granted in the connection data");
        assert!(!p.a.s.can_send());
        assert!(!p.a.s.can_send_or_closed());
        Pair::deliver(&mut p.a, &mut p.b);
        assert_eq!(p.a.s.send(&[3; 100], &mut olen, &p.a.sbuf), 0);
        // A flushed receive (the peer's QP went away) fails the stream: waiting ends.
        let t = Mem(RefCell::new(vec![0; 64]));
        p.a.s.on_recv(None, 0, false, &t);
        assert_eq!((p.a.s.state, p.a.s.err), (ERROR, libc::ECONNRESET));
        assert!(p.a.s.can_send_or_closed() && p.a.s.have_data_or_closed());
    }

    #[test]
    fn iomap_entries_reach_the_peer_and_direct_writes_use_them() {
        let mut p = Pair::new(cfg(1 << 16, 16), cfg(1 << 16, 16));
        p.settle();
        assert_eq!(p.a.s.remote_iomap.length, 2);
        let iom = RsIomap { offset: 0, sge: RsSge { addr: 0x7000, key: 0xB000_0002, length: 100 } };
        assert!(p.b.s.send_iomap(1, iom));
        assert!(!p.b.s.send_iomap(2, iom), "beyond the peer's table");
        p.settle();
        assert_eq!(p.a.s.find_iomap(50, &p.a.target), Some(iom));
        assert_eq!(p.a.s.find_iomap(100, &p.a.target), None);
        let mut olen = OLAP_START_SIZE;
        let n = p.a.s.write_direct(&[1; 150], 10, &mut olen, &p.a.sbuf, &p.a.target);
        assert_eq!(n, 90, "up to the end of the mapping");
        let w = p.a.s.poll_post().unwrap();
        assert_eq!((w.addr, w.rkey, w.imm, w.len()), (0x7000 + 10, 0xB000_0002, None, 90));
        p.a.s.on_send_complete(w.wr_id, true);
        assert!(p.a.s.all_sends_done());
    }

    #[test]
    fn a_failed_send_fails_the_stream() {
        let mut p = Pair::new(cfg(8192, 16), cfg(8192, 16));
        let mut olen = OLAP_START_SIZE;
        p.a.s.send(&[1; 10], &mut olen, &p.a.sbuf);
        let w = p.a.s.poll_post().unwrap();
        p.a.s.on_send_complete(w.wr_id, false);
        assert_eq!((p.a.s.state, p.a.s.err), (ERROR, libc::EIO));
        assert!(p.a.s.all_sends_done());
    }
}
