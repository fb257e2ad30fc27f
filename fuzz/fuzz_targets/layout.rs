//! What the transport fuzz targets share: a reader that takes fields from the fuzzer's bytes,
//! and the memory layout of each endpoint (a local buffer, a remotely accessible target, and
//! right after it a guard region that no key grants remote access to).

use softroce::transport::sim::PD;
use softroce::transport::{Access, VecMemory};

pub const BUF: u32 = 0x100;
pub const TGT: u32 = 0x200;
pub const GUARD: u32 = 0x300;
pub const BUF_ADDR: u64 = 0x10000;
pub const TGT_ADDR: u64 = 0x40000;
pub const TGT_LEN: u64 = 16384;
pub const GUARD_ADDR: u64 = TGT_ADDR + TGT_LEN;
/// What the guard region holds; it must still hold it at the end.
pub const GUARD_BYTE: u8 = 0x5a;

/// Registers the buffer, the target and the (filled) guard region in `m`.
pub fn add_regions(m: &VecMemory) {
    m.add(PD, BUF, BUF_ADDR, 65536, Access::LOCAL_WRITE);
    m.add(PD, TGT, TGT_ADDR, TGT_LEN as usize, Access::ALL);
    m.add(PD, GUARD, GUARD_ADDR, 4096, Access::LOCAL_WRITE);
    m.set(GUARD, GUARD_ADDR, &[GUARD_BYTE; 4096]);
}

/// Reads fields from the fuzzer's input; `None` once it is used up.
pub struct R<'a>(pub &'a [u8]);

impl R<'_> {
    pub fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    pub fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes([self.u8()?, self.u8()?]))
    }
    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes([self.u8()?, self.u8()?, self.u8()?, self.u8()?]))
    }
    pub fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
}
