/* cmd_cost.c - `carve cost`: apply a schedule, lower, and print the cost
 * model's estimate with its breakdowns (per op kind, collective kind, phase,
 * layer) and the reward against the replicated plan on the same mesh
 * (session_cost_run prices both). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/schedule.h"
#include "analysis/spmd.h"
#include "cli/cli.h"
#include "cli/report.h"
#include "session/session.h"

/* The text: what was priced, then the estimate and the padding of p's
 * uneven splits (priced in the estimate like data). */
static void print_text(const char *cfg, const shard_mesh *mesh, const schedule *sc, const cost_hw *hw,
                       const cost_options *opt, const cost_estimate *e, const spmd_program *p)
{
    char buf[256], buf2[SCHED_STR_MAX];
    int mixed = opt->precision == COST_MIXED_BF16 || opt->precision == COST_MIXED_FP16;
    printf("model %s\nmesh %s (%lld devices)\nschedule %s\nhardware %s (%s)\nprecision %s%s%s, %s\n\n", cfg,
           shard_mesh_str(mesh, buf, sizeof buf), (long long)mesh->n_devices, sched_str(sc, mesh, buf2, sizeof buf2),
           hw->name, hw->source, cost_precision_describe(opt->precision),
           mixed ? "; gradients in " : "", mixed ? (cost_grads_f32(opt) ? "f32" : cost_precision_name(opt->precision)) : "",
           opt->overlap ? "communication overlapped with compute" : "no overlap of compute and communication");
    cli_print_estimate(e);
    spmd_padding pad;
    spmd_padding_of(p, &pad);
    if (pad.padded_elems > 0 || pad.padded_comm_bytes > 0 || pad.padded_arg_bytes > 0)
        printf("\npadding (uneven splits, counted in the figures above): %.2f%% of the elements computed per device, "
               "%.2f%% of the bytes communicated (%.4g MiB), %.4g MiB of %.4g MiB of params, states and inputs\n",
               pad.elems > 0 ? 100 * pad.padded_elems / pad.elems : 0,
               pad.comm_bytes > 0 ? 100 * pad.padded_comm_bytes / pad.comm_bytes : 0, pad.padded_comm_bytes / 1048576.0,
               pad.padded_arg_bytes / 1048576.0, pad.arg_bytes / 1048576.0);
    else
        printf("\npadding: none (every split is even)\n");
}

int cmd_cost(const cli_opts *o)
{
    char cfg[512], err[1024], buf2[SCHED_STR_MAX];
    shard_mesh mesh;
    schedule sc;
    if (cli_mesh_schedule("cost", o->mesh, o->schedule, &mesh, &sc)) return CLI_BAD_INPUT;
    if (!o->hw) {
        cli_error("cost: --hw is required (a100, h100, tpu-v3, cpu, or a file from carve calibrate)");
        return CLI_BAD_INPUT;
    }
    cost_hw hw;
    cost_options opt;
    session_pricing pricing = {o->hw, o->precision, o->grads, o->overlap, o->memory_gib};
    if (session_cost_options(&pricing, &hw, &opt, err, sizeof err) < 0) {
        cli_error("%s", err);
        return CLI_BAD_INPUT;
    }
    ir_graph *g = cli_load_step(o, cfg, sizeof cfg);
    if (!g) return CLI_BAD_INPUT;
    int rc = CLI_OK;
    session_cost c;
    if (session_cost_run(&c, g, &mesh, &sc, &hw, &opt, err, sizeof err) < 0) {
        cli_error("%s", err);
        rc = CLI_BAD_INPUT;
    } else if (o->json) {
        cJSON *doc = view_doc_cost(cfg, &mesh, sched_str(&sc, &mesh, buf2, sizeof buf2), &hw, &opt, &c.e, &c.base);
        if (view_doc_print(doc, stdout) < 0) {
            cli_error("cost: cannot write the JSON document");
            rc = CLI_BAD_INPUT;
        }
    } else {
        print_text(cfg, &mesh, &sc, &hw, &opt, &c.e, c.p);
        char a[32];
        cost_fmt_time(c.base.step_time, a, sizeof a);
        printf("\nreplicated plan: step %s, peak %.4g GiB%s; reward of this plan %.4g\n", a, c.base.peak_memory / 1073741824.0,
               c.base.fits ? "" : " (does not fit)", cost_reward(&c.e, c.base.step_time));
    }
    session_cost_free(&c);
    ir_free(g);
    return rc;
}
