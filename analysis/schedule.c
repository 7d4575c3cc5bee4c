/* schedule.c - parsing schedules and expanding tactics into decisions.
 * See schedule.h for the tactic language.  The expert tactics (dp, zero*,
 * megatron) find what to split from the graph's structure (structure.h), so
 * they apply to any graph, whatever its params are called. */
#include "schedule.h"
#include "pipeline.h"
#include "spmd.h"

#include "groups.h"
#include "structure.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

static int parse_axis(const char *name, const shard_mesh *m, const char *tac, char *err, size_t n)
{
    int a = shard_mesh_axis(m, name);
    if (a < 0) {
        char ms[128];
        return ir_errf(err, n, "schedule: tactic '%s': unknown mesh axis '%s' (mesh is %s)", tac, name,
                    shard_mesh_str(m, ms, sizeof ms));
    }
    return a;
}

/* "all", "N" or "A-B" into t->lo, t->hi.  Returns 0 or -1. */
static int parse_layers(const char *text, tactic *t)
{
    if (!strcmp(text, "all")) {
        t->lo = 0;
        t->hi = SCHED_ALL_LAYERS;
        return 0;
    }
    char *end;
    if (!isdigit((unsigned char)text[0])) return -1;
    long a = strtol(text, &end, 10), b = a;
    if (*end == '-') {
        if (!isdigit((unsigned char)end[1])) return -1;
        b = strtol(end + 1, &end, 10);
    }
    if (*end || a > b || b >= SCHED_ALL_LAYERS) return -1;
    t->lo = (int)a;
    t->hi = (int)b;
    return 0;
}

/* pipeline:AXIS[:M[:SCHED[:SPLIT]]] (parts split at ':', np of them); the
 * split into split (SCHED_SPLIT_LEN bytes, the schedule's). */
static int parse_pipeline(const char *tac, char **parts, int np, const shard_mesh *m, tactic *t, char *split, char *err, size_t n)
{
    if (np < 2 || !parts[1][0])
        return ir_errf(err, n, "schedule: tactic '%s': write pipeline:AXIS, pipeline:AXIS:M, pipeline:AXIS:M:SCHED or pipeline:AXIS:M:SCHED:SPLIT", tac);
    t->kind = TACTIC_PIPELINE;
    t->dim = PIPE_1F1B;
    t->hi = 1;
    if ((t->axis = parse_axis(parts[1], m, tac, err, n)) < 0) return -1;
    if (m->sizes[t->axis] < 2)
        return ir_errf(err, n, "schedule: tactic '%s': axis '%s' has %lld device; a pipeline needs at least 2 stages", tac, parts[1],
                       (long long)m->sizes[t->axis]);
    if (np >= 3 && strcmp(parts[2], "auto")) {
        char *end;
        long c = strtol(parts[2], &end, 10);
        if (!isdigit((unsigned char)parts[2][0]) || *end || c < 1 || c > PIPE_MAX_MICROBATCHES)
            return ir_errf(err, n, "schedule: tactic '%s': M (micro-batches) must be a number in 1..%d", tac, PIPE_MAX_MICROBATCHES);
        t->lo = (int)c;
    }
    if (np >= 4) {
        const char *s = parts[3];
        if (!strcmp(s, "gpipe")) t->dim = PIPE_GPIPE;
        else if (!strcmp(s, "1f1b")) t->dim = PIPE_1F1B;
        else if (!strncmp(s, "interleaved-", 12) && isdigit((unsigned char)s[12])) {
            char *end;
            long v = strtol(s + 12, &end, 10);
            if (*end || v < 2 || v > 64)
                return ir_errf(err, n, "schedule: tactic '%s': interleaved-V needs V (model chunks per device) in 2..64", tac);
            t->dim = PIPE_INTERLEAVED;
            t->hi = (int)v;
        } else {
            return ir_errf(err, n, "schedule: tactic '%s': SCHED must be 1f1b, gpipe or interleaved-V (V chunks per device)", tac);
        }
    }
    if (t->dim == PIPE_INTERLEAVED && t->hi * m->sizes[t->axis] > PIPE_MAX_VSTAGES)
        return ir_errf(err, n, "schedule: tactic '%s': %lld virtual stages, at most %d", tac, (long long)(t->hi * m->sizes[t->axis]),
                       PIPE_MAX_VSTAGES);
    if (np >= 5 && strcmp(parts[4], "auto")) {
        const char *s = parts[4];
        int count = 0, digits = 0;
        for (const char *q = s; *q; q++) {
            if (isdigit((unsigned char)*q) && digits < 6) digits++;
            else if (*q == '/' && digits) count++, digits = 0;
            else if (isdigit((unsigned char)*q)) /* past 6 digits: 4294967298 wrapped to 2 in an int before */
                return ir_errf(err, n, "schedule: tactic '%.60s': SPLIT: a layer count of more than 6 digits", tac);
            else return ir_errf(err, n, "schedule: tactic '%s': SPLIT must be auto or layer counts joined by '/' (7/6/6/5)", tac);
        }
        if (!digits) return ir_errf(err, n, "schedule: tactic '%s': SPLIT must be auto or layer counts joined by '/' (7/6/6/5)", tac);
        if (++count != t->hi * m->sizes[t->axis])
            return ir_errf(err, n, "schedule: tactic '%s': SPLIT gives %d layer counts, the pipeline has %lld virtual stages", tac, count,
                           (long long)(t->hi * m->sizes[t->axis]));
        if (strlen(s) >= SCHED_SPLIT_LEN)
            return ir_errf(err, n, "schedule: tactic '%.40s...': SPLIT is longer than %d characters", tac, SCHED_SPLIT_LEN - 1);
        strcpy(split, s);
    }
    return 0;
}

/* One tactic's words after its name, parsed into t (parts[0] is the name,
 * np the count; tac the whole text, for messages): one parser a family, in
 * a table by name below.  Each returns 0 or -1 with a message. */
typedef struct tactic_text {
    const char *tac;
    char **parts;
    int np;
    tactic_kind kind; /* the table row's */
    char *split;      /* the schedule's pipeline split */
} tactic_text;
typedef int (*tactic_parser)(const tactic_text *x, const shard_mesh *m, tactic *t, char *err, size_t n);

static int parse_auto(const tactic_text *x, const shard_mesh *m, tactic *t, char *err, size_t n)
{
    if (x->np != 1) return ir_errf(err, n, "schedule: tactic '%s': auto takes no arguments", x->tac);
    t->kind = TACTIC_AUTO;
    t->axis = -1;
    return 0;
}

/* dp, megatron, zero1-3, ep: KIND:AXIS */
static int parse_axis_tactic(const tactic_text *x, const shard_mesh *m, tactic *t, char *err, size_t n)
{
    if (x->np != 2 || !x->parts[1][0]) return ir_errf(err, n, "schedule: tactic '%s': write %s:AXIS", x->tac, x->parts[0]);
    t->kind = x->kind;
    return (t->axis = parse_axis(x->parts[1], m, x->tac, err, n)) < 0 ? -1 : 0;
}

/* remat:LAYERS (selective), remat:LAYERS:full, remat:LAYERS:attn;
 * remat:full and remat:attn (= remat:all:full, remat:all:attn) */
static int parse_remat(const tactic_text *x, const shard_mesh *m, tactic *t, char *err, size_t n)
{
    static const char *const policy[] = {[IR_REMAT_FULL] = "full", [IR_REMAT_ATTN] = "attn"};
    int np = x->np, mode = IR_REMAT_SELECTIVE;
    const char *layers = np >= 2 ? x->parts[1] : "", *last = np >= 2 ? x->parts[np - 1] : "";
    for (int k = IR_REMAT_FULL; k <= IR_REMAT_ATTN; k++)
        if ((np == 3 || np == 2) && !strcmp(last, policy[k])) mode = k;
    if (np == 2 && mode != IR_REMAT_SELECTIVE) layers = "all";
    if ((np != 2 && !(np == 3 && mode != IR_REMAT_SELECTIVE)) || parse_layers(layers, t) < 0)
        return ir_errf(err, n,
                       "schedule: tactic '%s': write remat:all, remat:N or remat:A-B (layers), :full after them to "
                       "re-run each layer's whole forward or :attn to recompute only the attention cores; remat:full, remat:attn",
                       x->tac);
    t->kind = TACTIC_REMAT;
    t->axis = -1;
    t->dim = mode;
    return 0;
}

static int parse_microbatch(const tactic_text *x, const shard_mesh *m, tactic *t, char *err, size_t n)
{
    char *end;
    long c = x->np == 2 ? strtol(x->parts[1], &end, 10) : 0;
    if (x->np != 2 || !isdigit((unsigned char)x->parts[1][0]) || *end || c < 1 || c > 1024)
        return ir_errf(err, n, "schedule: tactic '%s': write microbatch:N with N in 1..1024", x->tac);
    t->kind = TACTIC_MICROBATCH;
    t->axis = -1;
    t->lo = t->hi = (int)c;
    return 0;
}

static int parse_gather(const tactic_text *x, const shard_mesh *m, tactic *t, char *err, size_t n)
{
    if (x->np != 2 || (strcmp(x->parts[1], "keep") && strcmp(x->parts[1], "regather")))
        return ir_errf(err, n, "schedule: tactic '%s': write gather:keep or gather:regather", x->tac);
    t->kind = TACTIC_GATHER;
    t->axis = -1;
    t->lo = t->hi = !strcmp(x->parts[1], "keep") ? SPMD_GATHER_KEEP : SPMD_GATHER_REGATHER;
    return 0;
}

/* The NAME of tile, group and atomic into t->pattern. */
static int parse_pattern(const tactic_text *x, const char *name, tactic *t, char *err, size_t n)
{
    if (!name[0] || strlen(name) >= SCHED_NAME_LEN)
        return ir_errf(err, n, "schedule: tactic '%s': NAME must take 1 to %d characters", x->tac, SCHED_NAME_LEN - 1);
    strcpy(t->pattern, name);
    return 0;
}

/* tile:NAME:DIM:AXIS, group:NAME:DIM:AXIS */
static int parse_tile(const tactic_text *x, const shard_mesh *m, tactic *t, char *err, size_t n)
{
    if (x->np != 4) return ir_errf(err, n, "schedule: tactic '%s': write %s:NAME:DIM:AXIS", x->tac, x->parts[0]);
    char *end;
    long d = strtol(x->parts[2], &end, 10);
    if (!x->parts[2][0] || *end || d < 0 || d >= IR_MAX_RANK)
        return ir_errf(err, n, "schedule: tactic '%s': DIM must be a number in 0..%d", x->tac, IR_MAX_RANK - 1);
    t->kind = x->kind;
    t->dim = (int)d;
    if (parse_pattern(x, x->parts[1], t, err, n) < 0) return -1;
    return (t->axis = parse_axis(x->parts[3], m, x->tac, err, n)) < 0 ? -1 : 0;
}

/* atomic:NAME:AXIS */
static int parse_atomic(const tactic_text *x, const shard_mesh *m, tactic *t, char *err, size_t n)
{
    if (x->np != 3) return ir_errf(err, n, "schedule: tactic '%s': write atomic:NAME:AXIS", x->tac);
    t->kind = TACTIC_ATOMIC;
    if (parse_pattern(x, x->parts[1], t, err, n) < 0) return -1;
    return (t->axis = parse_axis(x->parts[2], m, x->tac, err, n)) < 0 ? -1 : 0;
}

/* pipeline:AXIS[:M[:SCHED[:SPLIT]]] */
static int parse_pipeline_tactic(const tactic_text *x, const shard_mesh *m, tactic *t, char *err, size_t n)
{
    return parse_pipeline(x->tac, x->parts, x->np, m, t, x->split, err, n);
}

/* The tactics by name, in the order the unknown-tactic message and the
 * commands' help list them, each with its written form and what it does. */
static const struct {
    const char *name;
    tactic_kind kind;
    tactic_parser parse;
    const char *form, *does;
} tactic_table[] = {
    {"dp", TACTIC_DP, parse_axis_tactic, "dp:AXIS", "data parallel: the batch split over AXIS"},
    {"megatron", TACTIC_MEGATRON, parse_axis_tactic, "megatron:AXIS", "Megatron tensor parallelism (heads, MLP, vocabulary)"},
    {"zero1", TACTIC_ZERO1, parse_axis_tactic, "zero1:AXIS", "data parallel, optimizer states split (ZeRO-1)"},
    {"zero2", TACTIC_ZERO2, parse_axis_tactic, "zero2:AXIS", "data parallel, optimizer states and gradients split (ZeRO-2)"},
    {"zero3", TACTIC_ZERO3, parse_axis_tactic, "zero3:AXIS", "data parallel, params split too (ZeRO-3 / FSDP)"},
    {"ep", TACTIC_EP, parse_axis_tactic, "ep:AXIS", "expert parallelism: experts split, tokens routed by all-to-alls"},
    {"sp", TACTIC_SP, parse_axis_tactic, "sp:AXIS", "sequence parallelism: the sequence split (after megatron:AXIS)"},
    {"overlap", TACTIC_OVERLAP, parse_axis_tactic, "overlap:AXIS", "tensor-parallel communication overlapped with its einsums (priced)"},
    {"tile", TACTIC_TILE, parse_tile, "tile:NAME:DIM:AXIS", "split dim DIM of the arguments named NAME (globs)"},
    {"atomic", TACTIC_ATOMIC, parse_atomic, "atomic:NAME:AXIS", "keep those arguments whole on AXIS"},
    {"group", TACTIC_GROUP, parse_tile, "group:NAME:DIM:AXIS", "split every dim of NAME's dim group (the search's action)"},
    {"remat", TACTIC_REMAT, parse_remat, "remat:LAYERS[:full|:attn]",
     "recompute layers (all, N or A-B) in the backward pass: selective, full or attention only"},
    {"microbatch", TACTIC_MICROBATCH, parse_microbatch, "microbatch:N", "gradient accumulation over N micro-batches"},
    {"gather", TACTIC_GATHER, parse_gather, "gather:keep|regather", "ZeRO-3's params: the backward reuses or gathers again"},
    {"pipeline", TACTIC_PIPELINE, parse_pipeline_tactic, "pipeline:AXIS[:M[:SCHED[:SPLIT]]]",
     "pipeline stages over AXIS: M micro-batches, 1f1b, gpipe or interleaved-V, a layer split"},
    {"auto", TACTIC_AUTO, parse_auto, "auto", "the search decides the rest (carve autopart)"},
};
#define N_TACTIC_NAMES ((int)(sizeof tactic_table / sizeof tactic_table[0]))
_Static_assert(N_TACTIC_NAMES == TACTIC_N_KINDS, "tactic_table: one row per tactic_kind");

/* The name of tactic kind k (tactic_table's: the one spelling). */
static const char *tactic_name(int k)
{
    for (int i = 0; i < N_TACTIC_NAMES; i++)
        if ((int)tactic_table[i].kind == k) return tactic_table[i].name;
    return "?";
}

void sched_tactics_help(FILE *f)
{
    fprintf(f, "tactics (docs/schedule-format.md, docs/sharding.md):\n");
    for (int i = 0; i < N_TACTIC_NAMES; i++) fprintf(f, "  %-34s %s\n", tactic_table[i].form, tactic_table[i].does);
}

/* Parses one tactic "kind:args" (no commas) into t (a pipeline's split into
 * split, the schedule's). */
static int parse_tactic(const char *tac, const shard_mesh *m, tactic *t, char *split, char *err, size_t n)
{
    char buf[SCHED_SPLIT_LEN + 256];
    if (strlen(tac) >= sizeof buf)
        return ir_errf(err, n, "schedule: tactic '%.40s...' is %zu characters, at most %zu", tac, strlen(tac), sizeof buf - 1);
    strcpy(buf, tac);
    char *parts[5];
    int np = 0;
    for (char *p = buf, *q;; p = q + 1) {
        if (np == 5) /* text after the fifth field was dropped before */
            return ir_errf(err, n, "schedule: tactic '%.80s': more than 5 fields joined by ':' (the longest is "
                                   "pipeline:AXIS:M:SCHED:SPLIT)", tac);
        parts[np++] = p;
        q = strchr(p, ':');
        if (!q) break;
        *q = 0;
    }
    memset(t, 0, sizeof *t);
    for (int i = 0; i < N_TACTIC_NAMES; i++)
        if (!strcmp(parts[0], tactic_table[i].name))
            return tactic_table[i].parse(&(tactic_text){tac, parts, np, tactic_table[i].kind, split}, m, t, err, n);
    char known[256];
    size_t k = 0;
    for (int i = 0; i < N_TACTIC_NAMES && k < sizeof known; i++)
        k += (size_t)snprintf(known + k, sizeof known - k, "%s%s", i ? ", " : "", tactic_table[i].name);
    return ir_errf(err, n, "schedule: unknown tactic '%s' (known: %s)", parts[0], known);
}

/* At most one pipeline; no other tactic on its axis; not with microbatch. */
static int check_pipeline(const schedule *s, const shard_mesh *m, char *err, size_t n)
{
    int pipe = -1;
    for (int i = 0; i < s->n; i++)
        if (s->t[i].kind == TACTIC_PIPELINE) {
            if (pipe >= 0) return ir_errf(err, n, "schedule: two pipeline tactics; a plan has one pipeline");
            pipe = i;
        }
    if (pipe < 0) return 0;
    int axis = s->t[pipe].axis;
    for (int i = 0; i < s->n; i++) {
        const tactic *t = &s->t[i];
        if (t->kind == TACTIC_MICROBATCH)
            return ir_errf(err, n, "schedule: microbatch:%d with pipeline:%s: the pipeline makes its own micro-batches (pipeline:%s:M)", t->lo,
                           m->names[axis], m->names[axis]);
        if (i != pipe && t->kind != TACTIC_AUTO && t->kind != TACTIC_REMAT && t->kind != TACTIC_GATHER && t->axis == axis)
            return ir_errf(err, n, "schedule: tactic %d shards over '%s', the pipeline's axis; nothing is sharded over it", i + 1,
                           m->names[axis]);
    }
    return 0;
}

static int parse_list(const char *text, const shard_mesh *m, schedule *out, char *err, size_t n)
{
    const char *p = text;
    while (*p) {
        const char *q = strchr(p, ',');
        size_t len = q ? (size_t)(q - p) : strlen(p);
        char tac[SCHED_SPLIT_LEN + 256];
        if (len == 0) return ir_errf(err, n, "schedule '%s': empty tactic (two commas, or a comma at an end)", text);
        if (len >= sizeof tac)
            return ir_errf(err, n, "schedule: tactic '%.40s...' is %zu characters, at most %zu", p, len, sizeof tac - 1);
        memcpy(tac, p, len);
        tac[len] = 0;
        if (out->n == SCHED_MAX_TACTICS) return ir_errf(err, n, "schedule: more than %d tactics", SCHED_MAX_TACTICS);
        if (parse_tactic(tac, m, &out->t[out->n], out->split, err, n) < 0) return -1;
        out->n++;
        if (!q) break;
        p = q + 1;
        if (!*p) return ir_errf(err, n, "schedule '%s': empty tactic (two commas, or a comma at an end)", text);
    }
    return check_pipeline(out, m, err, n);
}

/* A schedule file's object j: an object of "format" ("carve-schedule/1")
 * and "tactics" (a non-empty array), each key once.  Returns its tactics, or
 * NULL with a message. */
static const cJSON *schedule_object(const cJSON *j, const char *where, char *err, size_t n)
{
    if (!cJSON_IsObject(j)) return ir_errf(err, n, "%s: a schedule file must be a JSON object", where), NULL;
    const char *twice = ir_json_repeated_key(j);
    if (twice) return ir_errf(err, n, "%s: %s: key given twice", where, twice), NULL;
    for (const cJSON *a = j->child; a; a = a->next) {
        const char *key = a->string ? a->string : "";
        if (strcmp(key, "format") && strcmp(key, "tactics")) return ir_errf(err, n, "%s: %s: unknown key", where, key), NULL;
    }
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format"), *tacs = cJSON_GetObjectItemCaseSensitive(j, "tactics");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "carve-schedule/1"))
        return ir_errf(err, n, "%s: format: must be \"carve-schedule/1\"", where), NULL;
    if (!cJSON_IsArray(tacs) || cJSON_GetArraySize(tacs) == 0)
        return ir_errf(err, n, "%s: tactics: must be a non-empty array of strings", where), NULL;
    return tacs;
}

int sched_parse_json(const char *text, const char *where, const shard_mesh *m, schedule *out, char *err, size_t n)
{
    memset(out, 0, sizeof *out);
    int rc = -1;
    cJSON *j = cJSON_ParseWithOpts(text, NULL, 1);
    if (!j) return ir_errf(err, n, "%s: malformed JSON", where);
    const cJSON *tacs = schedule_object(j, where, err, n);
    if (!tacs) goto done;
    const cJSON *it;
    int i = 0;
    cJSON_ArrayForEach(it, tacs)
    {
        if (!cJSON_IsString(it)) {
            ir_errf(err, n, "%s: tactics[%d]: not a string", where, i);
            goto done;
        }
        if (out->n == SCHED_MAX_TACTICS) {
            ir_errf(err, n, "%s: tactics: more than %d", where, SCHED_MAX_TACTICS);
            goto done;
        }
        char e2[IR_ERR_LEN];
        if (parse_tactic(it->valuestring, m, &out->t[out->n], out->split, e2, sizeof e2) < 0) {
            ir_errf(err, n, "%s: tactics[%d]: %s", where, i, e2);
            goto done;
        }
        out->n++;
        i++;
    }
    rc = check_pipeline(out, m, err, n) < 0 ? -1 : 0;
    if (rc) {
        char e2[IR_ERR_LEN];
        snprintf(e2, sizeof e2, "%s", err);
        ir_errf(err, n, "%s: %s", where, e2);
    }
done:
    cJSON_Delete(j);
    return rc;
}

static int parse_file(const char *path, const shard_mesh *m, schedule *out, char *err, size_t n)
{
    char why[160];
    size_t len;
    char *text = ir_read_input(path, (size_t)1 << 24, &len, why, sizeof why);
    if (!text) return ir_errf(err, n, "%s: %s%s", path, strncmp(why, "larger", 6) ? "cannot open: " : "", why);
    int rc = sched_parse_json(text, path, m, out, err, n);
    free(text);
    return rc;
}

int sched_parse(const char *text, const shard_mesh *mesh, schedule *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!text || !*text) return ir_errf(err, errlen, "schedule: empty (write e.g. dp:batch or dp:batch,megatron:model)");
    size_t len = strlen(text);
    if (len > 5 && !strcmp(text + len - 5, ".json")) return parse_file(text, mesh, out, err, errlen);
    return parse_list(text, mesh, out, err, errlen);
}

char *sched_str(const schedule *s, const shard_mesh *mesh, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < s->n && k < n; i++) {
        const tactic *t = &s->t[i];
        const char *ax = t->axis >= 0 ? mesh->names[t->axis] : "";
        if (i) k += (size_t)snprintf(buf + k, n - k, ",");
        if (k >= n) break;
        switch (t->kind) {
        case TACTIC_DP:
        case TACTIC_MEGATRON:
        case TACTIC_ZERO1:
        case TACTIC_ZERO2:
        case TACTIC_EP:
        case TACTIC_SP:
        case TACTIC_OVERLAP:
        case TACTIC_ZERO3: k += (size_t)snprintf(buf + k, n - k, "%s:%s", tactic_name(t->kind), ax); break;
        case TACTIC_TILE:
        case TACTIC_GROUP: k += (size_t)snprintf(buf + k, n - k, "%s:%s:%d:%s", tactic_name(t->kind), t->pattern, t->dim, ax); break;
        case TACTIC_ATOMIC: k += (size_t)snprintf(buf + k, n - k, "atomic:%s:%s", t->pattern, ax); break;
        case TACTIC_AUTO: k += (size_t)snprintf(buf + k, n - k, "auto"); break;
        case TACTIC_REMAT:
            {
                const char *pol = t->dim == IR_REMAT_FULL ? ":full" : t->dim == IR_REMAT_ATTN ? ":attn" : "";
                if (t->hi >= SCHED_ALL_LAYERS) k += (size_t)snprintf(buf + k, n - k, "remat:%s", pol[0] ? pol + 1 : "all");
                else if (t->lo == t->hi) k += (size_t)snprintf(buf + k, n - k, "remat:%d%s", t->lo, pol);
                else k += (size_t)snprintf(buf + k, n - k, "remat:%d-%d%s", t->lo, t->hi, pol);
            }
            break;
        case TACTIC_MICROBATCH: k += (size_t)snprintf(buf + k, n - k, "microbatch:%d", t->lo); break;
        case TACTIC_GATHER: k += (size_t)snprintf(buf + k, n - k, "gather:%s", spmd_gather_policy_name(t->lo)); break;
        case TACTIC_PIPELINE: {
            char sch[32], mb[16];
            if (t->dim == PIPE_INTERLEAVED) snprintf(sch, sizeof sch, "interleaved-%d", t->hi);
            else snprintf(sch, sizeof sch, "%s", pipe_schedule_name(t->dim));
            if (t->lo) snprintf(mb, sizeof mb, "%d", t->lo);
            else snprintf(mb, sizeof mb, "auto");
            k += (size_t)snprintf(buf + k, n - k, "pipeline:%s:%s:%s:%s", ax, mb, sch, s->split[0] ? s->split : "auto");
            break;
        }
        }
    }
    return buf;
}

tactic sched_remat_tactic(int lo, int hi, int mode)
{
    tactic t;
    memset(&t, 0, sizeof t);
    t.kind = TACTIC_REMAT;
    t.axis = -1;
    t.lo = lo;
    t.hi = hi;
    t.dim = mode;
    return t;
}

tactic sched_microbatch_tactic(int n)
{
    tactic t;
    memset(&t, 0, sizeof t);
    t.kind = TACTIC_MICROBATCH;
    t.axis = -1;
    t.lo = t.hi = n;
    return t;
}

int sched_pipeline_tactic(const pipe_spec *spec, tactic *t, char *split, size_t n)
{
    memset(t, 0, sizeof *t);
    t->kind = TACTIC_PIPELINE;
    t->axis = spec->axis;
    t->dim = spec->schedule;
    t->lo = spec->microbatches;
    t->hi = spec->schedule == PIPE_INTERLEAVED ? spec->chunks : 1;
    size_t k = 0;
    if (n) split[0] = 0;
    for (int i = 0; !spec->split_auto && i < pipe_vstages(spec); i++) {
        k += (size_t)snprintf(split + k, k < n ? n - k : 0, "%s%d", i ? "/" : "", spec->first[i + 1] - spec->first[i]);
        if (k >= n) return -1;
    }
    return 0;
}

/* ---- expansion -------------------------------------------------------- */

static int push(shard_decision *out, int *n, int cap, shard_decision d)
{
    if (*n >= cap) return -1;
    out[(*n)++] = d;
    return 0;
}

static int is_arg(const ir_value *v) { return v->role != IR_INTERMEDIATE; }

/* The name a tactic's NAME pattern matches an argument by: the user's, so
 * `tile:tokens:0:data` also takes every micro-batch of tokens (the rewrite
 * records which input each one is a micro-batch of: batch_of). */
static const char *user_name(const ir_value *v) { return v->batch_of ? v->batch_of : v->name; }

/* Data parallelism: every argument dim of the batch groups (structure.h: one,
 * or one per micro-batch)
 * tiled over the axis.  A graph without a loss has no batch group: dim 0 of
 * every input is tiled instead. */
static int expand_dp(const tactic *t, const shard_state *st, shard_decision *out, int *n, int cap)
{
    const ir_graph *g = st->g;
    const shard_groups *gs = shard_state_groups(st);
    char why[160];
    int grps[64]; /* every micro-batch's batch group */
    int n_grp = shard_batch_groups(g, gs, grps, 64, why, sizeof why), rc = 0;
    if (n_grp > 0) {
        for (int j = 0; j < n_grp && rc == 0; j++) {
            const shard_group *G = &gs->groups[grps[j]];
            for (int k = 0; k < G->n && rc == 0; k++) {
                const shard_member *m = &gs->members[G->first + k];
                rc = push(out, n, cap, (shard_decision){SHARD_TILE, (int8_t)m->dim, (int8_t)t->axis, m->value});
            }
        }
    } else {
        for (int v = 0; v < g->n_values && rc == 0; v++)
            if (g->values[v].role == IR_INPUT && g->values[v].rank >= 1)
                rc = push(out, n, cap, (shard_decision){SHARD_TILE, 0, (int8_t)t->axis, v});
    }
    return rc;
}

/* Tiles every argument of role `role` that is not yet tiled on `axis` over
 * it, on its largest local dim that still divides (none: left as is). */
static int tile_largest(int axis, ir_role role, const shard_state *st, shard_decision *out, int *n, int cap)
{
    const ir_graph *g = st->g;
    const shard_mesh *m = &st->mesh;
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role != role || (shard_spec_tiled(&st->spec[v], x->rank) & (1u << axis))) continue;
        int best = -1;
        int64_t best_local = 0;
        for (int d = 0; d < x->rank; d++) {
            int64_t k = shard_dim_shards(m, &st->spec[v], d) * m->sizes[axis];
            int64_t local = x->dims[d] / shard_dim_shards(m, &st->spec[v], d);
            if (x->dims[d] % k == 0 && local > best_local) {
                best = d;
                best_local = local;
            }
        }
        if (best >= 0 && push(out, n, cap, (shard_decision){SHARD_TILE, (int8_t)best, (int8_t)axis, v}) < 0) return -1;
    }
    return 0;
}

/* ZeRO-1/2 after data parallelism: params stay whole on the axis (atomic, so
 * the sharded update does not spread back into them: their new values are
 * all-gathered at the end of the step); for ZeRO-1 the gradients too (they
 * are all-reduced and kept whole; the update slices them); then the
 * optimizer states are tiled, and propagation carries that tiling into the
 * update arithmetic and, for ZeRO-2, into the gradients (a partial gradient
 * needed tiled is reduce-scattered). */
static int expand_zero12(const tactic *t, const shard_state *st, shard_decision *out, int *n, int cap)
{
    const ir_graph *g = st->g;
    for (int v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        int keep = x->role == IR_PARAM || (t->kind == TACTIC_ZERO1 && x->grad_of >= 0);
        if (keep && x->rank > 0 && push(out, n, cap, (shard_decision){SHARD_ATOMIC, 0, (int8_t)t->axis, v}) < 0) return -1;
    }
    return tile_largest(t->axis, IR_OPT_STATE, st, out, n, cap);
}

/* Tiles over `axis` every member that can still take it (not tiled or
 * atomic on it, its dim divides) of each dim group holding dim `dim` of an
 * argument the user names `who`: in a step of micro-batches, each
 * micro-batch's copy of it has its own group (no op joins them).  Returns 0,
 * or -1 when out is full. */
static int tile_groups_of(const shard_state *st, const char *who, int dim, int axis, shard_decision *out, int *n, int cap)
{
    const ir_graph *g = st->g;
    const shard_groups *gs = shard_state_groups(st);
    int rc = 0;
    for (int c = 0; c < gs->n && rc == 0; c++) {
        const shard_group *G = &gs->groups[c];
        int here = 0;
        for (int i = 0; i < G->n; i++) {
            const ir_value *x = &g->values[gs->members[G->first + i].value];
            here |= gs->members[G->first + i].dim == dim && is_arg(x) && !strcmp(user_name(x), who);
        }
        for (int i = 0; here && i < G->n && rc == 0; i++) {
            const shard_member *mb = &gs->members[G->first + i];
            if (shard_member_can(st, mb->value, mb->dim, axis))
                rc = push(out, n, cap, (shard_decision){SHARD_TILE, (int8_t)mb->dim, (int8_t)axis, mb->value});
        }
    }
    return rc;
}

/* group:NAME:DIM:AXIS: every member of the dim group of NAME's dim DIM that
 * can still take AXIS (not tiled or atomic on it, its dim divides) is tiled;
 * in a step of micro-batches, of each micro-batch's copy of NAME too. */
static int expand_group(const tactic *t, const shard_state *st, shard_decision *out, int *n, int cap, char *err,
                        size_t errlen)
{
    const ir_graph *g = st->g;
    int v0 = -1;
    for (int v = 0; v < g->n_values && v0 < 0; v++)
        if (is_arg(&g->values[v]) && !fnmatch(t->pattern, user_name(&g->values[v]), 0)) v0 = v;
    if (v0 < 0) return ir_errf(err, errlen, "group:%s: no argument (param, optimizer state or input) is named like that", t->pattern);
    if (t->dim >= g->values[v0].rank)
        return ir_errf(err, errlen, "group:%s:%d: '%s' has rank %d, no dim %d", t->pattern, t->dim, g->values[v0].name,
                       g->values[v0].rank, t->dim);
    int rc = tile_groups_of(st, user_name(&g->values[v0]), t->dim, t->axis, out, n, cap);
    return rc < 0 ? ir_errf(err, errlen, "tactic expands to more than %d decisions", cap) : 0;
}

/* The sequence dim of input x: the dim after its batch dim (a member of one
 * of the batch groups, grps[0..n_grp)), or dim 1 where no batch group has
 * one of its dims (a batch of one sequence: the loss's batch dim is not
 * told apart from the others).  -1 when x has none. */
static int sequence_dim(const shard_groups *gs, const int *grps, int n_grp, int x, int rank)
{
    for (int j = 0; j < n_grp; j++) {
        const shard_group *G = &gs->groups[grps[j]];
        for (int k = 0; k < G->n; k++)
            if (gs->members[G->first + k].value == x) return gs->members[G->first + k].dim + 1 < rank ? gs->members[G->first + k].dim + 1 : -1;
    }
    return rank >= 2 ? 1 : -1;
}

/* sp:AXIS, Megatron-LM's sequence parallelism: the dim group of the
 * sequence of every input of token ids (a GPT's tokens[B, S], each
 * micro-batch's copy of it) tiled over the axis.  After megatron:AXIS its
 * conflicts with the split hidden dims leave the residual stream, the norms
 * and the dropouts split by sequence and the lowering all-gathers the
 * sequence before each column-parallel matmul and reduce-scatters after each
 * row-parallel one (docs/sharding.md, "Sequence parallelism"). */
static int expand_sp(const tactic *t, const shard_state *st, shard_decision *out, int *n, int cap, char *err, size_t errlen)
{
    const ir_graph *g = st->g;
    const shard_groups *gs = shard_state_groups(st);
    char why[160];
    int grps[64], n_grp = shard_batch_groups(g, gs, grps, 64, why, sizeof why), found = 0, rc = 0;
    if (n_grp < 0) n_grp = 0;
    for (int v0 = 0; v0 < g->n_values && rc == 0; v0++) {
        const ir_value *x = &g->values[v0];
        int d0 = x->role == IR_INPUT && x->dtype == IR_I32 ? sequence_dim(gs, grps, n_grp, v0, x->rank) : -1;
        if (d0 < 0) continue;
        found = 1;
        int seen = 0; /* a micro-batch's copy of an input already tiled (tile_groups_of tiles every copy) */
        for (int u = 0; u < v0 && !seen; u++)
            seen = g->values[u].role == IR_INPUT && !strcmp(user_name(&g->values[u]), user_name(x));
        if (!seen) rc = tile_groups_of(st, user_name(x), d0, t->axis, out, n, cap);
    }
    if (!found)
        return ir_errf(err, errlen, "sp:%s: the graph has no input of token ids with a sequence dim after its batch dim (sequence parallelism splits a language model's sequence)",
                       st->mesh.names[t->axis]);
    return rc < 0 ? ir_errf(err, errlen, "tactic expands to more than %d decisions", cap) : 0;
}

/* The message of a tactic that expands to more decisions than out holds. */
static int too_many(int cap, char *err, size_t errlen) { return ir_errf(err, errlen, "tactic expands to more than %d decisions", cap); }

/* The tactics that make no decisions: the state's gather policy, auto, and
 * those whose rewrite of the step the graph must record (ir_graph.rewrites:
 * sched_rewrite or the model's builders made it).  Returns 0, or -1 with a
 * message. */
static int expand_rewrite(const tactic *t, const ir_graph *g, const shard_mesh *m, char *err, size_t errlen)
{
    if (t->kind == TACTIC_PIPELINE) { /* sched_apply reserves the axis; pipe_lower cuts the stages */
        int mb = pipe_body_microbatches(g);
        if (mb > 0 && (!t->lo || t->lo == mb)) return 0;
        return ir_errf(err, errlen, "pipeline:%s: the training step was not built for it (the body of one micro-batch: "
                       "model_build_pipeline_body)", m->names[t->axis]);
    }
    if (t->kind == TACTIC_REMAT && g->rewrites.remat <= 0)
        return ir_errf(err, errlen, "remat: the training step was not rewritten for it (sched_rewrite)");
    if (t->kind == TACTIC_MICROBATCH && t->lo != 1 && g->rewrites.microbatches != t->lo)
        return ir_errf(err, errlen, "microbatch:%d: the training step was not built for it (model_build_microbatched_step)", t->lo);
    return 0; /* (auto; gather and overlap: sched_apply sets the state's policy and overlapped axes) */
}

/* megatron:AXIS: the graph's Megatron dims (built once for every state
 * sharing its rules).  Returns the decisions, or -1 with a message. */
static int expand_megatron(const tactic *t, const shard_state *st, shard_decision *out, int cap, char *err, size_t errlen)
{
    int n = 0;
    shard_megatron *own = NULL;
    const shard_megatron *mg = shard_state_megatron(st);
    if (!mg) mg = own = shard_megatron_build(st->g);
    for (int i = 0; i < mg->n && n >= 0; i++)
        if (push(out, &n, cap, (shard_decision){SHARD_TILE, (int8_t)mg->dims[i].dim, (int8_t)t->axis, mg->dims[i].value}) < 0)
            n = -1;
    int k = mg->n;
    if (!k && n >= 0) ir_errf(err, errlen, "megatron:%s: %s", st->mesh.names[t->axis], mg->why);
    shard_megatron_free(own);
    if (n < 0) return too_many(cap, err, errlen);
    return k ? n : -1;
}

/* ep:AXIS: the experts first (their stamp wins over the tokens' at the
 * expert einsums), then the batch.  Returns the decisions, or -1 with a
 * message. */
static int expand_ep(const tactic *t, const shard_state *st, shard_decision *out, int cap, char *err, size_t errlen)
{
    int n = 0;
    shard_member *dims = ir_xcalloc((size_t)cap + 1, sizeof *dims);
    char why[160];
    int k = shard_expert_dims(st->g, shard_state_groups(st), dims, cap, why, sizeof why);
    for (int i = 0; i < k && n >= 0; i++)
        if (push(out, &n, cap, (shard_decision){SHARD_TILE, (int8_t)dims[i].dim, (int8_t)t->axis, dims[i].value}) < 0) n = -1;
    free(dims);
    if (n < 0) return too_many(cap, err, errlen);
    if (!k) return ir_errf(err, errlen, "ep:%s: %s", st->mesh.names[t->axis], why);
    if (expand_dp(t, st, out, &n, cap) < 0) return too_many(cap, err, errlen);
    return n;
}

/* tile:NAME:DIM:AXIS and atomic:NAME:AXIS: every argument named like the
 * pattern.  A glob names params and inputs: optimizer states follow their
 * param by propagation, and `*` must not pick Adam's m and v on its own; a
 * state is reached only by its exact name.  Returns the decisions, or -1
 * with a message. */
static int expand_named(const tactic *t, const shard_state *st, shard_decision *out, int cap, char *err, size_t errlen)
{
    const ir_graph *g = st->g;
    int glob = strpbrk(t->pattern, "*?[") != NULL, matched = 0, n = 0;
    for (int v = 0; v < g->n_values; v++) {
        if (!is_arg(&g->values[v]) || (glob && g->values[v].role == IR_OPT_STATE) ||
            fnmatch(t->pattern, user_name(&g->values[v]), 0))
            continue;
        matched++;
        if (t->kind == TACTIC_TILE && t->dim >= g->values[v].rank)
            return ir_errf(err, errlen, "tile:%s:%d: '%s' has rank %d, no dim %d", t->pattern, t->dim, g->values[v].name,
                           g->values[v].rank, t->dim);
        shard_decision d = {t->kind == TACTIC_TILE ? SHARD_TILE : SHARD_ATOMIC, (int8_t)t->dim, (int8_t)t->axis, v};
        if (push(out, &n, cap, d) < 0) return too_many(cap, err, errlen);
    }
    if (!matched)
        return ir_errf(err, errlen, "%s:%s: no argument (param, optimizer state or input) is named like that",
                       t->kind == TACTIC_TILE ? "tile" : "atomic", t->pattern);
    return n;
}

int sched_expand(const tactic *t, const shard_state *st, shard_decision *out, int cap, char *err, size_t errlen)
{
    int n = 0;
    switch (t->kind) {
    case TACTIC_AUTO:
    case TACTIC_GATHER:
    case TACTIC_OVERLAP:
    case TACTIC_PIPELINE:
    case TACTIC_REMAT:
    case TACTIC_MICROBATCH: return expand_rewrite(t, st->g, &st->mesh, err, errlen);
    case TACTIC_DP:
        if (expand_dp(t, st, out, &n, cap) < 0) return too_many(cap, err, errlen);
        if (!n) return ir_errf(err, errlen, "dp:%s: the graph has no inputs to split", st->mesh.names[t->axis]);
        return n;
    case TACTIC_MEGATRON: return expand_megatron(t, st, out, cap, err, errlen);
    case TACTIC_ZERO1:
    case TACTIC_ZERO2:
        if (expand_dp(t, st, out, &n, cap) < 0 || expand_zero12(t, st, out, &n, cap) < 0) return too_many(cap, err, errlen);
        return n;
    case TACTIC_ZERO3:
        if (expand_dp(t, st, out, &n, cap) < 0 || tile_largest(t->axis, IR_PARAM, st, out, &n, cap) < 0) return too_many(cap, err, errlen);
        return n;
    case TACTIC_GROUP: return expand_group(t, st, out, &n, cap, err, errlen) < 0 ? -1 : n;
    case TACTIC_SP: return expand_sp(t, st, out, &n, cap, err, errlen) < 0 ? -1 : n;
    case TACTIC_EP: return expand_ep(t, st, out, cap, err, errlen);
    case TACTIC_TILE:
    case TACTIC_ATOMIC: return expand_named(t, st, out, cap, err, errlen);
    }
    return 0;
}

int sched_microbatches(const schedule *s)
{
    int n = 1;
    for (int i = 0; i < s->n; i++)
        if (s->t[i].kind == TACTIC_MICROBATCH) n = s->t[i].lo;
    return n;
}

int sched_pipeline_default_microbatches(int64_t batch, int p, int64_t others, int multiple)
{
    int best = 0, any = 1;
    for (int64_t d = 1; d <= 4 * (int64_t)p && d <= batch; d++) {
        if (batch % d || (multiple && d % p)) continue;
        any = (int)d;
        if ((batch / d) % others == 0) best = (int)d;
    }
    return best ? best : any;
}

int sched_pipeline(const schedule *s, const shard_mesh *mesh, int64_t batch, int n_layers, pipe_spec *out, char *err, size_t errlen)
{
    *out = pipe_spec_none();
    const tactic *t = NULL;
    for (int i = 0; i < s->n; i++)
        if (s->t[i].kind == TACTIC_PIPELINE) t = &s->t[i];
    if (!t) return 0;
    const char *ax = mesh->names[t->axis];
    out->axis = t->axis;
    out->stages = (int)mesh->sizes[t->axis];
    out->schedule = t->dim;
    out->chunks = t->dim == PIPE_INTERLEAVED ? t->hi : 1;
    out->microbatches = t->lo;
    if (!out->microbatches) {
        if (batch <= 0) return ir_errf(err, errlen, "pipeline:%s: give the micro-batches (pipeline:%s:M): the batch is not known", ax, ax);
        int64_t others = mesh->n_devices / out->stages;
        out->microbatches = sched_pipeline_default_microbatches(batch, out->stages, others, t->dim == PIPE_INTERLEAVED);
    }
    if (batch > 0 && batch % out->microbatches)
        return ir_errf(err, errlen, "pipeline:%s: %d micro-batches do not divide the batch of %lld", ax, out->microbatches, (long long)batch);
    int V = pipe_vstages(out);
    out->split_auto = !s->split[0];
    if (n_layers >= 0) {
        pipe_split_even(out, n_layers);
        if (!out->split_auto) {
            const char *q = s->split;
            for (int i = 0; i < V; i++) {
                out->first[i + 1] = out->first[i] + (int)strtol(q, (char **)&q, 10);
                if (*q == '/') q++;
            }
        }
    }
    return pipe_spec_check(out, mesh, n_layers, err, errlen) < 0 ? -1 : 1;
}

int sched_pipeline_step(const schedule *s, const ir_graph *g, const shard_mesh *mesh, pipe_spec *out, char *err, size_t errlen)
{
    schedule with = *s;
    int m = pipe_body_microbatches(g);
    for (int i = 0; i < with.n; i++)
        if (with.t[i].kind == TACTIC_PIPELINE && !with.t[i].lo) with.t[i].lo = m;
    return sched_pipeline(&with, mesh, 0, g->n_layers, out, err, errlen);
}

int sched_gather_policy(const schedule *s)
{
    int policy = -1;
    for (int i = 0; i < s->n; i++)
        if (s->t[i].kind == TACTIC_GATHER) policy = s->t[i].lo;
    return policy;
}

/* The rewrite of each recomputation mode (tactic.dim), and how much each
 * recomputes: the attention cores are a part of what the backward pass
 * reads (selective), which is a part of the whole forward (full). */
static ir_graph *(*const remat_of[])(const ir_graph *, int, int, int *, char *, size_t) = {
    [IR_REMAT_SELECTIVE] = ir_remat, [IR_REMAT_FULL] = ir_remat_full, [IR_REMAT_ATTN] = ir_remat_attn};
static const unsigned char remat_rank[] = {[IR_REMAT_ATTN] = 1, [IR_REMAT_SELECTIVE] = 2, [IR_REMAT_FULL] = 3};
static const int remat_mode_of_rank[] = {-1, IR_REMAT_ATTN, IR_REMAT_SELECTIVE, IR_REMAT_FULL};

/* Recomputes layers a..b of *cur in `mode`, replacing *cur (freed unless it
 * is `keep`).  Returns 0, or -1 with a message. */
static int remat_run(ir_graph **cur, const ir_graph *keep, int a, int b, int mode, char *err, size_t errlen)
{
    ir_graph *next = remat_of[mode](*cur, a, b, NULL, err, errlen);
    if (!next) return -1;
    if (*cur != keep) ir_free(*cur);
    *cur = next;
    return 0;
}

int sched_rewrite(const schedule *s, ir_graph **g, char *err, size_t errlen)
{
    ir_graph *cur = *g;
    int L = cur->n_layers, any = 0;
    /* a tactic the step cannot take says why as it alone would (no loss, no layers, a range past them) */
    for (int i = 0; i < s->n; i++) {
        const tactic *t = &s->t[i];
        if (t->kind != TACTIC_REMAT) continue;
        any = 1;
        if (cur->loss < 0 || L == 0 || t->lo >= L) {
            ir_graph *x = remat_of[t->dim](cur, t->lo, t->hi, NULL, err, errlen);
            ir_free(x);
            return -1;
        }
    }
    if (!any) return 0;
    /* each layer gets the most recomputation a tactic asks of it (full over
       selective over attention cores), so remat: tactics commute and may
       overlap; then one rewrite per run of layers alike */
    unsigned char *rank = ir_xcalloc((size_t)L, 1);
    for (int i = 0; i < s->n; i++) {
        const tactic *t = &s->t[i];
        for (int l = t->lo; t->kind == TACTIC_REMAT && l <= t->hi && l < L; l++)
            if (rank[l] < remat_rank[t->dim]) rank[l] = remat_rank[t->dim];
    }
    int rc = 0;
    for (int l = 0; l < L && rc == 0;) {
        int a = l, r = rank[l];
        while (l < L && rank[l] == r) l++;
        if (r) rc = remat_run(&cur, *g, a, l - 1, remat_mode_of_rank[r], err, errlen);
    }
    free(rank);
    if (rc < 0) {
        if (cur != *g) ir_free(cur);
        return -1;
    }
    if (cur != *g) {
        ir_free(*g);
        *g = cur;
    }
    return 0;
}

static int is_zero(tactic_kind k) { return k == TACTIC_ZERO1 || k == TACTIC_ZERO2 || k == TACTIC_ZERO3; }

void sched_order(const schedule *s, int *order)
{
    int n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < s->n; i++)
            if (is_zero(s->t[i].kind) == pass) order[n++] = i;
}

/* Which tactic made each decision's stamp (shard_state's n_decisions before
 * it), and each atomic (value, axis): what the report attributes blocked
 * values to. */
typedef struct stamp_book {
    int *tactic; /* per stamp */
    int cap;
    int *atomic; /* per value * SHARD_MAX_AXES + axis: 1 + the tactic, or 0 */
} stamp_book;

static void book_stamp(stamp_book *b, int stamp, int t)
{
    if (stamp >= b->cap) {
        int cap = b->cap ? 2 * b->cap : 256;
        while (cap <= stamp) cap *= 2;
        b->tactic = ir_xrealloc(b->tactic, (size_t)cap * sizeof *b->tactic);
        for (int i = b->cap; i < cap; i++) b->tactic[i] = -1;
        b->cap = cap;
    }
    b->tactic[stamp] = t;
}

/* A conflict attributed: the tactic whose decision lost, the one whose
 * earlier decision won, the value. */
typedef struct blocked_at {
    int t, k, value;
} blocked_at;

static int by_tkv(const void *x, const void *y)
{
    const blocked_at *a = x, *b = y;
    if (a->t != b->t) return a->t - b->t;
    if (a->k != b->k) return a->k - b->k;
    return a->value - b->value;
}

/* The conflicts st recorded from index `from` on, met while tactic t's
 * decision was applied (refused, or stopped in its propagation): each
 * against the tactic of the winning stamp (or atomic (value, axis)),
 * appended to *list. */
static void attribute(const shard_state *st, int from, int t, const stamp_book *b, blocked_at **list, int *n, int *cap)
{
    for (int i = from; i < st->n_conflicts; i++) {
        const shard_conflict *c = &st->conflicts[i];
        int k = c->winner_stamp >= 0 ? (c->winner_stamp < b->cap ? b->tactic[c->winner_stamp] : -1)
                                     : b->atomic[(size_t)c->value * SHARD_MAX_AXES + (size_t)c->axis] - 1;
        if (k < 0 || k == t) continue;
        if (*n == *cap) {
            *cap = *cap ? 2 * *cap : 64;
            *list = ir_xrealloc(*list, (size_t)*cap * sizeof **list);
        }
        (*list)[(*n)++] = (blocked_at){t, k, c->value};
    }
}

/* The report's blocked counts: each (t, k, value) once. */
static void count_blocked(blocked_at *list, int n, sched_report *rep)
{
    if (n > 1) qsort(list, (size_t)n, sizeof *list, by_tkv);
    for (int i = 0; i < n; i++)
        if (!i || by_tkv(&list[i], &list[i - 1])) rep->blocked[list[i].t][list[i].k]++;
}

int sched_apply_report(const schedule *s, shard_state *st, sched_report *rep,
                       void (*decided)(void *ctx, int t, const shard_decision *d, int result), void *ctx, char *err,
                       size_t errlen)
{
    int cap = st->g->n_values + 16, order[SCHED_MAX_TACTICS];
    shard_decision *d = malloc((size_t)cap * sizeof *d);
    if (!d) ir_oom((size_t)cap * sizeof *d);
    stamp_book b = {NULL, 0, rep ? ir_xcalloc((size_t)st->g->n_values * SHARD_MAX_AXES + 1, sizeof(int)) : NULL};
    blocked_at *blocked = NULL;
    int n_blocked = 0, cap_blocked = 0;
    if (rep) {
        memset(rep, 0, sizeof *rep);
        rep->n = s->n;
    }
    sched_order(s, order);
    for (int i = 0; i < s->n; i++) { /* set by position, whatever the order: the pipeline's axis, the overlapped axes */
        if (s->t[i].kind == TACTIC_OVERLAP) st->overlap_axes |= 1u << s->t[i].axis;
        if (s->t[i].kind == TACTIC_PIPELINE) st->reserved_axes |= 1u << s->t[i].axis;
    }
    int rc = 0;
    for (int j = 0; j < s->n && rc == 0; j++) {
        int t = order[j];
        if (s->t[t].kind == TACTIC_GATHER) st->gather_policy = s->t[t].lo;
        int n = sched_expand(&s->t[t], st, d, cap, err, errlen);
        if (n < 0) {
            rc = -1;
            break;
        }
        for (int k = 0; k < n && rc == 0; k++) {
            int stamp = st->n_decisions, nc = st->n_conflicts, r = shard_apply(st, &d[k], err, errlen);
            if (r < 0) {
                rc = -1;
                break;
            }
            if (decided) decided(ctx, t, &d[k], r);
            if (!rep) continue;
            if (r == 0) rep->changed[t]++;
            else rep->unchanged[t]++;
            if (st->n_decisions > stamp) book_stamp(&b, stamp, t);
            if (r == 0 && d[k].kind == SHARD_ATOMIC) b.atomic[(size_t)d[k].value * SHARD_MAX_AXES + (size_t)d[k].axis] = t + 1;
            attribute(st, nc, t, &b, &blocked, &n_blocked, &cap_blocked);
        }
    }
    if (rep && rc == 0) count_blocked(blocked, n_blocked, rep);
    free(blocked);
    free(b.tactic);
    free(b.atomic);
    free(d);
    return rc;
}

int sched_apply(const schedule *s, shard_state *st, char *err, size_t errlen)
{
    return sched_apply_report(s, st, NULL, NULL, NULL, err, errlen);
}

char *sched_applied_str(const schedule *s, const shard_mesh *mesh, char *buf, size_t n)
{
    int order[SCHED_MAX_TACTICS];
    schedule *a = ir_xcalloc(1, sizeof *a);
    *a = *s;
    sched_order(s, order);
    for (int i = 0; i < s->n; i++) a->t[i] = s->t[order[i]];
    sched_str(a, mesh, buf, n);
    free(a);
    return buf;
}

char *sched_report_line(const sched_report *rep, const schedule *s, const shard_mesh *mesh, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (int t = 0; t < rep->n && k < n; t++)
        for (int w = 0; w < rep->n && k < n; w++) {
            if (!rep->blocked[t][w] || is_zero(s->t[t].kind)) continue;
            schedule one = {.n = 1}, other = {.n = 1};
            one.t[0] = s->t[t];
            other.t[0] = s->t[w];
            char a[160], b[160];
            sched_str(&one, mesh, a, sizeof a);
            sched_str(&other, mesh, b, sizeof b);
            k += (size_t)snprintf(buf + k, n - k, "%s%s: %d value%s kept off its axis by %s, which came first", k ? "; " : "", a,
                                  rep->blocked[t][w], rep->blocked[t][w] == 1 ? "" : "s", b);
        }
    return buf;
}
