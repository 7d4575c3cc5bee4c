/* opts.c - flag parsing and the loading of --model / --graph shared by
 * subcommands (session/load.c does the loading). */
#include "cli.h"
#include "calib/calib.h"
#include "cost/cost.h"

#include <errno.h>
#include <stddef.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "search/search.h"
#include "session/session.h"

/* Writes s to f with every byte that is not printable ASCII (control
 * characters, escape sequences, DEL, bytes of other encodings) as \xNN, so a
 * name read from a file cannot reach the terminal raw. */
void cli_put_printable(FILE *f, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p >= 0x20 && *p < 0x7f) fputc(*p, f);
        else fprintf(f, "\\x%02x", *p);
    }
}

void cli_error(const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char small[1024], *msg = small;
    if (n >= (int)sizeof small && !(msg = malloc((size_t)n + 1))) msg = small; /* cut only without memory */
    vsnprintf(msg, msg == small ? sizeof small : (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    fputs("carve: ", stderr);
    cli_put_printable(stderr, msg);
    fputc('\n', stderr);
    if (msg != small) free(msg);
}

static int has_flag(const char *flags, const char *f)
{
    size_t n = strlen(f);
    for (const char *p = flags; (p = strstr(p, f)); p += n)
        if ((p == flags || p[-1] == ' ') && (p[n] == ' ' || p[n] == 0)) return 1;
    return 0;
}

static int parse_int(const char *cmd, const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) {
        cli_error("%s: %s must be an integer in %lld..%lld, got '%s'", cmd, flag, (long long)lo, (long long)hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_num(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v <= lo || v > hi) {
        cli_error("%s: %s must be a number above %g and at most %g, got '%s'", cmd, flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* A value checked against a list of words ("auto none"), or by a parser:
 * 0, or -1 after the error line. */
static int one_of(const char *cmd, const char *flag, const char *val, const char *words, const char *said)
{
    if (*val && !strchr(val, ' ') && has_flag(words, val)) return 0;
    cli_error("%s: %s must be %s, got '%s'", cmd, flag, said, val);
    return -1;
}

/* A parser's verdict on flag's value: 0, or -1 after the error line
 * "CMD: FLAG: what the parser said". */
static int parsed(const char *cmd, const char *flag, int rc, const char *perr)
{
    if (rc == 0) return 0;
    cli_error("%s: %s: %s", cmd, flag, perr);
    return -1;
}

static int check_precision(const char *cmd, const char *val)
{
    cost_precision prec;
    char perr[160];
    return parsed(cmd, "--precision", cost_precision_parse(val, &prec, perr, sizeof perr), perr);
}

static int check_grads(const char *cmd, const char *val)
{
    cost_grads gr;
    char perr[160];
    return parsed(cmd, "--grads", cost_grads_parse(val, &gr, perr, sizeof perr), perr);
}

static int check_search(const char *cmd, const char *val)
{
    return search_algo_find(val) ? 0 : one_of(cmd, "--search", val, "", "mcts, random, greedy or exhaustive");
}

/* Every flag with a value: where it goes in cli_opts and how it is checked. */
typedef enum { FLAG_TEXT, FLAG_INT, FLAG_NUM } flag_kind;
static const struct flag {
    const char *name;
    flag_kind kind;
    size_t at;                                   /* offsetof(cli_opts, ...) */
    const char *words, *said;                    /* FLAG_TEXT: the values allowed (NULL: any), as the error says them */
    int (*check)(const char *cmd, const char *val); /* FLAG_TEXT: or a parser that checks it */
    double lo, hi;                               /* FLAG_INT: lo..hi; FLAG_NUM: above lo, at most hi */
} flags[] = {
    {"--model", FLAG_TEXT, offsetof(cli_opts, model), NULL, NULL, NULL, 0, 0},
    {"--graph", FLAG_TEXT, offsetof(cli_opts, graph), NULL, NULL, NULL, 0, 0},
    {"--mesh", FLAG_TEXT, offsetof(cli_opts, mesh), NULL, NULL, NULL, 0, 0},
    {"--hw", FLAG_TEXT, offsetof(cli_opts, hw), NULL, NULL, NULL, 0, 0},
    {"--schedule", FLAG_TEXT, offsetof(cli_opts, schedule), NULL, NULL, NULL, 0, 0},
    {"--plan", FLAG_TEXT, offsetof(cli_opts, plan), NULL, NULL, NULL, 0, 0},
    {"--to", FLAG_TEXT, offsetof(cli_opts, to), NULL, NULL, NULL, 0, 0},
    {"--html", FLAG_TEXT, offsetof(cli_opts, html), NULL, NULL, NULL, 0, 0},
    {"--out", FLAG_TEXT, offsetof(cli_opts, out), NULL, NULL, NULL, 0, 0},
    {"--precision", FLAG_TEXT, offsetof(cli_opts, precision), NULL, NULL, check_precision, 0, 0},
    {"--grads", FLAG_TEXT, offsetof(cli_opts, grads), NULL, NULL, check_grads, 0, 0},
    {"--memory-tactics", FLAG_TEXT, offsetof(cli_opts, memory_tactics), "auto none", "auto or none", NULL, 0, 0},
    {"--pipeline", FLAG_TEXT, offsetof(cli_opts, pipeline), "auto search none", "auto, search or none", NULL, 0, 0},
    {"--layouts", FLAG_TEXT, offsetof(cli_opts, layouts), "auto search none", "auto, search or none", NULL, 0, 0},
    {"--backend", FLAG_TEXT, offsetof(cli_opts, backend), "threads mpi", "threads or mpi", NULL, 0, 0},
    {"--optimizer", FLAG_TEXT, offsetof(cli_opts, optimizer), "adam sgd", "adam or sgd", NULL, 0, 0},
    {"--search", FLAG_TEXT, offsetof(cli_opts, search), NULL, NULL, check_search, 0, 0},
    {"--seed", FLAG_INT, offsetof(cli_opts, seed), NULL, NULL, NULL, 0, (double)INT64_MAX},
    {"--threads", FLAG_INT, offsetof(cli_opts, threads), NULL, NULL, NULL, 1, 256},
    {"--seeds", FLAG_INT, offsetof(cli_opts, seeds), NULL, NULL, NULL, 1, SESSION_MAX_SEEDS},
    {"--rounds", FLAG_INT, offsetof(cli_opts, rounds), NULL, NULL, NULL, 1, CALIB_MAX_ROUNDS},
    {"--steps", FLAG_INT, offsetof(cli_opts, steps), NULL, NULL, NULL, 1, 1000000},
    {"--stall", FLAG_INT, offsetof(cli_opts, stall), NULL, NULL, NULL, 1, 100000000},
    {"--budget", FLAG_INT, offsetof(cli_opts, budget), NULL, NULL, NULL, 1, 100000000},
    {"--time", FLAG_NUM, offsetof(cli_opts, time_s), NULL, NULL, NULL, 0, 86400 * 7},
    {"--memory", FLAG_NUM, offsetof(cli_opts, memory_gib), NULL, NULL, NULL, 0, 1e9},
    {"--dim", FLAG_TEXT, offsetof(cli_opts, dims), NULL, NULL, NULL, 0, 0},
    {"--loss", FLAG_TEXT, offsetof(cli_opts, loss), NULL, NULL, NULL, 0, 0},
    {"--frozen", FLAG_TEXT, offsetof(cli_opts, frozen), NULL, NULL, NULL, 0, 0},
    {"--inputs", FLAG_TEXT, offsetof(cli_opts, inputs), NULL, NULL, NULL, 0, 0},
    {"--dump", FLAG_TEXT, offsetof(cli_opts, dump), NULL, NULL, NULL, 0, 0},
    {"--attention", FLAG_TEXT, offsetof(cli_opts, attention), "fused materialized", "fused or materialized", NULL, 0, 0},
};

/* Flags without a value. */
static const struct { const char *name; size_t at; } switches[] = {
    {"--summary", offsetof(cli_opts, summary)}, {"--ops", offsetof(cli_opts, ops)},
    {"--forward", offsetof(cli_opts, forward)}, {"--quiet", offsetof(cli_opts, quiet)},
    {"--overlap", offsetof(cli_opts, overlap)}, {"--json", offsetof(cli_opts, json)},
    {"--weights", offsetof(cli_opts, weights)}, {"--shrink", offsetof(cli_opts, shrink)},
};

/* Stores the value of flag f into o.  Returns 0, or -1 after the error line. */
static int set_flag(const char *cmd, const struct flag *f, const char *val, cli_opts *o)
{
    char *at = (char *)o + f->at;
    switch (f->kind) {
    case FLAG_TEXT:
        if (f->words && one_of(cmd, f->name, val, f->words, f->said) < 0) return -1;
        if (f->check && f->check(cmd, val) < 0) return -1;
        memcpy(at, &val, sizeof val);
        return 0;
    case FLAG_INT:
        return parse_int(cmd, f->name, val, (int64_t)f->lo, f->hi >= (double)INT64_MAX ? INT64_MAX : (int64_t)f->hi, (int64_t *)(void *)at);
    case FLAG_NUM:
        return parse_num(cmd, f->name, val, f->lo, f->hi, (double *)(void *)at);
    }
    return -1;
}

/* The flag named by argument a ("--name" or "--name=value") into flag[64];
 * its value after '=' (or NULL) into *eq.  Returns 0, or CLI_BAD_INPUT after
 * the error line when command c has no such flag. */
static int flag_name(const cli_command *c, const char *a, char flag[64], const char **eq)
{
    *eq = strchr(a, '=');
    size_t fl = *eq ? (size_t)(*eq - a) : strlen(a);
    if (fl >= 64) fl = 63;
    memcpy(flag, a, fl);
    flag[fl] = 0;
    if (fl < 63 && has_flag(c->flags, flag)) return 0;
    const char *near = ir_nearest(flag, c->flags); /* shown whole, never cut */
    cli_error("%s: unknown option '%.*s' (%s%s%ssee carve %s --help)", c->name, (int)(*eq ? (size_t)(*eq - a) : strlen(a)), a,
              near ? "did you mean " : "", near ? near : "", near ? "? " : "", c->name);
    return CLI_BAD_INPUT;
}

int cli_parse(const cli_command *c, int argc, char **argv, cli_opts *o)
{
    memset(o, 0, sizeof *o);
    o->seed = 1;
    o->threads = 1;
    o->steps = 1;
    o->optimizer = "adam";
    uint64_t seen = 0; /* the flags with a value given so far, by index */
    _Static_assert(sizeof flags / sizeof flags[0] <= 64, "seen holds a bit a flag");
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *eq;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            o->help = 1;
            return 0;
        }
        if (strncmp(a, "--", 2) != 0) {
            if (o->positional || !has_flag(c->flags, "FILE")) {
                cli_error("%s: unexpected argument '%s' (see carve %s --help)", c->name, a, c->name);
                return CLI_BAD_INPUT;
            }
            o->positional = a;
            continue;
        }
        char flag[64];
        if (flag_name(c, a, flag, &eq)) return CLI_BAD_INPUT;
        int is_switch = 0;
        for (size_t k = 0; k < sizeof switches / sizeof switches[0]; k++)
            if (!strcmp(flag, switches[k].name)) *(int *)(void *)((char *)o + switches[k].at) = is_switch = 1;
        if (is_switch) continue;
        const char *val = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
        if (!val) {
            cli_error("%s: option %s needs a value", c->name, flag);
            return CLI_BAD_INPUT;
        }
        for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++) {
            if (strcmp(flag, flags[k].name)) continue;
            if (seen >> k & 1) { /* the last one won before: --out a.json ... --out b.json wrote b.json alone */
                cli_error("%s: %s given twice", c->name, flag);
                return CLI_BAD_INPUT;
            }
            seen |= 1ull << k;
            if (set_flag(c->name, &flags[k], val, o) < 0) return CLI_BAD_INPUT;
        }
    }
    return 0;
}

int cli_check_outputs(const cli_command *c, const cli_opts *o)
{
    const char *outs[] = {o->out, o->html}, *ins[] = {o->graph, o->plan, o->positional, o->hw, o->schedule};
    char err[IR_ERR_LEN];
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        for (size_t k = 0; k < sizeof ins / sizeof ins[0]; k++)
            if (ir_out_is_input(outs[i], ins[k], err, sizeof err) < 0) {
                cli_error("%s: %s", c->name, err);
                return CLI_BAD_INPUT;
            }
    return 0;
}

void cli_source_import(session_source *src, const cli_opts *o, char *notes, size_t n)
{
    src->dims = o->dims;
    src->loss = o->loss;
    src->frozen = o->frozen;
    src->attention = o->attention;
    src->weights = o->weights;
    src->notes = notes;
    src->notes_len = n;
}

ir_graph *cli_load_step(const cli_opts *o, char *cfg_text, size_t n)
{
    /* graph tactics (microbatch, remat) make or rewrite the step before
     * anything shards it; a schedule that does not parse is the caller's to
     * report */
    char err[IR_ERR_LEN + 640];
    shard_mesh mesh;
    schedule sc;
    int have = o->schedule && o->mesh && shard_mesh_parse(o->mesh, &mesh, err, sizeof err) == 0 &&
               sched_parse(o->schedule, &mesh, &sc, err, sizeof err) == 0;
    char notes[1024] = "";
    session_source src = {.model = o->model, .graph = o->graph, .optimizer = o->optimizer, .forward = o->forward,
                          .sched = have ? &sc : NULL, .mesh = have ? &mesh : NULL};
    cli_source_import(&src, o, notes, sizeof notes);
    ir_graph *g = session_load_step(&src, cfg_text, n, NULL, err, sizeof err);
    if (!g) cli_error("%s", err);
    else if (notes[0]) cli_error("note: %s", notes);
    return g;
}

ir_graph *cli_load_plain(const cli_opts *o)
{
    char err[IR_ERR_LEN + 640];
    session_source src = {.model = o->model, .graph = o->graph, .optimizer = o->optimizer};
    cli_source_import(&src, o, NULL, 0);
    ir_graph *g = session_load_plain(&src, err, sizeof err);
    if (!g) cli_error("the plain step (to check against): %s", err);
    return g;
}

void cli_plan_note(const plan *pl)
{
    if (pl->note[0]) cli_error("note: %s", pl->note);
}

int cli_mesh_schedule(const char *cmd, const char *mesh_text, const char *sched_text, shard_mesh *mesh, schedule *sc)
{
    char err[512];
    if (!mesh_text) {
        cli_error("%s: --mesh is required (e.g. --mesh batch=4,model=2)", cmd);
        return CLI_BAD_INPUT;
    }
    if (sc && !sched_text) {
        cli_error("%s: --schedule is required (e.g. --schedule dp:batch,megatron:model)", cmd);
        return CLI_BAD_INPUT;
    }
    if (shard_mesh_parse(mesh_text, mesh, err, sizeof err) < 0 || (sc && sched_parse(sched_text, mesh, sc, err, sizeof err) < 0)) {
        cli_error("%s", err);
        return CLI_BAD_INPUT;
    }
    return 0;
}

