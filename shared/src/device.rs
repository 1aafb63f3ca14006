//! Checks of `[[ports]] device` strings that can be made without starting DPDK, so that
//! `spillway --check` and the daemon's start refuse a device DPDK would refuse with its
//! generic "a driver or bus failed to probe".
//!
//! A device is a PCI address with optional devargs (`0000:3b:00.0`,
//! `0000:3b:00.0,rxq_cqe_comp_en=0`) or a virtual device `NAME,key=value,...` whose NAME
//! starts with its driver's name (`net_af_packet0,iface=eth1`; DPDK's `--vdev`,
//! doc.dpdk.org/guides/nics/). Checked: a non-PCI name is a `net_`/`eth_` vdev (not a kernel
//! interface name), every argument is `key=value` with a key and a value, and the drivers in [`REQUIRED`] get the argument they
//! cannot start without. Not checked (needs DPDK or the host): that the driver is built in,
//! that the interface, file or PCI device exists.

/// Virtual-device drivers (by name prefix, DPDK's `net_` and legacy `eth_` spellings) and
/// the arguments of which at least one is required, per the DPDK NIC guides: af_packet and
/// af_xdp need the kernel interface (`iface`), pcap a capture file or interface, vhost its
/// socket path (`iface`), virtio_user its device path (`path`), bonding its `mode`.
pub const REQUIRED: &[(&str, &[&str], &str)] = &[
    ("net_af_packet", &["iface"], "net_af_packet0,iface=eth1"),
    ("eth_af_packet", &["iface"], "eth_af_packet0,iface=eth1"),
    ("net_af_xdp", &["iface"], "net_af_xdp0,iface=eth1"),
    ("net_pcap", &["rx_pcap", "tx_pcap", "rx_iface", "rx_iface_in", "tx_iface", "iface"], "net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap"),
    ("eth_pcap", &["rx_pcap", "tx_pcap", "rx_iface", "rx_iface_in", "tx_iface", "iface"], "eth_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap"),
    ("net_vhost", &["iface"], "net_vhost0,iface=/tmp/vhost0.sock"),
    ("eth_vhost", &["iface"], "eth_vhost0,iface=/tmp/vhost0.sock"),
    ("net_virtio_user", &["path"], "net_virtio_user0,path=/dev/vhost-net"),
    ("net_bonding", &["mode"], "net_bonding0,mode=4,member=0000:3b:00.0"),
];

/// Whether a device string is a PCI address (`0000:3b:00.0` or `3b:00.0`, optionally with
/// devargs after a comma): the daemon passes it to EAL as `-a`, anything else as `--vdev`.
pub fn is_pci(device: &str) -> bool {
    let d = device_name(device);
    d.contains(':') && d.contains('.') && d.chars().all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
}

/// The device name of a device string: the part before the first comma (`net_pcap0` of
/// `net_pcap0,rx_pcap=in.pcap`), as DPDK names the port.
pub fn device_name(device: &str) -> &str {
    device.split(',').next().unwrap_or(device).trim()
}

/// Checks one `device` string; the error is the rule broken (the caller names the field
/// path and the value).
pub fn check(device: &str) -> Result<(), String> {
    let name = device_name(device);
    if name.is_empty() {
        return Err("must start with a PCI address or a vdev name, e.g. 0000:3b:00.0 or net_af_packet0,iface=eth1".into());
    }
    // DPDK's ethernet vdev drivers are named net_* (a few also eth_*); a kernel interface
    // name (`eth1`, `ens3f0`) is the most common mistake
    if !is_pci(device) && !name.starts_with("net_") && !name.starts_with("eth_") {
        return Err(format!(
            "`{name}` is neither a PCI address (0000:3b:00.0) nor a DPDK virtual device net_<driver><n>; for the kernel interface {name} use net_af_packet0,iface={name}"
        ));
    }
    let mut keys: Vec<&str> = Vec::new();
    for arg in device.split(',').skip(1) {
        let arg = arg.trim();
        match arg.split_once('=') {
            // a key may repeat: pcap takes one rx_pcap per queue, bonding one member each
            Some((k, v)) if !k.trim().is_empty() && !v.trim().is_empty() => keys.push(k.trim()),
            _ => return Err(format!("argument `{arg}` must be key=value with a non-empty key and value (e.g. {name},iface=eth1)")),
        }
    }
    if let Some((driver, need, example)) = REQUIRED.iter().find(|(d, _, _)| name.starts_with(d)) {
        if !need.iter().any(|k| keys.contains(k)) {
            let which = if need.len() == 1 { format!("`{}=`", need[0]) } else { format!("one of {}", need.iter().map(|k| format!("`{k}=`")).collect::<Vec<_>>().join(", ")) };
            return Err(format!("the {driver} driver needs {which} (e.g. {example}); DPDK refuses the device without it"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_addresses_are_told_from_vdevs() {
        assert!(is_pci("0000:3b:00.0") && is_pci("3b:00.0") && is_pci("0000:3b:00.1,rxq_cqe_comp_en=0"));
        assert!(!is_pci("net_null0") && !is_pci("net_pcap0,rx_pcap=a:b.pcap") && !is_pci("eth1"));
    }

    #[test]
    fn devices_dpdk_would_refuse_are_refused_here() {
        for ok in ["net_null0", "net_null0,no-rx=1", "net_af_packet0,iface=veth0", "eth_af_packet1,iface=eth1,qpairs=2", "net_pcap0,rx_pcap=a.pcap,tx_pcap=b.pcap", "net_pcap1,iface=lo", "net_pcap0,rx_pcap=a,rx_pcap=b", "0000:3b:00.0", "3b:00.0,rxq_cqe_comp_en=0", "net_tap0", "net_ring0"] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        for (bad, says) in [
            ("net_af_packet0", "needs `iface=`"),
            ("net_af_packet0,qpairs=2", "needs `iface=`"),
            ("net_pcap0", "one of `rx_pcap=`"),
            ("net_af_xdp0", "needs `iface=`"),
            ("net_af_packet0,iface=", "key=value"),
            ("net_af_packet0,veth0", "`veth0` must be key=value"),
            (",iface=a", "must start with"),
            ("eth1", "for the kernel interface eth1 use net_af_packet0,iface=eth1"),
            ("ens3f0,x=1", "neither a PCI address"),
            ("net_vhost0", "needs `iface=`"),
        ] {
            let e = check(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
