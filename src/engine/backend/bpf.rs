//! A small classic-BPF assembler: instructions with symbolic jump targets, resolved into the
//! relative offsets the kernel wants (`SO_ATTACH_FILTER`), and the call that attaches a
//! program to a socket. The receive filters (`raw`'s frame filter, `filter`'s RoCE checks)
//! are written with it.

use std::io;

/// A classic BPF instruction with symbolic jump targets, resolved by [`assemble`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Insn {
    pub code: u16,
    pub jt: Target,
    pub jf: Target,
    pub k: u32,
}

/// Where a conditional jump goes.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Target {
    /// The next instruction.
    Next,
    /// The instruction after [`label`] `l`.
    Label(u32),
}

pub(crate) const LD_W_ABS: u16 = 0x20;
pub(crate) const LD_H_ABS: u16 = 0x28;
pub(crate) const LD_B_ABS: u16 = 0x30;
pub(crate) const LD_W_IND: u16 = 0x40;
pub(crate) const LD_H_IND: u16 = 0x48;
pub(crate) const LD_B_IND: u16 = 0x50;
/// `A = len` (the bytes the filter sees: for a UDP socket, UDP header and payload).
pub(crate) const LD_LEN: u16 = 0x80;
/// `A = k`.
pub(crate) const LD_IMM: u16 = 0x00;
/// `A = M[k]`.
pub(crate) const LD_MEM: u16 = 0x60;
/// `X = k`.
pub(crate) const LDX_IMM: u16 = 0x01;
/// `X = M[k]`.
pub(crate) const LDX_MEM: u16 = 0x61;
/// `X = 4 * (P[k] & 0xf)`.
pub(crate) const LDX_B_MSH: u16 = 0xb1;
/// `M[k] = A`.
pub(crate) const ST: u16 = 0x02;
pub(crate) const ADD_X: u16 = 0x0c;
pub(crate) const SUB_K: u16 = 0x14;
pub(crate) const SUB_X: u16 = 0x1c;
pub(crate) const AND_K: u16 = 0x54;
pub(crate) const RSH_K: u16 = 0x74;
pub(crate) const RSH_X: u16 = 0x7c;
pub(crate) const JA: u16 = 0x05;
pub(crate) const JEQ: u16 = 0x15;
pub(crate) const JGE: u16 = 0x35;
pub(crate) const JGE_X: u16 = 0x3d;
pub(crate) const JSET: u16 = 0x45;
pub(crate) const RET: u16 = 0x06;
/// `X = A`.
pub(crate) const TAX: u16 = 0x07;
/// `A = X`.
pub(crate) const TXA: u16 = 0x87;
/// The kernel's ancillary-data area (`SKF_AD_OFF`, -0x1000) plus `SKF_AD_RANDOM` (56): a
/// word load there gives a fresh random number (`get_random_u32`).
pub(crate) const AD_RANDOM: u32 = 0xffff_f000 + 56;
/// Pseudo-instruction: a label.
const LABEL: u16 = 0xffff;

/// An instruction that does not jump.
pub(crate) fn op(code: u16, k: u32) -> Insn {
    Insn { code, jt: Target::Next, jf: Target::Next, k }
}

/// A conditional jump (`code` one of the `J*` codes): to `jt` if true, else to `jf`.
pub(crate) fn jump(code: u16, k: u32, jt: Target, jf: Target) -> Insn {
    Insn { code, jt, jf, k }
}

/// `if A == k goto jt else goto jf`.
pub(crate) fn jeq(k: u32, jt: Target, jf: Target) -> Insn {
    jump(JEQ, k, jt, jf)
}

/// A label: the target of jumps to `Target::Label(l)`.
pub(crate) fn label(l: u32) -> Insn {
    Insn { code: LABEL, jt: Target::Next, jf: Target::Next, k: l }
}

/// An unconditional jump (any distance).
pub(crate) fn goto(l: u32) -> Insn {
    Insn { code: JA, jt: Target::Next, jf: Target::Next, k: l }
}

/// Resolves labels into relative jumps. `None` if a conditional jump does not fit in a byte
/// (a program too long between a test and its target) or names a missing label.
pub(crate) fn assemble(prog: &[Insn]) -> Option<Vec<libc::sock_filter>> {
    let mut at = std::collections::HashMap::new();
    let mut n = 0usize;
    for i in prog {
        if i.code == LABEL {
            at.insert(i.k, n);
        } else {
            n += 1;
        }
    }
    let mut out = Vec::with_capacity(n);
    for i in prog.iter().filter(|i| i.code != LABEL) {
        let here = out.len() + 1;
        let rel = |t: Target| -> Option<u8> {
            match t {
                Target::Next => Some(0),
                Target::Label(l) => u8::try_from(at.get(&l)?.checked_sub(here)?).ok(),
            }
        };
        let (jt, jf, k) = if i.code == JA {
            (0, 0, u32::try_from(at.get(&i.k)?.checked_sub(here)?).ok()?)
        } else {
            (rel(i.jt)?, rel(i.jf)?, i.k)
        };
        out.push(libc::sock_filter { code: i.code, jt, jf, k });
    }
    // The kernel refuses longer programs (BPF_MAXINSNS).
    (out.len() <= 4096).then_some(out)
}

/// Attaches (or atomically replaces) the socket filter of `fd`.
pub(crate) fn attach_filter(fd: i32, prog: &[libc::sock_filter]) -> io::Result<()> {
    let fprog = libc::sock_fprog { len: prog.len() as u16, filter: prog.as_ptr() as *mut _ };
    // SAFETY: `fprog` points at `prog`, which outlives the call; the kernel copies the program
    // and reads `size_of::<sock_fprog>()` bytes from `&fprog`.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_become_relative_offsets() {
        let p = [
            op(LD_B_ABS, 0),
            jeq(1, Target::Label(7), Target::Next),
            goto(8),
            label(7),
            op(RET, 1),
            label(8),
            op(RET, 0),
        ];
        let out = assemble(&p).unwrap();
        assert_eq!(out.len(), 5);
        assert_eq!((out[1].jt, out[1].jf), (1, 0));
        assert_eq!(out[2].k, 1);
        assert!(assemble(&[goto(3)]).is_none(), "a missing label");
        assert!(assemble(&[goto(3), label(3), label(4), jeq(0, Target::Label(3), Target::Next)]).is_none());
    }
}
