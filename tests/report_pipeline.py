#!/usr/bin/env python3
"""report_pipeline.py - checks a pipelined plan's schedule picture (view/html.c)
against the cost model's figures and the schedule's order (tests/e2e_report.sh).

  report_pipeline.py PAGE.html EXPLAIN.json    the page as carve wrote it, or as
                                               Chromium rendered it (--dump-dom)
  report_pipeline.py --png SHOT.png            the screenshot shows the picture

The page: one <svg class="pipe"> with the stages, chunks, micro-batches and
schedule of the plan (carve explain --json's pipeline object); a row per
stage holding each (micro-batch, chunk)'s forward and backward exactly once,
in the schedule's order (as many forwards before the first backward as the
warm-up takes: GPipe all of them, 1F1B min(p - r, m), interleaved
min(2 (p - r - 1) + (v - 1) p + 1, m v)), left to right without overlaps,
then its end of step; its hatched idle boxes fill the gaps, and the idle they
add up to is the stage's idle share of the step in explain's JSON (within
0.5% of the step); every stage has some.  The screenshot: the forward,
backward and bubble colours each cover a visible area.
Prints what failed; exit status 1 then.
"""
import json
import struct
import sys
import zlib
from html.parser import HTMLParser

FWD, BWD, BUBBLE = (0x4E, 0x79, 0xA7), (0xF2, 0x8E, 0x2B), (0xFD, 0xE8, 0xE8)


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.svg, self.rows, self.row = None, {}, None
        self.ready = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body" and a.get("data-ready") == "1":
            self.ready = True
        if tag == "svg" and "pipe" in (a.get("class") or "").split():
            self.svg = a
        if self.svg is None or tag != "rect" or "data-stage" not in a:
            return
        r = int(a["data-stage"])
        row = self.rows.setdefault(r, {"boxes": [], "idle": 0.0})
        x, w = float(a["x"]), float(a["width"])
        kind = (a.get("class") or "").split()[0]
        if kind == "idle":
            row["idle"] += w
            row.setdefault("gaps", []).append((x, w))
        elif kind == "task":
            row["boxes"].append((x, w, a["data-dir"], int(a["data-mb"]), int(a["data-chunk"])))
        elif kind == "end":
            row["boxes"].append((x, w, "E", -1, -1))


def warmup(sched, p, r, m, v):
    if sched == "gpipe":
        return m
    if sched == "1f1b":
        return min(p - r, m)
    return min(2 * (p - r - 1) + (v - 1) * p + 1, m * v)


def check_page(page_path, explain_path):
    bad = []
    pg = Page()
    pg.feed(open(page_path, encoding="utf-8").read())
    ex = json.load(open(explain_path))
    pipe = ex["pipeline"]
    if pg.svg is None:
        return ["no <svg class=pipe> in the page"]
    p, v, m = int(pg.svg["data-stages"]), int(pg.svg["data-chunks"]), int(pg.svg["data-microbatches"])
    sched, step, scale = pg.svg["data-schedule"], float(pg.svg["data-step"]), float(pg.svg["data-scale"])
    want = (pipe["stages"], pipe["chunks"], pipe["microbatches"], pipe["schedule"])
    if (p, v, m, sched) != want:
        bad.append("picture's (stages, chunks, micro-batches, schedule) %s, explain's %s" % ((p, v, m, sched), want))
    if abs(step - ex["estimate"]["step_time_s"]) > 1e-6 * step:
        bad.append("picture's step %g s, explain's %g s" % (step, ex["estimate"]["step_time_s"]))
    if sorted(pg.rows) != list(range(p)):
        bad.append("rows for stages %s, want 0..%d" % (sorted(pg.rows), p - 1))
    width = step * scale
    for r, row in sorted(pg.rows.items()):
        boxes = row["boxes"]
        tasks = [(d, k, c) for _, _, d, k, c in boxes if d != "E"]
        every = sorted((d, k, c) for d in "FB" for k in range(m) for c in range(v))
        if sorted(tasks) != every:
            bad.append("stage %d: %d tasks, not each (micro-batch, chunk)'s forward and backward once" % (r, len(tasks)))
        if not boxes or boxes[-1][2] != "E":
            bad.append("stage %d: its end of step is not its last box" % r)
        for (x0, w0, *_), (x1, *_) in zip(boxes, boxes[1:]):
            if x1 < x0 + w0 - 0.02 and w0 > 0.5:
                bad.append("stage %d: boxes overlap or go backwards at x=%.2f" % (r, x1))
                break
        first_b = next((i for i, t in enumerate(tasks) if t[0] == "B"), len(tasks))
        if first_b != warmup(sched, p, r, m, v):
            bad.append("stage %d: %d forwards before the first backward, %s wants %d" % (r, first_b, sched, warmup(sched, p, r, m, v)))
        filled = sum(w for _, w, *_ in boxes) + row["idle"]
        if abs(filled - width) > 0.5 + 0.005 * width:
            bad.append("stage %d: boxes and bubbles cover %.1f px of a %.1f px row" % (r, filled, width))
        st = pipe["per_stage"][r]
        share, want_share = row["idle"] / width, st["idle_s"] / step
        if abs(share - want_share) > 0.005:
            bad.append("stage %d: hatched %.4f of the step, explain's idle %.4f" % (r, share, want_share))
        if share <= 0:
            bad.append("stage %d: no bubble drawn" % r)
    return bad


def png_pixels(path):
    """(width, height, rows of RGB tuples) of an 8-bit RGB or RGBA PNG."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", data[pos + 8:pos + 18])
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + n]
        pos += 12 + n
    assert depth == 8 and ctype in (2, 6), "PNG colour type %d depth %d" % (ctype, depth)
    bpp = 3 if ctype == 2 else 4
    raw, stride = zlib.decompress(idat), w * bpp
    prev, out, i = bytearray(stride), [], 0
    for _ in range(h):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out.append(bytes(line))
        prev = line
    return w, h, bpp, out


def check_png(path):
    w, h, bpp, rows = png_pixels(path)
    count = {FWD: 0, BWD: 0, BUBBLE: 0}
    for line in rows:
        for x in range(0, w * bpp, bpp):
            px = tuple(line[x:x + 3])
            if px in count:
                count[px] += 1
    print("screenshot %dx%d: forward %d, backward %d, bubble %d pixels" % (w, h, count[FWD], count[BWD], count[BUBBLE]))
    return ["the %s colour covers %d pixels (want 500 or more)" % (name, count[c])
            for name, c in (("forward", FWD), ("backward", BWD), ("bubble", BUBBLE)) if count[c] < 500]


if __name__ == "__main__":
    problems = check_png(sys.argv[2]) if sys.argv[1] == "--png" else check_page(sys.argv[1], sys.argv[2])
    for b in problems:
        print("report_pipeline:", b)
    sys.exit(1 if problems else 0)
