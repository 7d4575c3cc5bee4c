#!/usr/bin/env bash
# build.sh - builds carve, runs its tests and benchmarks.
#   ./build.sh          build build/carve and the test programs
#   ./build.sh demo     build build/carve where needed, then plan GPT-1.3B over 8 A100s
#                       (carve autopart; the plan in build/plan-gpt-1.3b.json)
#   ./build.sh test     build, then run every test (closing line: N passed, N failed; and
#                       N skipped where a test could not run a check here); each test's
#                       line gives its wall and CPU seconds, the summary the framework
#                       tests' (PyTorch, JAX: "# carve-test: frameworks") apart
#   ./build.sh test-core        the same without the framework tests
#   ./build.sh test-frameworks  the framework tests alone
#   ./build.sh test-long [S]    every test in its long form (CARVE_TEST_LONG=1: the
#                       shortened scripts' full runs; the fuzz targets S seconds each,
#                       default 60)
#   ./build.sh asan     the same tests built with AddressSanitizer + UBSan (build-asan/)
#   ./build.sh bench    build, then run the benchmarks into build/BENCHMARKS-run.md (BENCHMARKS.md
#                       is kept by hand: its first page says where new figures go)
#   ./build.sh fuzz [S] build the libFuzzer targets in fuzz/ with clang (build-fuzz/) and run
#                       each for S seconds (default 60) on its corpus; `test` runs each briefly
#                       (tests/e2e_fuzz.sh)
#   ./build.sh clean    remove build outputs
# `test` and `asan` also make the Python virtual environment the framework tests
# run in (torch, JAX, onnx, transformers), pinned by tests/requirements.txt, in
# ${CARVE_VENV:-.venv} when it is missing or the file changed (see need_venv).
# Missing Debian packages (libblis-dev, libcjson-dev, libprotobuf-c-dev; openmpi-bin and
# libopenmpi-dev for the MPI backend, clang for the fuzz targets; chromium,
# libonnx-testdata and python3-torch/python3-onnx for `test`) are installed with apt-get when run as
# root; otherwise the script says what to install (and builds without MPI
# when only MPI is missing).  The tests fail closed: a missing or broken
# MPI, clang, chromium, ONNX test data or Debian's torch (python3-torch) is a failure, unless
# CARVE_TEST_WITHOUT names it (e.g.
# CARVE_TEST_WITHOUT=mpi,clang,chromium,onnx-testdata,python3-torch), which counts those checks as
# skipped in the closing line.
set -euo pipefail
cd "$(dirname "$0")"
mode=${1:-build}

need_pkgs() {
    local missing=()
    [ -e /usr/include/x86_64-linux-gnu/blis.h ] || [ -e /usr/include/blis.h ] || [ -e /usr/include/blis/blis.h ] \
        || dpkg -s libblis-dev >/dev/null 2>&1 || missing+=(libblis-dev)
    [ -e /usr/include/cjson/cJSON.h ] || missing+=(libcjson-dev)
    [ -e /usr/include/protobuf-c/protobuf-c.h ] || missing+=(libprotobuf-c-dev)
    command -v gcc >/dev/null 2>&1 || missing+=(gcc)
    command -v make >/dev/null 2>&1 || missing+=(make)
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        command -v mpirun >/dev/null 2>&1 || missing+=(openmpi-bin)
        [ -e /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ] || command -v mpicc >/dev/null 2>&1 || missing+=(libopenmpi-dev)
        [ -n "$(fuzz_cc)" ] || missing+=(clang)
        [ -z "$(fuzz_cc)" ] || clang_omp_ok || missing+=(libomp-dev)
    fi
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "build.sh: installing ${missing[*]}" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >&2 || true
        apt-get install -y -qq "${missing[@]}" >&2
    else
        echo "build.sh: missing packages: ${missing[*]}; install them with: sudo apt-get install -y ${missing[*]}" >&2
        exit 2
    fi
}

# The framework tests (PyTorch, JAX, onnx, transformers) run in a virtual
# environment made from tests/requirements.txt (every package pinned):
# ${CARVE_VENV:-.venv}, brought in step with the file when its hash changed
# (a stamp in the venv holds it).  CARVE_PYTHON is exported for the tests.
# Where it cannot be made (no network, no venv module), the tests that need it
# fail closed, unless CARVE_TEST_WITHOUT names torch and jax.
need_venv() {
    local venv=${CARVE_VENV:-$PWD/.venv} req=$PWD/tests/requirements.txt stamp
    stamp=$(sha256sum "$req" | cut -c1-16)
    if [ "$(cat "$venv/.carve-requirements" 2>/dev/null)" != "$stamp" ]; then
        echo "build.sh: installing the pinned Python test packages into $venv (torch, JAX, onnx, transformers: once, a few minutes)" >&2
        if { [ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2; } &&
            "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req" >&2; then
            echo "$stamp" >"$venv/.carve-requirements"
        else
            echo "build.sh: the Python test environment could not be made; the torch and JAX tests will fail (CARVE_TEST_WITHOUT=torch,jax to skip them)" >&2
            return 0
        fi
    fi
    export CARVE_PYTHON="$venv/bin/python"
}

# clang builds the fuzz targets with OpenMP: its omp.h comes with libomp-dev.
clang_omp_ok() {
    local cc; cc=$(fuzz_cc); [ -n "$cc" ] || return 1
    echo '#include <omp.h>' | "$cc" -fopenmp -x c -fsyntax-only - >/dev/null 2>&1
}

# The MPI backend (exec/spmd_mpi.c) is compiled in when mpicc and mpirun are
# there; its include directories come in as system headers (no -Werror noise).
mpi_flags() {
    MPI_CFLAGS="" MPI_LIBS=""
    if command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1; then
        MPI_CFLAGS="-DCARVE_MPI $(mpicc --showme:compile | sed 's/-I/-isystem /g')"
        MPI_LIBS="$(mpicc --showme:link)"
    fi
}

# Chromium renders the HTML report in tests/e2e_report.sh: installed when
# root (for `test` only: it is large); without it that test fails (unless
# CARVE_TEST_WITHOUT=chromium).
need_browser() {
    command -v chromium >/dev/null 2>&1 && return 0
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 0
    echo "build.sh: installing chromium (for tests/e2e_report.sh)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2 ||
        echo "build.sh: chromium could not be installed; tests/e2e_report.sh will fail" >&2
}

# The ONNX node tests (tests/test_onnx_nodes.c) read libonnx-testdata: installed
# when root, never fatal (the test says it skipped without it).
need_testdata() {
    [ -d /usr/share/libonnx-testdata/data/node ] && return 0
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 0
    echo "build.sh: installing libonnx-testdata (for tests/test_onnx_nodes.c)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libonnx-testdata >&2 ||
        echo "build.sh: libonnx-testdata not installed; tests/test_onnx_nodes.c will fail (CARVE_TEST_WITHOUT=onnx-testdata skips it)" >&2
}

# Debian's PyTorch 1.13 and onnx (python3-torch, python3-onnx) for /usr/bin/python3: tests/e2e_onnx.sh
# exports the fixtures again with them and checks the torch exports against the modules (torch 1.13 is
# what the committed fixtures were made with).  Installed when root; without them that test fails
# (unless CARVE_TEST_WITHOUT=python3-torch).
need_debian_torch() {
    /usr/bin/python3 -c 'import torch, onnx' >/dev/null 2>&1 && return 0
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 0
    echo "build.sh: installing python3-torch python3-onnx (for tests/e2e_onnx.sh)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch python3-onnx >&2 ||
        echo "build.sh: python3-torch not installed; tests/e2e_onnx.sh will fail (CARVE_TEST_WITHOUT=python3-torch skips its torch 1.13 checks)" >&2
}

# One makefile, kept here so the build stays one short file.
run_make() { # $1 = output dir, $2 = extra CFLAGS, $3 = extra LDFLAGS[, $4 = what to make (default: all)]
    mpi_flags
    mkdir -p "$1"
    # the MPI backend's object changes with MPI's presence: rebuild it when that changed
    if [ "$(cat "$1/.mpi-flags" 2>/dev/null)" != "$MPI_CFLAGS" ]; then
        rm -f "$1/obj/exec/spmd_mpi.o"; echo "$MPI_CFLAGS" >"$1/.mpi-flags"
    fi
    make --no-print-directory -j"$(nproc)" -f - OUT="$1" EXTRA_CFLAGS="$2 $MPI_CFLAGS" EXTRA_LDFLAGS="$3 $MPI_LIBS" ${4:-all} <<'MK'
MODULES := ir onnx analysis cost search exec calib models autopart plan view session cli
LIB_SRC := $(filter-out cli/main.c,$(foreach m,$(MODULES),$(wildcard $(m)/*.c)))
TEST_SRC := $(wildcard tests/test_*.c)
BENCH_SRC := $(wildcard bench/bench_*.c)
CFLAGS := -std=gnu11 -O2 -g -fopenmp -fno-math-errno -fno-trapping-math -Wall -Wextra -Werror -Wshadow -Wswitch-enum \
          -Wstrict-prototypes -Wmissing-prototypes -Wpointer-arith -Wformat=2 -Wvla \
          -Wno-unused-parameter -I. -Iir -MMD -MP $(EXTRA_CFLAGS)
LDLIBS := -lblis -lcjson -lprotobuf-c -lm -fopenmp $(EXTRA_LDFLAGS)
LIB_OBJ := $(patsubst %.c,$(OUT)/obj/%.o,$(LIB_SRC))
TESTS := $(patsubst tests/%.c,$(OUT)/tests/%,$(TEST_SRC))
BENCHES := $(patsubst bench/%.c,$(OUT)/bench/%,$(BENCH_SRC))
all: $(OUT)/carve $(TESTS) $(BENCHES)
.SECONDARY:
$(OUT)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  cc $<"
	@gcc $(CFLAGS) -c $< -o $@
$(OUT)/libcarve.a: $(LIB_OBJ)
	@rm -f $@
	@ar rcs $@ $^
$(OUT)/carve: $(OUT)/obj/cli/main.o $(OUT)/libcarve.a
	@echo "  ld $@"
	@gcc -o $@ $^ $(LDLIBS)
$(OUT)/tests/%: $(OUT)/obj/tests/%.o $(OUT)/libcarve.a
	@mkdir -p $(dir $@)
	@gcc -o $@ $^ $(LDLIBS)
$(OUT)/bench/%: $(OUT)/obj/bench/%.o $(OUT)/libcarve.a
	@mkdir -p $(dir $@)
	@gcc -o $@ $^ $(LDLIBS)
-include $(shell find $(OUT)/obj -name '*.d' 2>/dev/null)
MK
}

# Runs every test program and every tests/*.sh end-to-end script; sums their
# closing "N passed, N failed" lines (", N skipped" where any were skipped).
# A test without that line, or whose status is not 0, fails.  Each test's line
# gives its wall and CPU seconds (user + system of everything it ran); the
# closing lines add them up, the framework tests (PyTorch, JAX) apart.
# CARVE_TEST_SET picks the tests: all (default), core (all but the framework
# tests), frameworks (only them).  A framework test is a script or test
# source that holds the line "# carve-test: frameworks" (tests that import
# torch or jax: their own time is what they cost CI beyond the core suite).
is_framework_test() { # $1 = test program or script
    local src=$1
    [[ "$src" == *.sh ]] || src=tests/$(basename "$src").c
    grep -q '^\(#\|//\|/\*\) carve-test: frameworks' "$src" 2>/dev/null
}
cpu_now() { # CPU_NOW = user + system seconds of this shell's waited-for children so far
    times >"$CPU_TIMES" # in this shell, not a subshell: its second line is the children's "1m2.345s 0m0.678s"
    CPU_NOW=$(awk 'NR == 2 { split($0, a, /[ms ]+/); printf "%.1f", a[1] * 60 + a[2] + a[3] * 60 + a[4] }' "$CPU_TIMES")
}
minus() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", a - b }'; }
run_tests() { # $1 = output dir
    local out=$1 total_p=0 total_f=0 total_s=0 status=0 t line p f s set=${CARVE_TEST_SET:-all}
    local wall0=$SECONDS cpu0 fw_wall=0 fw_cpu=0 n_fw=0
    CPU_TIMES=$(mktemp); cpu_now; cpu0=$CPU_NOW
    case "$set" in all | core | frameworks) ;; *) echo "build.sh: CARVE_TEST_SET=$set: all, core or frameworks" >&2; return 2 ;; esac
    export CARVE_BIN="$PWD/$out/carve" CARVE_ROOT="$PWD"
    for t in "$out"/tests/test_* tests/e2e_*.sh; do
        [ -e "$t" ] || continue
        case "$t" in *.d|*.o) continue ;; esac
        local fw=0; is_framework_test "$t" && fw=1
        if { [ "$set" = core ] && [ $fw = 1 ]; } || { [ "$set" = frameworks ] && [ $fw = 0 ]; }; then continue; fi
        local log; log=$(mktemp)
        local start=$SECONDS rc=0 c0 secs cpu
        cpu_now; c0=$CPU_NOW
        if [[ "$t" == *.sh ]]; then bash "$t" >"$log" 2>&1 || rc=$?
        else "$t" >"$log" 2>&1 || rc=$?; fi
        secs=$((SECONDS - start)); cpu_now; cpu=$(minus "$CPU_NOW" "$c0")
        if [ $fw = 1 ]; then n_fw=$((n_fw + 1)); fw_wall=$((fw_wall + secs)); fw_cpu=$(minus "$fw_cpu" "-$cpu"); fi
        line=$(grep -E '^[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$' "$log" | tail -n 1 || true)
        if [ -z "$line" ]; then
            echo "FAIL $(basename "$t"): no closing line (crashed?) (${secs}s, ${cpu}s CPU)"; tail -n 20 "$log"; status=1; total_f=$((total_f + 1))
        else
            p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}; s=0
            [[ "$line" == *skipped ]] && { s=${line##*failed, }; s=${s%% skipped}; }
            total_p=$((total_p + p)); total_f=$((total_f + f)); total_s=$((total_s + s))
            if [ "$f" != 0 ] || [ "$rc" != 0 ]; then
                echo "FAIL $(basename "$t"): $line (exit $rc) (${secs}s, ${cpu}s CPU)"; grep -E '^FAIL|check failed|error' "$log" | head -n 20 || true; status=1
                [ "$f" = 0 ] && total_f=$((total_f + 1))
            else
                echo "ok   $(basename "$t"): $line (${secs}s, ${cpu}s CPU)"
                if [ "$s" != 0 ]; then grep -E '^skip ' "$log" | head -n 10 | sed 's/^/       /' || true; fi
            fi
        fi
        rm -f "$log"
    done
    cpu_now; rm -f "$CPU_TIMES"
    echo "tests ($set): $((SECONDS - wall0)) s wall, $(minus "$CPU_NOW" "$cpu0") s CPU;" \
        "of which the $n_fw framework tests (PyTorch, JAX): $fw_wall s wall, $fw_cpu s CPU"
    if [ "$total_s" -gt 0 ]; then echo "$total_p passed, $total_f failed, $total_s skipped"
    else echo "$total_p passed, $total_f failed"; fi
    return $status
}

# libFuzzer targets (fuzz/fuzz_*.c) built with clang on the whole library,
# instrumented for coverage, ASan and UBSan.  Nothing here runs without clang.
fuzz_cc() { command -v clang-14 || command -v clang || true; }
build_fuzz() { # $1 = output dir
    local cc; cc=$(fuzz_cc)
    make --no-print-directory -j"$(nproc)" -f - OUT="$1" CC="$cc" <<'MK'
# the readers and what they call (not exec/ nor the commands: a shorter build)
LIB_SRC := $(foreach m,ir onnx analysis cost search models plan,$(wildcard $(m)/*.c))
FUZZ_SRC := $(wildcard fuzz/fuzz_*.c)
SAN := -fsanitize=address,undefined -fno-sanitize-recover=all
CFLAGS := -std=gnu11 -O1 -g -fopenmp -fno-omit-frame-pointer -fsanitize=fuzzer-no-link $(SAN) -Wall -Wno-unused-parameter \
          -Wno-unknown-warning-option -I. -Iir -MMD -MP
LIB_OBJ := $(patsubst %.c,$(OUT)/obj/%.o,$(LIB_SRC))
TARGETS := $(patsubst fuzz/%.c,$(OUT)/%,$(FUZZ_SRC))
all: $(TARGETS)
.SECONDARY:
$(OUT)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  clang $<"
	@$(CC) $(CFLAGS) -c $< -o $@
$(OUT)/libcarve.a: $(LIB_OBJ)
	@rm -f $@
	@ar rcs $@ $^
$(OUT)/fuzz_%: $(OUT)/obj/fuzz/fuzz_%.o $(OUT)/libcarve.a
	@echo "  ld $@"
	@$(CC) -fsanitize=fuzzer $(SAN) -fopenmp -o $@ $^ -lblis -lcjson -lprotobuf-c -lm
-include $(shell find $(OUT)/obj -name '*.d' 2>/dev/null)
MK
}

# Seeds from the repo's own files: graphs, schedules, meshes and model specs
# from the tests and docs, the preset profiles, and a plan made by the build.
fuzz_seeds() { # $1 = seeds dir, $2 = built carve
    local s=$1 carve=$2 i=0 t
    mkdir -p "$s"/graph "$s"/plan "$s"/profile "$s"/schedule "$s"/mesh "$s"/model "$s"/onnx
    cp tests/graphs/*.json fuzz/seeds/graph/* "$s"/graph/ 2>/dev/null || true
    # ONNX: the small fixtures, the exports of the models people train (tests/onnx/hf: torch 2.13's
    # default and TorchScript exporters, torch 1.13's; the target reads up to 64 KiB), and the node
    # tests' one-op models when libonnx-testdata is there
    find tests/onnx/fixtures -name '*.onnx' -size -8k -exec cp {} "$s"/onnx/ \; 2>/dev/null || true
    find tests/onnx/hf -name '*.onnx' -size -64k -exec cp {} "$s"/onnx/ \; 2>/dev/null || true
    cp fuzz/seeds/onnx/*.onnx "$s"/onnx/ 2>/dev/null || true # torch 2.13's default exports, tiny (their metadata cut to the scopes)
    i=0; for t in /usr/share/libonnx-testdata/data/node/*/model.onnx; do
        [ -e "$t" ] || break; i=$((i + 1)); [ "$(stat -c %s "$t")" -lt 8192 ] && cp "$t" "$s/onnx/node$i.onnx"
    done
    cp fuzz/seeds/profile/* "$s"/profile/ 2>/dev/null || true
    # regression inputs of issue 43 (fuzz/seeds/onnx above: deep nesting, external data through
    # links and fifos, the folded constants' total); plans whose graph is a device or a pipe
    cp fuzz/seeds/plan/*.json "$s"/plan/ 2>/dev/null || true
    for t in fuzz/seeds/mesh fuzz/seeds/model; do
        i=0; while IFS= read -r line; do i=$((i + 1)); printf '%s' "$line" >"$s/${t##*/}/seed$i"; done <"$t.txt"
    done
    i=0; while IFS= read -r line; do # schedules: first byte 0 = text, 1 = JSON
        i=$((i + 1)); printf '0%s' "$line" >"$s/schedule/text$i"
        printf '1{"format":"carve-schedule/1","tactics":["%s"]}' "${line//,/\",\"}" >"$s/schedule/json$i"
    done <fuzz/seeds/schedule.txt
    if [ -x "$carve" ] && [ "$carve" -nt "$s/plan/gpt-tiny.json" ]; then # remade when carve changes
        "$carve" autopart --model gpt-tiny --mesh batch=2,model=2 --budget 20 --quiet --out "$s/plan/gpt-tiny.json" >/dev/null 2>&1 || true
        "$carve" autopart --graph tests/graphs/mlp-by-hand.json --mesh 2x2 --budget 20 --quiet --out "$s/plan/mlp.json" >/dev/null 2>&1 || true
    fi
}

# Runs every target for $2 seconds (each), corpus kept in $1/corpus/NAME.
# Prints one line per target with its executions; fails on any finding.
run_fuzz() { # $1 = fuzz build dir, $2 = seconds per target
    local out=$1 secs=$2 status=0 t name log execs total=0 jobs
    jobs=$(nproc)
    fuzz_seeds "$out/seeds" "${CARVE_BIN:-build/carve}"
    # the targets run side by side, as many at once as there are cores (each is one process);
    # then each one's result, in name order
    for t in "$out"/fuzz_*; do
        name=${t##*/fuzz_}
        mkdir -p "$out/corpus/$name" "$out/artifacts"
        while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
        # the ONNX and plan targets read up to 64 KB (a plan seed is 9-20 KB, the deep-nesting
        # ONNX one 44 KB); the others 8 KB
        { "$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
            -max_len=$(case $name in onnx | plan) echo 65536 ;; *) echo 8192 ;; esac) \
            -print_final_stats=1 -artifact_prefix="$out/artifacts/" \
            "$out/corpus/$name" "$out/seeds/$name" >"$out/$name.log" 2>&1; echo $? >"$out/$name.rc"; } &
    done
    wait
    for t in "$out"/fuzz_*; do
        name=${t##*/fuzz_} log="$out/${t##*/fuzz_}.log"
        if [ "$(cat "$out/$name.rc" 2>/dev/null)" = 0 ]; then
            execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}')
            total=$((total + ${execs:-0}))
            echo "fuzz $name: ${execs:-?} executions in ${secs}s, no finding"
        else
            status=1; echo "fuzz $name: FINDING (log: $log)"; grep -E 'ERROR|SUMMARY|assertion' "$log" | head -5
        fi
    done
    echo "fuzz total: $total executions"
    return $status
}


case "$mode" in
build)
    need_pkgs; run_make build "" "" ;;
demo) # the first command: carve built where needed, then a plan for GPT-1.3B over 8 A100s
    need_pkgs; run_make build "" "" build/carve
    demo_out=build/plan-gpt-1.3b.json
    echo "build.sh: build/carve autopart --model gpt-1.3b --mesh batch=4,model=2 --hw a100 --out $demo_out" >&2
    build/carve autopart --model gpt-1.3b --mesh batch=4,model=2 --hw a100 --out "$demo_out"
    echo
    echo "next: build/carve explain $demo_out; build/carve report $demo_out --html plan.html; ./build.sh test (README.md: the tour)" ;;
test | test-core | test-frameworks | test-long)
    need_pkgs; need_browser; need_testdata; need_debian_torch; need_venv; run_make build "" ""
    case "$mode" in
    test-core) export CARVE_TEST_SET=core ;;
    test-frameworks) export CARVE_TEST_SET=frameworks ;;
    test-long) # the long forms of the shortened scripts (CARVE_TEST_LONG=1), then the fuzz campaign
        export CARVE_TEST_LONG=1 CARVE_FUZZ_SMOKE_S=${2:-60} ;;
    esac
    run_tests build ;;
asan)
    need_pkgs; need_testdata; need_debian_torch; need_venv
    run_make build-asan "-O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
        "-fsanitize=address,undefined"
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    CARVE_ASAN=1 run_tests build-asan ;;
bench)
    need_pkgs; run_make build "" ""; bash bench/run.sh build ;;
fuzz)
    need_pkgs; run_make build "" ""
    [ -n "$(fuzz_cc)" ] || { echo "build.sh: fuzz needs clang (apt-get install -y clang-14)" >&2; exit 2; }
    clang_omp_ok || { echo "build.sh: fuzz needs clang's OpenMP header (apt-get install -y libomp-dev)" >&2; exit 2; }
    build_fuzz build-fuzz; run_fuzz build-fuzz "${2:-60}" ;;
fuzz-smoke) # what tests/e2e_fuzz.sh runs: each target CARVE_FUZZ_SMOKE_S seconds (default 1: libFuzzer runs every seed
    # first whatever the time, then mutates for what is left; test-long gives each 60 s)
    [ -n "$(fuzz_cc)" ] || { echo "build.sh: fuzz needs clang (apt-get install -y clang-14)" >&2; exit 2; }
    clang_omp_ok || { echo "build.sh: fuzz needs clang's OpenMP header (apt-get install -y libomp-dev)" >&2; exit 2; }
    build_fuzz build-fuzz; run_fuzz build-fuzz "${CARVE_FUZZ_SMOKE_S:-1}" ;;
clean)
    rm -rf build build-asan build-fuzz ;;
*)
    echo "usage: ./build.sh [build|demo|test|test-core|test-frameworks|test-long [FUZZ_SECONDS]|asan|bench|fuzz [SECONDS]|clean]" >&2
    exit 2 ;;
esac
