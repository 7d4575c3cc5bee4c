/* shard.h - meshes, tensor shardings, per-op factor rules, propagation.
 *
 * Vocabulary (GSPMD / Shardy):
 *  - a mesh has up to 4 named axes; devices are numbered row-major over them;
 *  - a tensor sharding gives, per dimension, an ordered list of mesh axes
 *    (major to minor) that tile it, plus a set of axes on which the tensor
 *    holds unreduced partial results (sum or max);
 *  - an op's sharding rule maps every dim of every operand and of the result
 *    to factors; a factor in the result is pass-through, a factor only in
 *    operands is a reduction (sharding it leaves the result partial).
 *
 * Propagation state (shard_state) holds one sharding per value and one
 * "stamp" per (value, axis): the index of the decision that put the axis
 * there.  Stamps make conflicts predictable: when two shardings meet at an
 * op, the one from the earlier decision wins, whatever order the worklist
 * visits ops in.
 */
#ifndef CARVE_SHARD_H
#define CARVE_SHARD_H

#include <stdint.h>
#include <stdio.h>

#include "ir/ir.h"

#define SHARD_MAX_AXES 4
#define SHARD_AXIS_NAME 16
#define SHARD_MAX_DEVICES (1 << 20) /* devices in a mesh */
#define SHARD_MAX_FACTORS 16
#define SHARD_MAX_COMPOUND 3
#define SHARD_NO_STAMP 0x7fff

/* ---- mesh ------------------------------------------------------------ */
typedef struct shard_mesh {
    int n_axes;
    char names[SHARD_MAX_AXES][SHARD_AXIS_NAME];
    int64_t sizes[SHARD_MAX_AXES];
    int64_t n_devices;
} shard_mesh;

/* Parses "batch=4,model=2" (or "4x2": axes named batch, model, x2, x3).
 * Returns 0 or -1 with a one-line message. */
int shard_mesh_parse(const char *text, shard_mesh *m, char *err, size_t errlen);
/* Axis index of a name, or -1. */
int shard_mesh_axis(const shard_mesh *m, const char *name);
char *shard_mesh_str(const shard_mesh *m, char *buf, size_t n);
/* Product of the sizes of the axes in `mask`. */
int64_t shard_axes_size(const shard_mesh *m, unsigned mask);
/* Coordinate of device `dev` along axis a. */
int64_t shard_device_coord(const shard_mesh *m, int64_t dev, int a);

/* ---- tensor sharding -------------------------------------------------- */
typedef struct shard_spec {
    uint8_t n[IR_MAX_RANK];                   /* number of axes tiling each dim */
    uint8_t axes[IR_MAX_RANK][SHARD_MAX_AXES]; /* axis ids, major to minor */
    uint8_t partial;                          /* axes holding partial results */
    uint8_t partial_max;                      /* of those, partial max (else sum) */
} shard_spec;

/* Mask of the axes that tile any dim of s. */
unsigned shard_spec_tiled(const shard_spec *s, int rank);
/* Number of shards along dim d. */
int64_t shard_dim_shards(const shard_mesh *m, const shard_spec *s, int d);
/* Block size of a dim of `size` under s (mesh.c: uneven splits are padded,
 * level by level over the dim's axes). */
int64_t shard_dim_block(const shard_mesh *m, const shard_spec *s, int d, int64_t size);
/* Local dims of a value under s: the same on every device, padding included. */
void shard_local_dims(const shard_mesh *m, const ir_value *v, const shard_spec *s, int64_t *dims);
size_t shard_local_bytes(const shard_mesh *m, const ir_value *v, const shard_spec *s);
/* Offset of device `dev`'s block along dim d (in elements of the global dim). */
int64_t shard_dim_offset(const shard_mesh *m, const ir_value *v, const shard_spec *s, int d, int64_t dev);
/* Rows of device `dev`'s block along dim d that hold data (the rest, at the
 * block's end, is padding: zeros). */
int64_t shard_dim_valid(const shard_mesh *m, const ir_value *v, const shard_spec *s, int d, int64_t dev);
/* Whether a dim of `size` may be split in `shards`: evenly, or padded when
 * it has at least one row per shard (a smaller dim would be mostly padding). */
int shard_split_ok(int64_t size, int64_t shards);
int shard_spec_equal(const shard_spec *a, const shard_spec *b, int rank);
/* Compact text: "[{batch}, {}, {model}]" plus " partial{model}" when partial. */
char *shard_spec_str(const shard_mesh *m, const shard_spec *s, int rank, char *buf, size_t n);
/* JAX-style PartitionSpec: [null, "model"] or [["batch","model"], null]. */
char *shard_spec_pspec(const shard_mesh *m, const shard_spec *s, int rank, char *buf, size_t n);

/* ---- factor rules ------------------------------------------------------ */
typedef enum { SHARD_PASS, SHARD_REDUCE_SUM, SHARD_REDUCE_MAX, SHARD_REPLICATE } shard_factor_kind;

/* Tensor t in 0..n_in-1 is an operand, n_in is the result. */
typedef struct shard_rule {
    /* the fields propagation reads at every visit of the op come first, in
     * as few cache lines as possible (a GPT-1.3B step has ~10,000 ops) */
    int n_factors;
    int n_in;
    int tensor[IR_MAX_OPERANDS + 1];          /* value of tensor t (inputs, then the output) */
    uint8_t rank[IR_MAX_OPERANDS + 1];        /* and its rank */
    uint8_t reshard;                          /* the op is a reshard (propagation passes it one way) */
    uint16_t even;                            /* shard_rule_even_factors, computed once */
    /* bit t * IR_MAX_RANK + d: dim d of tensor t has one factor whose size is
     * not the dim's (propagation then reads the dim's size from the value) */
    uint32_t own_size;
    /* factors of dim d of tensor t, major first; nf = 0 for a size-1 dim
     * that carries no factor. Only the first (major) factor of a compound
     * dim can be sharded through that dim. */
    uint8_t nf[IR_MAX_OPERANDS + 1][IR_MAX_RANK];
    int8_t f[IR_MAX_OPERANDS + 1][IR_MAX_RANK][SHARD_MAX_COMPOUND];
    uint8_t kind[SHARD_MAX_FACTORS];          /* shard_factor_kind */
    int64_t size[SHARD_MAX_FACTORS];
} shard_rule;

/* The sharding rule of op `op` of g. Returns 0 or -1 (never for a verified graph). */
int shard_rule_of(const ir_graph *g, int op, shard_rule *r);

/* Mask of the factors of op o (rule r) that split only evenly: those of a
 * reshape's compound dims (a padded block of the major factor would not be
 * whole rows of the compound dim) and the dim that slice, pad and concat
 * cut; any other factor may be split unevenly, padded (mesh.c). */
unsigned shard_rule_even_factors(const ir_graph *g, const shard_rule *r, const ir_op *o);

/* ---- decisions and propagation ----------------------------------------- */
typedef enum { SHARD_TILE, SHARD_ATOMIC } shard_decision_kind;

/* A decision on one argument: tile its dim `dim` over `axis` (appended as the
 * minor-most axis of that dim), or keep it replicated over `axis` (atomic). */
typedef struct shard_decision {
    uint8_t kind;  /* shard_decision_kind */
    int8_t dim;
    int8_t axis;
    int value;
} shard_decision;

typedef struct shard_conflict {
    int op;        /* op where two shardings met, or -1 for a decision */
    int value;     /* the value that could not take the axis */
    int axis;
    int winner_stamp, loser_stamp;
    char why[96];
} shard_conflict;

/* The axes a factor is sharded on at one op, with the stamps that put them there. */
typedef struct shard_factor_axes {
    uint8_t n;
    uint8_t axes[SHARD_MAX_AXES];
    int16_t stamp[SHARD_MAX_AXES];
} shard_factor_axes;

typedef struct shard_state {
    const ir_graph *g;
    shard_mesh mesh;           /* its own copy of the mesh */
    shard_rule *rules;         /* one per op, computed once */
    shard_spec *spec;          /* one per value */
    int16_t (*stamp)[SHARD_MAX_AXES]; /* per value, per axis */
    uint8_t *atomic;           /* per value: axes it must stay replicated on */
    uint8_t *contested;        /* per op: 1 once a visit found its tensors proposing conflicting
                                * factor shardings (kept until reset; shard_state_plan_hash) */
    int n_decisions;           /* stamps given so far */
    shard_conflict *conflicts;
    int n_conflicts, cap_conflicts;
    /* scratch for the worklist */
    int *queue, *in_queue;
    int queue_head, queue_tail;
    /* use lists: ops reading each value (CSR) */
    int *use_start, *uses;
    int *producer;             /* per value: its producer op, or -1 (the graph's, read without touching ir_value) */
    int *update_of;            /* per value: the argument its output updates, or -1 */
    int *updated_by;           /* per argument: the output updating it, or -1 */
    uint32_t *conflict_keys;   /* hash set of recorded (op, value, axis) */
    int conflict_cap;
    int record_conflicts;      /* 0 while the search evaluates plans (faster) */
    /* 1, or while recording conflicts: an op whose visit changed one of its
     * tensors is queued again, as any op reading a changed value is.  0 (the
     * default) and not recording conflicts (the search): it is not, because a
     * visit leaves its op at a fixpoint (each tensor took the factor shardings
     * or kept what it had, so a second visit computes the same ones and
     * changes nothing; it would only record the same conflicts in another
     * order).  tests/test_search.c checks that both reach the same state. */
    int revisit;
    /* every decision that changed something, in order (plans record it) */
    shard_decision *log;
    int n_log, cap_log;
    /* ZeRO-3 gather policy the lowering uses for this plan (spmd_gather_policy:
     * 0 regather, 1 keep); set by the gather: tactic, copied with the state */
    int gather_policy;
    /* axes whose tensor-parallel collectives (all-gathers and reduce-scatters
     * of activations) the plan overlaps with the einsums they feed or follow:
     * a property the cost model prices (overlap: tactic); copied with the
     * state */
    unsigned overlap_axes;
    /* axes no decision may tile (a pipelined plan's pipeline axis: set by the
     * pipeline: tactic, copied with the state); the search offers no action
     * on them */
    unsigned reserved_axes;
    /* what the states that share rules, uses, use_start, producer, update_of
     * and updated_by (shard_state_new_like; no state writes them after
     * shard_state_new builds them) also share: how many they are (the last
     * one freed frees them), the graph's dim groups and its Megatron dims,
     * each built on first use (shard_state_groups, groups.h;
     * shard_state_megatron, structure.h).  NULL in a saved state, which has
     * none. */
    struct shard_shared *shared;
} shard_state;

typedef struct shard_shared {
    int refs;
    struct shard_groups *groups;     /* NULL until shard_state_groups builds them */
    struct shard_megatron *megatron; /* NULL until shard_state_megatron builds them */
} shard_shared;

/* The factor shardings of op `op` given the current shardings of its operands
 * and result: for each factor, the axes proposed by the tensors that have it,
 * earliest decision first; an axis claimed by two factors goes to the one with
 * the earlier stamp.  Fills fa[0..n_factors).  Used by propagation and by
 * lowering, so both resolve conflicts the same way.  When `s` records
 * conflicts, the ones met here are recorded.  Returns the number of conflicts
 * met (0: the tensors agree, and fa does not depend on the stamps). */
int shard_op_factors(shard_state *s, int op, shard_factor_axes *fa);

/* A hint: asks for the shardings and stamps of op's tensors, which
 * shard_op_factors reads (its rule is read here). */
static inline void shard_prefetch_tensors(const shard_state *s, int op)
{
    const shard_rule *r = &s->rules[op];
    for (int t = 0; t <= r->n_in; t++) {
        __builtin_prefetch(&s->spec[r->tensor[t]]);
        __builtin_prefetch(&s->stamp[r->tensor[t]]);
    }
}

/* Returns a new state with every value replicated; caller frees with
 * shard_state_free.  g is borrowed (it must outlive the state); the state
 * keeps its own copy of the mesh. */
shard_state *shard_state_new(const ir_graph *g, const shard_mesh *mesh);
void shard_state_free(shard_state *s);
/* Back to all-replicated, no decisions (keeps the allocations). */
void shard_state_reset(shard_state *s);
/* Copies shardings and stamps of src into dst (same graph and mesh). */
void shard_state_copy(shard_state *dst, const shard_state *src);
/* A new all-replicated state of base's graph and mesh that shares base's
 * per-graph tables (the rules and use lists, read only) instead of building
 * its own: a state per expert schedule or search thread then costs its
 * per-value shardings, not a copy of the graph's rules (several MB for a
 * large model).  A saved base (no tables) gets a state of its own.  Free
 * with shard_state_free, in any order with base. */
shard_state *shard_state_new_like(const shard_state *base);
/* A state that holds only what shard_state_copy copies (no rules, no
 * worklist): a saved copy for caches, a source and destination of
 * shard_state_copy, never propagated.  Free with shard_state_free. */
shard_state *shard_state_new_saved(const ir_graph *g, const shard_mesh *mesh);

/* Applies one decision and propagates to a fixpoint.  Returns 0 when applied,
 * 1 when it changed nothing (already so, or blocked: a conflict is recorded),
 * -1 with a message in err for a decision that is malformed (bad value, dim
 * or axis, not an argument, dim not divisible). */
int shard_apply(shard_state *s, const shard_decision *d, char *err, size_t errlen);
/* Propagates from every value to a fixpoint (used after loading shardings). */
void shard_propagate_all(shard_state *s);

/* A 64-bit hash of every value's sharding and atomic axes: two decision
 * sequences that reach the same shardings hash equal, whatever order they
 * were applied in. */
uint64_t shard_state_hash(const shard_state *s);
/* A 64-bit hash of everything lowering reads: shard_state_hash, the gather
 * policy, and the factor shardings (shard_op_factors) of each op where the
 * tensors propose conflicting ones.  Equal value shardings do not make equal
 * programs: at such an op the earlier decision wins, so two orders of the same
 * decisions can leave every value sharded alike and resolve a conflict
 * differently.  Two states whose plan hashes are equal lower to the same
 * program (the search's transposition key).  Only ops marked `contested` are
 * looked at: an op whose tensors conflict was visited by propagation since it
 * last changed.  Records no conflicts; s is otherwise unchanged. */
uint64_t shard_state_plan_hash(shard_state *s);

char *shard_decision_str(const shard_state *s, const shard_decision *d, char *buf, size_t n);

#endif
