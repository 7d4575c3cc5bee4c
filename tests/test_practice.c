/* test_practice.c - the strategy line's practitioner name
 * (view/practice.c) on plans whose names are known: each schedule applied,
 * lowered and explained as carve cost does, and the name compared exactly.
 * The names come from the shardings and the collectives (an FSDP axis
 * gathers its params before use; a TP axis uses its Megatron params split),
 * so a plan that splits Megatron params on a data-parallel axis and gathers
 * them (the HSDP plan of issue 46) is HSDP, not TP.
 */
#include "models/models.h"
#include "session/session.h"
#include "tests/test.h"

#include <string.h>

static void named(const char *model, const char *mesh_text, const char *sched_text, const char *want)
{
    char err[512], label[256];
    model_config cfg;
    shard_mesh mesh;
    schedule sc;
    cost_hw hw;
    cost_options opt;
    session_pricing sp = {.hw = "a100"};
    session_cost c;
    memset(&c, 0, sizeof c);
    ir_graph *g = NULL;
    session_source src = {.model = model, .sched = &sc, .mesh = &mesh};
    if (model_parse(model, &cfg, err, sizeof err) < 0 || shard_mesh_parse(mesh_text, &mesh, err, sizeof err) < 0 ||
        sched_parse(sched_text, &mesh, &sc, err, sizeof err) < 0 || session_cost_options(&sp, &hw, &opt, err, sizeof err) < 0 ||
        !(g = session_load_step(&src, label, sizeof label, NULL, err, sizeof err)) ||
        session_cost_run(&c, g, &mesh, &sc, &hw, &opt, err, sizeof err) < 0) {
        CHECKF(0, "%s over %s with %s: %s", model, mesh_text, sched_text, err);
        session_cost_free(&c);
        ir_free(g);
        return;
    }
    session_cost_explain(&c, model_config_str(&cfg, label, sizeof label), sched_text, &hw, &opt);
    CHECKF(!strcmp(c.x.practice, want), "%s over %s: '%s', want '%s'", sched_text, mesh_text, c.x.practice, want);
    printf("%-48s %-18s %s\n", sched_text, mesh_text, c.x.practice);
    session_cost_free(&c);
    ir_free(g);
}

int main(void)
{
    const char *gpt = "gpt:layers=4,hidden=64,heads=8,seq=32,batch=64,vocab=128";
    named(gpt, "batch=8", "dp:batch", "DP=8 (batch)");
    named(gpt, "batch=8", "zero1:batch", "DP=8 (batch) with ZeRO-1");
    named(gpt, "batch=8", "zero2:batch", "DP=8 (batch) with ZeRO-2");
    named(gpt, "batch=8", "zero3:batch", "FSDP=8 (batch)");
    named(gpt, "node=4,gpu=8", "dp:node,zero3:gpu", "HSDP: FSDP=8 (gpu) sharded inside x DP=4 (node) replicated across");
    named(gpt, "node=4,gpu=8", "zero3:node,zero3:gpu", "FSDP=4 (node) x FSDP=8 (gpu)");
    named(gpt, "model=8", "megatron:model", "TP=8 (model)");
    named(gpt, "data=4,model=2", "dp:data,megatron:model", "DP=4 (data) x TP=2 (model)");
    named(gpt, "data=4,model=2", "dp:data,megatron:model,sp:model", "DP=4 (data) x TP=2 + SP (model)");
    named(gpt, "data=4,model=2", "zero1:data,megatron:model", "DP=4 (data) with ZeRO-1 x TP=2 (model)");
    named(gpt, "pipe=4,data=2", "pipeline:pipe,dp:data", "PP=4 (pipe) x DP=2 (data)");
    named(gpt, "pipe=2,data=2,model=2", "pipeline:pipe,dp:data,megatron:model",
          "3D parallelism: PP=2 (pipe) x DP=2 (data) x TP=2 (model)");
    named("moe-tiny", "expert=2,model=2", "ep:expert,megatron:model", "EP=2 (expert) + DP x TP=2 (model)");
    named("moe-tiny", "data=8", "ep:data,zero3:data", "EP=8 (data) + FSDP"); /* the lead's case: mixtral over data=8 */
    named("moe-tiny", "data=8", "ep:data,zero1:data", "EP=8 (data) + DP with ZeRO-1");
    named(gpt, "batch=8", "dp:batch,remat:all", "DP=8 (batch) + activation checkpointing (selective, every layer)");
    named(gpt, "batch=8", "dp:batch,remat:0-1:full", "DP=8 (batch) + activation checkpointing (full, 2 of 4 layers)");
    named(gpt, "batch=8", "dp:batch,microbatch:2", "DP=8 (batch) + gradient accumulation (2 micro-batches)");
    return test_done();
}
