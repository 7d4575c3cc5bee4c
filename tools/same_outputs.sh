#!/usr/bin/env bash
# same_outputs.sh - what a change that should move no plan and no price is
# checked against (issue 45: "byte-identical before and after"):
#   tools/same_outputs.sh record DIR [BUILD]   writes, from BUILD (default build/):
#     pricelog/plog.T    bench_search's price logs (CARVE_SEARCH_ONLY=1 CARVE_SEARCH_PRICELOG:
#                        every plan section 1 prices, in order, floats in %a; thread T); its
#                        stderr (bench.err) says how many lines of plog.0 the one-thread search
#                        wrote: those compare byte for byte, the two-thread search's (whose
#                        order depends on the threads' timing) by state hash
#     cost/N.json        `carve cost --json` of line N of tools/same_outputs.cost (the zoo's
#                        expert schedules, the memory level's and the pipelined ones; .rc and
#                        .err beside it), cost/cases.txt the lines
#     import/NAME*.      `carve import` of every ONNX fixture (tests/onnx/fixtures, regress):
#                        the graph file, with --weights too, stdout, stderr and the exit code
#     views/             what the renderers draw (view/): carve shard, cost (text and --json)
#                        and autopart (budget, seed and one thread: deterministic) of the
#                        schedules of views(), pipelined ones among them, then explain (text,
#                        --json), report --html and export --to jax/shardy/xla/torch of every
#                        plan autopart wrote and of tests/plans/
#     counts.txt         the grep counts of issue 45 (with the lines counted), from the tree
#                        (tools/same_outputs.sh counts [REV]: of the tree, or of a revision)
#     fnlen.txt          every function of the library, longest first (tools/fnlen.sh)
#     duplicates.txt     `duplicates --most 200` of the whole tree (when the tool is there;
#                        CARVE_SAME_NODUP=1 leaves it out)
#   tools/same_outputs.sh compare BEFORE AFTER
#     compares two such folders: the prices, imports and views must be equal byte
#     for byte (the views but for the search's timings and the folder they were written in) (a cost document that differs is compared again on BEFORE's keys only, so a
#     key added within carve-cost/1 is said apart from a changed price); exits 1 when
#     any differs.  The counts, the function lengths and the repeated code are shown
#     side by side, never judged.
# Run from anywhere; the cases run in a temporary folder.  Takes a few minutes.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)

record() { # $1 = output folder, $2 = build folder
    local out build carve n=0
    mkdir -p "$1" && out=$(cd "$1" && pwd)
    build=$(cd "${2:-$root/build}" && pwd) && carve=$build/carve
    [ -x "$carve" ] && [ -x "$build/bench/bench_search" ] || { echo "same_outputs: no $carve or bench_search: build first" >&2; return 2; }
    rm -rf "$out/pricelog" "$out/cost" "$out/import"
    mkdir -p "$out/pricelog" "$out/cost" "$out/import"
    (cd "$root" && git rev-parse HEAD 2>/dev/null; git -C "$root" status --short | head -20) >"$out/commit.txt"
    echo "same_outputs: price logs" >&2
    CARVE_SEARCH_ONLY=1 CARVE_SEARCH_PRICELOG="$out/pricelog/plog" "$build/bench/bench_search" >"$out/pricelog/bench.out" \
        2>"$out/pricelog/bench.err"
    echo "same_outputs: carve cost cases" >&2
    grep -v '^#' "$root/tools/same_outputs.cost" | grep . >"$out/cost/cases.txt"
    while read -r model mesh hw schedule extra; do
        n=$((n + 1))
        # shellcheck disable=SC2086
        "$carve" cost --model "$model" --mesh "$mesh" --hw "$hw" --schedule "$schedule" $extra --json \
            >"$out/cost/$n.json" 2>"$out/cost/$n.err"
        echo $? >"$out/cost/$n.rc"
    done <"$out/cost/cases.txt"
    echo "same_outputs: carve import of the fixtures" >&2
    (cd "$root" && for f in tests/onnx/fixtures/*.onnx tests/onnx/fixtures/*/*.onnx tests/onnx/regress/*.onnx; do
        local name opts=()
        name=$(echo "${f#tests/onnx/}" | tr / _); name=${name%.onnx}
        case "$f" in */dynamic/*) opts=(--dim batch=4 --loss cross_entropy:logits) ;; esac
        "$carve" import "$f" "${opts[@]}" --out "$out/import/$name.json" >"$out/import/$name.out" 2>"$out/import/$name.err"
        echo $? >"$out/import/$name.rc"
        "$carve" import "$f" "${opts[@]}" --weights --out "$out/import/$name.weights.json" >/dev/null 2>&1
    done; sed -i "s#$out/#OUT/#g" "$out"/import/*.out "$out"/import/*.err)
    echo "same_outputs: the renderers' views" >&2
    views "$carve" "$out/views"
    counts >"$out/counts.txt"
    "$root/tools/fnlen.sh" 100000 >"$out/fnlen.txt"
    if [ -z "${CARVE_SAME_NODUP:-}" ] && command -v duplicates >/dev/null; then
        echo "same_outputs: duplicates" >&2
        (cd "$root" && duplicates --most 200 --seconds 300) >"$out/duplicates.txt"
    fi
    echo "same_outputs: recorded in $out ($n cost cases, $(ls "$out"/import/*.rc | wc -l) imports)" >&2
}

# The renderers' outputs of $1 (carve) into folder $2 (see the top).
views() {
    local carve=$1 out=$2 i=0 m x h s p n to
    rm -rf "$out" && mkdir -p "$out"
    while read -r m x h s; do
        i=$((i + 1))
        "$carve" shard --model "$m" --mesh "$x" --schedule "$s" >"$out/shard$i.txt" 2>&1
        "$carve" shard --model "$m" --mesh "$x" --schedule "$s" --json >"$out/shard$i.json" 2>&1
        "$carve" cost --model "$m" --mesh "$x" --hw "$h" --schedule "$s" >"$out/cost$i.txt" 2>&1
        "$carve" cost --model "$m" --mesh "$x" --hw "$h" --schedule "$s" --json >"$out/cost$i.json" 2>&1
        "$carve" autopart --model "$m" --mesh "$x" --hw "$h" --budget 60 --seed 1 --threads 1 --pipeline search --layouts none \
            --quiet --out "$out/ap$i.plan" >"$out/ap$i.txt" 2>&1
    done <<'CASES'
gpt-tiny batch=2,model=2 cpu dp:batch,megatron:model
gpt-tiny data=2,pipe=2 cpu dp:data,pipeline:pipe:4
gpt-tiny pipe=2,model=2 cpu pipeline:pipe:4:interleaved-2,megatron:model
gpt-tiny pipe=2 cpu pipeline:pipe:4:gpipe:2/0
llama-tiny data=2,model=2 cpu remat:full,zero3:data,megatron:model
gpt-1.3b pipe=4,data=2 a100 dp:data,pipeline:pipe:8:1f1b
CASES
    for p in "$out"/ap*.plan "$root"/tests/plans/*.json; do
        n=$(basename "${p%.*}")
        "$carve" explain "$p" >"$out/$n.explain.txt" 2>&1
        "$carve" explain "$p" --json >"$out/$n.explain.json" 2>&1
        "$carve" report "$p" --html "$out/$n.html" >"$out/$n.report.out" 2>&1
        for to in jax shardy xla torch; do "$carve" export "$p" --to $to >"$out/$n.$to" 2>&1; done
    done
    sed -i "s#$out/#OUT/#g" "$out"/*
}

# A view's file without what differs from run to run: the search's seconds
# and rates, the folder it was written in.
views_norm() { sed -E 's/[0-9.e+-]+ (s|plans\/s)\b/T \1/g; s/"(seconds|wall_s)":[[:space:]]*[0-9.e+-]+/"\1": T/g' "$1"; }

# The library's C (not tests/, bench/, fuzz/) at revision $rev (empty: the
# working tree), or only the paths named: lib_grep LABEL REGEX [PATHSPEC...]
lib_grep() {
    local label=$1 re=$2 spec=('*.c' '*.h') s; shift 2
    for s in "$@"; do [[ "$s" == :!* ]] || spec=(); done  # paths named: only those
    local lines; lines=$(cd "$root" && git grep -nE "$re" $rev -- "${spec[@]}" ':!tests' ':!bench' ':!fuzz' "$@" | sed "s/^$rev://")
    echo "$label: $(echo -n "$lines" | grep -c .) lines in $(echo -n "$lines" | cut -d: -f1 | sort -u | grep -c .) files"
    [ -n "$lines" ] && echo "$lines" | cut -c1-200 | sed 's/^/    /'
}

# Issue 45's counts, of the working tree or of revision $1 (the function
# lengths of a revision: its tree unpacked in a temporary folder).
counts() {
    local rev=${1:-} own=(':!analysis/pipeline*' ':!analysis/pipe_lower.c' ':!cost/pipeline*' ':!exec/spmd_pipe.c')
    # a condition (if, while, &&, ||, ?:) on whether a pipeline is there: piped, a pipe or pp
    # pointer or field, its program, as a truth value or against NULL (a ternary's condition: the
    # whole of it, not the right side of a comparison such as `x->pp < y->pp ? ...`)
    local b='!?([a-z_]+(->|\.))*(piped|pipe|pp)(\.prog)?'
    lib_grep "callers that branch on a pipeline (a condition on piped, ->pipe, pp; outside analysis/pipeline*, analysis/pipe_lower.c, cost/pipeline*, exec/spmd_pipe.c)" \
        "(\bif \(|\bwhile \(|&& *|\|\| *)$b *(\)|&&|\|\|)|(^ *|[(,?:&|] *|[^=!<>]= *|\breturn +)$b *\?|$b *[!=]= *NULL" "${own[@]}"
    lib_grep "lines naming 'piped' (the issue's word; same files left out)" '\bpiped\b' "${own[@]}"
    lib_grep "calls of a pipelined pricer, lowering or runtime by name (cost_price_pipelined, cost_estimate_pipeline, exec_pipe_new, session_run_open_pipe, autopart_pricer_set_pipeline; same files left out)" \
        '\b(cost_price_pipelined|cost_estimate_pipeline|exec_pipe_new|session_run_open_pipe|autopart_pricer_set_pipeline)\(' "${own[@]}"
    lib_grep "name-prefix tests on values (str*cmp/strstr of a value's name against a literal with a '/')" \
        '(strn?cmp|strstr)\((g->values\[[^]]*\]\.name|nm\b[^,]*|[a-z_]+->name)[^,]*, *"[^"]*/[^"]*"'
    lib_grep "tactic text spliced (strchr on tactics)" 'strchr\([a-z_>.-]*tactics'
    lib_grep "strcmp on op names in onnx/ emitters and folders (op, op_type; switch on op[0])" \
        '\bstrn?cmp\((op|[a-z_]+->op_type)\b|switch \(op\[0\]\)' 'onnx/emit*.c' 'onnx/fold.c'
    lib_grep "strcmp on op names anywhere in onnx/ (op, op_type; switch on op[0])" \
        '\bstrn?cmp\((op|[a-z_]+->op_type)\b|switch \(op\[0\]\)' 'onnx/*.c'
    lib_grep "every strcmp in onnx/ emitters and folders" '\bstrcmp\(' 'onnx/emit*.c' 'onnx/fold.c'
    local tree=$root dir=""
    if [ -n "$rev" ]; then dir=$(mktemp -d) && (cd "$root" && git archive "$rev" | tar -x -C "$dir") && tree=$dir; fi
    echo "functions over 60 lines (tools/fnlen.sh --over 60): $(FNLEN_ROOT=$tree "$root/tools/fnlen.sh" --over 60 | wc -l); in cost/ and analysis/: $(FNLEN_ROOT=$tree "$root/tools/fnlen.sh" --over 60 cost analysis | wc -l)"
    FNLEN_ROOT=$tree "$root/tools/fnlen.sh" --over 60 | sed 's/^/    /'
    [ -z "$dir" ] || rm -rf "$dir"
}

# The price logs of $1 and $2: the one-thread search's lines byte for byte,
# every state hash both priced at the same price.  Prints what it found;
# returns 1 when they differ.
compare_pricelogs() {
    local a=$1 b=$2 n common differ
    n=$(sed -n 's/.*one-thread search logged \([0-9]*\) plans.*/\1/p' "$b/pricelog/bench.err" "$a/pricelog/bench.err" 2>/dev/null | head -1)
    [ -n "$n" ] || { echo "DIFFERS: pricelog: neither folder says how many plans the one-thread search logged"; return 1; }
    if ! cmp -s <(head -n "$n" "$a/pricelog/plog.0") <(head -n "$n" "$b/pricelog/plog.0"); then
        echo "DIFFERS: pricelog: the one-thread search's $n plans"; return 1
    fi
    common=$(comm -12 <(cut -d' ' -f1 "$a"/pricelog/plog.* | sort -u) <(cut -d' ' -f1 "$b"/pricelog/plog.* | sort -u))
    differ=$(diff <(sort -u "$a"/pricelog/plog.* | grep -Fwf <(echo "$common")) \
                  <(sort -u "$b"/pricelog/plog.* | grep -Fwf <(echo "$common")) | grep -c '^[<>]')
    echo "price logs: the one-thread search's $n plans equal byte for byte; $(echo "$common" | grep -c .) states priced by both" \
         "builds, $differ lines of them differ"
    [ "$differ" = 0 ]
}

compare() { # $1 = before, $2 = after
    local a=$1 b=$2 bad=0 same=0 keys=0 f rel
    compare_pricelogs "$a" "$b" || bad=$((bad + 1))
    for f in "$a"/cost/*.json "$a"/cost/*.rc "$a"/cost/*.err "$a"/import/*; do
        rel=${f#"$a"/}
        if cmp -s "$f" "$b/$rel"; then same=$((same + 1)); continue; fi
        if [[ "$rel" == cost/*.json ]] && [ -s "$f" ] && [ -s "$b/$rel" ] &&
            jq -e --slurpfile new "$b/$rel" '. as $old | [paths(scalars)] | all(. as $p | ($old | getpath($p)) == ($new[0] | getpath($p)))' \
                "$f" >/dev/null 2>&1 && [ "$(jq '[paths(scalars)] | length' "$f")" -le "$(jq '[paths(scalars)] | length' "$b/$rel")" ]; then
            keys=$((keys + 1)); echo "same on before's keys: $rel ($(sed -n "${rel//[^0-9]/}p" "$a/cost/cases.txt"))"; continue
        fi
        bad=$((bad + 1)); echo "DIFFERS: $rel$([[ "$rel" == cost/* ]] && echo " ($(sed -n "$(basename "$rel" | cut -d. -f1)p" "$a/cost/cases.txt"))")"
    done
    for f in "$a"/views/*; do
        [ -e "$f" ] || continue # (a folder recorded before the views were)
        rel=${f#"$a"/}
        if cmp -s "$f" "$b/$rel" || cmp -s <(views_norm "$f") <(views_norm "$b/$rel"); then same=$((same + 1)); continue; fi
        bad=$((bad + 1)); echo "DIFFERS: $rel"
    done
    echo "--- counts (before | after)"; diff -y -W 200 --suppress-common-lines <(grep -v '^    ' "$a/counts.txt") <(grep -v '^    ' "$b/counts.txt") || true
    echo "--- longest functions (before | after)"; paste -d'|' <(head -12 "$a/fnlen.txt") <(head -12 "$b/fnlen.txt") | column -t -s'|'
    [ -f "$a/duplicates.txt" ] && [ -f "$b/duplicates.txt" ] &&
        echo "--- duplicates: before: $(head -1 "$a/duplicates.txt"); after: $(head -1 "$b/duplicates.txt")"
    echo "$same equal byte for byte, $keys equal on before's keys, $bad differ (cost documents, imports, views; the price logs as above)"
    [ "$bad" = 0 ]
}

case "${1:-}" in
views) [ $# -eq 3 ] || { echo "usage: tools/same_outputs.sh views CARVE DIR" >&2; exit 2; }; views "$2" "$(mkdir -p "$3" && cd "$3" && pwd)" ;;
record) [ $# -ge 2 ] || { echo "usage: tools/same_outputs.sh record DIR [BUILD]" >&2; exit 2; }; record "$2" "${3:-}" ;;
compare) [ $# -eq 3 ] || { echo "usage: tools/same_outputs.sh compare BEFORE AFTER" >&2; exit 2; }; compare "$2" "$3" ;;
counts) counts "${2:-}" ;;
*) echo "usage: tools/same_outputs.sh record DIR [BUILD] | compare BEFORE AFTER | counts [REV] | views CARVE DIR" >&2; exit 2 ;;
esac
