/* doc.h - the documents `--json` prints (docs/json-output.md, schema in
 * docs/output.schema.json): carve cost, carve shard, carve explain and carve
 * autopart, each one JSON object whose "format" names it and its version.
 *
 * A document carries the figures the command's text shows, unrounded (times
 * in seconds, sizes in bytes, numbers written with %.17g), and the lists the
 * text folds or cuts (every param, every collective).  The builders take what
 * the command has already computed; nothing is priced again here.  Every
 * returned cJSON is the caller's to delete.
 */
#ifndef CARVE_VIEW_JSON_H
#define CARVE_VIEW_JSON_H

#include "analysis/schedule.h"
#include "autopart/experts.h"
#include "autopart/memory.h"
#include "plan/plan.h"

#define VIEW_DOC_COST "carve-cost/1"
#define VIEW_DOC_SHARD "carve-shard/1"
#define VIEW_DOC_EXPLAIN "carve-explain/1"
#define VIEW_DOC_AUTOPART "carve-autopart/1"

/* One sentence naming the strategy of the plan in st (data parallel over X,
 * params sharded over X (ZeRO-3), tensor parallel over Y, ...).  Returns buf. */
char *view_strategy(const shard_state *st, char *buf, size_t n);

/* An estimate: totals, memory at the peak, breakdowns by op kind, collective
 * kind, phase and layer. */
cJSON *view_doc_estimate(const cost_estimate *e);
/* The expert table: one entry per expert schedule, the best fitting marked;
 * with mine, each fitting expert's step time over mine. */
cJSON *view_doc_experts(const autopart_expert *ex, int n, const cost_estimate *mine);

/* carve cost: the schedule priced (e) and the replicated plan on the same
 * mesh (base, NULL when it could not be priced). */
cJSON *view_doc_cost(const char *model, const shard_mesh *mesh, const char *sched, const cost_hw *hw,
                     const cost_options *opt, const cost_estimate *e, const cost_estimate *base);

/* What one tactic of carve shard did. */
typedef struct view_doc_tactic {
    char tactic[SCHED_NAME_LEN + 64]; /* as sched_str writes it */
    int changed, unchanged;   /* decisions that changed the sharding; that changed nothing */
} view_doc_tactic;

/* carve shard: the tactics' outcome, conflicts, every argument's sharding,
 * bytes per device by role, and the collectives of the lowered program p.
 * With decisions (st's log, applied in order), each one is listed too. */
cJSON *view_doc_shard(const char *model, const char *sched, const shard_state *st, const view_doc_tactic *t,
                      int n_tactics, int decisions, const spmd_program *p);

/* carve explain and carve autopart share the body of a plan: the model,
 * mesh, hardware and options it is priced with (pr), its schedule, strategy,
 * every param's sharding, every collective of pr->p with its predicted time,
 * the estimate e and the experts. */
typedef struct view_doc_body {
    const char *model, *schedule;
    const shard_state *st;
    const autopart_pricer *pr;
    const cost_estimate *e;
    const autopart_expert *ex;
    int n_ex;
} view_doc_body;

/* carve explain of the plan pl read from path (hw_given: --hw replaced the
 * plan's profile). */
cJSON *view_doc_explain(const view_doc_body *b, const plan *pl, const char *path, int hw_given);

/* carve autopart: the search (pl->search), the actions after the prefix
 * ("group->axis" each), the expert the best plan starts from (NULL: none),
 * the plan file written (NULL: none). */
cJSON *view_doc_autopart(const view_doc_body *b, const plan *pl, const char *const *actions, int n_actions,
                         const char *from_expert, const char *written);

/* Adds "memory" to an autopart document: the memory level's configurations
 * (steps[0..n), each step's best plan; `chosen` the one kept) and the ZeRO-3
 * gather policy of the chosen plan (by_search: the search chose it, not the
 * schedule; other: the chosen plan priced under the other policy, NULL when
 * the policy changes nothing). */
void view_doc_add_memory(cJSON *doc, const autopart_step *steps, int n, int chosen, int by_search,
                         const cost_estimate *other);

/* Prints doc (indented, one trailing newline) on f and deletes it.  Returns 0,
 * or -1 when out of memory or f reports an error. */
int view_doc_print(cJSON *doc, FILE *f);

#endif
