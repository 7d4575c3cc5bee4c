/* html.h - a plan as one self-contained HTML page with inline SVG (html.c,
 * docs/report.md): shardings on the mesh, a timeline per phase, memory per
 * device. */
#ifndef CARVE_VIEW_HTML_H
#define CARVE_VIEW_HTML_H

#include <stdio.h>

#include "plan/plan.h"

/* Writes the page for plan pl (read from `path`; st its replayed state, p its
 * program priced on hw into e, whose instr_time must still be valid).
 * Returns 0, or -1 when f reports a write error. */
int view_html(const plan *pl, const char *path, const shard_state *st, const spmd_program *p, const cost_hw *hw,
              const cost_estimate *e, FILE *f);

#endif
