//! `softroce devinfo`: the device as `ibv_devinfo -v` shows an rxe device — port state,
//! active and maximum MTU, the GID table with types, and the limits the library enforces.
//! It does not open the device (no port is bound), so it works beside a running one.

use softroce::verbs::device::DeviceInfo;
use softroce::verbs::{DeviceConfig, PortState};

use super::common::{CliError, default_local_ip, exit, report};

/// Arguments of `softroce devinfo`.
#[derive(clap::Args, Debug)]
#[command(after_help = super::common::EXIT_CODES)]
pub struct DevinfoArgs {
    /// Local IP address or network interface of the device (default: the first interface
    /// address) [ibv_devinfo -d]
    #[arg(short = 'd', long = "ib-dev")]
    pub dev: Option<String>,
    /// Packet I/O: `udp` (a UDP socket, unprivileged) or `raw` (an AF_PACKET socket on the
    /// interface: full-strength ICRC checks, needs CAP_NET_RAW) [softroce only]
    #[arg(long, value_enum, default_value_t = crate::cli::common::BackendArg::Udp)]
    pub backend: crate::cli::common::BackendArg,
    /// Print all attributes, the limits and the GID table [ibv_devinfo -v]
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
    /// Print everything -v shows as one JSON object instead [softroce only]
    #[arg(long)]
    pub json: bool,
}

fn mtu_line(m: softroce::verbs::Mtu) -> String {
    format!("{} ({})", m.bytes(), m as u32)
}

/// Runs `softroce devinfo`.
pub fn run(a: &DevinfoArgs) -> i32 {
    let address = a.dev.clone().unwrap_or_else(|| default_local_ip().to_string());
    let info = match DeviceInfo::query(&DeviceConfig::new(&address).with_backend(a.backend.kind())) {
        Ok(i) => i,
        Err(e) => return report("devinfo", &CliError::from(e)),
    };
    if a.json {
        println!("{}", to_json(&info));
    } else {
        print!("{}", render(&info, a.verbose));
    }
    exit::OK
}

/// Everything `render(.., true)` shows, as JSON.
pub fn to_json(i: &DeviceInfo) -> serde_json::Value {
    let a = &i.attr;
    let p = &i.port;
    serde_json::json!({
        "hca_id": i.name,
        "ip": i.ip.to_string(),
        "fw_ver": a.fw_ver,
        "node_guid": format!("{:016x}", a.node_guid),
        "vendor_id": a.vendor_id,
        "vendor_part_id": a.vendor_part_id,
        "phys_port_cnt": a.phys_port_cnt,
        "limits": {
            "max_mr_size": a.max_mr_size,
            "page_size_cap": a.page_size_cap,
            "max_qp": a.max_qp,
            "max_qp_wr": a.max_qp_wr,
            "max_sge": a.max_sge,
            "max_cq": a.max_cq,
            "max_cqe": a.max_cqe,
            "max_mr": a.max_mr,
            "max_mw": a.max_mw,
            "max_pd": a.max_pd,
            "max_qp_rd_atom": a.max_qp_rd_atom,
            "max_qp_init_rd_atom": a.max_qp_init_rd_atom,
            "max_srq": a.max_srq,
            "max_srq_wr": a.max_srq_wr,
            "max_srq_sge": a.max_srq_sge,
            "max_ah": a.max_ah,
            "max_inline_data": a.max_inline_data,
            "atomic_cap": a.atomic_cap.to_string(),
        },
        "port": {
            "port": 1,
            "state": match p.state {
                PortState::Active => "PORT_ACTIVE",
                PortState::Down => "PORT_DOWN",
            },
            "max_mtu": p.max_mtu.bytes(),
            "active_mtu": p.active_mtu.bytes(),
            "lid": p.lid,
            "link_layer": p.link_layer.to_string(),
            "max_msg_sz": p.max_msg_sz,
            "port_cap_flags": p.port_cap_flags,
            "gid_tbl_len": p.gid_tbl_len,
            "netdev": p.netdev,
            "netdev_mtu": p.netdev_mtu,
        },
        "gids": i.gids.iter().enumerate().map(|(k, g)| serde_json::json!({
            "index": k,
            "gid": g.to_ibv_string(),
            "type": "RoCE v2",
        })).collect::<Vec<_>>(),
    })
}

/// The text `ibv_devinfo [-v]` would print for this device.
pub fn render(i: &DeviceInfo, verbose: bool) -> String {
    let a = &i.attr;
    let p = &i.port;
    let guid = |g: u64| {
        let b = g.to_be_bytes();
        format!(
            "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
        )
    };
    let mut o = String::new();
    o += &format!("hca_id:\t{}\n", i.name);
    o += "\ttransport:\t\t\tInfiniBand (0)\n";
    o += &format!("\tfw_ver:\t\t\t\t{}\n", a.fw_ver);
    o += &format!("\tnode_guid:\t\t\t{}\n", guid(a.node_guid));
    o += &format!("\tsys_image_guid:\t\t\t{}\n", guid(a.node_guid));
    o += &format!("\tvendor_id:\t\t\t{:#06x}\n", a.vendor_id);
    o += &format!("\tvendor_part_id:\t\t\t{}\n", a.vendor_part_id);
    o += "\thw_ver:\t\t\t\t0x0\n";
    o += &format!("\tphys_port_cnt:\t\t\t{}\n", a.phys_port_cnt);
    if verbose {
        o += &format!("\tmax_mr_size:\t\t\t{:#x}\n", a.max_mr_size);
        o += &format!("\tpage_size_cap:\t\t\t{:#x}\n", a.page_size_cap);
        for (k, v) in [
            ("max_qp", a.max_qp),
            ("max_qp_wr", a.max_qp_wr),
            ("max_sge", a.max_sge),
            ("max_cq", a.max_cq),
            ("max_cqe", a.max_cqe),
            ("max_mr", a.max_mr),
            ("max_mw", a.max_mw),
            ("max_pd", a.max_pd),
            ("max_qp_rd_atom", a.max_qp_rd_atom),
            ("max_qp_init_rd_atom", a.max_qp_init_rd_atom),
            ("max_srq", a.max_srq),
            ("max_srq_wr", a.max_srq_wr),
            ("max_srq_sge", a.max_srq_sge),
            ("max_ah", a.max_ah),
            ("max_inline_data", a.max_inline_data),
        ] {
            let tabs = if k.len() >= 15 { "\t\t" } else { "\t\t\t" };
            o += &format!("\t{k}:{tabs}{v}\n");
        }
        o += &format!("\tatomic_cap:\t\t\t{} (1)\n", a.atomic_cap);
    }
    o += &format!("\t\tport:\t{}\n", 1);
    let state = match p.state {
        PortState::Active => "PORT_ACTIVE (4)",
        PortState::Down => "PORT_DOWN (1)",
    };
    o += &format!("\t\t\tstate:\t\t\t{state}\n");
    o += &format!("\t\t\tmax_mtu:\t\t{}\n", mtu_line(p.max_mtu));
    o += &format!("\t\t\tactive_mtu:\t\t{}\n", mtu_line(p.active_mtu));
    o += "\t\t\tsm_lid:\t\t\t0\n";
    o += &format!("\t\t\tport_lid:\t\t{}\n", p.lid);
    o += "\t\t\tport_lmc:\t\t0x00\n";
    o += &format!("\t\t\tlink_layer:\t\t{}\n", p.link_layer);
    if verbose {
        o += &format!("\t\t\tmax_msg_sz:\t\t{:#x}\n", p.max_msg_sz);
        o += &format!("\t\t\tport_cap_flags:\t\t{:#010x}\n", p.port_cap_flags);
        o += "\t\t\tmax_vl_num:\t\t1 (1)\n";
        o += &format!("\t\t\tgid_tbl_len:\t\t{}\n", p.gid_tbl_len);
        o += "\t\t\tpkey_tbl_len:\t\t1\n";
        o += &format!("\t\t\tnetdev:\t\t\t{} (MTU {}, address {})\n", p.netdev, p.netdev_mtu, i.ip);
        for (k, g) in i.gids.iter().enumerate() {
            o += &format!("\t\t\tGID[{k:>3}]:\t\t{}, RoCE v2\n", g.to_ibv_string());
        }
    }
    o
}
