/* html.c - the HTML renderer (view.h): a picture of a plan, one
 * self-contained page with inline SVG (carve report PLAN --html out.html,
 * carve explain --html, docs/report.md).
 *
 *  - a summary (model, mesh, hardware, schedule, step time, peak memory,
 *    strategy, throughput and MFU, each axis's link, the mesh-order warning),
 *    then the pipeline's schedule, the timeline, memory, and the shardings:
 *  - per argument (params and inputs of layer 0 and outside layers; the other
 *    layers are folded when their sharding is layer 0's, the explanation's
 *    per-value fold; optimizer states are sharded like their params): the
 *    mesh as a grid, first axis down, the
 *    others across, and in each device the block of the tensor it holds
 *    ([0:1024, :], every block written: no cell says "(hover)"); devices
 *    holding the same block share a colour;
 *  - per phase (forward, backward, optimizer): a timeline of the program's
 *    instructions as the cost model priced them (cost_estimate.instr_time):
 *    runs of compute as one bar, each collective as its own bar with a tooltip
 *    naming its kind, axes, the value it moves and the op it serves;
 *  - memory per device at the peak as stacked bars (params, optimizer states,
 *    gradients, activations, other) against the capacity; a pipelined plan's
 *    per stage;
 *  - a pipelined plan's schedule first: a row per stage, a box per
 *    micro-batch's forward and backward at its simulated times
 *    (cost_pipe_estimate), the end of step, the bubbles hatched.
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
    ".hl rect.dev{stroke:#000;stroke-width:2}rect.task.mb{stroke:#000;stroke-width:2}";

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

/* The longest block text of value v over the devices, in characters. */
static size_t longest_block(const shard_state *st, int v)
{
    char blk[160];
    size_t w = 0;
    for (int64_t dev = 0; dev < st->mesh.n_devices; dev++) {
        block_text(&st->mesh, &st->g->values[v], &st->spec[v], dev, blk, sizeof blk);
        if (strlen(blk) > w) w = strlen(blk);
    }
    return w;
}

/* The mesh as a grid (first axis down, the others across), every device's
 * block written in its cell: cells as wide as the longest block (10 px
 * monospace: 6.1 px a character), a mesh row of more than 16 devices
 * wrapped onto several rows of 16. */
#define GRID_WRAP 16
static void mesh_grid(FILE *f, const shard_state *st, int v)
{
    const shard_mesh *m = &st->mesh;
    const ir_value *x = &st->g->values[v];
    int64_t rows = m->n_axes > 1 ? m->sizes[0] : 1, cols = m->n_devices / rows;
    int64_t per = cols > GRID_WRAP ? GRID_WRAP : cols, wraps = (cols + per - 1) / per;
    size_t chars = longest_block(st, v);
    int cw = (int)(chars * 6.1) + 10, ch = 34;
    if (cw < 64) cw = 64;
    int64_t nblocks = 1;
    for (int d = 0; d < x->rank; d++) nblocks *= shard_dim_shards(m, &st->spec[v], d);
    fprintf(f, "<svg width=\"%lld\" height=\"%lld\" data-value=\"%d\">", (long long)(per * cw + 2),
            (long long)(rows * wraps * ch + (rows > 1 ? (rows - 1) * 4 : 0) + 2), v);
    char blk[160];
    for (int64_t dev = 0; dev < m->n_devices; dev++) {
        int64_t r = m->n_axes > 1 ? shard_device_coord(m, dev, 0) : 0, c = dev - r * cols;
        int64_t gx = c % per, gy = r * wraps + c / per;
        long long px = 1 + gx * cw, py = 1 + gy * ch + r * 4;
        int64_t id = block_id(m, x, &st->spec[v], dev);
        int hue = nblocks > 1 ? (int)(id * 360 / nblocks) : 0;
        block_text(m, x, &st->spec[v], dev, blk, sizeof blk);
        fprintf(f, "<g><rect class=\"dev\" data-block=\"%lld\" x=\"%lld\" y=\"%lld\" width=\"%d\" height=\"%d\" fill=\"hsl(%d,%d%%,%d%%)\" stroke=\"#fff\"/>",
                (long long)id, px, py, cw - 2, ch - 2, hue, nblocks > 1 ? 60 : 0, nblocks > 1 ? 80 : 88);
        fprintf(f, "<title>device %lld holds %s</title>", (long long)dev, blk);
        fprintf(f, "<text x=\"%lld\" y=\"%lld\">dev %lld</text><text x=\"%lld\" y=\"%lld\">", px + 3, py + 11, (long long)dev,
                px + 3, py + 25);
        esc(f, blk);
        fputs("</text></g>", f);
    }
    fputs("</svg>", f);
}

static void shardings_section(FILE *f, const view_explanation *vx)
{
    const shard_state *st = vx->st;
    const ir_graph *g = st->g;
    char ty[128], ps[256];
    fputs("<h2>Shardings</h2><p class=\"note\">The mesh as a grid (first axis down, the others across; a row of "
          "more than 16 devices wrapped); each device shows the block it holds. Devices of one colour hold the same "
          "block. Parameters and inputs of layer 0 and outside the layers; optimizer states are sharded like their "
          "params.</p><div class=\"args\">",
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
        esc(f, shard_spec_pspec(&st->mesh, &st->spec[v], x->rank, ps, sizeof ps));
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

static void timeline_section(FILE *f, const view_explanation *x)
{
    const spmd_program *p = x->p;
    const double *instr_time = x->instr_time;
    static const char *const colour[SPMD_N_KINDS] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#b07aa1", "#9c755f",
                                                     [SPMD_SEND] = "#59a14f", [SPMD_RECV] = "#8cd17d"};
    char t[32], ax[64];
    fputs("<h2>Timeline per phase</h2><p class=\"note\">Each instruction of the program in order, as the cost model "
          "prices it (runs of compute merged). Hover a bar for what it is.",
          f);
    for (int i = 0; i < x->n_schedules; i++) /* a pipeline's */
        fputs(" A pipelined plan's program is one micro-batch's step: every stage's part of it, in order.", f);
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
                esc(f, p->g->values[in->value].name);
                if (in->op >= 0) {
                    fprintf(f, " for %s -&gt; ", ir_op_name(p->g->ops[in->op].kind));
                    esc(f, p->g->values[p->g->ops[in->op].out].name);
                }
                fprintf(f, ": %s, %.4g MiB</title></rect>", t, (double)in->bytes / 1048576.0);
            }
            clock += dt;
        }
        fputs("</svg>", f);
    }
}

/* ---- memory -------------------------------------------------------------- */

#define MEM_PARTS 6
static const char *const mem_names[MEM_PARTS] = {"own param blocks", "gathered params", "optimizer states",
                                                 "gradients", "activations", "backward temporaries"};
static const char *const mem_colour[MEM_PARTS] = {"#4e79a7", "#a0cbe8", "#59a14f", "#edc948", "#e15759", "#bab0ac"};

/* Stacked bars, one per column: part[col * MEM_PARTS + k] bytes of mem_names[k],
 * against the capacity (dashed line); columns labelled label(col). */
static void memory_bars(FILE *f, int cols, const double *part, double capacity, const char *what)
{
    char a[32];
    double most = capacity;
    for (int c = 0; c < cols; c++) {
        double sum = 0;
        for (int k = 0; k < MEM_PARTS; k++) sum += part[c * MEM_PARTS + k];
        most = fmax(most, sum);
    }
    double top = most * 1.05, h = 220;
    fprintf(f, "<svg width=\"%d\" height=\"%.0f\">", 60 + cols * 40, h + 30);
    double cy = h - capacity / top * h;
    for (int d = 0; d < cols; d++) {
        double y = h;
        for (int k = 0; k < MEM_PARTS; k++) {
            double bh = part[d * MEM_PARTS + k] / top * h;
            y -= bh;
            fmt_bytes(part[d * MEM_PARTS + k], a, sizeof a);
            fprintf(f, "<rect x=\"%d\" y=\"%.2f\" width=\"28\" height=\"%.2f\" fill=\"%s\"><title>%s %d %s: %s</title></rect>",
                    50 + d * 40, y, fmax(bh, 0), mem_colour[k], what, d, mem_names[k], a);
        }
        fprintf(f, "<text x=\"%d\" y=\"%.0f\">%d</text>", 56 + d * 40, h + 14, d);
    }
    fprintf(f, "<line x1=\"40\" x2=\"%d\" y1=\"%.2f\" y2=\"%.2f\" stroke=\"#000\" stroke-dasharray=\"4 3\"/>"
               "<text x=\"0\" y=\"%.2f\">capacity</text></svg>",
            50 + cols * 40, cy, cy, cy - 3);
}

static void memory_legend(FILE *f)
{
    for (int k = 0; k < MEM_PARTS; k++) fprintf(f, " <span style=\"color:%s\">&#9632; %s</span>", mem_colour[k], mem_names[k]);
    fputs("</p>", f);
}

static void memory_section(FILE *f, const shard_mesh *m, const cost_estimate *e)
{
    const double part[MEM_PARTS] = {e->peak_params,      e->peak_gathered_params, e->peak_opt_states,
                                    e->peak_grads,       e->peak_activations,     e->peak_other};
    char a[32], b[32];
    fmt_bytes(e->peak_memory, a, sizeof a);
    fmt_bytes(e->capacity, b, sizeof b);
    fprintf(f, "<h2>Memory per device at the peak</h2><p class=\"note\">%s of %s per device (%s); every device "
               "holds the same amount (one program for all devices).",
            a, b, e->fits ? "fits" : "DOES NOT FIT");
    memory_legend(f);
    int shown = m->n_devices > 16 ? 16 : (int)m->n_devices;
    double *parts = malloc(sizeof *parts * MEM_PARTS * (size_t)shown);
    if (!parts) return;
    for (int d = 0; d < shown; d++) memcpy(parts + d * MEM_PARTS, part, sizeof part);
    memory_bars(f, shown, parts, e->capacity, "device");
    free(parts);
    if (shown < m->n_devices) fprintf(f, "<p class=\"note\">devices 16..%lld alike</p>", (long long)m->n_devices - 1);
}

/* A pipeline's stages hold different layers: a bar per stage (every device
 * of a stage alike), its peak as the schedule simulation found it: held all
 * step (params, optimizer states, gradient accumulators), the activations
 * stashed by its micro-batches in flight, the rest (inputs, temporaries). */
static void memory_stages_section(FILE *f, const cost_pipe_estimate *pe, int chunks, const cost_estimate *e)
{
    char a[32], b[32];
    double *parts = calloc((size_t)pe->n_stages * MEM_PARTS, sizeof *parts);
    if (!parts) return;
    for (int r = 0; r < pe->n_stages; r++) {
        const cost_pipe_stage *s = &pe->stage[r];
        double *q = parts + r * MEM_PARTS, held = s->params + s->opt_states + s->grads;
        q[0] = s->params;
        q[2] = s->opt_states;
        q[3] = s->grads;
        /* stash: one micro-batch's over all chunks; in_flight counts (micro-batch, chunk) stashes */
        q[4] = fmin(s->stash / chunks * s->in_flight, fmax(s->peak - held, 0));
        q[5] = fmax(s->peak - held - q[4], 0);
    }
    fmt_bytes(e->peak_memory, a, sizeof a);
    fmt_bytes(e->capacity, b, sizeof b);
    fprintf(f, "<h2>Memory per stage at the peak</h2><p class=\"note\">The largest stage holds %s of %s per device (%s). "
               "A bar per stage (its devices alike): activations are the micro-batches in flight at its peak under the "
               "schedule.",
            a, b, e->fits ? "fits" : "DOES NOT FIT");
    memory_legend(f);
    memory_bars(f, pe->n_stages, parts, e->capacity, "stage");
    free(parts);
}

/* A bar per stage of each schedule priced (a pipeline's); a bar per device
 * when there is none (one program for every device). */
static void memory_sections(FILE *f, const view_explanation *x, const cost_estimate *e)
{
    int drawn = 0;
    for (int i = 0; i < x->n_schedules; i++)
        if (x->schedules[i].pe) memory_stages_section(f, x->schedules[i].pe, x->schedules[i].pp->spec.chunks, e), drawn++;
    if (!drawn) memory_section(f, &x->st->mesh, e);
}

/* ---- a pipeline's schedule ----------------------------------------------- */

/* A task's colour: forwards blue, backwards orange, later chunks lighter. */
static const char *task_colour(int dir, int chunk)
{
    static const char *const fwd[3] = {"#4e79a7", "#86a9d0", "#b7cde6"}, *const bwd[3] = {"#f28e2b", "#f7b26b", "#fbd2a6"};
    return dir == PIPE_FWD ? fwd[chunk % 3] : bwd[chunk % 3];
}

/* The idle stretch [t0, t1) of stage row y, if long enough to draw. */
static void idle_box(FILE *f, int r, double t0, double t1, double x0, double scale, double y, double h)
{
    char t[32];
    if ((t1 - t0) * scale < 0.5) return;
    fmt_time(t1 - t0, t, sizeof t);
    fprintf(f, "<rect class=\"idle\" data-stage=\"%d\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"url(#bubble)\">"
               "<title>stage %d idle %s (bubble)</title></rect>",
            r, x0 + t0 * scale, y, (t1 - t0) * scale, h, r, t);
}

/* Stage r's row: its tasks (pe's start and end, pipe_task_order's order),
 * its end of step, and the idle stretches between them. */
static void schedule_row(FILE *f, const pipe_spec *s, const cost_pipe_estimate *pe, const pipe_task *order, int r, double x0,
                         double scale, double y, double h)
{
    char t[32];
    int n = pe->n_tasks;
    double clock = 0, spans = 0;
    fprintf(f, "<g class=\"row\" data-stage=\"%d\" data-idle=\"%.4f\"><text x=\"0\" y=\"%.1f\">stage %d</text>", r,
            pe->step > 0 ? pe->stage[r].idle / pe->step : 0, y + h / 2 + 4, r);
    for (int i = 0; i < n; i++) {
        const pipe_task *k = &order[i];
        double t0 = pe->task_start[(size_t)r * n + i], t1 = pe->task_end[(size_t)r * n + i];
        idle_box(f, r, clock, t0, x0, scale, y, h);
        fmt_time(t1 - t0, t, sizeof t);
        fprintf(f, "<rect class=\"task\" data-stage=\"%d\" data-mb=\"%d\" data-chunk=\"%d\" data-dir=\"%c\" x=\"%.2f\" y=\"%.1f\" "
                   "width=\"%.2f\" height=\"%.1f\" fill=\"%s\" stroke=\"#fff\" stroke-width=\"0.5\">"
                   "<title>stage %d: micro-batch %d, chunk %d (virtual stage %d), %s: %s</title></rect>",
                r, k->mb, k->chunk, k->dir == PIPE_FWD ? 'F' : 'B', x0 + t0 * scale, y, fmax((t1 - t0) * scale, 0.5), h,
                task_colour(k->dir, k->chunk), r, k->mb, k->chunk, k->chunk * s->stages + r,
                k->dir == PIPE_FWD ? "forward" : "backward", t);
        if ((t1 - t0) * scale >= 14)
            fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" fill=\"#fff\" text-anchor=\"middle\" pointer-events=\"none\">%d</text>",
                    x0 + (t0 + t1) / 2 * scale, y + h / 2 + 4, k->mb);
        clock = t1;
        spans += t1 - t0;
    }
    /* the end of step holds its stage for its work and its sends (of shared
     * params' updates): the stage's busy time less its tasks' */
    double e0 = pe->end_start[r], e1 = e0 + fmax(pe->stage[r].busy - spans, pe->stage[r].end);
    idle_box(f, r, clock, e0, x0, scale, y, h);
    fmt_time(e1 - e0, t, sizeof t);
    fprintf(f, "<rect class=\"end\" data-stage=\"%d\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"#9c755f\">"
               "<title>stage %d: end of step (gradient sums, optimizer, sends of shared params): %s</title></rect>",
            r, x0 + e0 * scale, y, fmax((e1 - e0) * scale, 0.5), h, r, t);
    idle_box(f, r, e1, pe->step, x0, scale, y, h);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">idle %.1f%%</text></g>", x0 + pe->step * scale + 8, y + h / 2 + 4,
            pe->step > 0 ? 100 * pe->stage[r].idle / pe->step : 0.0);
}

/* The time axis under the rows: about six ticks. */
static void schedule_axis(FILE *f, double step, double x0, double scale, double y)
{
    char t[32];
    double tick = pow(10, floor(log10(step / 6)));
    if (step / tick > 30) tick *= 5;
    else if (step / tick > 12) tick *= 2;
    fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#888\"/>", x0, x0 + step * scale, y, y);
    for (double v = 0; v <= step * 1.0001; v += tick) {
        fmt_time(v, t, sizeof t);
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#888\"/><text x=\"%.1f\" y=\"%.1f\">%s</text>",
                x0 + v * scale, x0 + v * scale, y, y + 4, x0 + v * scale - 10, y + 15, v > 0 ? t : "0");
    }
}

/* The schedule as pipelines are drawn (GPipe's and Megatron-LM's papers): a
 * row per stage, a box per micro-batch's forward and backward at the times
 * the cost model's simulation gives them (cost_pipe_estimate), its end of
 * step, and the bubbles hatched. */
static void schedule_section(FILE *f, const pipe_program *pp, const cost_pipe_estimate *pe)
{
    const pipe_spec *s = &pp->spec;
    int p = pe->n_stages, n = pe->n_tasks;
    pipe_task *order = malloc(sizeof *order * (size_t)n);
    if (!order || pe->step <= 0) {
        free(order);
        return;
    }
    char a[32], b[32];
    fmt_time(pe->step, a, sizeof a);
    fmt_time(pe->ideal, b, sizeof b);
    fprintf(f, "<h2>Pipeline schedule</h2><p class=\"note\">%s over axis <code>%s</code>: %d stages, %d micro-batches", pipe_schedule_name(s->schedule),
            pp->prog->mesh.names[s->axis], p, s->microbatches);
    if (s->chunks > 1) fprintf(f, ", %d chunks a stage", s->chunks);
    fprintf(f, "; step %s (without bubbles %s), bubble %.1f%% of the step (mean over stages). A row per stage, a box per "
               "micro-batch's forward <span style=\"color:%s\">&#9632;</span> and backward "
               "<span style=\"color:%s\">&#9632;</span> (numbered by micro-batch%s), its end of step "
               "<span style=\"color:#9c755f\">&#9632;</span>, the bubbles hatched; times as the cost model simulates the "
               "schedule. Hover a box for what it is.</p>",
            a, b, 100 * pe->bubble, task_colour(PIPE_FWD, 0), task_colour(PIPE_BWD, 0), s->chunks > 1 ? "; later chunks lighter" : "");
    const double x0 = 60, width = 1000, h = 22, gap = 6;
    double scale = width / pe->step, height = p * (h + gap) + 24;
    fprintf(f, "<svg class=\"pipe\" data-schedule=\"%s\" data-stages=\"%d\" data-chunks=\"%d\" data-microbatches=\"%d\" "
               "data-step=\"%.9g\" data-scale=\"%.9g\" width=\"%.0f\" height=\"%.0f\">"
               "<defs><pattern id=\"bubble\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
               "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#fde8e8\"/>"
               "<rect width=\"2\" height=\"6\" fill=\"#e8a0a0\"/></pattern></defs>",
            pipe_schedule_name(s->schedule), p, s->chunks, s->microbatches, pe->step, scale, x0 + width + 90, height);
    for (int r = 0; r < p; r++) {
        pipe_task_order(s, r, order);
        schedule_row(f, s, pe, order, r, x0, scale, r * (h + gap), h);
    }
    schedule_axis(f, pe->step, x0, scale, p * (h + gap) + 2);
    fputs("</svg>", f);
    free(order);
}

/* The curve's range: its first fitting point (returned; NULL: none fits), the lowest
 * step time *lo, the best expert *best (NULL: none) and the top *hi, its step time (else
 * the first point's), at least 1% above *lo. */
static const search_point *curve_range(const plan_search *s, const plan_reached **best, double *lo, double *hi)
{
    const search_point *first = NULL;
    *lo = 1e300;
    for (int i = 0; i < s->n_curve; i++)
        if (s->curve[i].best.fits && s->curve[i].best.step_time > 0) {
            if (!first) first = &s->curve[i];
            *lo = fmin(*lo, s->curve[i].best.step_time);
        }
    if (!first) return NULL;
    *best = NULL;
    for (int i = 0; i < s->n_reached; i++)
        if (!*best || s->reached[i].step_time < (*best)->step_time) *best = &s->reached[i];
    *hi = *best ? (*best)->step_time : first->best.step_time;
    if (*hi < *lo * 1.01) *hi = *lo * 1.01;
    return first;
}

/* The search's best-so-far curve (the plan file's search.curve): the best
 * step time against steps (log scale from the first plan priced), the best
 * fitting expert's step time dashed (the others in its tooltip), the end of
 * the search and why it stopped.  Plans slower than the best expert are drawn
 * at the top edge. */
static void search_section(FILE *f, const plan_search *s)
{
    const plan_reached *best = NULL;
    double lo = 0, hi = 0;
    const search_point *first = curve_range(s, &best, &lo, &hi);
    if (!first) return; /* nothing fits: no step times to draw */
    double x0 = first->steps, x1 = s->steps > x0 + 1 ? s->steps : x0 + 2;
    double pad = (hi - lo) * 0.08, y0 = lo - pad, y1 = hi + pad, W = 640, H = 220, L = 70;
    char a[32], b[32];
    fmt_time(lo, a, sizeof a);
    fmt_time(hi, b, sizeof b);
    fprintf(f, "<h2>The search</h2><p class=\"note\">The best step time so far against the search's steps (a plan priced is "
               "one step, a plan reached again a quarter; docs/search.md), from step %.0f, when the expert schedules had "
               "been priced: %d better plans, the last (%s) at step %.0f of %.0f, %.2f s; stopped by %s. Dashed: the best "
               "expert's step time (%s).</p>",
            x0, s->n_curve, a, s->curve[s->n_curve - 1].steps, s->steps, s->curve[s->n_curve - 1].seconds, s->stop, b);
    fprintf(f, "<svg width=\"%.0f\" height=\"%.0f\" data-curve=\"%d\">", W + L + 10, H + 30, s->n_curve);
#define CX(v) (L + W * log(1 + (v) - x0) / log(1 + x1 - x0))
#define CY(t) (H - H * (fmin(t, y1) - y0) / (y1 - y0))
    if (best) {
        fprintf(f, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.2f\" y2=\"%.2f\" stroke=\"#999\" stroke-dasharray=\"4 3\"><title>", L,
                L + W, CY(hi), CY(hi));
        for (int i = 0; i < s->n_reached; i++) { /* every expert, when the search reached it */
            fmt_time(s->reached[i].step_time, a, sizeof a);
            esc(f, s->reached[i].schedule);
            if (s->reached[i].steps >= 0) fprintf(f, " %s: reached at step %.0f\n", a, s->reached[i].steps);
            else fprintf(f, " %s: not reached\n", a);
        }
        fputs("</title></line>", f);
    }
    fputs("<polyline fill=\"none\" stroke=\"#4e79a7\" stroke-width=\"2\" points=\"", f);
    double py = -1;
    for (int i = 0; i < s->n_curve; i++) {
        if (!s->curve[i].best.fits) continue;
        double x = CX(s->curve[i].steps), y = CY(s->curve[i].best.step_time);
        if (py >= 0) fprintf(f, "%.1f,%.2f ", x, py); /* a step: the best holds until the next better plan */
        fprintf(f, "%.1f,%.2f ", x, y);
        py = y;
    }
    fprintf(f, "%.1f,%.2f\"/>", CX(x1), py);
    for (int i = 0; i < s->n_curve; i++) {
        const search_point *p = &s->curve[i];
        if (!p->best.fits) continue;
        fmt_time(p->best.step_time, a, sizeof a);
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.2f\" r=\"3\" fill=\"#4e79a7\"><title>step %.1f, %.2f s, %lld plans priced: %s"
                   "</title></circle>",
                CX(p->steps), CY(p->best.step_time), p->steps, p->seconds, (long long)p->evaluations, a);
    }
    fmt_time(lo, a, sizeof a);
    fprintf(f, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.0f\" y2=\"%.0f\" stroke=\"#000\"/>"
               "<text x=\"0\" y=\"%.2f\">%s</text><text x=\"0\" y=\"%.2f\">%s</text>"
               "<text x=\"%.0f\" y=\"%.0f\">step %.0f</text><text x=\"%.0f\" y=\"%.0f\">%.0f steps</text></svg>\n",
            L, L + W, H, H, CY(hi) + 4, b, CY(lo) + 4, a, L, H + 14, x0, L + W - 60, H + 14, x1);
#undef CX
#undef CY
}

/* The summary's rows beyond the step and the memory: the strategy, the
 * throughput and MFU, each axis's link, the mesh-order warning. */
static void summary_rows(FILE *f, const view_explanation *x)
{
    char l[256];
    fputs("<tr><td>strategy</td><td><b>", f);
    esc(f, x->practice);
    fputs("</b><br><span class=\"note\">", f);
    esc(f, x->strategy);
    fputs("</span></td></tr>", f);
    const cost_throughput *t = &x->tput;
    char a[32], b[32];
    if (t->unit && t->per_second > 0)
        fprintf(f, "<tr><td>throughput</td><td>%s %s/s, %s %s/s per device; MFU %.1f%% (docs/cost-model.md)</td></tr>",
                view_count(t->per_second, a, sizeof a), t->unit, view_count(t->per_device, b, sizeof b), t->unit, 100 * t->mfu);
    for (int i = 0; i < x->n_axes; i++) {
        fprintf(f, "<tr><td>%s</td><td><code>", i ? "" : "links");
        esc(f, x->axes[i].name);
        fprintf(f, "=%lld</code>: ", (long long)x->axes[i].size);
        esc(f, cost_axis_link_str(x->hw, &x->axes[i], l, sizeof l));
        fputs("</td></tr>", f);
    }
    if (x->mesh_warning[0]) {
        fputs("<tr><td>warning</td><td>", f);
        esc(f, x->mesh_warning);
        fputs("</td></tr>", f);
    }
}

static const char *const script =
    "document.querySelectorAll('svg[data-value]').forEach(function(s){"
    "s.querySelectorAll('rect.dev').forEach(function(r){"
    "r.addEventListener('mouseenter',function(){s.querySelectorAll('rect.dev').forEach(function(q){"
    "q.parentNode.classList.toggle('hl',q.dataset.block===r.dataset.block);});});"
    "r.addEventListener('mouseleave',function(){s.querySelectorAll('g.hl').forEach(function(q){q.classList.remove('hl');});});"
    "});});"
    "document.querySelectorAll('svg.pipe rect.task').forEach(function(r){"
    "r.addEventListener('mouseenter',function(){r.ownerSVGElement.querySelectorAll('rect.task').forEach(function(q){"
    "q.classList.toggle('mb',q.dataset.mb===r.dataset.mb);});});"
    "r.addEventListener('mouseleave',function(){r.ownerSVGElement.querySelectorAll('rect.mb').forEach(function(q){"
    "q.classList.remove('mb');});});});"
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
            shard_mesh_str(&st->mesh, buf, sizeof buf), (long long)st->mesh.n_devices);
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
    fprintf(f, "<tr><td>peak memory</td><td>%s of %s per device</td></tr>\n", a, b);
    summary_rows(f, x);
    fputs("</table>\n", f);
    for (int i = 0; i < x->n_schedules; i++)
        if (x->schedules[i].pe) schedule_section(f, x->schedules[i].pp, x->schedules[i].pe);
    timeline_section(f, x);
    memory_sections(f, x, e);
    shardings_section(f, x);
    search_section(f, &pl->search);
    fprintf(f, "\n<script>%s</script>\n</body></html>\n", script);
    return ferror(f) ? -1 : 0;
}
