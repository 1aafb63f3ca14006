#!/usr/bin/env bash
# File-size rules of docs/architecture.md ("Layout"), over every Rust file git tracks:
# 1. A file over 600 lines says why in its top comment ("Over 600 lines: <why>" in its
#    first 40 lines).
# 2. No file over 800 lines outside a `tests/` directory, whatever its comment says.
# 3. A file under 60 lines named `<sibling>_<part>.rs` next to `<sibling>.rs` (or a
#    `<sibling>/` folder) is a piece split off another file to meet rule 1: merge it back
#    or put it in the sibling's folder, unless its top comment says why it stands alone
#    ("Stands alone: <why>" in its first 40 lines).
# Files listed in scripts/file-size-exceptions.txt (`PATH: reason`, one a line) are
# reported as known and do not fail; a listed file that no longer breaks a rule fails
# (remove its line), so the list only shrinks.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exceptions=scripts/file-size-exceptions.txt
declare -A known=()
if [[ -f $exceptions ]]; then
    while IFS= read -r line; do
        [[ -z $line || $line == \#* ]] && continue
        known[${line%%:*}]=${line#*: }
    done <"$exceptions"
fi
bad=0
declare -A seen=()
finding() { # FILE MESSAGE
    if [[ -n ${known[$1]+x} ]]; then
        seen[$1]=1
        echo "check-file-sizes: known: $1: $2 (${known[$1]})"
    else
        echo "check-file-sizes: $1: $2" >&2
        bad=1
    fi
}
while IFS= read -r f; do
    n=$(wc -l <"$f")
    if ((n > 800)) && [[ "/$f" != */tests/* ]]; then
        finding "$f" "$n lines: over the 800-line limit outside tests/ (split it by what its parts do)"
    elif ((n > 600)) && ! head -n 40 "$f" | grep -q "Over 600 lines"; then
        finding "$f" "$n lines and no 'Over 600 lines: <why>' in its top comment"
    fi
    if ((n < 60)); then
        dir=$(dirname "$f")
        base=$(basename "$f" .rs)
        prefix=$base
        while [[ $prefix == *_* ]]; do
            prefix=${prefix%_*}
            if [[ -f $dir/$prefix.rs || -d $dir/$prefix ]] && ! head -n 40 "$f" | grep -q "Stands alone"; then
                finding "$f" "$n lines split off $dir/$prefix: merge it back or move it into the folder, or say 'Stands alone: <why>' in its top comment"
                break
            fi
        done
    fi
done < <(git ls-files '*.rs')
for f in "${!known[@]}"; do
    if [[ -z ${seen[$f]+x} ]]; then
        echo "check-file-sizes: $exceptions lists $f, which breaks no rule now: remove its line" >&2
        bad=1
    fi
done
((bad == 0)) && echo "check-file-sizes: every Rust file is within 600 lines or says why, none is over 800 outside tests/, no small split file"
exit $bad
