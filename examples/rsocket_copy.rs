//! Copies a file from one process to another over an rsocket stream
//! ([`softroce::rsocket`]): the server listens and writes what it receives into a file, the
//! client connects and sends a file. Either side may be rdma-core's rsockets instead (the
//! protocol on the wire is rdma-core 44's).
//!
//! ```text
//! cargo run --release --example rsocket_copy -- recv 127.0.0.1:7471 /tmp/copy &    # server
//! cargo run --release --example rsocket_copy -- send 127.0.0.1:7471 /etc/services  # client
//! cmp /etc/services /tmp/copy
//! ```
//!
//! The server takes one connection and ends when the client has sent everything (the
//! client shuts its side down after the last byte); both print the byte count and an FNV-1a
//! hash of the bytes, so the two lines can be compared.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::{Shutdown, SocketAddr};

use softroce::rsocket::{RsListener, RsStream};

/// Copies `from` into `to` in 64 KiB pieces: the byte count and FNV-1a hash of the bytes.
fn copy(from: &mut impl Read, to: &mut impl Write) -> io::Result<(u64, u64)> {
    let mut buf = vec![0u8; 1 << 16];
    let (mut n, mut hash) = (0u64, 0xcbf2_9ce4_8422_2325u64);
    loop {
        let got = match from.read(&mut buf) {
            Ok(0) => return Ok((n, hash)),
            Ok(got) => got,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        for &b in &buf[..got] {
            hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        to.write_all(&buf[..got])?;
        n += got as u64;
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, addr, path] = &args[..] else {
        return Err("usage: rsocket_copy recv|send ADDRESS:PORT FILE".into());
    };
    let addr: SocketAddr = addr.parse()?;
    let (n, hash) = match mode.as_str() {
        "recv" => {
            let listener = RsListener::bind(addr)?;
            println!("listening on {}", listener.local_addr()?);
            let (mut s, peer) = listener.accept()?;
            println!("connection from {peer}");
            let mut out = BufWriter::new(File::create(path)?);
            let r = copy(&mut s, &mut out)?;
            out.flush()?;
            r
        }
        "send" => {
            let mut s = RsStream::connect(addr)?;
            let r = copy(&mut BufReader::new(File::open(path)?), &mut s)?;
            // The end of the stream: the server's read returns 0 once it has everything.
            s.shutdown(Shutdown::Write)?;
            // Waits for the server to close, so that no byte is in flight when this process
            // ends.
            let mut rest = [0u8; 1];
            let _ = s.read(&mut rest);
            r
        }
        _ => return Err(format!("unknown mode {mode}: recv or send").into()),
    };
    println!("{mode} {n} bytes, fnv1a {hash:016x}");
    Ok(())
}
