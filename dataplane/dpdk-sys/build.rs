//! Build script for dpdk-sys.
//!
//! 1. Finds the system DPDK with pkg-config (`libdpdk`, ≥ 22.11, shared libraries).
//! 2. Links pkg-config's library list as shared libraries (rustc links `--as-needed`) and
//!    publishes the four the bindings rely on (`rte_ethdev`, `rte_mbuf`, `rte_mempool`,
//!    `rte_eal`) as `DEP_DPDK_CORE_LIBS`, which `spillway-dataplane`'s build script forces
//!    with `-Wl,--no-as-needed` so they are always DT_NEEDED. Debian's `.pc` puts
//!    `-Wl,--as-needed` in `Libs`; we do not forward it (rustc already links as-needed) and
//!    PMDs (`librte_net_*`) are never linked: Debian's EAL `dlopen`s them from its driver
//!    directory (`RTE_EAL_PMD_PATH`) at `rte_eal_init`.
//! 3. Compiles `shim/shim.c` (static inline fast path) with pkg-config's cflags.
//! 4. Runs bindgen over `shim/wrapper.h` with a narrow allowlist.

use std::env;
use std::path::PathBuf;
use std::process::Command;

/// Libraries that must be DT_NEEDED even if a given binary references none of their symbols.
const CORE_LIBS: &[&str] = &["rte_ethdev", "rte_mbuf", "rte_mempool", "rte_eal"];

fn main() {
    println!("cargo:rerun-if-changed=shim/shim.c");
    println!("cargo:rerun-if-changed=shim/shim.h");
    println!("cargo:rerun-if-changed=shim/wrapper.h");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    let lib = pkg_config::Config::new()
        .atleast_version("22.11")
        .cargo_metadata(false)
        .statik(false)
        .probe("libdpdk")
        .unwrap_or_else(|e| {
            panic!(
                "dpdk-sys: libdpdk not found by pkg-config ({e}).\n\
                 Install DPDK 22.11 development files (Debian: apt-get install libdpdk-dev) \
                 or set PKG_CONFIG_PATH to the directory holding libdpdk.pc."
            )
        });

    // --- linking -------------------------------------------------------------------------
    for p in &lib.link_paths {
        println!("cargo:rustc-link-search=native={}", p.display());
    }
    for core in CORE_LIBS {
        assert!(
            lib.libs.iter().any(|l| l == core),
            "dpdk-sys: pkg-config libdpdk does not list lib{core}"
        );
        println!("cargo:rustc-link-lib=dylib={core}");
    }
    // `links = "dpdk"` metadata: dependents read DEP_DPDK_CORE_LIBS in their build script
    // and force these DT_NEEDED with `-Wl,--no-as-needed` (the `-as-needed` link modifier
    // is nightly-only, and `rustc-link-arg` does not propagate to dependents).
    println!("cargo:core_libs={}", CORE_LIBS.join(","));
    for l in &lib.libs {
        // Never link PMDs: EAL loads them at run time (a linked PMD would also be loaded
        // a second time from the driver directory).
        if CORE_LIBS.contains(&l.as_str()) || l.starts_with("rte_net_") {
            continue;
        }
        println!("cargo:rustc-link-lib=dylib={l}");
    }

    // --- cflags (for cc and clang) --------------------------------------------------------
    let pkg_config = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".into());
    let out = Command::new(&pkg_config)
        .args(["--cflags", "libdpdk"])
        .output()
        .expect("dpdk-sys: running pkg-config --cflags libdpdk");
    assert!(
        out.status.success(),
        "dpdk-sys: pkg-config --cflags libdpdk failed"
    );
    let cflags = split_cflags(&String::from_utf8_lossy(&out.stdout));

    // --- C shim -----------------------------------------------------------------------------
    let mut build = cc::Build::new();
    build
        .file("shim/shim.c")
        .include("shim")
        .warnings(true)
        .opt_level(3);
    for f in &cflags {
        build.flag(f);
    }
    build.compile("spillway_dpdk_shim");

    // --- bindgen ------------------------------------------------------------------------------
    let bindings = bindgen::Builder::default()
        .header("shim/wrapper.h")
        .clang_args(&cflags)
        .clang_arg("-Ishim")
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .clang_macro_fallback()
        // EAL / lcore / errno
        .allowlist_function("rte_eal_init")
        .allowlist_function("rte_eal_cleanup")
        .allowlist_function("rte_strerror")
        .allowlist_function("rte_thread_register")
        .allowlist_function("rte_thread_unregister")
        .allowlist_function("rte_socket_id")
        .allowlist_function("rte_lcore_count")
        // workers on EAL lcores (rte_thread_register disables multi-process)
        .allowlist_function("rte_eal_remote_launch")
        .allowlist_function("rte_eal_mp_wait_lcore")
        .allowlist_function("rte_get_next_lcore")
        .allowlist_function("rte_get_main_lcore")
        .allowlist_function("rte_eal_get_lcore_state")
        // mempool / mbuf
        .allowlist_function("rte_pktmbuf_pool_create")
        .allowlist_function("rte_mempool_free")
        .allowlist_function("rte_mempool_avail_count")
        .allowlist_function("rte_mempool_in_use_count")
        .allowlist_function("rte_pktmbuf_free_bulk")
        // ethdev
        .allowlist_function("rte_eth_dev_count_avail")
        .allowlist_function("rte_eth_dev_get_port_by_name")
        .allowlist_function("rte_eth_dev_get_name_by_port")
        .allowlist_function("rte_eth_find_next")
        .allowlist_function("rte_eth_dev_info_get")
        .allowlist_function("rte_eth_dev_configure")
        .allowlist_function("rte_eth_rx_queue_setup")
        .allowlist_function("rte_eth_tx_queue_setup")
        .allowlist_function("rte_eth_dev_start")
        .allowlist_function("rte_eth_dev_stop")
        .allowlist_function("rte_eth_dev_close")
        .allowlist_function("rte_eth_macaddr_get")
        .allowlist_function("rte_eth_dev_socket_id")
        .allowlist_function("rte_eth_promiscuous_enable")
        .allowlist_function("rte_eth_promiscuous_disable")
        .allowlist_function("rte_eth_allmulticast_enable")
        .allowlist_function("rte_eth_dev_set_mc_addr_list")
        .allowlist_function("rte_eth_stats_get")
        .allowlist_function("rte_eth_link_get_nowait")
        .allowlist_function("rte_eth_xstats_get")
        .allowlist_function("rte_eth_xstats_get_names")
        // packet capture framework (dpdk-dumpcap)
        .allowlist_function("rte_pdump_init")
        .allowlist_function("rte_pdump_uninit")
        .allowlist_function("rte_eth_dev_rss_hash_conf_get")
        .allowlist_function("rte_eth_dev_rss_reta_query")
        // shim
        .allowlist_function("spw_.*")
        .allowlist_var("SPW_.*")
        // types
        .allowlist_type("rte_mbuf")
        .allowlist_type("rte_mempool")
        .allowlist_type("rte_eth_conf")
        .allowlist_type("rte_eth_dev_info")
        .allowlist_type("rte_eth_stats")
        .allowlist_type("rte_eth_link")
        .allowlist_type("rte_eth_xstat")
        .allowlist_type("rte_eth_xstat_name")
        .allowlist_type("rte_eth_rss_reta_entry64")
        .allowlist_type("rte_ether_addr")
        .allowlist_type("rte_eth_rxconf")
        .allowlist_type("rte_eth_txconf")
        .allowlist_type("rte_eth_rx_mq_mode")
        .allowlist_type("rte_eth_tx_mq_mode")
        // constants
        .allowlist_var("RTE_MAX_ETHPORTS")
        .allowlist_var("RTE_MAX_LCORE")
        .allowlist_var("SOCKET_ID_ANY")
        .allowlist_var("LCORE_ID_ANY")
        .allowlist_var("RTE_MBUF_DEFAULT_BUF_SIZE")
        .allowlist_var("RTE_MBUF_DEFAULT_DATAROOM")
        .allowlist_var("RTE_PKTMBUF_HEADROOM")
        .allowlist_var("RTE_ETH_NAME_MAX_LEN")
        .allowlist_var("RTE_ETH_RSS_.*")
        .allowlist_var("RTE_ETH_LINK_.*")
        .allowlist_var("RTE_MEMPOOL_CACHE_MAX_SIZE")
        .derive_default(true)
        .layout_tests(true)
        .generate_comments(false)
        .generate()
        .expect("dpdk-sys: bindgen failed on shim/wrapper.h");

    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    bindings
        .write_to_file(out_dir.join("bindings.rs"))
        .expect("dpdk-sys: writing bindings.rs");
}

/// Splits pkg-config's `--cflags` output into compiler arguments, keeping `-include FILE`
/// pairs together and dropping linker-only `-Wl,` flags.
fn split_cflags(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = s.split_whitespace();
    while let Some(t) = it.next() {
        if t.starts_with("-Wl,") {
            continue;
        }
        if t == "-include" {
            if let Some(f) = it.next() {
                out.push("-include".into());
                out.push(f.into());
            }
            continue;
        }
        out.push(t.into());
    }
    out
}
