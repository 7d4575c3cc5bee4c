#!/usr/bin/env bash
# run.sh - runs every benchmark program and writes BUILD_DIR/BENCHMARKS-run.md
# (never BENCHMARKS.md, whose first page and sections are kept by hand: copy
# the sections you mean to keep there, as its "Where new figures go" says).
#   bash bench/run.sh BUILD_DIR      (./build.sh bench calls it with "build")
# Each BUILD_DIR/bench/bench_* program prints its own markdown section on
# stdout (starting with a "## title" line); this script adds a header with the
# machine, the date and the commands, and collects the sections in name order.
# A new benchmark is a new bench/bench_*.c file: nothing to change here.
# Benchmarks never pass or fail on a time; a program that crashes gets a
# section saying so and makes this script exit non-zero at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=$build/BENCHMARKS-run.md
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

model=$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)
cores=$(nproc)
{
    echo "# carve benchmarks"
    echo
    echo "Written by \`./build.sh bench\` (bench/run.sh); every figure below comes from that one run."
    echo
    echo "- machine: ${model:-unknown CPU}, $cores cores, Linux $(uname -r)"
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "- commands: \`./build.sh bench\`, which runs:"
    for b in "$build"/bench/bench_*; do
        case "$b" in *.d|*.o) continue ;; esac
        [ -x "$b" ] && echo "  - \`$b\`"
    done
    echo
    echo "Machines are shared and noisy (10-25% between runs): compare figures within one run."
    echo
} >"$tmp"

status=0
for b in "$build"/bench/bench_*; do
    case "$b" in *.d|*.o) continue ;; esac
    [ -x "$b" ] || continue
    echo "bench: running $b" >&2
    log=$(mktemp)
    if "$b" >"$log" 2>&1; then
        cat "$log" >>"$tmp"
    else
        rc=$?
        { echo "## $(basename "$b")"; echo; echo "**failed with exit code $rc**; last lines:"; echo; echo '```';
          tail -n 20 "$log"; echo '```'; } >>"$tmp"
        status=1
    fi
    echo >>"$tmp"
    rm -f "$log"
done

mv "$tmp" "$out"
trap - EXIT
echo "bench: wrote $out" >&2
exit $status
