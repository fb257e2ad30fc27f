//! A drop-in `librdmacm.so.1` for softroce: unmodified rdma_cm programs (rping, ucmatose,
//! rdma_server/rdma_client, perftest `-R`) on softroce devices, with no kernel `rdma_cm`:
//!
//! ```sh
//! cargo build --release
//! LD_LIBRARY_PATH=$(target/release/softroce lib-path) rping -s -a 127.0.0.1
//! ```
//!
//! This library holds no code of its own beyond one trampoline per export: each of Debian
//! 12's librdmacm symbols (`exports.tsv`: 68 functions in `RDMACM_1.0` … `RDMACM_1.3`) jumps
//! to `softroce_<name>@SOFTROCE_PRIVATE_1` in softroce's `libibverbs.so.1` (its
//! `DT_NEEDED`), where the implementation lives beside the verbs objects it hands out
//! (`id->verbs`, `id->qp`, the CQs): one runtime — one device table, one engine per device —
//! for both libraries. The references are bound by version, so a librdmacm paired with a
//! libibverbs that lacks them fails at load time instead of misbehaving.
//!
//! `build.rs` generates the trampolines (`.symver` aliases, recipe G of the ABI note) and
//! links against a stub `libibverbs.so.1` that only defines the private node's names.

include!(concat!(env!("OUT_DIR"), "/trampolines.rs"));
