#!/usr/bin/env bash
# e2e_report.sh - `carve report PLAN --html FILE`: one self-contained page
# (no external resource), parsed by Python's HTML parser; then rendered in
# headless Chromium (Debian package chromium; build.sh installs it when root):
# the page's script ran to its end (body data-ready="1" in the DOM: a script
# error would stop it), and the screenshot (left in $CARVE_REPORT_OUT when set)
# is not blank.  A pipelined plan (autopart's, 4 stages where nothing else
# fits): its schedule picture checked by tests/report_pipeline.py against
# carve explain --json (a row per stage, each micro-batch's forward and
# backward once in the schedule's order, the hatched bubbles adding up to each
# stage's idle time), on the page as written and as Chromium rendered it, and
# the screenshot shows forward, backward and bubble colours.  Without Chromium (a component build.sh installs when run as
# root) the test fails; CARVE_TEST_WITHOUT=chromium makes that a skip.
# Closing line: N passed, N failed (, N skipped).
set -u
. "$(dirname "$0")/lib_e2e.sh"
e2e_start

"$carve" autopart --model gpt-tiny --mesh batch=2,model=2 --schedule dp:batch,megatron:model,zero3:batch,auto \
    --budget 5 --quiet --out plan.json >/dev/null 2>&1
"$carve" report plan.json --html plan.html >out.txt 2>err.txt; check "report runs" $?
grep -q "wrote plan.html" out.txt; check "report says what it wrote" $?
python3 - plan.html <<'PY'
import sys
from html.parser import HTMLParser
class P(HTMLParser):
    def __init__(self):
        super().__init__(); self.tags = {}; self.external = []
    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        for k, v in attrs:
            if k in ("src", "href") and v: self.external.append(v)
p = P(); p.feed(open(sys.argv[1]).read())
ok = p.tags.get("svg", 0) >= 10 and p.tags.get("script", 0) == 1 and not p.external and p.tags.get("title", 0) > 50
sys.exit(0 if ok else 1)
PY
check "self-contained page with SVG" $?
grep -q "forward: " plan.html && grep -q "all-gather{" plan.html && grep -q "memory per device" plan.html -i
check "timeline and memory sections" $?
# the search's best-so-far curve (the plan's search.curve): a section with its chart, one dot per better plan
python3 - plan.json plan.html <<'PY'
import json, re, sys
curve = json.load(open(sys.argv[1]))["search"]["curve"]
page = open(sys.argv[2]).read()
m = re.search(r'<h2>The search</h2>.*?<svg[^>]*data-curve="(\d+)"(.*?)</svg>', page, re.S)
ok = m and int(m.group(1)) == len(curve) >= 1 and "<polyline" in m.group(2) and m.group(2).count("<circle") == sum(p["fits"] for p in curve)
sys.exit(0 if ok else 1)
PY
check "the search's curve drawn (a dot per better plan that fits)" $?
"$carve" report "$root/tests/plans/v1-gpt-tiny.json" --html v1.html >/dev/null 2>&1 && ! grep -q "<h2>The search</h2>" v1.html &&
    grep -q "<h2>Shardings</h2>" v1.html
check "a plan without a curve (carve-plan/1): no search section" $?
# a pipelined plan: 4 stages over node (nothing else fits in 6 MB a device), its schedule drawn
"$carve" autopart --model gpt-tiny:layers=8 --mesh node=4,gpu=2 --hw a100 --pipeline search --budget 10 --memory 0.006 \
    --quiet --out pipe.json >/dev/null 2>&1
grep -q '"schedule":.*pipeline:node:4:' pipe.json; check "autopart chose 4 stages" $?
"$carve" report pipe.json --html pipe.html >out.txt 2>err.txt; check "report of a pipelined plan runs" $?
"$carve" explain pipe.json --json >pipe-explain.json 2>err.txt; check "explain --json of the pipelined plan" $?
python3 "$root/tests/report_pipeline.py" pipe.html pipe-explain.json; check "the schedule picture: stages, tasks in order, bubbles" $?
bad no-html "give a plan file and --html FILE" "$carve" report plan.json
bad missing-plan "cannot open plan" "$carve" report nothere.json --html x.html
bad out-missing-folder "nodir" "$carve" report plan.json --html nodir/x.html

browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
    missing chromium "the page rendered in Chromium" "chromium is not installed: the page was not rendered"
else
    flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,1600)
    timeout 120 "$browser" "${flags[@]}" --dump-dom "file://$tmp/plan.html" >dom.html 2>/dev/null
    grep -q 'data-ready="1"' dom.html; check "the page's script ran without errors (Chromium)" $?
    timeout 120 "$browser" "${flags[@]}" --screenshot="$tmp/plan.png" "file://$tmp/plan.html" >/dev/null 2>&1
    python3 - plan.png <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n"
pos, idat, w = 8, b"", 0
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    if kind == b"IHDR": w, h = struct.unpack(">II", data[pos + 8:pos + 16])
    if kind == b"IDAT": idat += data[pos + 8:pos + 8 + n]
    pos += 12 + n
raw = zlib.decompress(idat)
distinct = len(set(raw))
# a blank page is one colour: its filtered rows hold a handful of byte values and
# compress to almost nothing; a drawn page has many values and compresses less
ratio = len(idat) / len(raw)
print("png %dx%d, %d distinct byte values, compressed to %.2f%%" % (w, h, distinct, 100 * ratio))
sys.exit(0 if w >= 1000 and distinct > 30 and ratio > 0.005 else 1)
PY
    check "the screenshot is not blank" $?
    # the pipelined page rendered: its script ran, the picture is in the rendered DOM, and the screenshot shows it
    timeout 120 "$browser" "${flags[@]}" --dump-dom "file://$tmp/pipe.html" >pipe-dom.html 2>/dev/null
    grep -q 'data-ready="1"' pipe-dom.html && python3 "$root/tests/report_pipeline.py" pipe-dom.html pipe-explain.json
    check "the pipelined page rendered by Chromium: script ran, schedule picture in the DOM" $?
    timeout 120 "$browser" "${flags[@]}" --screenshot="$tmp/pipe.png" "file://$tmp/pipe.html" >/dev/null 2>&1
    python3 "$root/tests/report_pipeline.py" --png pipe.png; check "the screenshot shows forwards, backwards and bubbles" $?
    [ -n "${CARVE_REPORT_OUT:-}" ] && mkdir -p "$CARVE_REPORT_OUT" && cp plan.png plan.html pipe.png pipe.html "$CARVE_REPORT_OUT/"
fi
closing
