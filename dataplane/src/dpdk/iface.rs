//! The kernel interfaces that `[[ports]] device` strings name, checked before EAL starts.
//! `net_af_packet`, `net_af_xdp` and `net_pcap` open an existing kernel interface
//! (`net_af_packet0,iface=eth1`); when it is missing DPDK only fails the probe, and the
//! port is then reported as "no port named net_af_packet0" with no word of the interface.
//! [`check_port_interfaces`] says which interface is missing, in `spillway --check` and
//! at start; likewise a `net_pcap` `rx_pcap=` file that cannot be read. (`net_tap`'s `iface=` names an interface the driver creates and `net_vhost`'s
//! a socket path: not checked.)

use spillway_shared::config::Config;
use spillway_shared::device::device_name;
use std::path::Path;

/// Where the kernel lists its network interfaces.
pub const SYS_CLASS_NET: &str = "/sys/class/net";

/// Virtual-device drivers (by name prefix, DPDK's `net_` and legacy `eth_` spellings) and
/// their arguments that name an existing kernel network interface.
const IFACE_ARGS: &[(&str, &[&str])] = &[
    ("net_af_packet", &["iface"]),
    ("eth_af_packet", &["iface"]),
    ("net_af_xdp", &["iface"]),
    ("net_pcap", &["iface", "rx_iface", "rx_iface_in", "tx_iface"]),
    ("eth_pcap", &["iface", "rx_iface", "rx_iface_in", "tx_iface"]),
];

/// The kernel interfaces `device` names, in order (none for other drivers).
pub fn named_interfaces(device: &str) -> Vec<&str> {
    named_args(device, IFACE_ARGS)
}

/// The non-empty values, in order, of the arguments of `device` that `table` lists for its
/// driver (by name prefix); none for a driver the table does not list.
fn named_args<'d>(device: &'d str, table: &[(&str, &[&str])]) -> Vec<&'d str> {
    let name = device_name(device);
    let Some((_, keys)) = table.iter().find(|(d, _)| name.starts_with(d)) else {
        return Vec::new();
    };
    device
        .split(',')
        .skip(1)
        .filter_map(|a| a.split_once('='))
        .filter(|(k, v)| keys.contains(&k.trim()) && !v.trim().is_empty())
        .map(|(_, v)| v.trim())
        .collect()
}

/// Whether the kernel has the interface `name`: listed under `sys_class_net`, or known to
/// `if_nametoindex(3)` (the same lookup the drivers make, in this process's network
/// namespace, which sysfs may not show).
fn interface_exists(name: &str, sys_class_net: &Path) -> bool {
    if !name.contains('/') && sys_class_net.join(name).exists() {
        return true;
    }
    let Ok(c) = std::ffi::CString::new(name) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated string; if_nametoindex only reads it.
    unsafe { libc::if_nametoindex(c.as_ptr()) != 0 }
}

/// Virtual-device drivers and their arguments that name a file the driver reads at start
/// (`net_pcap`'s `rx_pcap=`; `tx_pcap=` is created).
const FILE_ARGS: &[(&str, &[&str])] = &[("net_pcap", &["rx_pcap"]), ("eth_pcap", &["rx_pcap"])];

/// The files `device` has its driver read at start, in order (none for other drivers).
pub fn named_files(device: &str) -> Vec<&str> {
    named_args(device, FILE_ARGS)
}

/// Checks that every kernel interface `device` names exists (`sys_class_net` is
/// [`SYS_CLASS_NET`] but in tests), and every file its driver reads at start
/// ([`named_files`]) can be opened; the error names the first missing one. Without this,
/// DPDK only fails the probe, and the port is reported as "no port named ...".
pub fn check_interfaces(device: &str, sys_class_net: &Path) -> Result<(), String> {
    for file in named_files(device) {
        if let Err(e) = std::fs::File::open(file) {
            return Err(format!("cannot read {file:?} ({e}); {} reads it at start", device_name(device)));
        }
    }
    for name in named_interfaces(device) {
        if !interface_exists(name, sys_class_net) {
            return Err(format!(
                "interface {name:?} does not exist (no {}); {} opens an existing kernel interface: list them with `ip link`",
                sys_class_net.join(name).display(),
                device_name(device)
            ));
        }
    }
    Ok(())
}

/// [`check_interfaces`] for every port of `cfg`: the error starts with the field
/// (`ports[0].device: interface "eth9" does not exist ...`).
pub fn check_port_interfaces(cfg: &Config) -> Result<(), String> {
    for (i, p) in cfg.ports.iter().enumerate() {
        check_interfaces(&p.device, Path::new(SYS_CLASS_NET)).map_err(|e| format!("ports[{i}].device: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interfaces_are_read_from_the_drivers_that_open_one() {
        assert_eq!(named_interfaces("net_af_packet0,iface=eth1,qpairs=2"), ["eth1"]);
        assert_eq!(named_interfaces("eth_af_packet1, iface = veth0"), ["veth0"]);
        assert_eq!(named_interfaces("net_af_xdp0,iface=ens3,start_queue=0"), ["ens3"]);
        assert_eq!(named_interfaces("net_pcap0,rx_iface=a,tx_iface=b"), ["a", "b"]);
        assert_eq!(named_interfaces("net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap"), Vec::<&str>::new());
        assert_eq!(named_files("net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap"), ["in.pcap"]);
        assert!(named_files("net_af_packet0,iface=eth1").is_empty());
        let e = check_interfaces("net_pcap0,rx_pcap=/nonexistent/in.pcap,tx_pcap=/tmp/o.pcap", Path::new(SYS_CLASS_NET)).unwrap_err();
        assert!(e.starts_with("cannot read \"/nonexistent/in.pcap\"") && e.ends_with("net_pcap0 reads it at start"), "{e}");
        for other in ["net_tap0,iface=dtap0", "net_vhost0,iface=/tmp/v.sock", "net_null0", "0000:3b:00.0"] {
            assert!(named_interfaces(other).is_empty(), "{other}");
        }
    }

    #[test]
    fn a_missing_interface_is_named_with_its_sysfs_path() {
        let dir = std::env::temp_dir().join(format!("spw-iface-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("spwtest0")).unwrap();
        assert_eq!(check_interfaces("net_af_packet0,iface=spwtest0", &dir), Ok(()));
        assert_eq!(check_interfaces("net_null0", &dir), Ok(()));
        let e = check_interfaces("net_af_packet0,iface=doesnotexist0", &dir).unwrap_err();
        let want = format!("interface \"doesnotexist0\" does not exist (no {}/doesnotexist0); net_af_packet0 opens", dir.display());
        assert!(e.starts_with(&want), "{e}");
        let e = check_interfaces("net_pcap0,rx_iface=spwtest0,tx_iface=nope1", &dir).unwrap_err();
        assert!(e.starts_with("interface \"nope1\" does not exist"), "{e}");
        // The kernel's own lookup counts where sysfs does not list it (another namespace).
        assert_eq!(check_interfaces("net_af_packet0,iface=lo", &dir), Ok(()));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_port_is_named_in_the_error() {
        let cfg = Config::from_toml("[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\n[[ports]]\nname = \"p1\"\ndevice = \"net_af_packet1,iface=doesnotexist0\"\n").unwrap();
        let e = check_port_interfaces(&cfg).unwrap_err();
        assert!(e.starts_with("ports[1].device: interface \"doesnotexist0\" does not exist (no /sys/class/net/doesnotexist0)"), "{e}");
        let ok = Config::from_toml("[[ports]]\nname = \"p0\"\ndevice = \"net_af_packet0,iface=lo\"\n").unwrap();
        assert_eq!(check_port_interfaces(&ok), Ok(()));
    }
}
