//! The transport services as sans-IO state machines.
//!
//! This module will hold the Reliable Connected requester, completer and responder (named after
//! kernel rxe's `rxe_req.c`, `rxe_comp.c` and `rxe_resp.c`), then UC and UD: they take posted
//! work requests, received packets and the current time, and return packets to send, work
//! completions and timer deadlines. No sockets, no threads, no clock reads.
