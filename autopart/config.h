/* config.h (autopart) - a configuration of autopart's levels above the
 * sharding search: the graph tactics a step is built with (recomputation,
 * micro-batches, a pipeline), as data.
 *
 * The levels (memory.h, pipeline.h) make configurations, build each one's
 * step through their caller's callback from a parsed schedule (the
 * configuration's tactics, then the user's), search it, and hand the chosen
 * one back; the plan file's schedule text is written once, at the end, from
 * the configuration (autopart_config_schedule, then sched_str).  No level
 * reads or splices tactic text: a configuration's text is only its label in
 * tables (autopart_config_str).
 */
#ifndef CARVE_AUTOPART_CONFIG_H
#define CARVE_AUTOPART_CONFIG_H

#include "analysis/pipeline.h"
#include "analysis/schedule.h"

/* Recomputation of every layer (analysis/schedule.h's remat:all, remat:full, remat:attn). */
typedef enum { AUTOPART_REMAT_NONE, AUTOPART_REMAT_SELECTIVE, AUTOPART_REMAT_FULL, AUTOPART_REMAT_ATTN } autopart_remat;

typedef struct autopart_config {
    autopart_remat remat; /* recomputation (of every layer, or of remat_layers), or none */
    int remat_layers;     /* 0: every layer; k > 0: layers 0..k-1 only (remat:0-(k-1)) */
    int microbatches;     /* gradient accumulation over this many micro-batches (0: none) */
    pipe_choice pipe;     /* a pipeline when pipe.axis >= 0 (its layer split auto) */
} autopart_config;

/* The plain step's configuration: no graph tactic. */
autopart_config autopart_config_none(void);
/* 1 when c has a pipeline. */
int autopart_config_piped(const autopart_config *c);

/* The schedule of configuration c in front of `tail` (the user's tactics) into
 * *out: c's pipeline (pinned to `resolved` when not NULL: the micro-batches and
 * the layer split it was priced with), recomputation, micro-batches, then
 * gather:keep when `keep`, then tail's tactics (and tail's split when c has no
 * pipeline).  Returns 0, or -1 with a message when the tactics do not fit a
 * schedule. */
int autopart_config_schedule(const autopart_config *c, const pipe_spec *resolved, int keep, const schedule *tail,
                             schedule *out, char *err, size_t errlen);

/* c's tactics as text, its label in tables and messages ("remat:all,microbatch:2",
 * "pipeline:x:8:1f1b,remat:all"; "" for the plain step), into buf (n bytes);
 * returns buf. */
char *autopart_config_str(const autopart_config *c, const shard_mesh *mesh, char *buf, size_t n);

#endif
