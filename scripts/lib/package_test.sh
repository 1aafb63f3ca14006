#!/usr/bin/env bash
# The Debian package end to end (step "package" of scripts/test.sh), as root on Debian 12:
# builds it with scripts/package.sh (reusing the release build), runs lintian (no errors
# allowed), installs it with `apt-get install ./...deb`, checks what an operator relies on
# (files, conffile, man pages, bash completion, the unit, `--check` of the installed
# config, `--version`), then removes it (binaries gone, the edited conffile kept) and
# purges it (conffile gone). The package is purged on exit whatever happens.
# Refuses to run where a spillway package is already installed (it would replace it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
log() { printf '[package-test %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
fail() { echo "package-test: FAIL: $*" >&2; exit 1; }
# dpkg's two-letter state of the package: ii installed, rc removed with conffiles kept,
# un/pn (or nothing) unknown or purged.
state() { dpkg-query -W -f='${db:Status-Abbrev}' spillway 2>/dev/null | cut -c1-2 || true; }
present() { local s; s=$(state); [[ -n $s && $s != un && $s != pn ]]; }
export DEBIAN_FRONTEND=noninteractive

if present; then
    fail "a spillway package is already on this host (state $(state)); purge it first"
fi

deb=$(scripts/package.sh | tail -n 1)
[[ -f $deb ]] || fail "scripts/package.sh built no package"
log "package: $deb"

log "lintian"
lintian --fail-on error --display-info "$deb" || fail "lintian reports errors"

cleanup() {
    if present; then
        log "cleanup: apt-get purge spillway"
        apt-get purge -y -q -o DPkg::Lock::Timeout=300 spillway >/dev/null 2>&1 || dpkg --purge spillway >/dev/null 2>&1 || true
    fi
}
trap cleanup EXIT

# Hosts (container images) that keep man pages and docs out with dpkg path-exclude rules
# would not get ours: include them back for this package.
log "apt-get install $deb"
apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 \
    -o DPkg::Options::=--path-include='/usr/share/man/*/spillway*' \
    -o DPkg::Options::=--path-include='/usr/share/doc/spillway/*' \
    "$deb"
[[ $(state) == ii ]] || fail "spillway is not installed after apt-get install (state $(state))"

log "dpkg -L: the files"
files=$(dpkg -L spillway)
for f in /usr/bin/spillway /usr/bin/spillwayctl /usr/lib/systemd/system/spillway.service \
         /etc/spillway/spillway.toml /usr/share/doc/spillway/bird-spillway.conf \
         /usr/share/doc/spillway/copyright /usr/share/man/man8/spillway.8.gz \
         /usr/share/man/man1/spillwayctl.1.gz /usr/share/man/man1/spillwayctl-service.1.gz \
         /usr/share/bash-completion/completions/spillway /usr/share/bash-completion/completions/spillwayctl \
         /usr/share/zsh/vendor-completions/_spillway /usr/share/zsh/vendor-completions/_spillwayctl \
         /usr/share/fish/vendor_completions.d/spillway.fish /usr/share/fish/vendor_completions.d/spillwayctl.fish; do
    grep -qx "$f" <<<"$files" || fail "dpkg -L spillway lacks $f"
    [[ -e $f ]] || fail "$f is listed but not on disk"
done
if grep -q '^/run' <<<"$files"; then fail "the package ships /run (the unit's RuntimeDirectory= makes /run/spillway)"; fi
dpkg-query -W -f='${Conffiles}\n' spillway | grep -q '^ /etc/spillway/spillway.toml ' \
    || fail "/etc/spillway/spillway.toml is not a conffile"
[[ $(stat -c '%a %U:%G' /etc/spillway/spillway.toml) == "640 root:root" ]] \
    || fail "/etc/spillway/spillway.toml is $(stat -c '%a %U:%G' /etc/spillway/spillway.toml), not 640 root:root"
depends=$(dpkg-query -W -f='${Depends}' spillway)
for d in librte-eal23 librte-ethdev23 librte-mempool-ring23 dpdk; do
    grep -qE "(^|, )$d( |,|$)" <<<"$depends" || fail "Depends lacks $d: $depends"
done

log "man pages"
[[ $(man -w spillwayctl) == /usr/share/man/man1/spillwayctl.1.gz ]] || fail "man -w spillwayctl: $(man -w spillwayctl 2>&1)"
[[ $(man -w spillway) == /usr/share/man/man8/spillway.8.gz ]] || fail "man -w spillway: $(man -w spillway 2>&1)"
# One page per subcommand that --help lists (generated from the same definitions).
subs=$(spillwayctl --help | awk '/^Commands:/{on=1; next} on && /^  [a-z]/{print $1} on && /^$/{exit}' | grep -vx help)
[[ -n $subs ]] || fail "no subcommands in spillwayctl --help"
for s in $subs; do
    man -w "spillwayctl-$s" >/dev/null 2>&1 || fail "no man page spillwayctl-$s for the subcommand $s of --help"
done
warnings=$(LC_ALL=C.UTF-8 MANROFFSEQ='' MANWIDTH=80 man --warnings -E UTF-8 -l /usr/share/man/man1/spillwayctl.1.gz 2>&1 >/dev/null || true)
[[ -z $warnings ]] || fail "man --warnings spillwayctl: $warnings"

log "bash completion: spillwayctl ser<TAB>"
words=$(bash --norc --noprofile -c '
    source /usr/share/bash-completion/bash_completion
    __load_completion spillwayctl || exit 3
    fn=$(complete -p spillwayctl | sed -nE "s/.* -F ([^ ]+) .*/\1/p")
    [[ -n $fn ]] || exit 4
    COMP_WORDS=(spillwayctl ser); COMP_CWORD=1; COMP_LINE="spillwayctl ser"; COMP_POINT=${#COMP_LINE}
    "$fn" spillwayctl ser spillwayctl
    printf "%s\n" "${COMPREPLY[@]}"') || fail "bash completion did not load (rc $?)"
grep -qx service <<<"$words" || fail "spillwayctl ser<TAB> offers: $(tr '\n' ' ' <<<"$words")"

log "systemd-analyze verify /usr/lib/systemd/system/spillway.service"
out=$(systemd-analyze verify /usr/lib/systemd/system/spillway.service 2>&1) || fail "systemd-analyze verify: $out"
[[ -z $out ]] || fail "systemd-analyze verify: $out"
grep -q '^RuntimeDirectory=spillway$' /usr/lib/systemd/system/spillway.service || fail "the unit does not make /run/spillway"

log "installed binaries: --check of the installed config, --version"
/usr/bin/spillway --config /etc/spillway/spillway.toml --check || fail "spillway --check of /etc/spillway/spillway.toml"
for b in spillway spillwayctl; do
    v=$("/usr/bin/$b" --version)
    [[ $v =~ ^$b\ [0-9]+\.[0-9]+\.[0-9]+\ \(([0-9a-f]{7,}|unknown)\)$ ]] || fail "$b --version: $v"
    log "$v"
done

log "apt-get remove: binaries go, the edited conffile stays"
echo "# edited by the package test" >>/etc/spillway/spillway.toml
apt-get remove -y -q -o DPkg::Lock::Timeout=300 spillway >/dev/null
[[ ! -e /usr/bin/spillway && ! -e /usr/bin/spillwayctl ]] || fail "binaries left after remove"
[[ ! -e /usr/lib/systemd/system/spillway.service ]] || fail "unit left after remove"
grep -q '^# edited by the package test$' /etc/spillway/spillway.toml || fail "the edited conffile was not kept by remove"
[[ $(state) == rc ]] || fail "state after remove: $(state), not rc"

log "apt-get purge: the conffile goes"
apt-get purge -y -q -o DPkg::Lock::Timeout=300 spillway >/dev/null
[[ ! -e /etc/spillway/spillway.toml ]] || fail "/etc/spillway/spillway.toml left after purge"
[[ ! -e /etc/spillway ]] || fail "/etc/spillway left after purge"
if present; then fail "state after purge: $(state)"; fi
log "ok: built, lintian-clean, installed, checked, removed, purged"
