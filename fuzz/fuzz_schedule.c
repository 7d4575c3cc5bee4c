/* fuzz_schedule.c - the schedule readers: the first byte picks the --schedule
 * text form or a carve-schedule/1 JSON document; a schedule that parses is
 * applied to mlp-tiny's training step on a batch=2,model=2 mesh (globs, dims,
 * axes resolved against a real graph) and its text form parses back. */
#include "analysis/schedule.h"
#include "fuzz/fuzz.h"
#include "models/models.h"

static ir_graph *graph;
static shard_mesh mesh;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[IR_ERR_LEN], buf[4096];
    if (!graph) {
        model_config c;
        if (model_parse("mlp-tiny", &c, err, sizeof err) < 0 || shard_mesh_parse("batch=2,model=2", &mesh, err, sizeof err) < 0 ||
            !(graph = model_build_step(&c, NULL, err, sizeof err)))
            abort();
    }
    if (size < 1 || size > 8192) return 0;
    char *text = fuzz_text(data + 1, size - 1);
    schedule s, back;
    int rc = data[0] & 1 ? sched_parse_json(text, "fuzz.json", &mesh, &s, err, sizeof err)
                         : sched_parse(text, &mesh, &s, err, sizeof err);
    if (rc < 0) {
        fuzz_check_message(err);
    } else {
        fuzz_assert(s.n >= 1 && s.n <= SCHED_MAX_TACTICS);
        fuzz_assert(sched_parse(sched_str(&s, &mesh, buf, sizeof buf), &mesh, &back, err, sizeof err) == 0 && back.n == s.n);
        shard_state *st = shard_state_new(graph, &mesh);
        if (sched_apply(&s, st, err, sizeof err) < 0) fuzz_check_message(err);
        shard_state_free(st);
    }
    free(text);
    return 0;
}
