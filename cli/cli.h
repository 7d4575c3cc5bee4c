/* cli.h - the carve command: options shared by every subcommand.
 * Exit codes: 0 success, 1 a failed check, 2 bad usage or bad input. */
#ifndef CARVE_CLI_H
#define CARVE_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "analysis/schedule.h"
#include "ir/ir.h"
#include "session/session.h"
#include "view/view.h"

enum { CLI_OK = 0, CLI_CHECK_FAILED = 1, CLI_BAD_INPUT = 2 };

/* The profile carve cost and autopart price on without --hw (carve explain
 * and report: the plan's; carve run: the cpu preset, since it compares its
 * predictions with this machine's measurements). */
#define CLI_DEFAULT_HW "a100"

typedef struct cli_opts {
    const char *model, *graph, *mesh, *hw, *schedule, *plan, *out, *positional;
    const char *to;        /* export: jax, shardy, xla or torch */
    const char *html;      /* report: the HTML file to write */
    int64_t seed, threads, steps, budget;
    double time_s, memory_gib;
    int summary, ops, forward, quiet, help;
    int shrink;            /* carve run --plan: the plan's strategy on a small model of its family (session/shrink.c) */
    int json;              /* cost, shard, explain, autopart, run: print the JSON document (view/json.c) */
    const char *optimizer; /* "adam" or "sgd" */
    const char *backend;   /* carve run: "threads" (default, NULL) or "mpi" */
    const char *precision; /* carve cost: "f32" (default) or "bf16" (mixed) */
    const char *grads;     /* --grads: auto, f32 or working (gradient precision under mixed precision) */
    int overlap;           /* carve cost: communication overlaps compute */
    const char *search;    /* autopart: mcts (default), random, greedy, exhaustive */
    int64_t stall;         /* autopart: stop after this many steps without improvement */
    int64_t seeds;         /* autopart: searches of the plain step from seeds seed .. seed + seeds - 1 (0: one) */
    int64_t rounds;        /* calibrate: rounds of measurements, each figure their median (0: CALIB_DEFAULT_ROUNDS) */
    const char *memory_tactics; /* autopart: "auto" (default, NULL) or "none" */
    const char *pipeline;       /* autopart: "auto" (default, NULL), "search" or "none" */
    const char *layouts;        /* autopart: "auto" (default, NULL), "search" or "none" */
    const char *dims, *loss, *frozen; /* an ONNX file's import options (--dim, --loss, --frozen) */
    const char *attention;            /* a graph file's attention: fused or materialized (--attention) */
    int weights;           /* import: write the params' values too */
    const char *inputs;    /* carve run: the user's batch (session_inputs_attach) */
    const char *dump;      /* carve run: the folder for step 1's loss and gradients (session_run_dump) */
} cli_opts;

/* One subcommand: its name, the flags it accepts (space-separated, e.g.
 * "--model --graph --mesh"), a one-line summary and a usage text. */
typedef struct cli_command {
    const char *name;
    const char *flags;
    const char *summary;
    const char *usage;
    int (*run)(const cli_opts *o);
} cli_command;

/* Parses argv (after the subcommand) into o.  Returns 0, or prints one error
 * line naming the bad flag and returns CLI_BAD_INPUT. */
int cli_parse(const cli_command *c, int argc, char **argv, cli_opts *o);
/* Refuses an output (--out, --html) that is one of the inputs the flags
 * name (--graph, --plan, the plan or ONNX file, --hw, --schedule), by device
 * and inode: 0, or CLI_BAD_INPUT after the error line.  Inputs read on the
 * way (a plan's graph file, external data) are refused when the output is
 * written (ir_input_guard). */
int cli_check_outputs(const cli_command *c, const cli_opts *o);
#define CARVE_VERSION "0.15.0"

/* Prints "carve: <msg>" on stderr (one line), every byte that is not
 * printable ASCII written as \xNN (cli_put_printable). */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cli_put_printable(FILE *f, const char *s);

/* The training step named by --model or --graph (a forward graph with a loss
 * gets its training step derived; a full step is used as is).  NULL after an
 * error line.  `cfg_text` receives the canonical model text or the file name. */
ir_graph *cli_load_step(const cli_opts *o, char *cfg_text, size_t n);
/* The plain step of what o names (no schedule: nothing rewritten), or NULL
 * with the error printed. */
ir_graph *cli_load_plain(const cli_opts *o);
/* Sets an ONNX file's import options of src from the flags (--dim, --loss,
 * --frozen), its remarks to go to notes. */
void cli_source_import(session_source *src, const cli_opts *o, char *notes, size_t n);

/* Parses --mesh and, when sched_text is not NULL, the schedule for command
 * `cmd` (both required: a missing one is named).  Returns 0, or prints one
 * error line and returns CLI_BAD_INPUT. */
int cli_mesh_schedule(const char *cmd, const char *mesh_text, const char *sched_text, shard_mesh *mesh, schedule *sc);

/* Renders x with the renderer named `renderer` (view_find) on stdout.
 * Returns 0, or -1 when the renderer fails or stdout reports an error. */
int cli_render(const char *renderer, const view_explanation *x);
/* The same into a buffer first, then atomically into path (stdout when path
 * is NULL); *bytes (when not NULL) gets the size.  Returns 0, or -1 with a
 * message. */
int cli_render_file(const char *renderer, const view_explanation *x, const char *path, size_t *bytes, char *err,
                    size_t errlen);
/* Prints a plan's note (the first figure that differs from carve's own), if any. */
void cli_plan_note(const plan *pl);

int cmd_models(const cli_opts *o);
int cmd_show(const cli_opts *o);
int cmd_shard(const cli_opts *o);
int cmd_autopart(const cli_opts *o);
int cmd_explain(const cli_opts *o);
int cmd_cost(const cli_opts *o);
int cmd_calibrate(const cli_opts *o);
int cmd_run(const cli_opts *o);
int cmd_export(const cli_opts *o);
int cmd_report(const cli_opts *o);
int cmd_import(const cli_opts *o);

#endif
