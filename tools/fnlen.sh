#!/usr/bin/env bash
# fnlen.sh - the longest functions of carve's library (the folders that build
# libcarve.a and cli/, not tests/, bench/ nor fuzz/): one line a function,
# longest first: LINES FILE:LINE NAME.  A function's lines are its body's, from
# its opening brace to its closing one (each at column 0, as carve's style writes
# them), both included; FILE:LINE is where its signature starts.
# Usage: tools/fnlen.sh [N [FOLDER...]]   (N rows, default 20; default folders: the library's;
#        FNLEN_ROOT=DIR scans the tree at DIR instead of this one)
#        tools/fnlen.sh --over 60 [FOLDER...]   every function over 60 lines
set -u
cd "${FNLEN_ROOT:-$(dirname "$0")/..}"
over=0 most=20
if [ "${1:-}" = --over ]; then over=$2; most=1000000; shift 2
elif [ $# -gt 0 ]; then most=$1; shift; fi
[ $# -gt 0 ] || set -- ir onnx analysis cost search exec calib models autopart plan view session cli
find "$@" -name '*.c' ! -name '*.pb-c.c' | sort | xargs awk '
    FNR == 1 { sig = 0; inside = 0 }
    !inside && /^[A-Za-z_][A-Za-z0-9_ \t\*]*\(/ && !/;[ \t]*$/ && !/^(typedef|struct [a-z_]+ *\{|#)/ {
        sig = FNR; line = $0; sub(/\(.*/, "", line); n = split(line, w, /[ \t\*]+/); name = w[n]
    }
    !inside && sig && /^\{/ { inside = FNR }
    inside && /^\}/ { printf "%d %s:%d %s\n", FNR - inside + 1, FILENAME, sig, name; inside = 0; sig = 0 }
    !inside && sig && /;[ \t]*$/ && !/\(/ { sig = 0 }
' | sort -k1,1nr -k2,2 | awk -v over="$over" -v most="$most" '$1 > over && NR <= most'
