#!/usr/bin/env bash
# Fails when a Rust source file is over 600 lines without a top comment that says why
# ("Over 600 lines: ..." in its first 40 lines): the layout rule of docs/architecture.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bad=0
while IFS= read -r f; do
    n=$(wc -l <"$f")
    if ((n > 600)) && ! head -n 40 "$f" | grep -q "Over 600 lines"; then
        echo "check-file-sizes: $f has $n lines and no 'Over 600 lines: <why>' in its top comment" >&2
        bad=1
    fi
done < <(git ls-files '*.rs')
((bad == 0)) && echo "check-file-sizes: every Rust file is within 600 lines or says why"
exit $bad
