/* cmd_cost.c - `carve cost`: apply a schedule, lower, and print the cost
 * model's estimate with its breakdowns (per op kind, collective kind, phase,
 * layer) and the reward against the replicated plan on the same mesh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/schedule.h"
#include "analysis/spmd.h"
#include "cli/cli.h"
#include "cost/cost.h"

static void fmt_time(double s, char *buf, size_t n)
{
    if (s >= 1) snprintf(buf, n, "%.3f s", s);
    else if (s >= 1e-3) snprintf(buf, n, "%.3f ms", s * 1e3);
    else snprintf(buf, n, "%.3f us", s * 1e6);
}

static void print_estimate(const cost_estimate *e, const ir_graph *g)
{
    char a[32], b[32], c[32];
    fmt_time(e->step_time, a, sizeof a);
    fmt_time(e->compute_time, b, sizeof b);
    fmt_time(e->comm_time, c, sizeof c);
    printf("step time      %s  (compute %s + communication %s)\n", a, b, c);
    if (e->serialisation > 1) printf("               devices share %.3g cores: per-device times scaled by %.3g\n",
                                     e->serialisation, e->serialisation);
    printf("FLOPs/device   %.4g GFLOP; communicated %.4g MB per device (%.4g MB on the wire)\n", e->flops / 1e9,
           e->comm_bytes / 1e6, e->wire_bytes / 1e6);
    printf("peak memory    %.4g GB per device of %.4g GB: %s\n", e->peak_memory / 1e9, e->capacity / 1e9,
           e->fits ? "fits" : "DOES NOT FIT");
    printf("  at the peak: params %.4g GB, optimizer states %.4g GB, gradients %.4g GB, activations %.4g GB, "
           "other %.4g GB\n",
           e->peak_params / 1e9, e->peak_opt_states / 1e9, e->peak_grads / 1e9, e->peak_activations / 1e9,
           e->peak_other / 1e9);
    printf("  model states (params + gradients + optimizer states): %.4g GB\n", e->model_state_bytes / 1e9);

    printf("\ncompute by op kind:\n");
    int order[IR_N_OPS];
    for (int k = 0; k < IR_N_OPS; k++) order[k] = k;
    for (int i = 1; i < IR_N_OPS; i++) /* by time, largest first */
        for (int j = i; j > 0 && e->op_time[order[j]] > e->op_time[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (int i = 0; i < IR_N_OPS; i++) {
        int k = order[i];
        if (!e->op_count[k]) continue;
        fmt_time(e->op_time[k], a, sizeof a);
        printf("  %-12s %6d ops %14s  %5.1f%%\n", ir_op_name((ir_opkind)k), e->op_count[k], a,
               e->compute_time > 0 ? 100 * e->op_time[k] / e->compute_time : 0);
    }
    printf("\ncommunication by kind:\n");
    for (int k = SPMD_ALL_GATHER; k < SPMD_N_KINDS; k++) {
        fmt_time(e->coll_time[k], a, sizeof a);
        printf("  %-15s %6d %14s  %10.4g MB on the wire\n", spmd_kind_name((spmd_kind)k), e->coll_count[k], a,
               e->coll_wire[k] / 1e6);
    }
    printf("\nby phase:          compute  communication\n");
    for (int ph = 0; ph < SPMD_N_PHASES; ph++) {
        fmt_time(e->phase_compute[ph], a, sizeof a);
        fmt_time(e->phase_comm[ph], b, sizeof b);
        printf("  %-10s %14s %14s\n", spmd_phase_name((spmd_phase)ph), a, b);
    }
    printf("\nby layer:          compute  communication   wire MB\n");
    for (int l = 0; l < e->n_layers; l++) {
        fmt_time(e->layer_compute[l], a, sizeof a);
        fmt_time(e->layer_comm[l], b, sizeof b);
        char name[24];
        if (l) snprintf(name, sizeof name, "layer %d", l - 1);
        else snprintf(name, sizeof name, "outside");
        printf("  %-10s %14s %14s %10.4g\n", name, a, b, e->layer_wire[l] / 1e6);
    }
    (void)g;
}

int cmd_cost(const cli_opts *o)
{
    char cfg[512], err[512], buf[256], buf2[256];
    if (!o->mesh || !o->schedule || !o->hw) {
        cli_error("cost: --mesh, --schedule and --hw are required (e.g. --mesh batch=4,model=2 --schedule dp:batch --hw a100)");
        return CLI_BAD_INPUT;
    }
    cost_hw hw;
    if (cost_hw_lookup(o->hw, &hw, err, sizeof err) < 0) {
        cli_error("%s", err);
        return CLI_BAD_INPUT;
    }
    shard_mesh mesh;
    if (shard_mesh_parse(o->mesh, &mesh, err, sizeof err) < 0) {
        cli_error("%s", err);
        return CLI_BAD_INPUT;
    }
    schedule sc;
    if (sched_parse(o->schedule, &mesh, &sc, err, sizeof err) < 0) {
        cli_error("%s", err);
        return CLI_BAD_INPUT;
    }
    cost_options opt = {COST_FP32, o->overlap, o->memory_gib * 1024.0 * 1024.0 * 1024.0};
    if (o->precision && !strcmp(o->precision, "bf16")) opt.precision = COST_MIXED_BF16;
    ir_graph *g = cli_load_step(o, cfg, sizeof cfg);
    if (!g) return CLI_BAD_INPUT;
    int rc = CLI_OK;
    shard_state *st = shard_state_new(g, &mesh);
    cost_ws *ws = cost_ws_new();
    if (sched_apply(&sc, st, err, sizeof err) < 0) {
        cli_error("%s", err);
        rc = CLI_BAD_INPUT;
        goto done;
    }
    spmd_program *p = spmd_lower(st);
    cost_estimate e;
    if (cost_estimate_program(ws, p, &hw, &opt, &e, err, sizeof err) < 0) {
        cli_error("%s", err);
        rc = CLI_BAD_INPUT;
        spmd_free(p);
        goto done;
    }
    printf("model %s\nmesh %s (%lld devices)\nschedule %s\nhardware %s (%s)\nprecision %s, %s\n\n", cfg,
           shard_mesh_str(&mesh, buf, sizeof buf), (long long)mesh.n_devices, sched_str(&sc, &mesh, buf2, sizeof buf2),
           hw.name, hw.source, opt.precision == COST_MIXED_BF16 ? "mixed bf16 (f32 master weights and Adam states)" : "f32",
           opt.overlap ? "communication overlapped with compute" : "no overlap of compute and communication");
    print_estimate(&e, g);
    spmd_free(p);
    /* the replicated plan on the same mesh: every device does all the work */
    shard_state_reset(st);
    spmd_program *rp = spmd_lower(st);
    cost_estimate base;
    if (cost_estimate_program(ws, rp, &hw, &opt, &base, err, sizeof err) == 0) {
        char a[32];
        fmt_time(base.step_time, a, sizeof a);
        printf("\nreplicated plan: step %s, peak %.4g GB%s; reward of this plan %.4g\n", a, base.peak_memory / 1e9,
               base.fits ? "" : " (does not fit)", cost_reward(&e, base.step_time));
    }
    spmd_free(rp);
done:
    cost_ws_free(ws);
    shard_state_free(st);
    ir_free(g);
    return rc;
}
