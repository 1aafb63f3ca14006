//! `spillway --check`: refuses what the daemon would refuse at start
//! without starting DPDK (ranges, a missing `socket_group`, `worker_cores` this host
//! lacks), prints warnings, and says what it cannot check.

mod common;

use std::process::Command;

fn check(name: &str, text: &str) -> (i32, String) {
    check_with(name, text, &[])
}

/// `spillway --config FILE --check ARGS...`: (exit code, stdout and stderr).
fn check_with(name: &str, text: &str, args: &[&str]) -> (i32, String) {
    let dir = std::env::temp_dir().join(format!("spw-check-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("spillway.toml");
    std::fs::write(&path, text).unwrap();
    let o = Command::new(common::daemon_bin()).arg("--config").arg(&path).arg("--check").args(args).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (o.status.code().unwrap_or(-1), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

#[test]
fn check_passes_the_null_example_and_says_what_it_cannot_check() {
    let (code, out) = check("ok", &common::null_example());
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("configuration OK (2 services, 1 port)"), "{out}");
    assert!(out.contains("not checked without starting DPDK: that the devices exist"), "{out}");
}

#[test]
fn check_refuses_a_missing_socket_group_and_absent_cores() {
    let base = common::null_example();
    let (code, out) = check("group", &base.replace("workers = 2", "workers = 2\nsocket_group = \"spillway-no-such-group\""));
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("dataplane.socket_group = spillway-no-such-group: must name an existing group"), "{out}");
    let (code, out) = check("cores", &base.replace("workers = 2", "workers = 2\nworker_cores = [0, 4095]"));
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("dataplane.worker_cores[1] = 4095: must be a usable core of this host"), "{out}");
}

#[test]
fn check_refuses_out_of_type_values_with_the_range_and_warns_on_small_maglev_tables() {
    let base = common::null_example();
    let (code, out) = check("weight", &base.replace("zone = \"z2\"\n\n[[services]]", "zone = \"z2\"\nweight = -1\n\n[[services]]"));
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("services[0].backends[3].weight = -1: must be in 1..=1000"), "{out}");
    let (code, out) = check("maglev", &base.replace("port = 80\n", "port = 80\nmaglev_table_size = 251\n"));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("warning: services[0].maglev_table_size = 251: under 100 x 4 backends"), "{out}");
}

/// A port device DPDK would refuse for a missing argument (`net_af_packet0` without
/// `iface=`) is refused by `--check` and at start with the field path and the rule, not
/// DPDK's generic "a driver or bus failed to probe".
#[test]
fn check_refuses_a_device_without_its_required_arguments() {
    let base = common::null_example();
    let (code, out) = check("afp", &base.replace("device = \"net_null0,no-rx=1\"", "device = \"net_af_packet0\""));
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("ports[0].device = \"net_af_packet0\": the net_af_packet driver needs `iface=`"), "{out}");
    let (code, out) = check("pcap", &base.replace("device = \"net_null0,no-rx=1\"", "device = \"net_pcap0,in.pcap\""));
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("ports[0].device = \"net_pcap0,in.pcap\": argument `in.pcap` must be key=value"), "{out}");
    let (code, out) = check("iface", &base.replace("device = \"net_null0,no-rx=1\"", "device = \"eth1\""));
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("ports[0].device = \"eth1\": `eth1` is neither a PCI address") && out.contains("net_af_packet0,iface=eth1"), "{out}");
    // the daemon itself refuses it the same way, before DPDK starts
    let dir = std::env::temp_dir().join(format!("spw-check-{}-afp-start", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("spillway.toml");
    std::fs::write(&path, base.replace("device = \"net_null0,no-rx=1\"", "device = \"net_af_packet0\"")).unwrap();
    let o = Command::new(common::daemon_bin()).arg("--config").arg(&path).arg("--socket").arg(dir.join("s.sock")).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("ports[0].device = \"net_af_packet0\": the net_af_packet driver needs `iface=`") && !err.contains("rte_eal_init"), "{err}");
}

/// The control socket path checked is the one the daemon would bind: `--socket` when given
/// (a config whose `dataplane.socket` is unusable then passes, with a warning), else
/// `dataplane.socket`; the error names where the path came from.
#[test]
fn check_validates_the_socket_path_actually_used() {
    let base = common::null_example();
    assert!(base.contains("socket = \"/run/spillway/ctl.sock\""), "the null example sets dataplane.socket");
    let long = format!("/tmp/{}", "s".repeat(110));
    for bad in ["", long.as_str()] {
        let text = base.replace("socket = \"/run/spillway/ctl.sock\"", &format!("socket = \"{bad}\""));
        let (code, out) = check("sock-cfg", &text);
        assert_eq!(code, 2, "{out}");
        assert!(out.contains("dataplane.socket = ") && out.contains("must be a file path of 1 to 107 bytes"), "{out}");
        let (code, out) = check_with("sock-arg", &text, &["--socket", "/tmp/spw-check.sock"]);
        assert_eq!(code, 0, "--socket overrides an unusable dataplane.socket: {out}");
        assert!(out.contains("warning: dataplane.socket = ") && out.contains("the daemon starts only with --socket PATH"), "{out}");
    }
    let (code, out) = check_with("sock-bad-arg", &base, &["--socket", &long]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("--socket = ") && out.contains("must be a file path of 1 to 107 bytes"), "{out}");
}
