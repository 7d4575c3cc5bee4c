/* html.c - the HTML renderer (view.h): a picture of a plan, one
 * self-contained page with inline SVG (carve report PLAN --html out.html,
 * carve explain --html, docs/report.md).
 *
 *  - per argument (params and inputs of layer 0 and outside layers; the other
 *    layers are folded when their sharding is layer 0's, the explanation's
 *    per-value fold; optimizer states are sharded like their params): the
 *    mesh as a grid, first axis down, the
 *    others across, and in each device the block of the tensor it holds
 *    ([0:1024, :]); devices holding the same block share a colour;
 *  - per phase (forward, backward, optimizer): a timeline of the program's
 *    instructions as the cost model priced them (cost_estimate.instr_time):
 *    runs of compute as one bar, each collective as its own bar with a tooltip
 *    naming its kind, axes, the value it moves and the op it serves;
 *  - memory per device at the peak as stacked bars (params, optimizer states,
 *    gradients, activations, other) against the capacity.
 * A short script highlights devices holding the same block on hover and marks
 * the page ready (body data-ready="1"), which the browser test checks.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "view/view.h"

/* Writes s with &, <, >, " escaped and non-printable bytes as '?'. */
static void esc(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '&') fputs("&amp;", f);
        else if (c == '<') fputs("&lt;", f);
        else if (c == '>') fputs("&gt;", f);
        else if (c == '"') fputs("&quot;", f);
        else fputc(c >= 0x20 && c < 0x7f ? c : '?', f);
    }
}

static void fmt_time(double s, char *buf, size_t n)
{
    if (s >= 1) snprintf(buf, n, "%.3f s", s);
    else if (s >= 1e-3) snprintf(buf, n, "%.3f ms", s * 1e3);
    else snprintf(buf, n, "%.3f us", s * 1e6);
}

static void fmt_bytes(double b, char *buf, size_t n)
{
    if (b >= 1073741824.0) snprintf(buf, n, "%.3g GiB", b / 1073741824.0);
    else if (b >= 1048576.0) snprintf(buf, n, "%.3g MiB", b / 1048576.0);
    else if (b >= 1024.0) snprintf(buf, n, "%.3g KiB", b / 1024.0);
    else snprintf(buf, n, "%.0f B", b);
}

static const char *const style =
    "body{font:14px system-ui,sans-serif;margin:24px;color:#222;background:#fff}"
    "h1{font-size:20px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ccc}"
    "table.s td{padding:2px 10px 2px 0}.args{display:flex;flex-wrap:wrap;gap:14px}"
    ".arg{border:1px solid #ddd;padding:6px;border-radius:4px}.arg h3{font-size:13px;margin:0 0 4px}"
    "code{font-size:12px}.note{color:#555;font-size:12px}svg text{font:10px monospace}"
    ".hl rect.dev{stroke:#000;stroke-width:2}";

/* ---- shardings ------------------------------------------------------------ */

/* The block of value x that device dev holds, as "[0:64, :]". */
static void block_text(const shard_mesh *m, const ir_value *x, const shard_spec *s, int64_t dev, char *buf, size_t n)
{
    int64_t local[IR_MAX_RANK];
    shard_local_dims(m, x, s, local);
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < x->rank && k < n; d++) {
        if (!s->n[d]) k += (size_t)snprintf(buf + k, n - k, "%s:", d ? ", " : "");
        else {
            int64_t off = shard_dim_offset(m, x, s, d, dev);
            k += (size_t)snprintf(buf + k, n - k, "%s%lld:%lld", d ? ", " : "", (long long)off, (long long)(off + local[d]));
        }
    }
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* Index of the block device dev holds (0 for a replicated value). */
static int64_t block_id(const shard_mesh *m, const ir_value *x, const shard_spec *s, int64_t dev)
{
    int64_t id = 0, local[IR_MAX_RANK];
    shard_local_dims(m, x, s, local);
    for (int d = 0; d < x->rank; d++) {
        int64_t nb = shard_dim_shards(m, s, d);
        id = id * nb + (local[d] ? shard_dim_offset(m, x, s, d, dev) / local[d] : 0);
    }
    return id;
}

static void mesh_grid(FILE *f, const shard_state *st, int v)
{
    const shard_mesh *m = st->mesh;
    const ir_value *x = &st->g->values[v];
    int64_t rows = m->n_axes > 1 ? m->sizes[0] : 1, cols = m->n_devices / rows;
    int cw = cols > 16 ? 36 : 96, ch = rows > 16 ? 18 : 34;
    int64_t nblocks = 1;
    for (int d = 0; d < x->rank; d++) nblocks *= shard_dim_shards(m, &st->spec[v], d);
    fprintf(f, "<svg width=\"%lld\" height=\"%lld\" data-value=\"%d\">", (long long)(cols * cw + 2), (long long)(rows * ch + 2), v);
    char blk[160];
    for (int64_t dev = 0; dev < m->n_devices; dev++) {
        int64_t r = m->n_axes > 1 ? shard_device_coord(m, dev, 0) : 0, c = dev - r * cols;
        int64_t id = block_id(m, x, &st->spec[v], dev);
        int hue = nblocks > 1 ? (int)(id * 360 / nblocks) : 0;
        block_text(m, x, &st->spec[v], dev, blk, sizeof blk);
        fprintf(f, "<g><rect class=\"dev\" data-block=\"%lld\" x=\"%lld\" y=\"%lld\" width=\"%d\" height=\"%d\" fill=\"hsl(%d,%d%%,%d%%)\" stroke=\"#fff\"/>",
                (long long)id, (long long)(1 + c * cw), (long long)(1 + r * ch), cw - 2, ch - 2, hue, nblocks > 1 ? 60 : 0,
                nblocks > 1 ? 80 : 88);
        fprintf(f, "<title>device %lld holds %s</title>", (long long)dev, blk);
        if (cw >= 96) {
            fprintf(f, "<text x=\"%lld\" y=\"%lld\">dev %lld</text>", (long long)(4 + c * cw), (long long)(12 + r * ch), (long long)dev);
            fprintf(f, "<text x=\"%lld\" y=\"%lld\">", (long long)(4 + c * cw), (long long)(26 + r * ch));
            esc(f, strlen(blk) > 15 ? "(hover)" : blk);
            fputs("</text>", f);
        }
        fputs("</g>", f);
    }
    fputs("</svg>", f);
}

static void shardings_section(FILE *f, const view_explanation *vx)
{
    const shard_state *st = vx->st;
    const ir_graph *g = st->g;
    char ty[128], ps[256];
    fputs("<h2>Shardings</h2><p class=\"note\">The mesh as a grid (first axis down, the others across); each "
          "device shows the block it holds. Devices of one colour hold the same block. Parameters and inputs of "
          "layer 0 and outside the layers; optimizer states are sharded like their params.</p><div class=\"args\">",
          f);
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if ((x->role != IR_PARAM && x->role != IR_INPUT) || x->layer > 0) continue;
        int all = x->layer == 0 ? vx->alike[v] : 1;
        fputs("<div class=\"arg\"><h3>", f);
        esc(f, x->name);
        fputs(" <code>", f);
        esc(f, ir_type_str(x, ty, sizeof ty));
        fputs("</code> <code>", f);
        esc(f, shard_spec_pspec(st->mesh, &st->spec[v], x->rank, ps, sizeof ps));
        fputs("</code></h3>", f);
        mesh_grid(f, st, v);
        if (x->layer == 0)
            fprintf(f, "<div class=\"note\">%s</div>",
                    all ? "every layer alike" : "other layers differ (see the plan file)");
        fputs("</div>", f);
    }
    fputs("</div>", f);
}

/* ---- timeline ------------------------------------------------------------ */

static void axes_text(const shard_mesh *m, unsigned axes, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (int a = 0; a < m->n_axes && k < n; a++)
        if (axes & (1u << a)) k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? "," : "", m->names[a]);
}

static void timeline_section(FILE *f, const spmd_program *p, const double *instr_time)
{
    const ir_graph *g = p->g;
    static const char *const colour[SPMD_N_KINDS] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#b07aa1", "#9c755f",
                                                     [SPMD_SEND] = "#59a14f", [SPMD_RECV] = "#8cd17d"};
    char t[32], ax[64];
    fputs("<h2>Timeline per phase</h2><p class=\"note\">Each instruction of the program in order, as the cost model "
          "prices it (runs of compute merged). Hover a bar for what it is.",
          f);
    for (int k = SPMD_ALL_GATHER; k < SPMD_N_KINDS; k++)
        if (!spmd_kind_is_p2p(k) || p->stats.count[k][SPMD_FORWARD] + p->stats.count[k][SPMD_BACKWARD] + p->stats.count[k][SPMD_OPTIMIZER])
            fprintf(f, " <span style=\"color:%s\">&#9632; %s</span>", colour[k], spmd_kind_name((spmd_kind)k));
    fprintf(f, " <span style=\"color:%s\">&#9632; compute</span></p>", colour[0]);
    for (int ph = 0; ph < SPMD_N_PHASES; ph++) {
        double total = 0;
        for (int i = 0; i < p->n_instrs; i++)
            if (p->instrs[i].phase == ph) total += instr_time[i];
        fmt_time(total, t, sizeof t);
        fprintf(f, "<h3>%s: %s</h3>", spmd_phase_name((spmd_phase)ph), t);
        if (total <= 0) continue;
        const double width = 1100;
        fprintf(f, "<svg width=\"%.0f\" height=\"44\"><rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"44\" fill=\"#f6f6f6\"/>",
                width, width);
        double clock = 0, run_start = -1, run_time = 0;
        for (int i = 0; i <= p->n_instrs; i++) {
            const spmd_instr *in = i < p->n_instrs ? &p->instrs[i] : NULL;
            if (in && in->phase != ph) continue;
            int compute = in && in->kind == SPMD_COMPUTE;
            if (!compute && run_start >= 0) { /* close the compute run */
                fmt_time(run_time, t, sizeof t);
                fprintf(f, "<rect x=\"%.2f\" y=\"2\" width=\"%.2f\" height=\"18\" fill=\"%s\"><title>compute %s</title></rect>",
                        run_start * width / total, fmax(run_time * width / total, 0.5), colour[0], t);
                run_start = -1;
                run_time = 0;
            }
            if (!in) break;
            double dt = instr_time[i];
            if (compute) {
                if (run_start < 0) run_start = clock;
                run_time += dt;
            } else {
                axes_text(&p->mesh, in->axes, ax, sizeof ax);
                fmt_time(dt, t, sizeof t);
                fprintf(f, "<rect x=\"%.2f\" y=\"22\" width=\"%.2f\" height=\"18\" fill=\"%s\"><title>%s{%s} ",
                        clock * width / total, fmax(dt * width / total, 0.5), colour[in->kind],
                        spmd_kind_name((spmd_kind)in->kind), ax);
                esc(f, g->values[in->value].name);
                if (in->op >= 0) {
                    fprintf(f, " for %s -&gt; ", ir_op_name(g->ops[in->op].kind));
                    esc(f, g->values[g->ops[in->op].out].name);
                }
                fprintf(f, ": %s, %.4g MiB</title></rect>", t, (double)in->bytes / 1048576.0);
            }
            clock += dt;
        }
        fputs("</svg>", f);
    }
}

/* ---- memory -------------------------------------------------------------- */

static void memory_section(FILE *f, const shard_mesh *m, const cost_estimate *e)
{
    static const char *const names[5] = {"params", "optimizer states", "gradients", "activations", "other"};
    static const char *const colour[5] = {"#4e79a7", "#59a14f", "#edc948", "#e15759", "#bab0ac"};
    const double part[5] = {e->peak_params, e->peak_opt_states, e->peak_grads, e->peak_activations, e->peak_other};
    char a[32], b[32];
    fmt_bytes(e->peak_memory, a, sizeof a);
    fmt_bytes(e->capacity, b, sizeof b);
    fprintf(f, "<h2>Memory per device at the peak</h2><p class=\"note\">%s of %s per device (%s); every device "
               "holds the same amount (one program for all devices).",
            a, b, e->fits ? "fits" : "DOES NOT FIT");
    for (int k = 0; k < 5; k++) fprintf(f, " <span style=\"color:%s\">&#9632; %s</span>", colour[k], names[k]);
    fputs("</p>", f);
    int shown = m->n_devices > 16 ? 16 : (int)m->n_devices;
    double top = fmax(e->capacity, e->peak_memory) * 1.05, h = 220;
    fprintf(f, "<svg width=\"%d\" height=\"%.0f\">", 60 + shown * 40, h + 30);
    double cy = h - e->capacity / top * h;
    for (int d = 0; d < shown; d++) {
        double y = h;
        for (int k = 0; k < 5; k++) {
            double bh = part[k] / top * h;
            y -= bh;
            fmt_bytes(part[k], a, sizeof a);
            fprintf(f, "<rect x=\"%d\" y=\"%.2f\" width=\"28\" height=\"%.2f\" fill=\"%s\"><title>device %d %s: %s</title></rect>",
                    50 + d * 40, y, fmax(bh, 0), colour[k], d, names[k], a);
        }
        fprintf(f, "<text x=\"%d\" y=\"%.0f\">%d</text>", 56 + d * 40, h + 14, d);
    }
    fprintf(f, "<line x1=\"40\" x2=\"%d\" y1=\"%.2f\" y2=\"%.2f\" stroke=\"#000\" stroke-dasharray=\"4 3\"/>"
               "<text x=\"0\" y=\"%.2f\">capacity</text></svg>",
            50 + shown * 40, cy, cy, cy - 3);
    if (shown < m->n_devices) fprintf(f, "<p class=\"note\">devices 16..%lld alike</p>", (long long)m->n_devices - 1);
}

static const char *const script =
    "document.querySelectorAll('svg[data-value]').forEach(function(s){"
    "s.querySelectorAll('rect.dev').forEach(function(r){"
    "r.addEventListener('mouseenter',function(){s.querySelectorAll('rect.dev').forEach(function(q){"
    "q.parentNode.classList.toggle('hl',q.dataset.block===r.dataset.block);});});"
    "r.addEventListener('mouseleave',function(){s.querySelectorAll('g.hl').forEach(function(q){q.classList.remove('hl');});});"
    "});});"
    "document.body.dataset.ready=String(document.querySelectorAll('svg').length>0?1:0);";

int view_render_html(const view_explanation *x, FILE *f)
{
    if (!x->pl || !x->e) return -1;
    const plan *pl = x->pl;
    const char *path = x->path;
    const shard_state *st = x->st;
    const cost_hw *hw = x->hw;
    const cost_estimate *e = x->e;
    char a[64], b[64], c[64], buf[256];
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>carve plan ", f);
    esc(f, path);
    fprintf(f, "</title><style>%s</style></head><body>\n<h1>carve plan ", style);
    esc(f, path);
    fputs("</h1><table class=\"s\">", f);
    fputs("<tr><td>model</td><td><code>", f);
    esc(f, pl->model[0] ? pl->model : pl->graph_file);
    fprintf(f, "</code></td></tr><tr><td>mesh</td><td><code>%s</code> (%lld devices)</td></tr>",
            shard_mesh_str(st->mesh, buf, sizeof buf), (long long)st->mesh->n_devices);
    fputs("<tr><td>hardware</td><td>", f);
    esc(f, hw->name);
    fprintf(f, "</td></tr><tr><td>options</td><td>precision %s, %s</td></tr>", cost_precision_name(pl->options.precision),
            pl->options.overlap ? "communication overlapped with compute" : "no overlap");
    fputs("<tr><td>schedule</td><td><code>", f);
    esc(f, pl->schedule);
    fmt_time(e->step_time, a, sizeof a);
    fmt_time(e->compute_time, b, sizeof b);
    fmt_time(e->comm_time, c, sizeof c);
    fprintf(f, "</code></td></tr><tr><td>step time</td><td>%s (compute %s, communication %s%s)</td></tr>", a, b, c,
            pl->options.overlap ? ", overlapped" : "");
    fmt_bytes(e->peak_memory, a, sizeof a);
    fmt_bytes(e->capacity, b, sizeof b);
    fprintf(f, "<tr><td>peak memory</td><td>%s of %s per device</td></tr></table>\n", a, b);
    shardings_section(f, x);
    timeline_section(f, x->p, x->instr_time);
    memory_section(f, st->mesh, e);
    fprintf(f, "\n<script>%s</script>\n</body></html>\n", script);
    return ferror(f) ? -1 : 0;
}
