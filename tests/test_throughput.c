/* test_throughput.c - what a priced step means to a practitioner
 * (cost/throughput.c, view/explain.c; docs/cost-model.md, "Links,
 * throughput and MFU"), against hand calculations:
 *
 * - LLaMA-2-7B (batch 32, fused attention) over node=4,gpu=8 A100s with
 *   dp:node,zero3:gpu: 131,072 tokens a step; model FLOPs 6 x the
 *   non-embedding params x tokens + 3 x the full attention products
 *   (6.040 PFLOP, exact to the registry's formula, 1e-3 to the hand
 *   formula, which leaves out the norms' params); tokens/s, per device and
 *   MFU from the step time printed;
 * - GPT-1.3B over batch=8 (one node): 8,192 tokens; model FLOPs the
 *   registry's (3 x 24 b s h^2 L + attention + head), MFU against 312 TFLOP/s;
 * - links: gpu=8,node=4 prices gpu hierarchically (NVLink 3 among 2 in a
 *   node, then InfiniBand HDR across 4 nodes), node=4 inside a node; the
 *   mesh-order line appears over gpu=8,node=4 and names node=4,gpu=8 with
 *   that mesh's own step time, and does not appear over node=4,gpu=8;
 * - a sample model (vit) counts samples.
 * Tolerances: relative 1e-12 where both sides are the same sum, 1e-3 against
 * a hand formula that leaves out small terms (the norms' params).
 */
#include "models/models.h"
#include "session/session.h"
#include "tests/test.h"

#include <math.h>
#include <string.h>

typedef struct priced {
    ir_graph *g;
    session_cost c;
    cost_hw hw;
    cost_options opt;
    int ok;
} priced;

static void price(priced *r, const char *model, const char *mesh_text, const char *sched_text)
{
    char err[512];
    model_config cfg;
    memset(r, 0, sizeof *r);
    shard_mesh mesh;
    schedule sc;
    session_pricing sp = {.hw = "a100"};
    if (model_parse(model, &cfg, err, sizeof err) < 0 || !(r->g = model_build_step(&cfg, NULL, err, sizeof err)) ||
        shard_mesh_parse(mesh_text, &mesh, err, sizeof err) < 0 || sched_parse(sched_text, &mesh, &sc, err, sizeof err) < 0 ||
        session_cost_options(&sp, &r->hw, &r->opt, err, sizeof err) < 0 ||
        session_cost_run(&r->c, r->g, &mesh, &sc, &r->hw, &r->opt, err, sizeof err) < 0) {
        CHECKF(0, "%s over %s: %s", model, mesh_text, err);
        return;
    }
    char label[256];
    session_cost_explain(&r->c, model_config_str(&cfg, label, sizeof label), sched_text, &r->hw, &r->opt);
    r->ok = 1;
}

static void unprice(priced *r)
{
    session_cost_free(&r->c);
    ir_free(r->g);
}

static int near(double a, double b, double rel) { return fabs(a - b) <= rel * fmax(fabs(a), fabs(b)); }

static void test_llama(void)
{
    priced r;
    price(&r, "llama2-7b:batch=32,attention=fused", "node=4,gpu=8", "dp:node,zero3:gpu");
    if (!r.ok) return;
    const cost_throughput *t = &r.c.x.tput;
    model_config cfg;
    model_parse("llama2-7b:batch=32,attention=fused", &cfg, NULL, 0);
    double tokens = 32.0 * 4096, params = (double)model_param_count(&cfg), embed = 32000.0 * 4096;
    double attn = 3 * 32 * 4.0 * 32 * 4096.0 * 4096 * 4096, hand = 6 * (params - embed) * tokens + attn;
    double step = r.c.e.step_time;
    CHECKF(t->unit && !strcmp(t->unit, "tokens") && t->per_step == tokens, "unit %s, %g a step", t->unit, t->per_step);
    CHECKF(near(t->model_flops, model_step_flops(&cfg), 1e-12), "model FLOPs %.6g, registry %.6g", t->model_flops,
           model_step_flops(&cfg));
    CHECKF(near(t->model_flops, hand, 1e-3), "model FLOPs %.6g, hand %.6g", t->model_flops, hand);
    CHECK(near(t->per_second, tokens / step, 1e-12) && near(t->per_device, tokens / step / 32, 1e-12));
    CHECKF(near(t->mfu, hand / (step * 32 * 312e12), 1e-3), "MFU %.4f, hand %.4f", t->mfu, hand / (step * 32 * 312e12));
    printf("llama2-7b batch 32 over node=4,gpu=8 (dp:node,zero3:gpu): step %.4f s, %.1f tokens/s, %.1f a device, "
           "model FLOPs %.4g (hand %.4g), MFU %.2f%%\n",
           step, t->per_second, t->per_device, t->model_flops, hand, 100 * t->mfu);
    /* links: node spans nodes, gpu inside one; no warning */
    CHECK(r.c.x.n_axes == 2 && r.c.x.axes[0].across_nodes && !r.c.x.axes[1].across_nodes);
    CHECK(!strcmp(r.c.x.axes[0].level_link[0].name, "InfiniBand HDR") && !strcmp(r.c.x.axes[1].level_link[0].name, "NVLink 3"));
    CHECKF(r.c.x.mesh_warning[0] == 0, "%s", r.c.x.mesh_warning);
    double good = step;
    unprice(&r);

    price(&r, "llama2-7b:batch=32,attention=fused", "gpu=8,node=4", "dp:node,zero3:gpu");
    if (!r.ok) return;
    const cost_axis_info *g = &r.c.x.axes[0];
    CHECK(g->across_nodes && g->levels == 2 && g->level_size[0] == 2 && g->level_size[1] == 4);
    char line[256], want[64];
    cost_axis_link_str(&r.hw, g, line, sizeof line);
    CHECKF(strstr(line, "NVLink 3, 200 GB/s among 2 in a node, then InfiniBand HDR, 21.2 GB/s across 4 nodes"), "%s", line);
    char t1[32];
    cost_fmt_time(good, t1, sizeof t1);
    snprintf(want, sizeof want, "prices this plan at %s a step", t1);
    CHECKF(strstr(r.c.x.mesh_warning, "--mesh node=4,gpu=8") && strstr(r.c.x.mesh_warning, "axis 'gpu'") &&
               strstr(r.c.x.mesh_warning, want),
           "warning '%s' (want '%s')", r.c.x.mesh_warning, want);
    printf("gpu=8,node=4: %s\n", r.c.x.mesh_warning);
    unprice(&r);
}

static void test_gpt(void)
{
    priced r;
    price(&r, "gpt-1.3b:attention=fused", "batch=8", "dp:batch");
    if (!r.ok) return;
    const cost_throughput *t = &r.c.x.tput;
    double b = 8, s = 1024, h = 2048, L = 24, v = 51200;
    double hand = 3 * (L * (24 * b * s * h * h + 4 * b * s * s * h) + 2 * b * s * h * v), step = r.c.e.step_time;
    CHECKF(near(t->model_flops, hand, 1e-12), "model FLOPs %.6g, hand %.6g", t->model_flops, hand);
    CHECK(t->per_step == 8192 && near(t->mfu, hand / (step * 8 * 312e12), 1e-12));
    CHECK(r.c.x.n_axes == 1 && !r.c.x.axes[0].across_nodes && !r.c.x.mesh_warning[0]);
    printf("gpt-1.3b over batch=8 (dp): step %.4f s, %.1f tokens/s, MFU %.2f%%\n", step, t->per_second, 100 * t->mfu);
    unprice(&r);
    price(&r, "vit-tiny", "batch=2", "dp:batch");
    if (r.ok) CHECK(r.c.x.tput.unit && !strcmp(r.c.x.tput.unit, "samples") && r.c.x.tput.per_step == 8);
    if (r.ok) unprice(&r);
}

/* Memory as one account: the peak's six parts add up to the peak (1e-9:
 * one sum in another order); the
 * params and optimizer states at the peak are the model states' (the same
 * buffers), and the model states add up; ZeRO-3's gathered weights are not
 * its params. */
static void account(const char *model, const char *mesh, const char *sched, const char *precision)
{
    priced r;
    price(&r, model, mesh, sched);
    if (!r.ok) return;
    (void)precision;
    const cost_estimate *e = &r.c.e;
    double parts = e->peak_params + e->peak_gathered_params + e->peak_opt_states + e->peak_grads + e->peak_activations +
                   e->peak_other;
    CHECKF(near(parts, e->peak_memory, 1e-9), "%s %s: parts %.6g, peak %.6g", model, sched, parts, e->peak_memory);
    /* (optimizer states: 1e-6, the scalar Adam step counter's 4 bytes are an
     * optimizer state of no param, which ZeRO's count leaves out) */
    CHECKF(near(e->peak_params, e->model_state_params, 1e-9) && near(e->peak_opt_states, e->model_state_opt, 1e-6),
           "%s %s: params %.12g / %.12g, optimizer states %.12g / %.12g", model, sched, e->peak_params, e->model_state_params,
           e->peak_opt_states, e->model_state_opt);
    CHECK(near(e->model_state_params + e->model_state_opt + e->model_state_grads, e->model_state_bytes, 1e-9));
    printf("%s %s over %s: peak %.4g GiB = params %.4g + gathered %.4g + opt %.4g + grads %.4g + act %.4g + temp %.4g; "
           "model states %.4g\n", model, sched, mesh, e->peak_memory / 1073741824.0, e->peak_params / 1073741824.0,
           e->peak_gathered_params / 1073741824.0, e->peak_opt_states / 1073741824.0, e->peak_grads / 1073741824.0,
           e->peak_activations / 1073741824.0, e->peak_other / 1073741824.0, e->model_state_bytes / 1073741824.0);
    unprice(&r);
}

static void test_account(void)
{
    account("gpt-1.3b", "batch=8", "dp:batch", "bf16");
    account("gpt-1.3b", "batch=8", "zero3:batch", "bf16");
    account("gpt-1.3b", "batch=4,model=2", "dp:batch,megatron:model,zero1:batch", "bf16");
    account("llama2-7b:batch=32,attention=fused", "node=4,gpu=8", "dp:node,zero3:gpu", "bf16");
    /* a ZeRO-3 plan whose peak lies where weights are gathered: the sum still holds */
    account("gpt:layers=2,hidden=1024,heads=8,seq=64,batch=8,vocab=512", "batch=8", "zero3:batch", "bf16");
}

/* Peak memory with fused attention against a hand calculation: model states
 * at the peak (bf16 param blocks 2 bytes and Adam's f32 master weights, m
 * and v 12 bytes a param, both split over the FSDP axis's 8; no gradient
 * yet at the end of the forward pass) + per layer the values its backward
 * reads, counted from the block's ops (bf16, 2 bytes; no scores: fused
 * attention): GPT 18h + 2 a token (each layer norm x - mean, its
 * normalised x and its output, rstd; q, k, v, the context; fc1 and GELU's
 * 4h each), LLaMA 10h + 4f + 2 (each RMSNorm x * rsqrt and its output,
 * rsqrt; q, k, v, the context, the residual, the layer's output; the
 * SwiGLU's gate, up, SiLU and product) + the loss head (logits, their exp
 * and the one-hot labels, f32 [tokens, vocab]) and the final norm.  Within
 * 5% (docs/cost-model.md, section 3: the figures). */
static void hand_peak(const char *model, const char *mesh, const char *sched, double hand)
{
    priced r;
    price(&r, model, mesh, sched);
    if (!r.ok) return;
    double peak = r.c.e.peak_memory, GiB = 1073741824.0;
    CHECKF(fabs(peak - hand) <= 0.05 * hand, "%s: peak %.4f GiB, hand %.4f GiB", model, peak / GiB, hand / GiB);
    printf("%s over %s (%s): peak %.4f GiB, hand calculation %.4f GiB (%+.2f%%)\n", model, mesh, sched, peak / GiB, hand / GiB,
           100 * (peak - hand) / hand);
    unprice(&r);
}

static void test_hand_peak(void)
{
    model_config c;
    model_parse("gpt-1.3b", &c, NULL, 0);
    double N = (double)model_param_count(&c), h = 2048, L = 24, T = 1024, V = 51200;
    hand_peak("gpt-1.3b:attention=fused", "batch=8", "zero3:batch",
              14 * N / 8 + L * (18 * h + 2) * 2 * T + T * (3 * V * 4 + 3 * h * 2));
    model_parse("llama2-7b", &c, NULL, 0);
    N = (double)model_param_count(&c), h = 4096, L = 32, T = 4096, V = 32000;
    double f = 11008;
    hand_peak("llama2-7b:batch=32,attention=fused", "node=4,gpu=8", "dp:node,zero3:gpu",
              14 * N / 8 + L * (10 * h + 4 * f + 2) * 2 * T + T * (3 * V * 4 + 2 * h * 2));
}

int main(void)
{
    test_hand_peak();
    test_llama();
    test_gpt();
    test_account();
    return test_done();
}
