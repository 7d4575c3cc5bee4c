/* main.c - the carve command: a table of subcommands, help, dispatch. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "analysis/schedule.h"
#include "plan/plan.h"

static const cli_command commands[] = {
    {"models", "", "list models and presets with parameter counts and FLOPs per training step",
     "usage: carve models\n", cmd_models},
    {"show", "--model --graph --ops --forward --optimizer --dim --loss --frozen --attention",
     "print a model's training step (or forward graph): summary, and with --ops every op",
     "usage: carve show (--model SPEC | --graph FILE) [--ops] [--forward] [--optimizer adam|sgd]\n"
     "  --model SPEC   a model or preset with overrides, e.g. gpt-tiny or gpt:layers=4,hidden=256\n"
     "  --graph FILE   a carve-graph/1 file (docs/graph-format.md), or an ONNX file (FILE.onnx, docs/onnx.md);\n"
     "                 a forward graph gets its training step\n"
     "  --dim NAME=N[,...]   an ONNX file's symbolic dims; --loss KIND:OUT[,LABELS] a loss to append\n"
     "                 (cross_entropy or mse); --frozen GLOBS float initializers kept constant\n"
     "  --ops          print every op, one a line\n"
     "  --forward      the forward graph only, no backward or optimizer\n",
     cmd_show},
    {"shard", "--model --graph --mesh --schedule --summary --forward --optimizer --json --dim --loss --frozen --attention",
     "apply a sharding schedule: decisions, conflicts, argument shardings, the SPMD program",
     "usage: carve shard (--model SPEC | --graph FILE) --mesh MESH --schedule SCHEDULE [--summary] [--json]\n"
     "  --mesh MESH          named axes, e.g. batch=4,model=2 (or 4x2)\n"
     "  --schedule SCHEDULE  tactics in order, e.g. dp:batch,megatron:model,zero3:batch (below), or a\n"
     "                       carve-schedule/1 .json file\n"
     "  --summary            collective counts and bytes instead of the whole program\n"
     "  --json               print a carve-shard/1 document instead of text (docs/json-output.md);\n"
     "                       without --summary it lists every decision too\n",
     cmd_shard},
    {"cost", "--model --graph --mesh --schedule --hw --memory --precision --grads --overlap --optimizer --json --dim --loss "
             "--frozen --attention",
     "price a sharding schedule on a hardware profile: step time, peak memory, breakdowns",
     "usage: carve cost (--model SPEC | --graph FILE) --mesh MESH --schedule SCHEDULE [--hw PROFILE]\n"
     "                  [--memory GIB] [--precision f32|tf32|bf16|fp16] [--grads auto|f32|working] [--overlap] [--json]\n"
     "  --hw PROFILE         a100 (default, as autopart), h100, tpu-v3, cpu, or a carve-hw/1 file (carve calibrate)\n"
     "  --memory GIB         memory per device instead of the profile's\n"
     "  --precision P        f32; tf32 (f32 values, TF32 matmuls); bf16 or fp16 (mixed: 2-byte params,\n"
     "                       activations, gradients; f32 master weights, Adam states).  Default: bf16 on\n"
     "                       accelerator profiles, f32 on CPU profiles (what carve's executor runs)\n"
     "  --grads G            mixed precision: gradients in f32 or in the working 16-bit type; auto (default):\n"
     "                       f32 under bf16, 16-bit under fp16 (Megatron-LM's defaults; docs/cost-model.md)\n"
     "  --overlap            assume communication fully overlaps compute (step = max instead of sum)\n"
     "  --json               print a carve-cost/1 document instead of text (docs/json-output.md)\n",
     cmd_cost},
    {"calibrate", "--out --quiet --model --graph --mesh --schedule --rounds --optimizer --dim --loss --frozen --attention",
     "measure this machine (GEMM, elementwise, copy, barrier) into a hardware profile",
     "usage: carve calibrate --out FILE.json [(--model SPEC | --graph FILE) [--mesh MESH] [--schedule S]] [--rounds N]\n"
     "                       [--quiet]\n"
     "  writes a carve-hw/1 profile for carve cost --hw FILE.json (docs/cost-model.md)\n"
     "  --model/--graph    measure the einsums at the local shapes this plan's program runs (default mesh:\n"
     "                     one device; default schedule: none, every value replicated) instead of one\n"
     "                     square GEMM; the GEMM call overhead is measured too\n"
     "  --rounds N         take every measurement N times (1 to 15, default 3), whole rounds one after\n"
     "                     the other, and keep each figure's median: a slow spell of a shared machine\n"
     "                     moves one round, not the profile (each round takes as long as one calibration)\n",
     cmd_calibrate},
    {"autopart",
     "--model --graph --mesh --hw --memory --schedule --search --budget --time --stall --seed --seeds --threads --out --quiet "
     "--precision --grads --overlap --optimizer --json --memory-tactics --pipeline --layouts --dim --loss --frozen --attention",
     "search for the best plan (MCTS over sharding tactics, priced by the cost model) and write it as JSON",
     "usage: carve autopart (--model SPEC | --graph FILE) --mesh MESH [--hw PROFILE] [--out plan.json] [options]\n"
     "  --graph FILE       a carve-graph/1 file or an ONNX file (FILE.onnx: shapes are read, not weights; with\n"
     "                     --dim, --loss, --frozen as carve show takes them; the plan records them)\n"
     "  --hw PROFILE       a100 (default), h100, tpu-v3, cpu, or a carve-hw/1 file (carve calibrate)\n"
     "  --memory GIB       memory per device in GiB (default: the profile's)\n"
     "  --precision P      f32, tf32, bf16 or fp16 (default: bf16 on accelerators, f32 on cpu; see carve help cost)\n"
     "  --grads G          auto (default), f32 or working: gradient precision under bf16/fp16 (see carve help cost)\n"
     "  --overlap          price communication as overlapping compute (step = the larger of the two)\n"
     "  --optimizer adam|sgd   the optimizer of the training step (default adam)\n"
     "  --schedule S       manual tactics first, then auto (default: auto), e.g. dp:batch,auto\n"
     "  --memory-tactics auto|none   auto (default): also search the step with recomputation and 2 or 4\n"
     "                     micro-batches (a quarter of the budget each), ZeRO-1/2 seeds and the ZeRO-3\n"
     "                     gather policy, and keep the fastest plan that fits (docs/memory.md); none: sharding only\n"
     "  --pipeline auto|search|none   search pipelines too (an axis as stages, micro-batches, 1F1B,\n"
     "                     interleaved or GPipe, each priced by its experts, the best 3 searched; docs/pipeline.md):\n"
     "                     auto (default) when a mesh axis leaves a node, search always, none never\n"
     "  --layouts auto|search|none   cut the mesh's devices into pipeline x data x tensor axes (Megatron-LM's\n"
     "                     rank order) and price Megatron-LM's configurations on each cut: micro-batch size,\n"
     "                     interleaving, recomputation (none, attention only, selective, full), sequence\n"
     "                     parallelism, ZeRO-1/2; the best searched (autopart/layout.h): auto (default) when\n"
     "                     the schedule is auto alone and a mesh axis leaves a node, search always, none never\n"
     "  --search KIND      mcts (default), random, greedy, exhaustive\n"
     "  --budget N         steps: a plan priced is one, a plan reached again a quarter (wall time grows\n"
     "                     linearly with N); without --budget, --time or --stall the search stops when more\n"
     "                     search is unlikely to pay (docs/search.md, \"Budgets\"), and says why it stopped\n"
     "  --time S           wall-time limit in seconds (alone: search for S seconds)\n"
     "  --stall N          stop after N steps without a better plan (instead of the converge rule)\n"
     "  --seed N --threads N   same seed and thread count give the same plan\n"
     "  --seeds K          K searches of the plain step from seeds N .. N+K-1, side by side on the threads\n"
     "                     given, each with the whole budget: their spread says whether the budget is\n"
     "                     enough (the best is kept)\n"
     "  --out FILE         write the plan (docs/plan-format.md); Ctrl-C or SIGTERM stops the search and\n"
     "                     still writes it (exit 130 or 143)\n"
     "  --quiet            no progress line on stderr\n"
     "  --json             print a carve-autopart/1 document instead of text (docs/json-output.md)\n",
     cmd_autopart},
    {"explain", "--plan --hw --json --html FILE",
     "explain a plan: shardings, collectives per layer, predicted cost, expert schedules side by side",
     "usage: carve explain plan.json [--json] [--html FILE] [--hw PROFILE]\n"
     "  --json         print a carve-explain/1 document instead of text (docs/json-output.md)\n"
     "  --html FILE    also write the plan's picture, as carve report does (docs/report.md)\n"
     "  --hw PROFILE   price on this profile instead of the one the plan records\n",
     cmd_explain},
    {"report", "--plan --html FILE",
     "draw a plan as one HTML page: shardings on the mesh, a timeline per phase, memory, a pipeline's schedule",
     "usage: carve report plan.json --html plan.html\n"
     "  writes one self-contained page (inline SVG, no network): per argument the mesh as a grid and the\n"
     "  block each device holds; per phase the instructions as the cost model prices them; memory per\n"
     "  device at the peak against the capacity; a pipelined plan's schedule (a row per stage, a box per\n"
     "  micro-batch's forward and backward, the bubbles hatched) and memory per stage (docs/report.md)\n",
     cmd_report},
    {"export", "--plan --to --out FILE",
     "write a plan's shardings for JAX, Shardy, XLA or PyTorch",
     "usage: carve export plan.json --to jax|shardy|xla|torch [--out FILE]\n"
     "  --to jax      a Python module: Mesh, PartitionSpecs keyed like the params, NamedShardings\n"
     "  --to shardy   MLIR: sdy.mesh and a #sdy.sharding per argument\n"
     "  --to xla      an HLO sharding string per argument and named activation ({devices=[..]<=[..]})\n"
     "  --to torch    a Python module: DeviceMesh and DTensor placements per value\n"
     "  --out FILE    write FILE (atomically) instead of stdout; docs/export.md has an example of each\n",
     cmd_export},
    {"run", "--model --graph --mesh --schedule --plan --shrink --steps --seed --optimizer --backend --hw --json --dim --loss --frozen --attention --inputs --dump",
     "run a sharded training step on simulated devices and check it against the single-device reference",
     "usage: carve run (--model SPEC | --graph FILE) --mesh MESH --schedule SCHEDULE [--steps N] [--seed N]\n"
     "                 [--optimizer adam|sgd] [--hw PROFILE] [--json]\n"
     "       carve run --plan plan.json [--shrink] [--steps N] [--seed N] [--hw PROFILE] [--json]   (a plan from\n"
     "                 carve autopart; --model and --mesh, when given, must match it)\n"
     "  --shrink             run the plan's strategy on a small model of its family on the same mesh (2 layers,\n"
     "                       every size cut to what still splits as the plan splits it; the decisions\n"
     "                       replayed by argument name), checked as usual: how to try a big plan here\n"
     "  --mesh MESH          named axes, e.g. batch=2,model=2; one thread per device\n"
     "  --schedule SCHEDULE  tactics in order, e.g. dp:batch,megatron:model (see carve shard --help);\n"
     "                       with pipeline:AXIS each device runs its stage's tasks, checked against the\n"
     "                       unrolled step of the same micro-batches (needs --model; docs/run.md)\n"
     "  --steps N            training steps (default 1); the SPMD run carries its updates and the\n"
     "                       reference checks each step from the SPMD run's params and states\n"
     "  --seed N             seed of the arguments' values (default 1)\n"
     "  --hw PROFILE         what the predictions printed beside the measurements (a pipeline's bubble and\n"
     "                       memory per stage, its auto layer split) are priced on: a preset or a profile\n"
     "                       file, e.g. from carve calibrate --model M --mesh X --schedule S --out cal.json\n"
     "                       (default: the cpu preset, nominal figures; docs/run.md)\n"
     "  --backend threads|mpi  threads: every device a thread of this process (default); mpi: one device\n"
     "                       per MPI rank, e.g. mpirun -n 4 carve run --plan p.json --backend mpi (docs/run.md)\n"
     "  --json               print a carve-run/1 document at the end instead of text (docs/json-output.md):\n"
     "                       each step's losses and every param's gradient norm\n"
     "  --inputs FILE        the batch for every input of the step, by name, instead of seeded values:\n"
     "                       an .npz (np.savez), an ONNX GraphProto of initializers, or a folder of\n"
     "                       TensorProto .pb files (docs/run.md); a plain step (no pipeline, no microbatch:)\n"
     "  --dump DIR           write step 1's loss and every param's gradient (the reference's) into DIR as\n"
     "                       numpy .npy files (loss.npy, grad.NAME.npy; made when missing; docs/run.md)\n"
     "  an ONNX file (--graph FILE.onnx, or a plan made from one) runs from the file's weights\n"
     "prints each step's loss from both executors, per-device timings and bytes moved, and the check:\n"
     "the loss and every updated param and optimizer state within 1e-4 of the reference, relative to\n"
     "each tensor's largest magnitude (docs/run.md). Exit 1 when the check fails, 2 on bad input.\n",
     cmd_run},
    {"import", "FILE --out --dim --loss --frozen --weights",
     "read an ONNX file (a PyTorch export) and write what carve understood as a carve-graph/1 file",
     "usage: carve import FILE.onnx --out FILE.json [--dim NAME=N,...] [--loss KIND:OUT[,LABELS]] [--frozen GLOBS]\n"
     "                    [--weights]\n"
     "  writes the forward graph with its loss: every op, the params under their state_dict names and\n"
     "  layer tags, the constant tables (masks, rotary tables) inline (docs/onnx.md, docs/graph-format.md)\n"
     "  --dim NAME=N       the size of a symbolic dim (an export with dynamic_axes)\n"
     "  --loss KIND:OUT[,LABELS]   append a loss: cross_entropy (LABELS: integer labels, default a new input\n"
     "                     'labels') or mse (TARGET, default 'target'); without it the graph's scalar output\n"
     "  --frozen GLOBS     float initializers kept constant although the loss depends on them (inv_freq)\n"
     "  --weights          write the params' values too (one number per element: small models)\n",
     cmd_import},
};
static const int n_commands = sizeof commands / sizeof commands[0];

/* The command names, space-separated (for ir_nearest). */
static const char *command_names(void)
{
    static char names[512];
    size_t k = 0;
    for (int i = 0; i < n_commands && k < sizeof names; i++)
        k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", i ? " " : "", commands[i].name);
    return names;
}

/* The exit code once stdout is flushed and closed: a command whose output
 * did not all arrive (a full disk, /dev/full, a closed file system) fails
 * with one line and exit 2, unless it failed already (and said why). */
static int finish(int rc)
{
    int e = 0, failed = ferror(stdout);
    if (fflush(stdout) != 0) failed = 1, e = errno;
    if (fclose(stdout) != 0 && !failed) failed = 1, e = errno;
    if (!failed || rc != CLI_OK) return rc;
    cli_error("cannot write to stdout: %s", e ? strerror(e) : "a write failed");
    return CLI_BAD_INPUT;
}

/* A command's usage, and every tactic when it takes --schedule (one list:
 * the parser's table). */
static void print_usage(const cli_command *c)
{
    printf("%s", c->usage);
    if (strstr(c->flags, "--schedule")) sched_tactics_help(stdout);
}

static void usage(FILE *f)
{
    fprintf(f, "carve: find how to split a training step across devices\n\nusage: carve COMMAND [options]\n\ncommands:\n");
    for (int i = 0; i < n_commands; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\ncarve help COMMAND (or carve COMMAND --help) shows a command's options; carve --version.\n");
}

static int run(int argc, char **argv)
{
    if (argc < 2) {
        cli_error("no command given (see carve --help)");
        return CLI_BAD_INPUT;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("carve %s (plans %s, reads %s too)\n", CARVE_VERSION, PLAN_FORMAT, PLAN_FORMAT_V1);
        return CLI_OK;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        if (argc > 2 && strcmp(argv[1], "help") == 0) { /* carve help COMMAND */
            for (int i = 0; i < n_commands; i++)
                if (!strcmp(argv[2], commands[i].name)) {
                    print_usage(&commands[i]);
                    return CLI_OK;
                }
            const char *near = ir_nearest(argv[2], command_names());
            cli_error("help: unknown command '%s'%s%s%s (see carve --help)", argv[2], near ? " (did you mean " : "",
                      near ? near : "", near ? "?)" : "");
            return CLI_BAD_INPUT;
        }
        usage(stdout);
        return CLI_OK;
    }
    for (int i = 0; i < n_commands; i++) {
        const cli_command *c = &commands[i];
        if (strcmp(argv[1], c->name)) continue;
        cli_opts o;
        int rc = cli_parse(c, argc - 2, argv + 2, &o);
        if (rc) return rc;
        if (o.help) {
            print_usage(c);
            return CLI_OK;
        }
        if ((rc = cli_check_outputs(c, &o))) return rc;
        return c->run(&o);
    }
    const char *near = ir_nearest(argv[1], command_names());
    if (near) cli_error("unknown command '%s' (did you mean %s? see carve --help)", argv[1], near);
    else cli_error("unknown command '%s' (see carve --help)", argv[1]);
    return CLI_BAD_INPUT;
}

int main(int argc, char **argv)
{
    /* Past RLIMIT_FSIZE a write fails with EFBIG (reported, the temporary
     * file removed) instead of SIGXFSZ killing carve halfway. */
    signal(SIGXFSZ, SIG_IGN);
    /* no output replaces a file this command read (ir/file.c) */
    ir_input_guard(1);
    return finish(run(argc, argv));
}
