/* oracle.c - a checked run's second reference: the user's plain step
 * (session.h, session_run_set_plain).
 *
 * The run's first reference executes the step the devices run, rewritten
 * (recomputation, micro-batches) or unrolled (a pipeline's micro-batches),
 * on one device: it catches a wrong partition, not a rewrite that changes
 * the training step.  This one executes the model as written: the same
 * params and optimizer states (the same names, so the same seeded values),
 * the same batch, no recomputation, no micro-batches, no pipeline.  Its
 * inputs are the rewritten step's micro-batches put back together: input
 * X of the plain step is, along the one dim where its size is N times a
 * micro-batch's, the N inputs the micro-batch rewrite records as micro-batch
 * k of X (ir_value.batch_of and micro).
 *
 * Every output of the plain step (the loss, each updated param and state)
 * must have its counterpart among the run's outputs (matched by the
 * argument it updates): a rewrite that drops an update fails here, before
 * any number is compared.  Then, after every step, the run's outputs are
 * compared with the plain step's (exec_spmd_compare: the same tolerance and
 * noise rule as the first check; recomputation is exact, micro-batches sum
 * the batch's terms in another order, as the devices do), and before the
 * next step the plain step starts from the run's params and states
 * (exec_spmd_sync_reference), as the first reference does.
 *
 * Not compared with the plain step (the report says why), a micro-batched
 * or pipelined step whose micro-batches are not the whole batch's step in
 * exact arithmetic: with dropout (a micro-batch draws its masks with its
 * own seed, ir_microbatch_seed, the plain step one mask over the whole
 * batch), or with a loss that couples the batch's examples
 * (ir_graph.batch_coupled: a mixture of experts' load-balancing loss, a
 * product of batch means).  Recomputation re-draws the same masks and
 * recomputes the same loss, and is compared.
 */
#include "session/oracle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct session_oracle {
    ir_graph *g;        /* the plain step, owned */
    const ir_graph *rg; /* the graph the devices run (a pipeline's body) */
    int root;           /* this process holds the references */
    exec_ref *ref;      /* root only */
    exec_spmd_check c;
    int check_ready;
    session_plain_state state;
    char note[512];
};

/* The run's output updating the argument named `name`, or the loss when
 * name is NULL; -1 when there is none. */
static int run_output(const ir_graph *rg, const char *name)
{
    for (int i = 0; i < rg->n_outputs; i++) {
        const ir_output *o = &rg->outputs[i];
        if (name ? o->updates >= 0 && !strcmp(rg->values[o->updates].name, name) : o->value == rg->loss) return i;
    }
    return -1;
}

/* The plain step's outputs the run lacks, named in o->note; returns how many. */
static int missing_outputs(session_oracle *o)
{
    const ir_graph *g = o->g;
    int n = 0;
    size_t k = 0;
    for (int i = 0; i < g->n_outputs; i++) {
        const ir_output *out = &g->outputs[i];
        const char *name = out->updates >= 0 ? g->values[out->updates].name : NULL;
        if (out->updates < 0 && out->value != g->loss) continue;
        if (run_output(o->rg, name) >= 0) continue;
        if (n++ < 4 && k < sizeof o->note)
            k += (size_t)snprintf(o->note + k, sizeof o->note - k, "%s%s", n > 1 ? ", " : "", name ? name : "the loss");
    }
    if (n > 4 && k < sizeof o->note) snprintf(o->note + k, sizeof o->note - k, " and %d more", n - 4);
    return n;
}

/* 1 when g draws dropout masks. */
static int has_dropout(const ir_graph *g)
{
    for (int i = 0; i < g->n_ops; i++)
        if (g->ops[i].kind == IR_OP_DROPOUT_MASK) return 1;
    return 0;
}

session_oracle *session_oracle_new(ir_graph *plain, const ir_graph *run_g, const ir_graph *check_g, int root)
{
    session_oracle *o = ir_xcalloc(1, sizeof *o);
    o->g = plain;
    o->rg = run_g;
    o->root = root;
    int split = check_g->rewrites.microbatches > 1 || run_g->rewrites.pipe_body > 1;
    if (split && has_dropout(plain)) {
        o->state = SESSION_PLAIN_SKIPPED;
        snprintf(o->note, sizeof o->note, "the step draws dropout masks per micro-batch (ir_microbatch_seed), the plain step "
                                          "one mask over the whole batch: not the same masks");
    } else if (split && plain->batch_coupled) {
        o->state = SESSION_PLAIN_SKIPPED;
        snprintf(o->note, sizeof o->note, "the model's loss couples the batch's examples (a mixture of experts' load-balancing "
                                          "loss, a product of batch means), so micro-batches change the training step itself, as "
                                          "in Megatron-LM and DeepSpeed; only the rewritten step is checked");
    } else if (missing_outputs(o) > 0) {
        char names[sizeof o->note];
        snprintf(names, sizeof names, "%s", o->note);
        o->state = SESSION_PLAIN_MISSING;
        snprintf(o->note, sizeof o->note, "the run has no output for %.400s, which the plain step updates", names);
    } else {
        o->state = SESSION_PLAIN_CHECKED;
    }
    return o;
}

size_t session_oracle_bytes(const session_oracle *o) { return o->state == SESSION_PLAIN_CHECKED ? exec_ref_bytes(o->g) : 0; }

/* The dim along which plain input x is N copies of micro-batch input m's
 * shape (the other dims equal), or -1. */
static int split_dim(const ir_value *x, const ir_value *m, int n)
{
    int d = -1;
    if (x->rank != m->rank) return -1;
    for (int i = 0; i < x->rank; i++) {
        if (x->dims[i] == m->dims[i]) continue;
        if (d >= 0 || x->dims[i] != m->dims[i] * n) return -1;
        d = i;
    }
    return n == 1 ? (d < 0 ? 0 : -1) : d;
}

/* Plain input v: from the check graph's micro-batches of it (their values
 * in cref), or the same named input (the same seeded values).  Returns 0,
 * or -1 with a message. */
static int plain_input(session_oracle *o, int v, const ir_graph *cg, exec_ref *cref, char *err, size_t errlen)
{
    const ir_value *x = &o->g->values[v];
    int parts[64], n = 0;
    for (int u = 0; u < cg->n_values && n < 64; u++)
        if (cg->values[u].role == IR_INPUT && cg->values[u].batch_of && !strcmp(cg->values[u].batch_of, x->name)) parts[n++] = u;
    if (n == 0) {
        int u = ir_find(cg, x->name);
        if (u < 0 || cg->values[u].role != IR_INPUT || ir_numel(&cg->values[u]) != ir_numel(x))
            return ir_errf(err, errlen, "the plain step's input '%s' is not an input of the run's step", x->name);
        return 0; /* filled from the same stream */
    }
    int64_t outer = 1, inner = 1;
    int d = split_dim(x, &cg->values[parts[0]], n);
    if (d < 0)
        return ir_errf(err, errlen, "the plain step's input '%s' is not %d micro-batches of '%s' along one dim", x->name, n,
                       cg->values[parts[0]].name);
    for (int i = 0; i < d; i++) outer *= x->dims[i];
    for (int i = d + 1; i < x->rank; i++) inner *= x->dims[i];
    int64_t rows = x->dims[d] / n;
    char *dst = exec_ref_data(o->ref, v);
    for (int j = 0; j < n; j++) {
        const ir_value *m = &cg->values[parts[j]];
        int k = m->micro;
        if (k < 0 || k >= n || split_dim(x, m, n) != d)
            return ir_errf(err, errlen, "'%s' is not micro-batch k < %d of '%s'", m->name, n, x->name);
        const char *src = exec_ref_data(cref, parts[j]);
        for (int64_t q = 0; q < outer; q++)
            memcpy(dst + 4 * ((q * x->dims[d] + (int64_t)k * rows) * inner), src + 4 * (q * rows * inner), (size_t)(4 * rows * inner));
    }
    return 0;
}

int session_oracle_start(session_oracle *o, exec_ref *check_ref, const ir_graph *check_g, uint64_t seed, char *err, size_t errlen)
{
    char e2[512];
    if (o->state != SESSION_PLAIN_CHECKED) return 0;
    if (o->root) {
        if (!(o->ref = exec_ref_new(o->g, 0, e2, sizeof e2))) return ir_errf(err, errlen, "the plain step: %s", e2);
        exec_ref_init_args(o->ref, seed);
        for (int v = 0; v < o->g->n_values; v++)
            if (o->g->values[v].role == IR_INPUT && plain_input(o, v, check_g, check_ref, err, errlen) < 0) return -1;
    }
    if (exec_spmd_check_init(&o->c, o->g, e2, sizeof e2) < 0) return ir_errf(err, errlen, "%s", e2);
    o->check_ready = 1;
    return 0;
}

int session_oracle_run(session_oracle *o, char *err, size_t errlen)
{
    char e2[512];
    if (o->state != SESSION_PLAIN_CHECKED || !o->ref) return 0;
    if (exec_ref_run(o->ref, e2, sizeof e2) < 0) return ir_errf(err, errlen, "the plain step's executor failed: %s", e2);
    return 0;
}

int session_oracle_compare(session_oracle *o, exec_spmd *rt, char *err, size_t errlen)
{
    char e2[512];
    if (o->state != SESSION_PLAIN_CHECKED) return 0;
    if (exec_spmd_compare(rt, o->ref, &o->c, e2, sizeof e2) < 0) return ir_errf(err, errlen, "the plain step: %s", e2);
    return 0;
}

void session_oracle_advance(session_oracle *o, exec_spmd *rt)
{
    if (o->state == SESSION_PLAIN_CHECKED) exec_spmd_sync_reference(rt, o->ref);
}

int session_oracle_ok(const session_oracle *o)
{
    return o->state == SESSION_PLAIN_SKIPPED || (o->state == SESSION_PLAIN_CHECKED && exec_spmd_check_ok(&o->c, EXEC_SPMD_TOLERANCE));
}

session_plain_check session_oracle_report(const session_oracle *o)
{
    session_plain_check p = {o->state, o->state == SESSION_PLAIN_CHECKED ? &o->c : NULL, o->g, o->note};
    return p;
}

void session_oracle_free(session_oracle *o)
{
    if (!o) return;
    if (o->check_ready) exec_spmd_check_free(&o->c);
    exec_ref_free(o->ref);
    ir_free(o->g);
    free(o);
}
