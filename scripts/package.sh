#!/usr/bin/env bash
# Builds the Debian package of Spillway with cargo-deb (metadata: [package.metadata.deb] in
# dataplane/Cargo.toml) and prints the path of the .deb on its last line:
#
#   scripts/package.sh        # -> $CARGO_TARGET_DIR/debian/spillway_<version>-1_<arch>.deb
#
# Steps: the release build of both binaries (a no-op when it is up to date, e.g. after
# scripts/test.sh's build step); cargo-deb $CARGO_DEB_VERSION, installed with
# `cargo install --locked` when missing or another version; the man pages and completions,
# written by the binaries themselves (`--generate-assets`, from their clap definitions)
# under $CARGO_TARGET_DIR/release/spillway-assets (man pages gzipped), and the Debian
# changelog; then `cargo deb --no-build --strip`. Needs dpkg-dev (dpkg-shlibdeps, for the
# librte-* dependencies) besides the build packages of the README. Honours CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CARGO_DEB_VERSION=3.8.0
log() { printf '[package %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
case "${1:-}" in
    "") ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "package.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
esac

if ! command -v cargo >/dev/null && [[ -x "${HOME:-/root}/.cargo/bin/cargo" ]]; then
    export PATH="${HOME:-/root}/.cargo/bin:$PATH"
fi
command -v cargo >/dev/null || { echo "package.sh: cargo not found; install Rust with rustup" >&2; exit 2; }
command -v dpkg-shlibdeps >/dev/null || { echo "package.sh: dpkg-shlibdeps not found: apt-get install dpkg-dev" >&2; exit 2; }

target=${CARGO_TARGET_DIR:-target}
[[ $target == /* ]] || target="$PWD/$target"
export CARGO_TARGET_DIR=$target

log "release build (cargo build --release -p spillway-dataplane -p spillway-ctl)"
cargo build --release -p spillway-dataplane -p spillway-ctl >&2

if [[ "$(cargo deb --version 2>/dev/null || true)" != *"$CARGO_DEB_VERSION"* ]]; then
    log "installing cargo-deb $CARGO_DEB_VERSION (cargo install --locked)"
    cargo install cargo-deb --version "=$CARGO_DEB_VERSION" --locked >&2
fi

assets="$target/release/spillway-assets"
log "man pages and completions from the clap definitions -> $assets"
rm -rf "$assets"
"$target/release/spillway" --generate-assets "$assets" >/dev/null
"$target/release/spillwayctl" --generate-assets "$assets" >/dev/null
# -n: no name or timestamp in the gzip header, so the same page gives the same bytes.
gzip -9n "$assets"/man/*
# The Debian changelog (/usr/share/doc/spillway/changelog.Debian.gz), written from the
# version and commit the binary reports, so it cannot fall behind Cargo.toml; the date is
# the commit's. Package revision 1: cargo-deb's default.
version=$("$target/release/spillway" --version)     # spillway 0.1.0 (abc1234)
ver=${version#spillway }; ver=${ver%% *}
commit=${version##*(}; commit=${commit%)}
when=$(git log -1 --format=%ct 2>/dev/null || date +%s)
maintainer=$(sed -n 's/^maintainer = "\(.*\)"$/\1/p' dataplane/Cargo.toml)
{
    echo "spillway ($ver-1) unstable; urgency=medium"
    echo
    echo "  * Spillway $ver, built from commit $commit with scripts/package.sh."
    echo
    echo " -- $maintainer  $(LC_ALL=C date -u -R -d "@$when")"
} | gzip -9n >"$assets/changelog.Debian.gz"

log "cargo deb -p spillway-dataplane --no-build --strip"
mkdir -p "$target/debian"
out=$(cargo deb -p spillway-dataplane --no-build --strip --output "$target/debian/" | tail -n 1)
[[ -f $out ]] || { echo "package.sh: cargo deb printed no package path (got: $out)" >&2; exit 1; }
log "built $out"
echo "$out"
