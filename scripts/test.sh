#!/usr/bin/env bash
# Spillway test suite (README command 2; .ci/run calls it).
#
#   sudo scripts/test.sh [--no-install] [--no-package] [--no-e2e]
#
# As root on Debian 12: installs the packages the tests need (apt-get), builds, then runs
#   0. clippy (-D warnings) and the 800-line limit (scripts/check-file-sizes.sh),
#   1. unit and property tests of every crate (shared: config, pipeline, scenarios, Maglev;
#      dataplane: packet, connection table, worker over in-memory ports; ctl),
#   2. DPDK integration tests: the `spillway` binary as a child process on net_ring /
#      net_pcap / net_null ports, output captures checked with etherparse,
#   3. the Debian package (scripts/lib/package_test.sh): built from the release build with
#      scripts/package.sh, lintian, installed with apt-get, checked, removed and purged,
#   4. the end-to-end tests in network namespaces (scripts/e2e.sh all): real HTTP clients
#      and servers through Spillway on a net_af_packet port, and (test `pci`, which installs
#      QEMU itself) on a PCI NIC bound with dpdk-devbind.py in a QEMU guest.
# Prints a closing line "N passed, N failed" and exits non-zero if anything failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

NO_INSTALL=0
NO_E2E=0
NO_PACKAGE=0
for a in "$@"; do
    case "$a" in
        --no-install) NO_INSTALL=1 ;;
        --no-e2e) NO_E2E=1 ;;
        --no-package) NO_PACKAGE=1 ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) echo "test.sh: unknown argument $a (see --help)" >&2; exit 2 ;;
    esac
done
log() { printf '[test %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

[[ $EUID -eq 0 ]] || { echo "test.sh: run as root (DPDK and network namespaces need it)" >&2; exit 2; }

PACKAGES=(libdpdk-dev dpdk dpdk-dev clang libclang-dev pkg-config iproute2 ethtool curl python3 tcpdump util-linux procps
          tmux  # e2e top: spillwayctl top in a real terminal (capture-pane)
          prometheus bird2  # prometheus: promtool + e2e scrape; bird2: e2e ecmp
          python3-pip       # pip: aioquic for the e2e test quic (below)
          dpkg-dev lintian man-db bash-completion systemd)  # the package step: dpkg-shlibdeps, checks
if [[ $NO_INSTALL == 0 ]]; then
    missing=()
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if ((${#missing[@]})); then
        log "installing: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q
        apt-get install -y -q --no-install-recommends "${missing[@]}"
    fi
    # The e2e test `quic` runs real QUIC clients and servers (aioquic) under the python the
    # e2e scripts use (scripts/lib/topology.sh: /usr/bin/python3); Debian has no package.
    if ! /usr/bin/python3 -c "import aioquic" 2>/dev/null; then
        log "installing aioquic (pip, for the e2e test quic)"
        /usr/bin/python3 -m pip install -q --break-system-packages "aioquic>=1.2,<2"
    fi
fi
if ! command -v cargo >/dev/null; then
    [[ -x "${HOME:-/root}/.cargo/bin/cargo" ]] && export PATH="${HOME:-/root}/.cargo/bin:$PATH"
fi
command -v cargo >/dev/null || { echo "test.sh: cargo not found; install Rust with rustup" >&2; exit 2; }
if ! cargo clippy --version >/dev/null 2>&1 && command -v rustup >/dev/null; then
    log "installing the clippy component (rustup component add clippy)"
    rustup component add clippy || true
fi

passed=0
failed=0
failures=()
step() {
    local name="$1"; shift
    log "== $name: $*"
    if "$@"; then
        passed=$((passed + 1)); log "-- ok: $name"
    else
        failed=$((failed + 1)); failures+=("$name"); log "-- FAILED: $name"
    fi
}

step build-release cargo build --release -p spillway-dataplane -p spillway-ctl
step clippy cargo clippy --workspace --all-targets -- -D warnings
step file-sizes scripts/check-file-sizes.sh
step layout python3 scripts/check-layout.py
step cargo-test cargo test --workspace --no-fail-fast
# each criterion bench once in test mode: its setup and loops must still run as measured
step bench-smoke cargo test -p spillway-benches --benches
step scenarios "${CARGO_TARGET_DIR:-target}/release/spillwayctl" scenario run shared/tests/cases/policy/*.json
if [[ $NO_PACKAGE == 0 ]]; then
    step package scripts/lib/package_test.sh
fi
if [[ $NO_E2E == 0 ]]; then
    step e2e scripts/e2e.sh all
fi

echo
if ((failed)); then log "failed steps: ${failures[*]}"; fi
echo "$passed passed, $failed failed"
((failed == 0))
