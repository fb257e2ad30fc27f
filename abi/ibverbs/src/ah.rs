//! Address handles: `ibv_create_ah`, `ibv_destroy_ah`, `ibv_init_ah_from_wc`,
//! `ibv_create_ah_from_wc`.
//!
//! An AH is an `Obj<ibv_ah, Ah>` holding a softroce [`AddressHandle`]; UD work requests name
//! it and `post_send` turns it into the destination.

use libc::c_int;
use softroce::verbs::AddressHandle;

use crate::ffi::*;
use crate::object::Obj;
use crate::pd::pd_of;
use crate::util::{Errno, errno_of, ptr_or_errno, zero_or_errno, zero_or_minus1};

const AH_MAGIC: u64 = 0x736f_6674_5f61_6800;

/// The Rust side of an AH.
pub struct Ah {
    /// The softroce address handle.
    pub ah: AddressHandle,
}

/// An AH of ours behind `p`, or `None`.
///
/// # Safety
/// `p` is NULL or an `ibv_ah *`.
pub unsafe fn ah_of<'a>(p: *const ibv_ah) -> Option<&'a Obj<ibv_ah, Ah>> {
    // SAFETY: per the caller.
    unsafe { Obj::from_c(p, AH_MAGIC) }
}

fn create(pd: *mut ibv_pd, attr: &ibv_ah_attr) -> Result<*mut ibv_ah, Errno> {
    // SAFETY: the caller passes a PD (or NULL).
    let p = unsafe { pd_of(pd) }.ok_or(libc::EINVAL)?;
    let av = crate::qp::av_of(attr)?;
    let ah = p.rust.pd.create_ah(&av).map_err(|e| errno_of(&e))?;
    let c = ibv_ah { context: p.c.context, pd, handle: ah.id() };
    p.rust.users.hold();
    Ok(Obj::into_c(c, AH_MAGIC, Ah { ah }))
}

/// `ibv_create_ah`: NULL + errno (`EINVAL`: a PD not ours, no GRH — RoCE needs one —, a GID
/// index not in the table, a destination of the other IP family).
///
/// # Safety
/// `pd` is a PD of ours; `attr` is readable.
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    ptr_or_errno(|| {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: per the caller.
        create(pd, unsafe { &*attr })
    })
}

/// `ibv_destroy_ah`: 0 or `EINVAL`.
///
/// # Safety
/// `ah` is NULL or an AH of ours, not used again on success.
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    zero_or_errno(|| {
        // SAFETY: per the caller.
        let o = unsafe { Obj::<ibv_ah, Ah>::take(ah, AH_MAGIC) }.ok_or(libc::EINVAL)?;
        // SAFETY: the object's own PD (or NULL).
        unsafe { crate::pd::release_pd(o.c.pd) };
        Ok(())
    })
}

const IBV_WC_GRH: u32 = 1;

/// Which IP header a UD receive buffer's 40-byte GRH slot holds: 6 (an IPv6 header, the whole
/// slot) or 4 (an IPv4 header in its last 20 bytes, RoCEv2 over IPv4), as libibverbs decides
/// it: an IPv6 version nibble means IPv6 unless the last 20 bytes are a valid IPv4 header
/// (IHL 5, a right checksum); without one, an IPv4 version nibble at byte 20 means IPv4.
fn grh_version(g: &[u8; 40]) -> Option<u8> {
    let v4 = &g[20..];
    if g[0] >> 4 != 6 {
        return (v4[0] >> 4 == 4).then_some(4);
    }
    if v4[0] != 0x45 {
        return Some(6);
    }
    let sum: u32 = v4.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
    let folded = (sum & 0xffff) + (sum >> 16);
    let folded = (folded & 0xffff) + (folded >> 16);
    Some(if folded == 0xffff { 4 } else { 6 })
}

/// `ibv_init_ah_from_wc`: the reply address of a received UD (or RC) message, as libibverbs
/// computes it: the attributes zeroed, then the flow label (the slot's first word), the
/// completion's SLID, SL and path bits and `port`; with a GRH (`IBV_WC_GRH`), the source
/// address of the IP header in the GRH slot (an IPv6 header, or RoCEv2's IPv4 header in its
/// last 20 bytes, as an IPv4-mapped GID) as destination, the index of the address it was sent
/// to in our GID table as source, the header's hop limit (TTL) and traffic class (TOS). -1
/// with `EINVAL` for a multicast or unknown local address, `EPROTONOSUPPORT` for a slot holding
/// neither header.
///
/// # Safety
/// `ctx` is a context of ours; `wc`, `grh` readable; `attr` writable.
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    ctx: *mut ibv_context,
    port: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    attr: *mut ibv_ah_attr,
) -> c_int {
    zero_or_minus1(|| {
        // SAFETY: per the caller.
        let c = unsafe { crate::context::Context::from_ibv(ctx) }.ok_or(libc::EINVAL)?;
        if wc.is_null() || grh.is_null() || attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: per the caller; a GRH slot is 40 readable bytes.
        let (w, raw) = unsafe { (*wc, grh.cast::<[u8; 40]>().read_unaligned()) };
        let vtf = u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]);
        // SAFETY: ibv_ah_attr is plain data: all-zero is valid.
        let mut a: ibv_ah_attr = unsafe { std::mem::zeroed() };
        a.grh.flow_label = vtf & 0xf_ffff;
        a.dlid = w.slid;
        a.sl = w.sl;
        a.src_path_bits = w.dlid_path_bits;
        a.port_num = port;
        let r = (|| {
            if w.wc_flags & IBV_WC_GRH == 0 {
                return Ok(());
            }
            a.is_global = 1;
            let local = match grh_version(&raw).ok_or(libc::EPROTONOSUPPORT)? {
                4 => {
                    let ip = |b: &[u8]| std::net::Ipv4Addr::new(b[0], b[1], b[2], b[3]);
                    let (src, dst) = (ip(&raw[32..36]), ip(&raw[36..40]));
                    if dst.is_multicast() {
                        return Err(libc::EINVAL);
                    }
                    a.grh.dgid = ibv_gid { raw: src.to_ipv6_mapped().octets() };
                    a.grh.hop_limit = raw[28];
                    a.grh.traffic_class = raw[21];
                    dst.to_ipv6_mapped().octets()
                }
                _ => {
                    let mut d = [0u8; 16];
                    d.copy_from_slice(&raw[24..40]);
                    if d[0] == 0xff {
                        return Err(libc::EINVAL);
                    }
                    if raw[6] != libc::IPPROTO_UDP as u8 && raw[6] != 0x1b {
                        return Err(libc::EPROTONOSUPPORT);
                    }
                    let mut sg = [0u8; 16];
                    sg.copy_from_slice(&raw[8..24]);
                    a.grh.dgid = ibv_gid { raw: sg };
                    a.grh.hop_limit = raw[7];
                    a.grh.traffic_class = ((vtf >> 20) & 0xff) as u8;
                    d
                }
            };
            let idx = c.rt.info.gids.iter().position(|gid| gid.0 == local).filter(|_| port == 1);
            a.grh.sgid_index = idx.ok_or(libc::EINVAL)? as u8;
            Ok(())
        })();
        // SAFETY: per the caller (written whatever the outcome, as libibverbs does).
        unsafe { attr.write(a) };
        r
    })
}

/// `ibv_create_ah_from_wc`: `ibv_init_ah_from_wc` then `ibv_create_ah`; NULL + errno.
///
/// # Safety
/// As for [`ibv_init_ah_from_wc`], with `pd` a PD of ours.
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port: u8,
) -> *mut ibv_ah {
    ptr_or_errno(|| {
        // SAFETY: per the caller.
        let p = unsafe { pd_of(pd) }.ok_or(libc::EINVAL)?;
        // SAFETY: ibv_ah_attr is plain data.
        let mut attr: ibv_ah_attr = unsafe { std::mem::zeroed() };
        // SAFETY: per the caller.
        if unsafe { ibv_init_ah_from_wc(p.c.context, port, wc, grh, &mut attr) } != 0 {
            return Err(crate::util::errno());
        }
        create(pd, &attr)
    })
}

#[cfg(test)]
mod tests {
    use super::grh_version;

    #[test]
    fn grh_slot_holds_ipv4_or_ipv6() {
        // RoCEv2 over IPv4: the 20-byte header (checksum right) in the slot's last 20 bytes.
        let mut g = [0u8; 40];
        g[20..].copy_from_slice(&[
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01,
            0xc0, 0xa8, 0x00, 0xc7,
        ]);
        let sum: u32 = g[20..].chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
        let ck = !(((sum & 0xffff) + (sum >> 16)) as u16);
        g[30..32].copy_from_slice(&ck.to_be_bytes());
        assert_eq!(grh_version(&g), Some(4));
        // An IPv6 header: version 6 and no valid IPv4 header behind it.
        let mut g6 = [0u8; 40];
        g6[0] = 0x60;
        g6[6] = 17;
        g6[7] = 64;
        g6[8..24].copy_from_slice(&[0xfd, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        g6[24..40].copy_from_slice(&[0xfd, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        assert_eq!(grh_version(&g6), Some(6));
        // Neither.
        assert_eq!(grh_version(&[0u8; 40]), None);
        // An IPv4-looking tail with a bad checksum behind a version-6 nibble: IPv6.
        let mut bad = g;
        bad[0] = 0x60;
        bad[31] ^= 1;
        assert_eq!(grh_version(&bad), Some(6));
    }
}
