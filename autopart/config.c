/* config.c (autopart) - configurations of the levels above the sharding
 * search, and the schedules they stand for (see config.h). */
#include "autopart/config.h"

#include <stdio.h>
#include <string.h>

autopart_config autopart_config_none(void)
{
    autopart_config c;
    memset(&c, 0, sizeof c);
    c.pipe.axis = -1;
    return c;
}

int autopart_config_piped(const autopart_config *c) { return c->pipe.axis >= 0; }

/* c's own tactics, in the order they are written, into t (at most 3);
 * the pipeline pinned to `resolved` when given (its split into split, n
 * bytes).  Returns how many, or -1 when the split does not fit. */
static int config_tactics(const autopart_config *c, const pipe_spec *resolved, tactic *t, char *split, size_t n)
{
    int k = 0;
    split[0] = 0;
    if (autopart_config_piped(c)) {
        pipe_spec ps = pipe_spec_none();
        if (resolved) ps = *resolved;
        else {
            ps.axis = c->pipe.axis;
            ps.schedule = c->pipe.schedule;
            ps.chunks = c->pipe.chunks;
            ps.microbatches = c->pipe.microbatches;
            ps.split_auto = 1;
        }
        if (sched_pipeline_tactic(&ps, &t[k++], split, n) < 0) return -1;
    }
    static const int mode[] = {[AUTOPART_REMAT_SELECTIVE] = IR_REMAT_SELECTIVE, [AUTOPART_REMAT_FULL] = IR_REMAT_FULL,
                               [AUTOPART_REMAT_ATTN] = IR_REMAT_ATTN};
    if (c->remat != AUTOPART_REMAT_NONE)
        t[k++] = sched_remat_tactic(0, c->remat_layers > 0 ? c->remat_layers - 1 : SCHED_ALL_LAYERS, mode[c->remat]);
    if (c->microbatches > 1) t[k++] = sched_microbatch_tactic(c->microbatches);
    return k;
}

int autopart_config_schedule(const autopart_config *c, const pipe_spec *resolved, int keep, const schedule *tail,
                             schedule *out, char *err, size_t errlen)
{
    tactic own[3];
    memset(out, 0, sizeof *out);
    int k = config_tactics(c, resolved, own, out->split, sizeof out->split);
    if (k < 0) return ir_errf(err, errlen, "the pipeline's layer split is longer than %d characters", SCHED_SPLIT_LEN - 1);
    if (k + keep + tail->n > SCHED_MAX_TACTICS) return ir_errf(err, errlen, "schedule: more than %d tactics", SCHED_MAX_TACTICS);
    for (int i = 0; i < k; i++) out->t[out->n++] = own[i];
    if (keep) {
        tactic g;
        memset(&g, 0, sizeof g);
        g.kind = TACTIC_GATHER;
        g.axis = -1;
        g.lo = g.hi = SPMD_GATHER_KEEP;
        out->t[out->n++] = g;
    }
    for (int i = 0; i < tail->n; i++) out->t[out->n++] = tail->t[i];
    if (!autopart_config_piped(c)) memcpy(out->split, tail->split, sizeof out->split);
    return 0;
}

char *autopart_config_str(const autopart_config *c, const shard_mesh *mesh, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    if (autopart_config_piped(c)) {
        pipe_choice_text(&c->pipe, mesh, buf, n);
        k = strlen(buf);
    }
    static const char *const remat[] = {[AUTOPART_REMAT_SELECTIVE] = "remat:all", [AUTOPART_REMAT_FULL] = "remat:full",
                                        [AUTOPART_REMAT_ATTN] = "remat:attn"};
    static const char *const mode[] = {[AUTOPART_REMAT_SELECTIVE] = "", [AUTOPART_REMAT_FULL] = ":full",
                                       [AUTOPART_REMAT_ATTN] = ":attn"};
    if (c->remat != AUTOPART_REMAT_NONE && c->remat_layers > 0 && k < n) /* some layers: remat:0-11[:full|:attn] */
        k += (size_t)snprintf(buf + k, n - k, "%sremat:0-%d%s", k ? "," : "", c->remat_layers - 1, mode[c->remat]);
    else if (c->remat != AUTOPART_REMAT_NONE && k < n)
        k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? "," : "", remat[c->remat]);
    if (c->microbatches > 1 && k < n) snprintf(buf + k, n - k, "%smicrobatch:%d", k ? "," : "", c->microbatches);
    return buf;
}
