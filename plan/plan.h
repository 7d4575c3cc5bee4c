/* plan.h - the plan file a user keeps ("format": "carve-plan/2", docs/plan-format.md).
 *
 * A plan records how to rebuild the partitioned program exactly: the model (spec,
 * or graph file and its hash, the path relative to the plan file), the optimizer,
 * the mesh (axis names, sizes, device order), the hardware profile and every cost
 * option that changes the price (plan_options_*), the schedule text, and every
 * decision in the order it was applied (argument name, dim, axis).  It also
 * records what follows from those: the sharding of every argument and of the
 * named forward activations, the collectives, the predicted cost; and how the
 * search went.
 *
 * Opening a plan (session_plan_open in session/plan.c) rebuilds its training
 * step, re-applies the decisions, lowers and prices the program again, and
 * plan_verify rebuilds the whole document and compares every derived field
 * with the file: an edited plan, or one for another model or mesh,
 * is refused with the first difference named ("FILE: KEY: what is wrong").
 * carve-plan/1 files still load (their derived fields are fewer: arguments only).
 */
#ifndef CARVE_PLAN_H
#define CARVE_PLAN_H

#include <cjson/cJSON.h>

#include "analysis/schedule.h"
#include "analysis/shard.h"
#include "analysis/spmd.h"
#include "cost/cost.h"
#include "search/search.h"

#define PLAN_FORMAT "carve-plan/2"
#define PLAN_FORMAT_V1 "carve-plan/1"

/* When the search first held a plan as fast as an expert schedule's. */
typedef struct plan_reached {
    char schedule[160];     /* the expert's tactics */
    double step_time;       /* its step time */
    double steps, seconds;  /* when the search's best plan was first as fast (-1: never) */
} plan_reached;

#define PLAN_REACHED_MAX 64

typedef struct plan_search {
    char kind[16];          /* mcts, random, greedy, exhaustive, or "" (no search) */
    int64_t budget, simulations, evaluations, best_at, tree_nodes;
    int root_actions;
    double budget_seconds, seconds;
    uint64_t seed;
    int threads;
    char stop[16];
    int gather_chosen;      /* the ZeRO-3 gather policy was the pricer's choice, plan and experts alike
                               (autopart without a gather: tactic); explain prices the experts so too */
    double steps;           /* what the budget counted (docs/search.md, "Budgets") */
    int n_curve;            /* the best-so-far curve (search_result.curve) */
    search_point curve[SEARCH_CURVE_MAX];
    int n_reached;          /* each fitting expert's step time, and when the search reached it */
    plan_reached reached[PLAN_REACHED_MAX];
} plan_search;

typedef struct plan {
    int version;            /* format read (1 or 2); plans are written as 2 */
    char model[512];        /* canonical model spec, or "" for a graph file */
    char graph_file[1024];  /* as the file records it (v2: relative to the plan's folder) */
    char graph_path[2048];  /* where it is read from (resolved at load; set by the writer) */
    char graph_hash[24];    /* FNV-1a 64 of the graph file's bytes, hex */
    char onnx_dims[256], onnx_loss[256], onnx_frozen[256]; /* an ONNX file's import options ("" none) */
    char graph_attention[256]; /* a graph file's attention as built: "fused" or "materialized" ("": a plan from
                                  before fused attention, materialized) */
    char optimizer[8];      /* adam or sgd */
    shard_mesh mesh;
    char schedule[SCHED_STR_MAX]; /* a pipeline's split may take thousands of characters */
    char hw_name[64];
    cJSON *hw;              /* the hardware profile as JSON (owned), or NULL */
    cost_options options;   /* recorded in v2; v1 plans: all zero (f32, no overlap, profile's memory) */
    int n_decisions;
    shard_decision *decisions; /* owned; values resolved against a graph */
    char **decision_names;     /* owned; "arg\naxis" as read from a file */
    plan_search search;
    int has_predicted;
    cost_estimate predicted;   /* scalars only (no per-layer arrays) */
    cJSON *doc;             /* the file as read (owned), for the comparison */
    char note[1400];        /* set by plan_verify: the first collective or predicted figure that
                               differs from carve's (another carve version, or an edit), or "" */
} plan;

/* Adds the search's steps, its best-so-far curve and when each expert's step
 * time was reached to the search object o ("steps", "curve",
 * "experts_reached"; docs/plan-format.md). */
void plan_add_curve(cJSON *o, const plan_search *s);

/* The document of a plan: format, model, mesh, hardware, cost options,
 * schedule, decisions (st's log), arguments and activations (st), collectives
 * (p, may be NULL), predicted (e, may be NULL), search.  version 1 builds the
 * fields a carve-plan/1 file has.  Caller deletes. */
cJSON *plan_to_json(const plan *pl, const shard_state *st, const spmd_program *p, const cost_estimate *e, int version);

/* Pieces of the document that other documents (view/json.h) share: a number
 * written with %.17g (null when not finite); a PartitionSpec as JSON (null,
 * an axis name, or a list of names per dim); "mesh" and "devices" added to j
 * (version 1: the mesh as text); "collectives" added to j (count and bytes per
 * device by kind and phase). */
cJSON *plan_json_number(double x);
cJSON *plan_pspec_json(const shard_mesh *m, const shard_spec *s, int rank);
void plan_add_mesh(cJSON *j, const shard_mesh *m, int version);
void plan_add_collectives(cJSON *j, const spmd_program *p);
/* A number of a document, its key and value: PLAN_JSON_NUMBERS(o, {"key",
 * value}, ...) adds such rows to object o in order, each as
 * plan_json_number writes it (a table instead of a call a key). */
typedef struct plan_json_field {
    const char *key;
    double value;
} plan_json_field;
void plan_json_numbers(cJSON *o, const plan_json_field *f, size_t n);
#define PLAN_JSON_NUMBERS(o, ...)                                      \
    plan_json_numbers((o), (const plan_json_field[]){__VA_ARGS__},     \
                      sizeof((const plan_json_field[]){__VA_ARGS__}) / sizeof(plan_json_field))
/* Adds the figures of e named by keys (NULL-terminated), in that order, to j:
 * the one table of what each key means (step_time_s, compute_s,
 * communication_s, overlapped, serialisation, flops_per_device,
 * communicated_bytes_per_device, wire_bytes_per_device, peak_memory_bytes,
 * memory_capacity_bytes, fits, at_peak_bytes: what is live at the peak by
 * kind, model_state_bytes, collective_launches).  A plan file's "predicted"
 * and the views' estimates are lists of these keys.  Returns 0, or -1 at the
 * first key it does not know. */
int plan_add_estimate(cJSON *j, const cost_estimate *e, const char *const *keys);

/* Writes the plan atomically (temp file, rename).  pl->graph_path (when the
 * model is a graph file) is stored relative to the plan's folder.  Returns 0, or
 * -1 with a message naming the path. */
int plan_save(const char *path, plan *pl, const shard_state *st, const spmd_program *p, const cost_estimate *e,
              char *err, size_t errlen);

/* Reads a plan file (v1 or v2; rebuilds nothing).  Returns 0 or -1 with a
 * one-line message "FILE: KEY: what is wrong". */
int plan_load(const char *path, plan *pl, char *err, size_t errlen);

/* Re-applies the loaded plan's decisions (by argument name) on st (fresh, for
 * the rebuilt graph and pl->mesh), and its schedule's gather policy.  Returns
 * 0, or -1 with a message. */
int plan_replay(plan *pl, const char *path, shard_state *st, char *err, size_t errlen);

/* The plan's hardware profile (its stored profile, else its preset name).
 * Returns 0 or -1 with a message. */
int plan_hw(const plan *pl, const char *path, cost_hw *hw, char *err, size_t errlen);

/* Compares every field of the file that follows from the graph and the
 * decisions with the document rebuilt from st, p and e.  The layout (mesh,
 * devices, arguments, activations, model.params) must match: else -1 with the
 * first difference, "FILE: KEY: what is wrong".  The price (collectives,
 * predicted) depends on carve's version too: a difference there only sets
 * pl->note.  Returns 0 or -1. */
int plan_verify(plan *pl, const char *path, const shard_state *st, const spmd_program *p,
                const cost_estimate *e, char *err, size_t errlen);

void plan_free(plan *pl);

/* FNV-1a 64 of a file's bytes as 16 hex digits: 0, or -1 when it cannot be
 * read (a regular file only: ir_open_input) with the reason in why. */
int plan_file_hash(const char *path, char out[24], char *why, size_t whylen);

/* Copies s into buf with every byte that is not printable ASCII written as
 * \xNN (messages never carry control characters from a file).  Returns buf. */
char *plan_printable(const char *s, char *buf, size_t n);

/* ---- cost options (options.c) ----------------------------------------- */
/* Every field of cost_options as a JSON object (names in docs/plan-format.md).
 * Caller deletes. */
cJSON *plan_options_to_json(const cost_options *o);
/* Reads the object written by plan_options_to_json: unknown keys and bad
 * values are errors naming the key; missing keys keep o's values.  Returns 0
 * or -1 with a message "KEY: what is wrong". */
int plan_options_from_json(const cJSON *j, cost_options *o, char *err, size_t errlen);

#endif
