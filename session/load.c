/* load.c - a command's input into a training step (session.h).
 *
 * Every input goes through one table of front ends: each row names the
 * flag that selects it, how the usage error describes it, and a builder
 * that turns its argument into a graph.  A builder returns either a
 * training step it built itself (a model: models/ builds the step at
 * batch / N for N micro-batches) or a forward graph, which the loader turns
 * into a step the same way for every front end: a graph that already
 * updates its arguments is used as is, a forward graph needs a loss, has
 * every param checked for a gradient (ir_check_gradients) and gets its
 * backward pass and optimizer (ir_train_step).  Then the schedule's remat:
 * tactics rewrite the step.  A new reader is one more row here: nothing
 * downstream changes (the ONNX reader is the third).
 */
#include "session/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "analysis/structure.h"
#include "models/models.h"
#include "onnx/onnx.h"

/* One front end of the IR. */
typedef struct front_end {
    const char *flag;  /* the command's flag that names it */
    const char *what;  /* how the usage error describes it */
    int micro_batches; /* it can build the step of N micro-batches (else its batch is fixed) */
    const char *(*arg)(const session_source *s);
    /* Builds the input named `arg`: the forward graph when s->forward,
     * else a training step of `micro` micro-batches (*is_step = 1) or a
     * forward graph with a loss (*is_step = 0).  label gets the input's
     * name.  NULL with a message. */
    ir_graph *(*build)(const char *arg, const session_source *s, const ir_optimizer *opt, int micro, int *is_step,
                       char *label, size_t n, char *err, size_t errlen);
} front_end;

static const char *model_arg(const session_source *s) { return s->model; }
static const char *graph_arg(const session_source *s) { return s->graph && !onnx_is_onnx_path(s->graph) ? s->graph : NULL; }
static const char *onnx_arg(const session_source *s) { return s->graph && onnx_is_onnx_path(s->graph) ? s->graph : NULL; }

/* The micro-batches of s's pipeline for a model of `batch` sequences: 0
 * when s has no pipeline, -1 with a message. */
static int pipeline_microbatches(const session_source *s, int64_t batch, char *err, size_t errlen)
{
    const tactic *t = NULL;
    for (int i = 0; s->sched && i < s->sched->n; i++)
        if (s->sched->t[i].kind == TACTIC_PIPELINE) t = &s->sched->t[i];
    if (!t || s->forward) return 0;
    if (t->lo) return t->lo;
    pipe_spec ps;
    if (!s->mesh) return ir_errf(err, errlen, "pipeline: give its micro-batches (pipeline:AXIS:M)");
    return sched_pipeline(s->sched, s->mesh, batch, -1, &ps, err, errlen) < 0 ? -1 : ps.microbatches;
}

static ir_graph *build_model(const char *arg, const session_source *s, const ir_optimizer *opt, int micro, int *is_step,
                             char *label, size_t n, char *err, size_t errlen)
{
    model_config cfg;
    if (model_parse(arg, &cfg, err, errlen) < 0) return NULL;
    model_config_str(&cfg, label, n);
    *is_step = !s->forward;
    int bk = model_batch_key(&cfg);
    int pipe_m = pipeline_microbatches(s, bk >= 0 ? cfg.values[bk] : -1, err, errlen);
    if (pipe_m < 0) return NULL;
    if (pipe_m > 0) return model_build_pipeline_body(&cfg, opt, pipe_m, err, errlen);
    return s->forward ? model_build_forward(&cfg, err, errlen) : model_build_microbatched_step(&cfg, opt, micro, err, errlen);
}

/* What a file's front ends check first: a pipeline's body or a step of
 * micro-batches needs a model built at the micro-batch (a graph file, what
 * not NULL, has a fixed batch; an ONNX file's is cut: rebatch); the path
 * becomes the label.  Returns 0, or -1 with a message. */
static int file_label(const char *arg, const char *what, const session_source *s, int micro, char *label, size_t n,
                      char *err, size_t errlen)
{
    for (int i = 0; s->sched && !s->forward && what && i < s->sched->n; i++)
        if (s->sched->t[i].kind == TACTIC_PIPELINE)
            return ir_errf(err, errlen, "pipeline: needs --model (the step is built as one micro-batch's body); %s has a fixed batch",
                           what);
    if (micro > 1 && !s->forward && what)
        return ir_errf(err, errlen, "microbatch:%d: needs --model (the model is built at batch / %d); %s has a fixed batch",
                       micro, micro, what);
    if (strlen(arg) >= n)
        return ir_errf(err, errlen, "--graph: the path is %zu characters, more than the %zu this command keeps", strlen(arg), n - 1);
    snprintf(label, n, "%s", arg);
    return 0;
}

static ir_graph *build_graph_file(const char *arg, const session_source *s, const ir_optimizer *opt, int micro,
                                  int *is_step, char *label, size_t n, char *err, size_t errlen)
{
    (void)opt;
    if (file_label(arg, "a graph file", s, micro, label, n, err, errlen) < 0) return NULL;
    ir_graph *g = ir_load_json_file(arg, err, errlen);
    if (g) *is_step = session_is_step(g);
    return g;
}

static int attention_fused(const session_source *src);
static int fuse_attention(ir_graph **g, const session_source *src, const char *label, char *err, size_t errlen);
static ir_graph *train_step(ir_graph *fwd, const ir_optimizer *opt, const char *label, char *err, size_t errlen);

int64_t session_step_batch(const ir_graph *g)
{
    char why[256];
    shard_groups *gs = shard_groups_build(g);
    unsigned *mask = ir_xcalloc((size_t)g->n_values + 1, sizeof *mask);
    int64_t batch = -1;
    if (shard_batch_dims(g, gs, mask, &batch, why, sizeof why) < 0 || batch < 1) batch = -1;
    free(mask);
    shard_groups_free(gs);
    return batch;
}

/* The message when g has no batch dim (why): where a param shares the
 * first input's dim 0 (torch 2's exporter folds a mask expanded to the batch
 * into an initializer), it is named with the flag that keeps it constant. */
static void batch_param_hint(const ir_graph *g, const shard_groups *gs, const char *why, const char *label, char *err,
                             size_t errlen)
{
    for (int v = 0; v < g->n_values; v++) {
        if (g->values[v].role != IR_INPUT || g->values[v].rank < 1) continue;
        const shard_group *G = &gs->groups[gs->dim_group[gs->dim_base[v]]];
        for (int k = 0; k < G->n; k++) {
            const ir_value *p = &g->values[gs->members[G->first + k].value];
            if (p->role != IR_PARAM) continue;
            ir_errf(err, errlen, "%s: micro-batches need the batch dim: param '%s' shares dim 0 of input '%s' (an initializer "
                    "the exporter folded from the batch, such as an attention mask? keep it constant: --frozen %s)", label, p->name,
                    g->values[v].name, p->name);
            return;
        }
        break;
    }
    ir_errf(err, errlen, "%s: micro-batches need the batch dim: %s", label, why);
}

/* Forward graph fwd (freed) at 1/m of its batch, where m is micro (> 1) or,
 * with micro 0, s's pipeline's micro-batches (its M, or the default for the
 * batch found): ir_rebatch on the dims of the batch group (the dim group the
 * loss reduces over that no param shares, analysis/structure.h).  NULL with
 * a message; *m gets the micro-batches. */
static ir_graph *rebatch(ir_graph *fwd, const session_source *s, int micro, int *m, const char *label, char *err, size_t errlen)
{
    char why[512];
    shard_groups *gs = shard_groups_build(fwd);
    unsigned *mask = ir_xcalloc((size_t)fwd->n_values + 1, sizeof *mask);
    int64_t batch = 0;
    int coupled = 0;
    ir_graph *out = NULL;
    *m = micro;
    if (shard_batch_dims(fwd, gs, mask, &batch, why, sizeof why) < 0)
        batch_param_hint(fwd, gs, why, label, err, errlen);
    else if (!micro && (*m = pipeline_microbatches(s, batch, err, errlen)) < 0)
        ;
    else if (batch % *m)
        ir_errf(err, errlen, "%s: the batch (%lld) does not divide into %d micro-batches", label, (long long)batch, *m);
    else if (!(out = ir_rebatch(fwd, *m, mask, &coupled, why, sizeof why)))
        ir_errf(err, errlen, "%s: %s", label, why);
    else if (coupled) {
        ir_free(out);
        out = NULL;
        ir_errf(err, errlen, "%s: a reduction over the batch flows back into the examples (a training-mode BatchNormalization): "
                "%d micro-batches would not compute the batch's step", label, *m);
    }
    free(mask);
    shard_groups_free(gs);
    ir_free(fwd);
    return out;
}

/* The micro-batches the step of s is built for, as micro_step takes them:
 * 0 under a pipeline (its body: one micro-batch), else micro (1: the
 * batch's step as it is). */
static int step_microbatches(const session_source *s, int micro)
{
    for (int i = 0; s->sched && i < s->sched->n; i++)
        if (s->sched->t[i].kind == TACTIC_PIPELINE) return 0;
    return micro;
}

/* The step of forward graph fwd (freed) built at the micro-batch: with
 * micro 0 a pipeline's body (the loss scaled by 1/M, as
 * model_build_pipeline_body), else the step of micro micro-batches
 * (ir_microbatch, as model_build_microbatched_step).  NULL with a message. */
static ir_graph *micro_step(ir_graph *fwd, const session_source *s, const ir_optimizer *opt, int micro, const char *label,
                            char *err, size_t errlen)
{
    int m;
    if (attention_fused(s) && fuse_attention(&fwd, s, label, err, errlen) < 0) return NULL;
    ir_graph *g = rebatch(fwd, s, micro, &m, label, err, errlen), *step;
    if (!g) return NULL;
    if (!micro && ir_scale_loss(g, 1.0 / m, err, errlen) < 0) {
        ir_free(g);
        return NULL;
    }
    if (!(step = train_step(g, opt, label, err, errlen)) || !micro) {
        if (step) step->rewrites.pipe_body = m; /* the record pipe_body_microbatches reads */
        return step;
    }
    g = ir_microbatch(step, m, err, errlen);
    ir_free(step);
    return g;
}

/* An ONNX file (onnx/onnx.h): its forward graph with a loss, shapes only
 * unless the source asks for the weights (a run); under a pipeline or
 * microbatch:N, the step built at the micro-batch (micro_step). */
/* The last import of an ONNX file without its weights, kept for the next
 * build of the same file with the same options: autopart's levels build
 * the step of one file for every configuration they price (an import of a
 * 70B-parameter export takes ~220 MB and a few tenths of a second; a clone
 * of the graph a few MB).  The key names the path, the options and the
 * file's identity (device, inode, size, modification time), so a file
 * written again is imported again.  Imports with weights are not kept (the
 * cache would hold the weights). */
static struct {
    char *key;
    ir_graph *g;
    char notes[sizeof(((onnx_info *)0)->notes)];
} onnx_last;

/* The cache key of importing arg under s, or NULL when the file cannot be
 * looked at (the import then says why). */
static char *onnx_key(const char *arg, const session_source *s)
{
    struct stat st;
    if (stat(arg, &st) < 0) return NULL;
    const char *opt[3] = {s->dims, s->loss, s->frozen};
    size_t n = strlen(arg) + 256;
    for (int i = 0; i < 3; i++) n += opt[i] ? strlen(opt[i]) : 0;
    char *k = ir_xcalloc(n, 1);
    snprintf(k, n, "%s|%s|%s|%s|%llu|%llu|%lld|%lld.%09ld", arg, opt[0] ? opt[0] : "-", opt[1] ? opt[1] : "-", opt[2] ? opt[2] : "-",
             (unsigned long long)st.st_dev, (unsigned long long)st.st_ino, (long long)st.st_size, (long long)st.st_mtim.tv_sec,
             st.st_mtim.tv_nsec);
    return k;
}

ir_graph *session_unmerge(ir_graph *g, int *regions, char *notes, size_t n)
{
    if (!g) return NULL;
    int r = 0;
    char e2[IR_ERR_LEN];
    ir_graph *h = ir_unmerge(g, &r, e2, sizeof e2);
    if (regions) *regions = h ? r : 0;
    if (!h) {
        size_t k = strlen(notes);
        snprintf(notes + k, n - k, "%smerged dims kept as imported (%s)", k ? "; " : "", e2);
        return g;
    }
    ir_free(g);
    return h;
}

/* arg imported under s (a clone of the last import when it is the same
 * one; the merged dims kept apart: session_unmerge), its notes into notes.  NULL
 * with a message. */
static ir_graph *onnx_import_kept(const char *arg, const session_source *s, char *notes, size_t notes_len, char *err,
                                  size_t errlen)
{
    onnx_options o = {.weights = s->weights, .dims = s->dims, .loss = s->loss, .frozen = s->frozen};
    onnx_info info;
    char *key = s->weights ? NULL : onnx_key(arg, s);
    ir_graph *g = NULL;
#pragma omp critical(session_onnx_last)
    {
        if (key && onnx_last.key && !strcmp(key, onnx_last.key)) {
            g = ir_clone(onnx_last.g);
            snprintf(info.notes, sizeof info.notes, "%s", onnx_last.notes);
        } else if ((g = session_unmerge(onnx_import(arg, &o, &info, err, errlen), NULL, info.notes, sizeof info.notes)) && key) {
            free(onnx_last.key);
            ir_free(onnx_last.g);
            onnx_last.key = key;
            onnx_last.g = ir_clone(g);
            snprintf(onnx_last.notes, sizeof onnx_last.notes, "%s", info.notes);
            key = NULL;
        }
    }
    free(key);
    if (g && notes && notes_len) snprintf(notes, notes_len, "%s", info.notes);
    return g;
}

static ir_graph *build_onnx(const char *arg, const session_source *s, const ir_optimizer *opt, int micro, int *is_step,
                            char *label, size_t n, char *err, size_t errlen)
{
    if (file_label(arg, NULL, s, micro, label, n, err, errlen) < 0) return NULL;
    ir_graph *g = onnx_import_kept(arg, s, s->notes, s->notes_len, err, errlen);
    *is_step = 0;
    int at = step_microbatches(s, micro);
    if (!g || s->forward || at == 1) return g;
    *is_step = 1;
    return micro_step(g, s, opt, at, label, err, errlen);
}

static const front_end front_ends[] = {
    {"--model", "a model (--model gpt-tiny, see carve models)", 1, model_arg, build_model},
    {"--graph", "a graph file (--graph file.json)", 0, graph_arg, build_graph_file},
    {"--graph", "an ONNX file (--graph model.onnx)", 1, onnx_arg, build_onnx},
};
enum { N_FRONT_ENDS = sizeof front_ends / sizeof front_ends[0] };

ir_optimizer session_optimizer(const char *name)
{
    ir_optimizer opt = ir_default_adam();
    if (name && !strcmp(name, "sgd")) {
        opt.kind = IR_SGD;
        opt.lr = 0.01;
    }
    return opt;
}

int session_is_step(const ir_graph *g)
{
    for (int i = 0; i < g->n_outputs; i++)
        if (g->outputs[i].updates >= 0) return 1;
    return 0;
}

/* The front end src names; NULL with a message when it names none or
 * several. */
static const front_end *pick_front_end(const session_source *src, char *err, size_t errlen)
{
    const front_end *fe = NULL;
    int named = 0;
    for (int i = 0; i < N_FRONT_ENDS; i++)
        if (front_ends[i].arg(src)) {
            fe = &front_ends[i];
            named++;
        }
    if (named == 1) return fe;
    char list[256];
    size_t k = 0;
    list[0] = 0;
    int shown = 0, to_show = N_FRONT_ENDS;
    if (named) /* flags, each once (a graph file and an ONNX file share --graph) */
        for (int i = 1; i < N_FRONT_ENDS; i++)
            for (int j = 0; j < i; j++)
                if (!strcmp(front_ends[i].flag, front_ends[j].flag)) {
                    to_show--;
                    break;
                }
    for (int i = 0; i < N_FRONT_ENDS && k < sizeof list; i++) {
        int dup = 0;
        for (int j = 0; named && j < i; j++) dup |= !strcmp(front_ends[i].flag, front_ends[j].flag);
        if (dup) continue;
        k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", shown == 0 ? "" : shown + 1 < to_show ? ", " : " or ",
                              named ? front_ends[i].flag : front_ends[i].what);
        shown++;
    }
    if (named) ir_errf(err, errlen, "give %s, not %s", list, to_show == 2 ? "both" : "more than one");
    else ir_errf(err, errlen, "give %s", list);
    return NULL;
}

/* Whether src's graph file gets its attention fused: --attention, else
 * the presets' default. */
static int attention_fused(const session_source *src)
{
    if (src->attention) return !strcmp(src->attention, "fused");
    return MODEL_ATTENTION_DEFAULT == MODEL_ATTENTION_FUSED;
}

/* Fuses the attention chains of forward graph *g (replaced; freed on
 * error), saying how many into src's notes when --attention asked for it
 * (the default fuses silently).  Returns 0, or -1 with a message. */
static int fuse_attention(ir_graph **g, const session_source *src, const char *label, char *err, size_t errlen)
{
    int fused, kept;
    char why[200], e2[512];
    ir_graph *f = ir_fuse_attention(*g, &fused, &kept, why, sizeof why, e2, sizeof e2);
    ir_free(*g);
    *g = f;
    if (!f) return ir_errf(err, errlen, "%s: %s", label, e2);
    if (src->attention && src->notes && src->notes_len && (fused || kept)) { /* asked for: said (the default is silent) */
        char line[320];
        size_t k = strlen(src->notes);
        if (kept) snprintf(line, sizeof line, "attention fused in %d places, %d kept as written (%s)", fused, kept, why);
        else snprintf(line, sizeof line, "attention fused in %d places", fused);
        snprintf(src->notes + k, src->notes_len - k, "%s%s", k ? "; " : "", line);
    }
    return 0;
}

/* The training step of forward graph fwd (from the input named label):
 * fwd is freed.  NULL with a message. */
static ir_graph *train_step(ir_graph *fwd, const ir_optimizer *opt, const char *label, char *err, size_t errlen)
{
    if (fwd->loss < 0) {
        ir_free(fwd);
        return ir_errf(err, errlen, "%s: the graph has no loss and no updated arguments: nothing to train", label), NULL;
    }
    char e2[IR_ERR_LEN + 128];
    ir_graph *step = ir_check_gradients(fwd, e2, sizeof e2) < 0 ? NULL : ir_train_step(fwd, opt, e2, sizeof e2);
    ir_free(fwd);
    if (!step) ir_errf(err, errlen, "%s: %s", label, e2);
    return step;
}

ir_graph *session_load_step(const session_source *src, char *label, size_t n, int *rewrite_failed, char *err,
                            size_t errlen)
{
    if (rewrite_failed) *rewrite_failed = 0;
    const front_end *fe = pick_front_end(src, err, errlen);
    if (!fe) return NULL;
    if (fe->build != build_onnx && (src->dims || src->loss || src->frozen))
        return ir_errf(err, errlen, "%s is an ONNX file's import option: give --graph FILE.onnx",
                       src->dims ? "--dim" : src->loss ? "--loss" : "--frozen"),
               NULL;
    ir_optimizer opt = session_optimizer(src->optimizer);
    int is_step = 0, micro = src->sched ? sched_microbatches(src->sched) : 1;
    if (micro > 1 && !fe->micro_batches && src->micro_as_tactic) micro = 1;
    if (src->attention && fe->build == build_model)
        return ir_errf(err, errlen, "--attention is a graph file's option; a model takes attention=fused|materialized in its "
                       "spec (e.g. --model %s:attention=fused)", src->model), NULL;
    ir_graph *g = fe->build(fe->arg(src), src, &opt, micro, &is_step, label, n, err, errlen);
    if (g && fe->build != build_model && !is_step && attention_fused(src) && fuse_attention(&g, src, label, err, errlen) < 0)
        return NULL;
    if (!g || src->forward) return g;
    if (!is_step && !(g = train_step(g, &opt, label, err, errlen))) return NULL;
    /* graph tactics (remat) rewrite the step before anything shards it */
    if (src->sched && sched_rewrite(src->sched, &g, err, errlen) < 0) {
        if (rewrite_failed) *rewrite_failed = 1;
        ir_free(g);
        return NULL;
    }
    return g;
}

ir_graph *session_load_plain(const session_source *src, char *err, size_t errlen)
{
    session_source plain = *src;
    char label[2048];
    plain.sched = NULL; /* the model as written: built at its batch, nothing rewritten */
    plain.mesh = NULL;
    plain.forward = 0;
    plain.notes = NULL;
    return session_load_step(&plain, label, sizeof label, NULL, err, errlen);
}

ir_graph *session_spec_step(void *spec, const shard_mesh *mesh, const schedule *sc, const char *label, char *err,
                            size_t errlen)
{
    char name[512];
    session_source src = {.model = spec, .optimizer = "adam", .sched = sc, .micro_as_tactic = 1, .mesh = mesh};
    (void)label;
    return session_load_step(&src, name, sizeof name, NULL, err, errlen);
}
