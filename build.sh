#!/usr/bin/env bash
# build.sh - builds carve, runs its tests and benchmarks.
#   ./build.sh          build build/carve and the test programs
#   ./build.sh test     build, then run every test (closing line: N passed, N failed)
#   ./build.sh asan     the same tests built with AddressSanitizer + UBSan (build-asan/)
#   ./build.sh bench    build, then run the benchmarks; they rewrite BENCHMARKS.md
#   ./build.sh clean    remove build outputs
# Missing Debian packages (libblis-dev, libcjson-dev) are installed with apt-get
# when run as root; otherwise the script says what to install.
set -euo pipefail
cd "$(dirname "$0")"
mode=${1:-build}

need_pkgs() {
    local missing=()
    [ -e /usr/include/x86_64-linux-gnu/blis.h ] || [ -e /usr/include/blis.h ] || [ -e /usr/include/blis/blis.h ] \
        || dpkg -s libblis-dev >/dev/null 2>&1 || missing+=(libblis-dev)
    [ -e /usr/include/cjson/cJSON.h ] || missing+=(libcjson-dev)
    command -v gcc >/dev/null 2>&1 || missing+=(gcc)
    command -v make >/dev/null 2>&1 || missing+=(make)
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

# One makefile, kept here so the build stays one short file.
run_make() { # $1 = output dir, $2 = extra CFLAGS, $3 = extra LDFLAGS
    make --no-print-directory -j"$(nproc)" -f - OUT="$1" EXTRA_CFLAGS="$2" EXTRA_LDFLAGS="$3" <<'MK'
MODULES := ir analysis cost search exec models plan cli
LIB_SRC := $(filter-out cli/main.c,$(foreach m,$(MODULES),$(wildcard $(m)/*.c)))
TEST_SRC := $(wildcard tests/test_*.c)
BENCH_SRC := $(wildcard bench/bench_*.c)
CFLAGS := -std=gnu11 -O2 -g -fopenmp -fno-math-errno -fno-trapping-math -Wall -Wextra -Werror -Wshadow -Wswitch-enum \
          -Wstrict-prototypes -Wmissing-prototypes -Wpointer-arith -Wformat=2 -Wvla \
          -Wno-unused-parameter -I. -Iir -MMD -MP $(EXTRA_CFLAGS)
LDLIBS := -lblis -lcjson -lm -fopenmp $(EXTRA_LDFLAGS)
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
# closing "N passed, N failed" lines.
run_tests() { # $1 = output dir
    local out=$1 total_p=0 total_f=0 status=0 t line p f
    export CARVE_BIN="$PWD/$out/carve" CARVE_ROOT="$PWD"
    for t in "$out"/tests/test_* tests/e2e_*.sh; do
        [ -e "$t" ] || continue
        case "$t" in *.d|*.o) continue ;; esac
        local log; log=$(mktemp)
        local start=$SECONDS
        if [[ "$t" == *.sh ]]; then bash "$t" >"$log" 2>&1 || status=1
        else "$t" >"$log" 2>&1 || status=1; fi
        line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1 || true)
        if [ -z "$line" ]; then
            echo "FAIL $(basename "$t"): no closing line (crashed?)"; tail -n 20 "$log"; status=1; total_f=$((total_f + 1))
        else
            p=${line%% passed*}; f=${line#*passed, }; f=${f%% failed*}
            total_p=$((total_p + p)); total_f=$((total_f + f))
            if [ "$f" != 0 ]; then echo "FAIL $(basename "$t"): $line"; grep -E 'check failed|error' "$log" | head -n 20; status=1
            else echo "ok   $(basename "$t"): $line ($((SECONDS - start))s)"; fi
        fi
        rm -f "$log"
    done
    echo "$total_p passed, $total_f failed"
    return $status
}

case "$mode" in
build)
    need_pkgs; run_make build "" "" ;;
test)
    need_pkgs; run_make build "" ""; run_tests build ;;
asan)
    need_pkgs
    run_make build-asan "-O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
        "-fsanitize=address,undefined"
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    CARVE_ASAN=1 run_tests build-asan ;;
bench)
    need_pkgs; run_make build "" ""; bash bench/run.sh build ;;
clean)
    rm -rf build build-asan ;;
*)
    echo "usage: ./build.sh [build|test|asan|bench|clean]" >&2; exit 2 ;;
esac
