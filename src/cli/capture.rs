//! Reading capture files (pcap and pcapng) into link-layer-stripped IP packets.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;
use std::time::Duration;

use pcap_file::DataLink;
use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::{Block, PcapNgReader};

/// One captured frame.
pub struct Frame {
    /// Capture timestamp.
    pub time: Duration,
    /// Link type of the interface it was captured on.
    pub link: DataLink,
    /// The frame as captured, link-layer header included.
    pub data: Vec<u8>,
}

impl Frame {
    /// The IP packet inside the frame, for the link types tcpdump and dumpcap produce.
    pub fn ip(&self) -> Option<&[u8]> {
        let d = &self.data[..];
        let (ethertype, rest) = match self.link {
            DataLink::ETHERNET => {
                let mut ty = u16::from_be_bytes([*d.get(12)?, *d.get(13)?]);
                let mut off = 14;
                if ty == 0x8100 {
                    ty = u16::from_be_bytes([*d.get(16)?, *d.get(17)?]);
                    off = 18;
                }
                (Some(ty), d.get(off..)?)
            }
            DataLink::LINUX_SLL => (Some(u16::from_be_bytes([*d.get(14)?, *d.get(15)?])), d.get(16..)?),
            DataLink::LINUX_SLL2 => (Some(u16::from_be_bytes([*d.first()?, *d.get(1)?])), d.get(20..)?),
            DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => (None, d),
            _ => return None,
        };
        match ethertype {
            None | Some(0x0800) | Some(0x86dd) => Some(rest),
            _ => None,
        }
    }
}

/// Reads every frame of a pcap or pcapng file.
pub fn read(path: &Path) -> Result<Vec<Frame>, String> {
    let mut f = BufReader::new(File::open(path).map_err(|e| format!("{}: {e}", path.display()))?);
    let mut magic = [0u8; 4];
    f.read_exact(&mut magic).map_err(|e| format!("{}: {e}", path.display()))?;
    let f = BufReader::new(File::open(path).map_err(|e| format!("{}: {e}", path.display()))?);
    let bad = |e: pcap_file::PcapError| format!("{}: {e}", path.display());
    let mut out = Vec::new();
    if magic == [0x0a, 0x0d, 0x0d, 0x0a] {
        let mut r = PcapNgReader::new(f).map_err(bad)?;
        let mut links: Vec<DataLink> = Vec::new();
        while let Some(b) = r.next_block() {
            match b.map_err(bad)? {
                Block::SectionHeader(_) => links.clear(),
                Block::InterfaceDescription(i) => links.push(i.linktype),
                Block::EnhancedPacket(p) => {
                    let link = links.get(p.interface_id as usize).copied().unwrap_or(DataLink::ETHERNET);
                    out.push(Frame { time: p.timestamp, link, data: p.data.into_owned() });
                }
                Block::SimplePacket(p) => {
                    let link = links.first().copied().unwrap_or(DataLink::ETHERNET);
                    out.push(Frame { time: Duration::ZERO, link, data: p.data.into_owned() });
                }
                _ => {}
            }
        }
    } else {
        let mut r = PcapReader::new(f).map_err(bad)?;
        let link = r.header().datalink;
        while let Some(p) = r.next_packet() {
            let p = p.map_err(bad)?;
            out.push(Frame { time: p.timestamp, link, data: p.data.into_owned() });
        }
    }
    Ok(out)
}
