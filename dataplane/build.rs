//! Forces the core DPDK libraries to be DT_NEEDED by every binary of this package (daemon,
//! tests, examples), whether or not a given binary references their symbols: rustc links
//! shared libraries `--as-needed`, and the stable link modifiers cannot turn that off per
//! library. The list comes from dpdk-sys (`links = "dpdk"`, key `core_libs`).
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_DPDK_CORE_LIBS");
    if let Ok(libs) = std::env::var("DEP_DPDK_CORE_LIBS") {
        println!("cargo:rustc-link-arg=-Wl,--push-state,--no-as-needed");
        for l in libs.split(',').filter(|l| !l.is_empty()) {
            println!("cargo:rustc-link-arg=-l{l}");
        }
        println!("cargo:rustc-link-arg=-Wl,--pop-state");
    }
}
