/* opts.c - flag parsing and the loading of --model / --graph shared by
 * subcommands (session/load.c does the loading). */
#include "cli.h"
#include "cost/cost.h"

#include <errno.h>
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

int cli_parse(const cli_command *c, int argc, char **argv, cli_opts *o)
{
    memset(o, 0, sizeof *o);
    o->seed = 1;
    o->threads = 1;
    o->steps = 1;
    o->optimizer = "adam";
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
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
        const char *val = NULL;
        const char *eq = strchr(a, '=');
        size_t fl = eq ? (size_t)(eq - a) : strlen(a);
        if (fl >= sizeof flag) fl = sizeof flag - 1;
        memcpy(flag, a, fl);
        flag[fl] = 0;
        if (fl == sizeof flag - 1 || !has_flag(c->flags, flag)) { /* shown whole, never cut */
            const char *near = ir_nearest(flag, c->flags);
            cli_error("%s: unknown option '%.*s' (%s%s%ssee carve %s --help)", c->name, (int)(eq ? (size_t)(eq - a) : strlen(a)), a,
                      near ? "did you mean " : "", near ? near : "", near ? "? " : "", c->name);
            return CLI_BAD_INPUT;
        }
        static const char *const bools[] = {"--summary", "--ops", "--forward", "--quiet", "--overlap", "--json"};
        int *bool_dst[] = {&o->summary, &o->ops, &o->forward, &o->quiet, &o->overlap, &o->json};
        int is_bool = 0;
        for (int k = 0; k < 6; k++)
            if (!strcmp(flag, bools[k])) {
                *bool_dst[k] = 1;
                is_bool = 1;
            }
        if (is_bool) continue;
        if (eq) val = eq + 1;
        else if (i + 1 < argc) val = argv[++i];
        else {
            cli_error("%s: option %s needs a value", c->name, flag);
            return CLI_BAD_INPUT;
        }
        int rc = 0;
        if (!strcmp(flag, "--model")) o->model = val;
        else if (!strcmp(flag, "--graph")) o->graph = val;
        else if (!strcmp(flag, "--mesh")) o->mesh = val;
        else if (!strcmp(flag, "--hw")) o->hw = val;
        else if (!strcmp(flag, "--schedule")) o->schedule = val;
        else if (!strcmp(flag, "--plan")) o->plan = val;
        else if (!strcmp(flag, "--to")) o->to = val;
        else if (!strcmp(flag, "--html")) o->html = val;
        else if (!strcmp(flag, "--out")) o->out = val;
        else if (!strcmp(flag, "--precision")) {
            cost_precision prec;
            char perr[160];
            if (cost_precision_parse(val, &prec, perr, sizeof perr) < 0) {
                cli_error("%s: --precision: %s", c->name, perr);
                return CLI_BAD_INPUT;
            }
            o->precision = val;
        }
        else if (!strcmp(flag, "--grads")) {
            cost_grads gr;
            char perr[160];
            if (cost_grads_parse(val, &gr, perr, sizeof perr) < 0) {
                cli_error("%s: --grads: %s", c->name, perr);
                return CLI_BAD_INPUT;
            }
            o->grads = val;
        }
        else if (!strcmp(flag, "--memory-tactics")) {
            if (strcmp(val, "auto") && strcmp(val, "none")) {
                cli_error("%s: --memory-tactics must be auto or none, got '%s'", c->name, val);
                return CLI_BAD_INPUT;
            }
            o->memory_tactics = val;
        }
        else if (!strcmp(flag, "--backend")) {
            if (strcmp(val, "threads") && strcmp(val, "mpi")) {
                cli_error("%s: --backend must be threads or mpi, got '%s'", c->name, val);
                return CLI_BAD_INPUT;
            }
            o->backend = val;
        }
        else if (!strcmp(flag, "--optimizer")) {
            if (strcmp(val, "adam") && strcmp(val, "sgd")) {
                cli_error("%s: --optimizer must be adam or sgd, got '%s'", c->name, val);
                return CLI_BAD_INPUT;
            }
            o->optimizer = val;
        } else if (!strcmp(flag, "--seed")) rc = parse_int(c->name, flag, val, 0, INT64_MAX, &o->seed);
        else if (!strcmp(flag, "--threads")) rc = parse_int(c->name, flag, val, 1, 256, &o->threads);
        else if (!strcmp(flag, "--steps")) rc = parse_int(c->name, flag, val, 1, 1000000, &o->steps);
        else if (!strcmp(flag, "--search")) {
            if (!search_algo_find(val)) {
                cli_error("%s: --search must be mcts, random, greedy or exhaustive, got '%s'", c->name, val);
                return CLI_BAD_INPUT;
            }
            o->search = val;
        } else if (!strcmp(flag, "--stall")) rc = parse_int(c->name, flag, val, 1, 100000000, &o->stall);
        else if (!strcmp(flag, "--budget")) rc = parse_int(c->name, flag, val, 1, 100000000, &o->budget);
        else if (!strcmp(flag, "--time")) rc = parse_num(c->name, flag, val, 0, 86400 * 7, &o->time_s);
        else if (!strcmp(flag, "--memory")) rc = parse_num(c->name, flag, val, 0, 1e9, &o->memory_gib);
        if (rc) return CLI_BAD_INPUT;
    }
    return 0;
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
    session_source src = {o->model, o->graph, o->optimizer, o->forward, have ? &sc : NULL};
    ir_graph *g = session_load_step(&src, cfg_text, n, NULL, err, sizeof err);
    if (!g) cli_error("%s", err);
    return g;
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

