//! The packet walker on arbitrary UDP payloads.
//!
//! Invariant: whenever the bytes parse, header lengths + payload + pad + ICRC add up to the
//! input length, and re-emitting the parsed representation reproduces the input (with the pad
//! bytes and ICRC, which the builder writes as zero, zeroed).
#![no_main]

use libfuzzer_sys::fuzz_target;
use softroce::wire::pretty::PacketLine;
use softroce::wire::{ICRC_LEN, Packet, PacketRepr};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = Packet::new_checked(data) else { return };
    assert_eq!(p.header_len() + p.payload().len() + p.pad_bytes().len() + ICRC_LEN, data.len());
    assert_eq!(p.pad_bytes().len(), p.bth().pad() as usize);
    let repr = PacketRepr::parse(&p);
    let mut out = vec![0xa5u8; repr.buffer_len(p.payload().len())];
    let n = repr.emit(&mut out, p.payload()).expect("a parsed packet re-emits");
    assert_eq!(n, data.len());
    let mut expect = data.to_vec();
    let pad_start = p.header_len() + p.payload().len();
    expect[pad_start..].fill(0);
    assert_eq!(out, expect);
    let _ = format!("{}", PacketLine(&p));
});
