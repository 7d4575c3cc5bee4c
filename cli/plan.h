/* plan.h - the plan file a user keeps ("format": "carve-plan/1", docs/plan-format.md).
 *
 * A plan records how to rebuild the partitioned program exactly: the model (spec,
 * or graph file and its hash), the optimizer, the mesh, the schedule text, and
 * every decision in the order it was applied (argument name, dim, axis).  It
 * also records, for people and for checking, the sharding of every argument
 * (carve's form and a JAX PartitionSpec), the collectives, the predicted cost
 * and the search statistics.  Loading re-applies the decisions on the rebuilt
 * graph and refuses a plan whose argument shardings do not come out the same
 * (another model, another mesh, an edited file).
 */
#ifndef CARVE_PLAN_H
#define CARVE_PLAN_H

#include <cjson/cJSON.h>

#include "analysis/shard.h"
#include "analysis/spmd.h"

typedef struct plan_search {
    char kind[16];          /* mcts, random, greedy, exhaustive, or "" (no search) */
    int64_t budget, simulations, evaluations, best_at, tree_nodes;
    int root_actions;
    double budget_seconds, seconds;
    uint64_t seed;
    int threads;
    char stop[16];
} plan_search;

typedef struct plan_cost {
    int valid;
    double step_time, compute, comm, peak_bytes, capacity_bytes;
    int fits;
} plan_cost;

typedef struct plan {
    char model[512];        /* canonical model spec, or "" for a graph file */
    char graph_file[512];
    char graph_hash[24];    /* FNV-1a 64 of the graph file's bytes, hex */
    char optimizer[8];      /* adam or sgd */
    char mesh[160];
    char schedule[512];
    char hw_name[64];
    cJSON *hw;              /* the hardware profile as JSON (owned), or NULL */
    int n_decisions;
    shard_decision *decisions; /* owned; values resolved against a graph */
    char **decision_names;     /* owned; argument names (from a loaded file) */
    plan_search search;
    plan_cost cost;
} plan;

/* Writes the plan atomically (temp file, rename).  st holds the propagated
 * shardings of the plan's decisions, p the lowered program (collectives).
 * Returns 0, or -1 with a message naming the path. */
int plan_save(const char *path, const plan *pl, const shard_state *st, const spmd_program *p, char *err, size_t errlen);

/* Reads a plan file (does not rebuild anything).  Returns 0 or -1 with a one-line
 * message naming the file and the field. */
int plan_load(const char *path, plan *pl, char *err, size_t errlen);

/* Re-applies the loaded plan's decisions (by argument name) on st (fresh, for
 * the rebuilt graph and mesh) and checks every argument's sharding against the
 * file.  Returns 0, or -1 with a message saying what does not match. */
int plan_replay(plan *pl, const char *path, shard_state *st, char *err, size_t errlen);

void plan_free(plan *pl);

/* What run and explain both do first: load the plan file, parse its mesh,
 * rebuild its training step and replay its decisions (checking every
 * argument's sharding).  Returns 0 with *g and *st set (the caller frees them,
 * st before g, and plan_free(pl); st borrows *mesh), or prints one error line
 * starting with `cmd` and returns 2 (CLI_BAD_INPUT) with nothing left to free. */
int plan_open(const char *cmd, const char *path, plan *pl, shard_mesh *mesh, ir_graph **g, shard_state **st);

/* Rebuilds the plan's training step: the model spec (with its optimizer) or the
 * graph file, which must still hash as recorded.  NULL after an error line. */
ir_graph *plan_build_graph(const plan *pl, const char *path);

/* FNV-1a 64 of a file's bytes as 16 hex digits; -1 if unreadable. */
int plan_file_hash(const char *path, char out[24]);

#endif
