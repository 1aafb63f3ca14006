#!/usr/bin/env bash
# The file-size rule of docs/architecture.md ("Layout"), over every Rust file git tracks:
# no file over 800 lines outside tests (a `tests/` directory, or a test module's own file:
# `tests.rs`, `tests_*.rs`, `*_tests.rs`). Below that, what decides a split is a seam in
# what the code does, named by the folder it becomes, never a line count.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bad=0
while IFS= read -r f; do
    case "/$f" in
        */tests/* | */tests.rs | */tests_*.rs | */*_tests.rs) continue ;;
    esac
    n=$(wc -l <"$f")
    if ((n > 800)); then
        echo "check-file-sizes: $f: $n lines: over the 800-line limit outside tests (split it where what its parts do differs, into a folder named for it)" >&2
        bad=1
    fi
done < <(git ls-files '*.rs')
((bad == 0)) && echo "check-file-sizes: no Rust file is over 800 lines outside tests"
