//! The device-level verbs: the device list, names, GUIDs, device and port attributes, GIDs
//! and P_Keys.
//!
//! What a device reports (compare `softroce devinfo -v`): one port, Ethernet link layer,
//! `PORT_ACTIVE`, maximum MTU 4096 and the active MTU rxe derives from the netdev MTU, the GID
//! table of [`softroce::verbs::device::DeviceInfo`] (every entry RoCE v2), one P_Key (0xffff),
//! LID 0, rxe's vendor id 0xFFFFFF, and the limits the Rust API enforces. Capabilities are
//! honest: `device_cap_flags` has only what softroce does (RNR NAK generation, SRQ resize, a
//! system image GUID, memory windows of type 1 and 2B); no multicast, XRC, ODP, timestamps or
//! device memory (all zero) until they exist.

use libc::{c_char, c_int, c_uint, size_t, ssize_t};

use crate::context::Context;
use crate::ffi::*;
use crate::runtime::{DevRt, device_from_ibv, devices};
use crate::util::{Errno, copy_cstr, guard, set_errno, zero_or_errno, zero_or_minus1};

/// The port number of every softroce device's only port.
const PORT: u32 = 1;

fn context<'a>(ctx: *const ibv_context) -> Result<&'a Context, Errno> {
    // SAFETY: the caller passed a context pointer (or garbage, as with the real library).
    unsafe { Context::from_ibv(ctx) }.ok_or(libc::EINVAL)
}

fn clamp(v: u64) -> c_int {
    v.min(c_int::MAX as u64) as c_int
}

/// The `ibv_device_attr` of a device.
pub fn device_attr(rt: &DevRt) -> ibv_device_attr {
    let a = &rt.info.attr;
    // SAFETY: plain C data; all-zero is valid.
    let mut d: ibv_device_attr = unsafe { std::mem::zeroed() };
    copy_cstr(&mut d.fw_ver, &a.fw_ver);
    d.node_guid = a.node_guid.to_be();
    d.sys_image_guid = a.node_guid.to_be();
    d.max_mr_size = a.max_mr_size;
    d.page_size_cap = a.page_size_cap;
    d.vendor_id = a.vendor_id;
    d.vendor_part_id = a.vendor_part_id;
    d.hw_ver = 0;
    d.max_qp = clamp(a.max_qp as u64);
    d.max_qp_wr = clamp(a.max_qp_wr as u64);
    d.device_cap_flags = IBV_DEVICE_SYS_IMAGE_GUID
        | IBV_DEVICE_RC_RNR_NAK_GEN
        | IBV_DEVICE_SRQ_RESIZE
        | IBV_DEVICE_MEM_WINDOW
        | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
    d.max_sge = clamp(a.max_sge as u64);
    d.max_sge_rd = clamp(a.max_sge as u64);
    d.max_cq = clamp(a.max_cq as u64);
    d.max_cqe = clamp(a.max_cqe as u64);
    d.max_mr = clamp(a.max_mr as u64);
    d.max_mw = clamp(a.max_mw as u64);
    d.max_pd = clamp(a.max_pd as u64);
    d.max_qp_rd_atom = clamp(a.max_qp_rd_atom as u64);
    d.max_res_rd_atom = clamp(a.max_qp_rd_atom as u64 * a.max_qp as u64);
    d.max_qp_init_rd_atom = clamp(a.max_qp_init_rd_atom as u64);
    d.atomic_cap = if a.atomic_cap == "ATOMIC_HCA" { IBV_ATOMIC_HCA } else { IBV_ATOMIC_NONE };
    d.max_ah = clamp(a.max_ah as u64);
    d.max_srq = clamp(a.max_srq as u64);
    d.max_srq_wr = clamp(a.max_srq_wr as u64);
    d.max_srq_sge = clamp(a.max_srq_sge as u64);
    d.max_pkeys = 1;
    d.local_ca_ack_delay = 15;
    d.phys_port_cnt = a.phys_port_cnt;
    d
}

/// The `ibv_device_attr_ex` of a device: the plain attributes, one port, nothing else.
pub fn device_attr_ex(rt: &DevRt) -> ibv_device_attr_ex {
    // SAFETY: plain C data; all-zero is valid.
    let mut x: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
    x.orig_attr = device_attr(rt);
    x.device_cap_flags_ex = x.orig_attr.device_cap_flags as u64;
    x.phys_port_cnt_ex = x.orig_attr.phys_port_cnt as u32;
    x
}

/// `(active_width, active_speed)` for a netdev speed in Mb/s (unknown, as on loopback: 1X SDR),
/// the nearest IB width × lane speed at or above it, as the kernel does for RoCE ports.
pub fn width_speed(mbps: Option<u64>) -> (u8, u8) {
    // widths: 1 = 1X, 2 = 4X; speeds: 1 SDR 2.5, 2 DDR 5, 8 FDR10 10, 16 FDR 14, 32 EDR 25,
    // 64 HDR 50, 128 NDR 100 (Gb/s per lane).
    match mbps {
        None | Some(0) => (1, 1),
        Some(m) if m <= 2500 => (1, 1),
        Some(m) if m <= 5000 => (1, 2),
        Some(m) if m <= 10000 => (1, 8),
        Some(m) if m <= 14000 => (1, 16),
        Some(m) if m <= 25000 => (1, 32),
        Some(m) if m <= 40000 => (2, 8),
        Some(m) if m <= 50000 => (1, 64),
        Some(m) if m <= 100000 => (2, 32),
        Some(m) if m <= 200000 => (2, 64),
        Some(_) => (2, 128),
    }
}

/// The `ibv_port_attr` of a device's port.
pub fn port_attr(rt: &DevRt) -> ibv_port_attr {
    let p = &rt.info.port;
    // SAFETY: plain C data; all-zero is valid.
    let mut a: ibv_port_attr = unsafe { std::mem::zeroed() };
    a.state = match p.state {
        softroce::verbs::PortState::Active => IBV_PORT_ACTIVE,
        softroce::verbs::PortState::Down => IBV_PORT_DOWN,
    };
    a.max_mtu = p.max_mtu as u32;
    a.active_mtu = p.active_mtu as u32;
    a.gid_tbl_len = rt.info.gids.len() as c_int;
    a.port_cap_flags = p.port_cap_flags;
    a.max_msg_sz = p.max_msg_sz.min(u32::MAX as u64) as u32;
    a.pkey_tbl_len = 1;
    a.lid = p.lid;
    a.max_vl_num = 1;
    let speed = std::fs::read_to_string(format!("/sys/class/net/{}/speed", p.netdev))
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .and_then(|s| u64::try_from(s).ok());
    (a.active_width, a.active_speed) = width_speed(speed);
    a.phys_state = 5; // LinkUp
    a.link_layer = IBV_LINK_LAYER_ETHERNET;
    a.flags = 1; // IBV_QPF_GRH_REQUIRED: RoCE needs the GRH (rxe reports it)
    a
}

/// `ibv_get_device_list`: a NULL-terminated array of every configured device (see
/// `runtime.rs`), empty (not NULL) when none is; `*num` gets the count. In a process that has
/// UCX loaded, a missing `/dev/infiniband` node is reported once (`devnode`).
///
/// # Safety
/// `num` is NULL or writable.
pub unsafe extern "C" fn ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device {
    crate::util::ptr_or_errno(|| {
        let list = devices();
        crate::devnode::check(list);
        // SAFETY: calloc of n+1 pointers; zeroed, so the terminator is already there.
        let arr = unsafe { libc::calloc(list.len() + 1, std::mem::size_of::<*mut ibv_device>()) }
            .cast::<*mut ibv_device>();
        if arr.is_null() {
            return Err(libc::ENOMEM);
        }
        for (i, d) in list.iter().enumerate() {
            // SAFETY: i < len, inside the allocation.
            unsafe { *arr.add(i) = d.as_ibv() };
        }
        if !num.is_null() {
            // SAFETY: the caller's num is writable.
            unsafe { *num = list.len() as c_int };
        }
        Ok(arr)
    })
}

/// `ibv_free_device_list`: frees the array (the devices stay valid: they live for the
/// process, as contexts and librdmacm hold them).
///
/// # Safety
/// `list` is NULL or an array `ibv_get_device_list` returned, not used again.
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    // SAFETY: the array came from calloc.
    unsafe { libc::free(list.cast()) };
}

/// `ibv_get_device_name`: `device->name`, as rdma-core reads it — also of a `struct
/// ibv_device` the caller made (unit tests mock device lists); NULL (`ENODEV`) for NULL, where
/// rdma-core would crash.
///
/// # Safety
/// `dev` is NULL or points to a `struct ibv_device`.
pub unsafe extern "C" fn ibv_get_device_name(dev: *mut ibv_device) -> *const c_char {
    guard(std::ptr::null(), || {
        if dev.is_null() {
            set_errno(libc::ENODEV);
            return std::ptr::null();
        }
        // SAFETY: per the caller, a device struct (ours or the caller's); only the field's
        // address is taken.
        unsafe { (&raw const (*dev).name).cast::<c_char>() }
    })
}

/// `ibv_get_device_guid`: the node GUID, big-endian (0 for a device that is not ours).
///
/// # Safety
/// As [`ibv_get_device_name`].
pub unsafe extern "C" fn ibv_get_device_guid(dev: *mut ibv_device) -> u64 {
    guard(0, || device_from_ibv(dev).map_or(0, |d| d.guid.to_be()))
}

/// `ibv_get_device_index`: the `n` of `softroce<n>`, -1 for a device that is not ours.
///
/// # Safety
/// As [`ibv_get_device_name`].
pub unsafe extern "C" fn ibv_get_device_index(dev: *mut ibv_device) -> c_int {
    guard(-1, || device_from_ibv(dev).map_or(-1, |d| d.index as c_int))
}

/// `ibv_query_device`: 0 or `EINVAL`.
///
/// # Safety
/// `ctx` is a context from `ibv_open_device`; `attr` is writable.
pub unsafe extern "C" fn ibv_query_device(ctx: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int {
    zero_or_errno(|| {
        let c = context(ctx)?;
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's attr is writable.
        unsafe { attr.write(device_attr(&c.rt)) };
        Ok(())
    })
}

/// Copies `src` into a caller buffer of `len` bytes the way `__lib_query_port` does: zero it,
/// then copy `min(len, size_of::<T>())` bytes.
///
/// # Safety
/// `dst` has `len` writable bytes.
unsafe fn copy_sized<T>(dst: *mut u8, len: usize, src: &T) {
    let n = len.min(std::mem::size_of::<T>());
    // SAFETY: per the caller; src is a live T of at least n bytes.
    unsafe {
        std::ptr::write_bytes(dst, 0, len);
        std::ptr::copy_nonoverlapping((src as *const T).cast::<u8>(), dst, n);
    }
}

/// The `query_port` slot of the `verbs_context` (the header's `ibv_query_port` inline passes
/// the application's `sizeof(struct ibv_port_attr)` as `len`): any length is accepted, the
/// first `min(len, 52)` bytes are filled and the rest zeroed. `EINVAL` for a port other than 1.
///
/// # Safety
/// `ctx` is a context; `attr` has `len` writable bytes.
pub unsafe extern "C" fn query_port(
    ctx: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    len: size_t,
) -> c_int {
    zero_or_errno(|| {
        let c = context(ctx)?;
        if port as u32 != PORT || attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller gives len writable bytes.
        unsafe { copy_sized(attr.cast(), len, &port_attr(&c.rt)) };
        Ok(())
    })
}

/// `ibv_query_port@IBVERBS_1.1`, the exported one that binaries built without the inline call:
/// the 48-byte `struct _compat_ibv_port_attr`.
///
/// # Safety
/// `ctx` is a context; `attr` has 48 writable bytes.
pub unsafe extern "C" fn ibv_query_port(ctx: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> c_int {
    // SAFETY: per the caller.
    unsafe { query_port(ctx, port, attr, COMPAT_PORT_ATTR_LEN) }
}

/// The `query_device_ex` slot (the header's `ibv_query_device_ex` inline): `EINVAL` for a
/// non-zero `input->comp_mask` or an `attr_size` smaller than `ibv_device_attr`; otherwise the
/// first `min(attr_size, 400)` bytes filled, the rest zeroed.
///
/// # Safety
/// `ctx` is a context; `input` is NULL or readable; `attr` has `attr_size` writable bytes.
pub unsafe extern "C" fn query_device_ex(
    ctx: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: size_t,
) -> c_int {
    zero_or_errno(|| {
        let c = context(ctx)?;
        // SAFETY: input is NULL or readable.
        if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
            return Err(libc::EINVAL);
        }
        if attr.is_null() || attr_size < std::mem::size_of::<ibv_device_attr>() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller gives attr_size writable bytes.
        unsafe { copy_sized(attr.cast(), attr_size, &device_attr_ex(&c.rt)) };
        Ok(())
    })
}

/// The GID entry `index` of a context's port, or `EINVAL`.
fn gid_entry(c: &Context, port: u32, index: u32) -> Result<ibv_gid_entry, Errno> {
    let gids = &c.rt.info.gids;
    if port != PORT {
        return Err(libc::EINVAL);
    }
    let g = gids.get(index as usize).ok_or(libc::EINVAL)?;
    let netdev = std::ffi::CString::new(c.rt.info.port.netdev.as_str()).unwrap_or_default();
    Ok(ibv_gid_entry {
        gid: ibv_gid { raw: g.0 },
        gid_index: index,
        port_num: port,
        gid_type: IBV_GID_TYPE_ROCE_V2,
        // SAFETY: a NUL-terminated name.
        ndev_ifindex: unsafe { libc::if_nametoindex(netdev.as_ptr()) },
    })
}

/// `ibv_query_gid`: 0, or -1 with `EINVAL` for a port other than 1 or an index past the table
/// (`gid_tbl_len`, which has no empty entries).
///
/// # Safety
/// `ctx` is a context; `gid` is writable.
pub unsafe extern "C" fn ibv_query_gid(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    zero_or_minus1(|| {
        let c = context(ctx)?;
        let index = u32::try_from(index).map_err(|_| libc::EINVAL)?;
        let e = gid_entry(c, port as u32, index)?;
        if gid.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's gid is writable.
        unsafe { gid.write(e.gid) };
        Ok(())
    })
}

/// `_ibv_query_gid_ex` (behind the header's `ibv_query_gid_ex`): 0 or a positive errno
/// (`EINVAL` for an unknown port or index, or non-zero `flags`). `entry_size` is the
/// caller's `sizeof(struct ibv_gid_entry)`: `min(entry_size, 32)` bytes are filled, the rest
/// zeroed.
///
/// # Safety
/// `ctx` is a context; `entry` has `entry_size` writable bytes.
pub unsafe extern "C" fn _ibv_query_gid_ex(
    ctx: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: size_t,
) -> c_int {
    zero_or_errno(|| {
        let c = context(ctx)?;
        if flags != 0 || entry.is_null() || entry_size == 0 {
            return Err(libc::EINVAL);
        }
        let e = gid_entry(c, port, index)?;
        // SAFETY: the caller gives entry_size writable bytes.
        unsafe { copy_sized(entry.cast(), entry_size, &e) };
        Ok(())
    })
}

/// `_ibv_query_gid_table` (behind `ibv_query_gid_table`): the number of entries written, or a
/// negative errno (`-EINVAL` when the table does not fit in `max_entries`, for non-zero
/// `flags` or a zero `entry_size`). Entries are `entry_size` apart.
///
/// # Safety
/// `ctx` is a context; `entries` has `max_entries * entry_size` writable bytes.
pub unsafe extern "C" fn _ibv_query_gid_table(
    ctx: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: size_t,
    flags: u32,
    entry_size: size_t,
) -> ssize_t {
    guard(-(libc::EIO as ssize_t), || {
        let r = (|| {
            let c = context(ctx)?;
            let n = c.rt.info.gids.len();
            if flags != 0 || entry_size == 0 || entries.is_null() || n > max_entries {
                return Err(libc::EINVAL);
            }
            for i in 0..n {
                let e = gid_entry(c, PORT, i as u32)?;
                // SAFETY: i < n <= max_entries; each slot has entry_size bytes.
                unsafe { copy_sized(entries.cast::<u8>().add(i * entry_size), entry_size, &e) };
            }
            Ok(n as ssize_t)
        })();
        r.unwrap_or_else(|e| {
            set_errno(e);
            -(e as ssize_t)
        })
    })
}

/// `ibv_query_gid_type` (`IBVERBS_PRIVATE_34`; `ibv_devinfo` and pyverbs use it):
/// `IBV_GID_TYPE_SYSFS_ROCE_V2` for every entry; -1 with `EINVAL` past the table.
///
/// # Safety
/// `ctx` is a context; `gid_type` is writable.
pub unsafe extern "C" fn ibv_query_gid_type(
    ctx: *mut ibv_context,
    port: u8,
    index: c_uint,
    gid_type: *mut c_int,
) -> c_int {
    zero_or_minus1(|| {
        let c = context(ctx)?;
        gid_entry(c, port as u32, index)?;
        if gid_type.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's gid_type is writable.
        unsafe { *gid_type = IBV_GID_TYPE_SYSFS_ROCE_V2 };
        Ok(())
    })
}

/// The default (full-membership) P_Key, the only entry of the table.
const DEFAULT_PKEY: u16 = 0xffff;

/// `ibv_query_pkey`: index 0 of port 1 is 0xffff (big-endian); any other index or port -1,
/// `ENOENT` (rdma-core reads sysfs: no such file).
///
/// # Safety
/// `ctx` is a context; `pkey` is writable.
pub unsafe extern "C" fn ibv_query_pkey(
    ctx: *mut ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    zero_or_minus1(|| {
        context(ctx)?;
        if pkey.is_null() {
            return Err(libc::EINVAL);
        }
        // rdma-core reads ports/<port>/pkeys/<index> in sysfs: no such file is ENOENT.
        if port as u32 != PORT || index != 0 {
            return Err(libc::ENOENT);
        }
        // SAFETY: the caller's pkey is writable.
        unsafe { *pkey = DEFAULT_PKEY.to_be() };
        Ok(())
    })
}

/// `ibv_get_pkey_index`: 0 for 0xffff (big-endian), else -1 with `ENOENT` (the table has no
/// other entry: rdma-core's walk of the table ends at the first index it cannot read).
///
/// # Safety
/// `ctx` is a context.
pub unsafe extern "C" fn ibv_get_pkey_index(ctx: *mut ibv_context, port: u8, pkey: u16) -> c_int {
    guard(-1, || {
        let r = context(ctx).and_then(|_| {
            if port as u32 == PORT && pkey == DEFAULT_PKEY.to_be() { Ok(0) } else { Err(libc::ENOENT) }
        });
        r.unwrap_or_else(|e| {
            set_errno(e);
            -1
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netdev_speeds_map_to_ib_rates() {
        assert_eq!(width_speed(None), (1, 1));
        assert_eq!(width_speed(Some(1000)), (1, 1));
        assert_eq!(width_speed(Some(10000)), (1, 8));
        assert_eq!(width_speed(Some(25000)), (1, 32));
        assert_eq!(width_speed(Some(100000)), (2, 32));
        assert_eq!(width_speed(Some(400000)), (2, 128));
    }

    #[test]
    fn sized_copies_fill_then_zero() {
        let src = [7u8; 4];
        let mut dst = [1u8; 6];
        // SAFETY: dst has 6 bytes.
        unsafe { copy_sized(dst.as_mut_ptr(), 6, &src) };
        assert_eq!(dst, [7, 7, 7, 7, 0, 0]);
        let mut dst = [1u8; 3];
        // SAFETY: dst has 3 bytes.
        unsafe { copy_sized(dst.as_mut_ptr(), 3, &src) };
        assert_eq!(dst, [7, 7, 7]);
    }
}
