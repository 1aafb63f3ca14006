//! Tests of the whole configuration: parsing, loading and the rules across sections.

    use super::*;
    use std::net::Ipv4Addr;

    const EXAMPLE: &str = r#"
[dataplane]
eal_args = ["--no-huge", "-m", "512", "--no-pci"]
workers = 1

[[ports]]
name = "p0"
device = "net_null0"

[[zones]]
zone = "z1"
region = "r1"

[[client_zones]]
prefix = "10.1.0.0/16"
zone = "z1"

[[client_zones]]
prefix = "10.8.0.0/16"
compatible = false

[[services]]
name = "web"
vip = "10.0.0.100"
port = 80
zonal_affinity = "ZONAL_AFFINITY_SPILL_CROSS_ZONE"
spillover_ratio = 0.8

[[services.backends]]
name = "b1"
address = "10.0.1.1"
mac = "02:00:00:00:01:01"
zone = "z1"
"#;

    #[test]
    fn example_parses_and_validates() {
        let c = Config::from_toml(EXAMPLE).unwrap();
        c.validate().unwrap();
        assert_eq!(c.services[0].backends[0].weight, 50);
        assert_eq!(c.services[0].maglev_table_size, 65537);
        assert!(!c.client_zones[1].compatible);
        // serialise and read back: same model
        let again = Config::from_toml(&c.to_toml()).unwrap();
        assert_eq!(again, c);
    }

    #[test]
    fn unknown_field_is_an_error() {
        let e = Config::from_toml(&EXAMPLE.replace("spillover_ratio", "spilover_ratio")).unwrap_err();
        assert!(e.contains("spilover_ratio"), "{e}");
    }

    /// EXAMPLE plus an IPv6 service, an IPv6 client zone and a dual-stack port.
    fn example6() -> String {
        EXAMPLE.replace("device = \"net_null0\"\n", "device = \"net_null0\"\naddress = \"10.0.0.2\"\naddress6 = \"fd00::2\"\n")
            + r#"
[[client_zones]]
prefix = "fd01::/64"
zone = "z1"

[[services]]
name = "web6"
vip = "fd00::100"
port = 80

[[services.backends]]
name = "b1"
address = "fd00:21::1"
mac = "02:00:00:00:21:01"
zone = "z1"
"#
    }

    #[test]
    fn ipv6_literals_parse_validate_and_round_trip() {
        let c = Config::from_toml(&example6()).unwrap();
        c.validate().unwrap();
        assert_eq!(c.services[1].vip, "fd00::100".parse::<IpAddr>().unwrap());
        assert_eq!(c.services[1].backends[0].address, "fd00:21::1".parse::<IpAddr>().unwrap());
        assert_eq!(c.client_zones[2].prefix.to_string(), "fd01::/64");
        assert_eq!(c.ports[0].address6, Some("fd00::2".parse().unwrap()));
        let again = Config::from_toml(&c.to_toml()).unwrap();
        assert_eq!(again, c);
        // the IPv4 shape is unchanged: an IPv4-only config serialises without new fields
        let v4 = Config::from_toml(EXAMPLE).unwrap().to_toml();
        assert!(!v4.contains("address6"), "{v4}");
    }

    #[test]
    fn mixed_family_service_is_refused_unless_it_encapsulates() {
        let mut c = Config::from_toml(&example6()).unwrap();
        c.services[1].backends[0].address = "10.0.1.9".parse().unwrap();
        let e = c.validate().unwrap_err();
        assert_eq!(e.path, "services[1].backends[0].address");
        assert_eq!(e.value, "10.0.1.9");
        assert!(e.allowed.contains("VIP's family") && e.allowed.contains("fd00::100") && e.allowed.contains("IPIP or GUE"), "{e}");
        // an IPv4 VIP with an IPv6 endpoint, the other way round
        let mut c = Config::from_toml(&example6()).unwrap();
        c.services[0].backends[0].address = "fd00:9::1".parse().unwrap();
        assert_eq!(c.validate().unwrap_err().path, "services[0].backends[0].address");
        // encapsulation may cross families (IPv4 VIP over an IPv6 underlay and the reverse)
        for mode in [ForwardingMode::IPIP, ForwardingMode::GUE] {
            c.services[0].forwarding_mode = mode;
            c.validate().unwrap();
        }
    }

    #[test]
    fn ipv6_port_and_prefix_errors_name_the_field() {
        let mut c = Config::from_toml(&example6()).unwrap();
        c.ports[0].address = Some("fd00::3".parse().unwrap());
        let e = c.validate().unwrap_err();
        assert_eq!(e.path, "ports[0].address6");
        let mut c = Config::from_toml(&example6()).unwrap();
        c.ports[0].address6 = Some("ff02::1".parse().unwrap());
        assert_eq!(c.validate().unwrap_err().path, "ports[0].address6");
        for bad in ["::1", "::ffff:10.30.0.2"] {
            c.ports[0].address6 = Some(bad.parse().unwrap());
            assert_eq!(c.validate().unwrap_err().path, "ports[0].address6", "{bad}");
        }
        let e = Config::from_toml(&example6().replace("fd01::/64", "fd01::1/64")).unwrap_err();
        assert!(e.contains("host bits") && e.contains("fd01::/64"), "{e}");
        let e = Config::from_toml(&example6().replace("\"fd00::100\"", "\"fd00::zz\"")).unwrap_err();
        assert!(e.contains("vip"), "{e}");
        let mut c = Config::from_toml(&example6()).unwrap();
        c.services[1].vip = "ff02::1".parse().unwrap();
        assert_eq!(c.validate().unwrap_err().path, "services[1].vip");
    }

    fn with<F: FnOnce(&mut Config)>(f: F) -> ConfigError {
        let mut c = Config::from_toml(EXAMPLE).unwrap();
        f(&mut c);
        c.validate().unwrap_err()
    }

    #[test]
    fn ranges_name_field_value_and_rule() {
        let e = with(|c| c.services[0].spillover_ratio = Some(1.5));
        assert_eq!(e.path, "services[0].spillover_ratio");
        assert_eq!(e.field(), "spillover_ratio");
        assert!(e.to_string().contains("1.5") && e.to_string().contains("[0.0, 1.0]"), "{e}");
        assert_eq!(with(|c| c.services[0].failover_ratio = Some(-0.1)).field(), "failover_ratio");
        assert_eq!(with(|c| c.services[0].failover_health_threshold = Some(100)).field(), "failover_health_threshold");
        assert_eq!(with(|c| c.services[0].failover_health_threshold = Some(0)).field(), "failover_health_threshold");
        assert_eq!(with(|c| c.services[0].backends[0].weight = 0).field(), "weight");
        assert_eq!(with(|c| c.services[0].backends[0].weight = 1001).field(), "weight");
        assert_eq!(with(|c| c.services[0].backends[0].priority = 6).field(), "priority");
        assert_eq!(with(|c| c.services[0].backends[0].priority = 0).field(), "priority");
        assert_eq!(with(|c| c.services[0].backends[0].capacity_scaler = 0.05).field(), "capacity_scaler");
        assert_eq!(with(|c| c.services[0].backends[0].capacity_scaler = 1.01).field(), "capacity_scaler");
        assert_eq!(with(|c| c.services[0].maglev_table_size = 65536).field(), "maglev_table_size");
        let e = with(|c| {
            c.services[0].health_check = Some(HealthCheck { timeout_sec: 6.0, ..Default::default() })
        });
        assert_eq!(e.path, "services[0].health_check.timeout_sec");
        assert_eq!(with(|c| c.services[0].idle_timeout_sec = Some(599)).field(), "idle_timeout_sec");
    }

    #[test]
    fn boundaries_are_inclusive() {
        let mut c = Config::from_toml(EXAMPLE).unwrap();
        for (r, t, w, p, s) in [(0.0, 1, 1, 1, 0.0), (1.0, 99, 1000, 5, 0.1), (0.5, 70, 50, 3, 1.0)] {
            c.services[0].spillover_ratio = Some(r);
            c.services[0].failover_ratio = Some(r);
            c.services[0].failover_health_threshold = Some(t);
            c.services[0].backends[0].weight = w;
            c.services[0].backends[0].priority = p;
            c.services[0].backends[0].capacity_scaler = s;
            c.validate().unwrap();
        }
        c.services[0].health_check = Some(HealthCheck { timeout_sec: 5.0, check_interval_sec: 5.0, ..Default::default() });
        c.validate().unwrap();
    }

    #[test]
    fn duplicates_and_references() {
        let e = with(|c| {
            let b = c.services[0].backends[0].clone();
            c.services[0].backends.push(b)
        });
        assert_eq!(e.path, "services[0].backends[1].name");
        let e = with(|c| c.ports[0].forward_to = Some("nope".into()));
        assert_eq!(e.path, "ports[0].forward_to");
        let e = with(|c| {
            let mut s = c.services[0].clone();
            s.name = "web2".into();
            c.services.push(s)
        });
        assert_eq!(e.path, "services[1].vip");
    }

    #[test]
    fn zones_port_and_mac_are_checked() {
        let e = with(|c| c.services[0].backends[0].zone = "z9".into());
        assert_eq!(e.path, "services[0].backends[0].zone");
        assert!(e.allowed.contains("z1"), "{e}");
        let e = with(|c| c.client_zones[0].zone = Some("zz".into()));
        assert_eq!(e.path, "client_zones[0].zone");
        assert_eq!(with(|c| c.services[0].port = 0).field(), "port");
        assert_eq!(with(|c| c.services[0].backends[0].mac = Some(crate::net::MacAddr::BROADCAST)).field(), "mac");
        assert!(with(|c| c.services[0].backends[0].weight = 0).allowed.contains("enabled = false"));
        assert!(!with(|c| c.services[0].backends[0].weight = 1001).allowed.contains("enabled = false"));
    }

    /// Two ports with one MAC or one address, and a backend or endpoint MAC that is a
    /// port's own, are refused, naming both fields (fresh-user QA: `spillway --check`
    /// passed all three).
    #[test]
    fn ports_have_their_own_macs_and_addresses() {
        let mac = |s: &str| Some(s.parse::<crate::net::MacAddr>().unwrap());
        let two_ports = |c: &mut Config| {
            c.ports[0].mac = mac("02:00:00:00:00:01");
            c.ports[0].address = Some("10.0.0.1".parse().unwrap());
            let mut p = c.ports[0].clone();
            (p.name, p.device, p.mac, p.address) = ("p1".into(), "net_null1".into(), mac("02:00:00:00:00:02"), Some("10.0.0.2".parse().unwrap()));
            c.ports.push(p);
        };
        let mut c = Config::from_toml(EXAMPLE).unwrap();
        two_ports(&mut c);
        c.validate().unwrap();
        // two ports may share a MAC (different segments: two-armed), and a link-local
        // IPv6 address (per link, RFC 4291 §2.5.6)
        let mut c = Config::from_toml(EXAMPLE).unwrap();
        two_ports(&mut c);
        c.ports[1].mac = mac("02:00:00:00:00:01");
        (c.ports[0].address6, c.ports[1].address6) = (Some("fe80::1".parse().unwrap()), Some("fe80::1".parse().unwrap()));
        c.validate().unwrap();
        let e = with(|c| {
            two_ports(c);
            c.ports[1].address = Some("10.0.0.1".parse().unwrap());
        });
        assert!(e.to_string().starts_with("ports[1].address = 10.0.0.1: same as ports[0].address: each port needs its own address"), "{e}");
        // IPv6: one port's address6 is another's address
        let e = with(|c| {
            two_ports(c);
            c.ports[0].address6 = Some("fd00::1".parse().unwrap());
            c.ports[1].address = Some("fd00::1".parse().unwrap());
        });
        assert!(e.to_string().starts_with("ports[1].address = fd00::1: same as ports[0].address6"), "{e}");
        // a backend's MAC, and a group endpoint's, that is a port's own
        let e = with(|c| {
            two_ports(c);
            c.services[0].backends[0].mac = mac("02:00:00:00:00:02");
        });
        assert!(e.to_string().starts_with("services[0].backends[0].mac = 02:00:00:00:00:02: same as ports[1].mac: a backend's MAC must not be a port's own"), "{e}");
        let mut c = Config::from_toml(&format!("{EXAMPLE}{GROUP}")).unwrap();
        c.ports[0].mac = mac("02:00:00:00:02:01");
        let e = c.validate().unwrap_err();
        assert_eq!((e.path.as_str(), e.allowed.split(':').next().unwrap()), ("services[0].backends[1].endpoints[0].mac", "same as ports[0].mac"));
        // without a port `mac` (the device's own is used) there is nothing to compare here
        c.ports[0].mac = None;
        c.validate().unwrap();
    }

    const GROUP: &str = r#"
[[services.backends]]
name = "g1"
zone = "z1"
weight = 100

[[services.backends.endpoints]]
name = "e1"
address = "10.0.2.1"
mac = "02:00:00:00:02:01"

[[services.backends.endpoints]]
address = "10.0.2.2"
weight = 150
enabled = false
"#;

    #[test]
    fn groups_parse_round_trip_and_resolve_members() {
        let c = Config::from_toml(&format!("{EXAMPLE}{GROUP}")).unwrap();
        c.validate().unwrap();
        let g = &c.services[0].backends[1];
        assert!(g.is_group() && !c.services[0].backends[0].is_group());
        let m = g.members();
        assert_eq!(m.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(), ["e1", "10.0.2.2"]);
        assert_eq!((m[0].weight, m[1].weight, m[0].enabled, m[1].enabled), (50, 150, true, false));
        assert_eq!(g.endpoint_index("10.0.2.2"), Some(1));
        // the single-endpoint form is one endpoint named like the backend
        let one = c.services[0].backends[0].members();
        assert_eq!((one.len(), one[0].name.as_str(), one[0].address), (1, "b1", "10.0.1.1".parse().unwrap()));
        assert_eq!(Config::from_toml(&c.to_toml()).unwrap(), c);
        // borrowed, the same members in the same order (a named endpoint's name borrowed)
        for b in &c.services[0].backends {
            assert_eq!(b.member_refs().map(|m| m.to_member()).collect::<Vec<_>>(), b.members());
        }
        assert!(matches!(g.member_refs().next().unwrap().name, std::borrow::Cow::Borrowed("e1")));
    }

    #[test]
    fn group_errors_name_the_endpoint_field() {
        let grouped = || {
            let mut c = Config::from_toml(&format!("{EXAMPLE}{GROUP}")).unwrap();
            c.services[0].backends.remove(0);
            c
        };
        let err = |f: &dyn Fn(&mut Config)| {
            let mut c = grouped();
            f(&mut c);
            c.validate().unwrap_err()
        };
        let e = err(&|c| c.services[0].backends[0].endpoints[1].address = "10.0.2.1".parse().unwrap());
        assert_eq!(e.path, "services[0].backends[0].endpoints[1].address");
        assert!(e.allowed.contains("unique within the service") && e.allowed.contains("endpoints[0]"), "{e}");
        let e = err(&|c| c.services[0].backends[0].endpoints[1].name = Some("e1".into()));
        assert_eq!(e.path, "services[0].backends[0].endpoints[1].name");
        let e = err(&|c| c.services[0].backends[0].endpoints[0].weight = 0);
        assert_eq!(e.path, "services[0].backends[0].endpoints[0].weight");
        assert!(e.allowed.contains("1..=1000") && e.allowed.contains("enabled = false"), "{e}");
        assert_eq!(err(&|c| c.services[0].backends[0].endpoints[0].weight = 1001).field(), "weight");
        let e = err(&|c| c.services[0].backends[0].address = "10.0.9.9".parse().unwrap());
        assert_eq!(e.path, "services[0].backends[0].address");
        let e = err(&|c| c.services[0].backends[0].endpoints[0].mac = Some(crate::net::MacAddr::BROADCAST));
        assert_eq!(e.path, "services[0].backends[0].endpoints[0].mac");
        let e = err(&|c| c.services[0].backends[0].endpoints[0].address = Ipv4Addr::UNSPECIFIED.into());
        assert_eq!(e.path, "services[0].backends[0].endpoints[0].address");
        // a single-endpoint backend's address clashes with a group's endpoint too
        let e = with(|c| {
            let mut g = Backend::new("g2", "z1");
            g.endpoints.push(Endpoint::new(Some("x"), "10.0.1.1".parse::<IpAddr>().unwrap()));
            c.services[0].backends.push(g);
        });
        assert_eq!(e.path, "services[0].backends[1].endpoints[0].address");
        // parse-time range error names the path
        let bad = format!("{EXAMPLE}{}", GROUP.replace("weight = 150", "weight = -3"));
        let e = Config::from_toml(&bad).unwrap_err();
        assert!(e.contains("endpoints[1].weight = -3") && e.contains("1..=1000"), "{e}");
    }

    #[test]
    fn primes() {
        assert!(is_prime(65537) && is_prime(251) && !is_prime(65536) && !is_prime(1) && is_prime(2));
    }

/// The `[[...]]` indices of a parser error's path are counted from the headers before it:
/// nested arrays from their parent's last header, comments and spaces in headers allowed,
/// a UTF-8 BOM before the first header, `[]` kept when nothing can be counted (review).
#[test]
fn indexed_path_counts_the_headers_before_the_error() {
    let text = "\u{feff}[[services]]\nname = \"a\"\n[[ services.backends ]] # b\nname = \"x\"\n[[services]]\nname = \"b\"\n[[services.backends]]\nname = \"y\"\n[[services.backends]]\nweight = 9\n";
    let at = text.find("weight").unwrap() + 9;
    assert_eq!(indexed_path(text, at, "services[].backends[].weight"), "services[1].backends[1].weight");
    let at = text.find("name = \"x\"").unwrap();
    assert_eq!(indexed_path(text, at, "services[].backends[].name"), "services[0].backends[0].name");
    assert_eq!(indexed_path("services = [{ port = 1 }]", 20, "services[].port"), "services[].port");
    assert_eq!(indexed_path(text, usize::MAX, "dataplane.workers"), "dataplane.workers");
    assert_eq!(line_value("a = 1\nport = 99999999999999999999 # x\n", 12).as_deref(), Some("99999999999999999999"));
    assert_eq!(line_value("port =\n", 6), None);
}

/// Line and column are 1-based, columns count characters, and offsets past the end or
/// inside a character clamp (every config error's position, `config apply`'s too).
#[test]
fn line_col_counts_lines_and_characters() {
    let t = "a = 1\nbé = [\n";
    assert_eq!(line_col(t, 0), (1, 1));
    assert_eq!(line_col(t, 4), (1, 5));
    assert_eq!(line_col(t, 6), (2, 1));
    assert_eq!(line_col(t, 9), (2, 3), "é is one column");
    assert_eq!(line_col(t, 8), (2, 2), "inside é clamps to its start");
    assert_eq!(line_col(t, 999), (3, 1));
    assert_eq!(line_col("", 5), (1, 1));
}

/// A JSON file given as the config is named as not TOML, with the parser's own words and
/// where (fresh-user QA: it answered a bare "invalid key").
#[test]
fn json_is_named_as_not_toml() {
    let e = Config::from_toml("\n  {\"services\": []}\n").unwrap_err();
    assert!(e.starts_with("not a TOML document: it starts with '{' (JSON?)") && e.ends_with("(line 2, column 3)"), "{e}");
    // a TOML syntax error elsewhere keeps its own message
    let e = Config::from_toml("services = [").unwrap_err();
    assert!(!e.contains("JSON"), "{e}");
}

/// An integer beyond 64 bits for a key several tables have (`port`, `weight`) names its
/// field path and range from the table it is in, like one whose key is unique
/// (`capacity_per_worker`) (QA: `port = 99999999999999999999` in a service gave neither).
#[test]
fn a_huge_integer_in_a_table_names_its_path_and_range() {
    let base = "[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\naddress = \"10.0.0.2\"\n[[services]]\nname = \"web\"\nvip = \"10.0.0.100\"\nport = PORT\n[[services.backends]]\nname = \"b1\"\naddress = \"10.0.1.1\"\nweight = WEIGHT\n";
    let e = Config::from_toml(&base.replace("PORT", "99999999999999999999").replace("WEIGHT", "1")).unwrap_err();
    assert!(e.starts_with("services[0].port = 99999999999999999999: number too large to fit in target type; must be in 1..=65535"), "{e}");
    let e = Config::from_toml(&base.replace("PORT", "80").replace("WEIGHT", "99999999999999999999")).unwrap_err();
    assert!(e.starts_with("services[0].backends[0].weight = 99999999999999999999: number too large to fit in target type; must be in 1..=1000"), "{e}");
}

/// `validate_edit` of an edit of a valid config gives `validate`'s answer: an error in the
/// changed service, a rule across services broken by the changed one (a VIP taken, a
/// backend at another service's VIP), and a zone removed that an unchanged service's
/// backend names (zones changed: its backends are checked again).
#[test]
fn validate_edit_answers_as_validate() {
    let two = |bname: &str, vip2: &str, addr2: &str, zones: &str| {
        Config::from_toml(&format!(
            "[[ports]]\nname = \"p0\"\ndevice = \"net_null0\"\n{zones}\
             [[services]]\nname = \"a\"\nvip = \"10.0.0.1\"\nport = 80\n[[services.backends]]\nname = \"b\"\nzone = \"z1\"\naddress = \"10.1.0.1\"\nmac = \"02:00:00:00:00:01\"\n\
             [[services]]\nname = \"c\"\nvip = \"{vip2}\"\nport = 80\n[[services.backends]]\nname = \"{bname}\"\naddress = \"{addr2}\"\nmac = \"02:00:00:00:00:02\"\n"
        ))
        .unwrap()
    };
    let z = "[[zones]]\nzone = \"z1\"\nregion = \"r1\"\n";
    let running = two("b", "10.0.0.2", "10.1.0.2", z);
    running.validate().unwrap();
    for edit in [two("b2", "10.0.0.2", "10.1.0.2", z), two("b b", "10.0.0.2", "10.1.0.2", z), two("b", "10.0.0.1", "10.1.0.2", z), two("b", "10.0.0.2", "10.0.0.1", z), two("b", "10.0.0.2", "10.1.0.2", "[[zones]]\nzone = \"z2\"\nregion = \"r1\"\n")] {
        let changed: HashSet<String> = edit.services.iter().filter(|s| running.service(&s.name) != Some(*s)).map(|s| s.name.clone()).collect();
        let (a, b) = (edit.validate_edit(&running, &changed).map_err(|e| e.to_string()), edit.validate().map_err(|e| e.to_string()));
        assert_eq!(a, b);
    }
    assert!(two("b", "10.0.0.2", "10.1.0.2", "[[zones]]\nzone = \"z2\"\nregion = \"r1\"\n").validate_edit(&running, &HashSet::new()).is_err(), "the unchanged service's zone is gone");
}
