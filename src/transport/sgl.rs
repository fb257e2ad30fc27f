//! Copies between a work request's scatter/gather list (or inline data) and packet payload,
//! through [`Memory`]: the gather of the requester and of READ responses, the scatter of
//! receives and READ responses.

use super::memory::{MemError, Memory};
use super::wr::{Payload, Sge};

/// Copies `dst.len()` bytes of a work request's payload, starting `offset` bytes in.
pub(crate) fn gather<M: Memory>(
    mem: &M,
    pd: u32,
    payload: &Payload,
    offset: u64,
    dst: &mut [u8],
) -> Result<(), MemError> {
    match payload {
        Payload::Inline(b) => {
            let s = usize::try_from(offset).map_err(|_| MemError::OutOfBounds)?;
            let src = b.get(s..s + dst.len()).ok_or(MemError::OutOfBounds)?;
            dst.copy_from_slice(src);
            Ok(())
        }
        Payload::Sges(list) => {
            let mut skip = offset;
            let mut out = 0usize;
            for sge in list {
                if out == dst.len() {
                    break;
                }
                let len = sge.length as u64;
                if skip >= len {
                    skip -= len;
                    continue;
                }
                let n = ((len - skip) as usize).min(dst.len() - out);
                mem.read_local(pd, sge.lkey.value(), sge.addr + skip, &mut dst[out..out + n])?;
                out += n;
                skip = 0;
            }
            if out == dst.len() { Ok(()) } else { Err(MemError::OutOfBounds) }
        }
    }
}

/// Writes `data` into a scatter/gather list starting `offset` bytes in (local write access).
pub(crate) fn scatter<M: Memory>(
    mem: &M,
    pd: u32,
    list: &[Sge],
    offset: u64,
    data: &[u8],
) -> Result<(), MemError> {
    let mut skip = offset;
    let mut done = 0usize;
    for sge in list {
        if done == data.len() {
            break;
        }
        let len = sge.length as u64;
        if skip >= len {
            skip -= len;
            continue;
        }
        let n = ((len - skip) as usize).min(data.len() - done);
        mem.write_local(pd, sge.lkey.value(), sge.addr + skip, &data[done..done + n])?;
        done += n;
        skip = 0;
    }
    if done == data.len() { Ok(()) } else { Err(MemError::OutOfBounds) }
}
