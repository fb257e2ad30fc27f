//! Random numbers for keys, PSNs, QP numbers and nonces: the process's SipHash seed, which
//! the standard library draws from the OS, keyed anew for each value by a counter and the
//! time. Not for cryptography; unpredictable to a peer that was not given the value (kernel
//! rxe puts 8 random bits in each key; softroce's keys are random in all 32).

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

/// A random 32-bit value.
pub fn u32() -> u32 {
    u64() as u32
}

/// A random 64-bit value.
pub fn u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

#[cfg(test)]
mod tests {
    #[test]
    fn values_differ() {
        let v: std::collections::HashSet<u64> = (0..1000).map(|_| super::u64()).collect();
        assert_eq!(v.len(), 1000);
    }
}
