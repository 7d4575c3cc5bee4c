/* cmd_shard.c - `carve shard`: apply a schedule and show what it does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/schedule.h"
#include "analysis/spmd.h"
#include "cli/cli.h"
#include "view/json.h"

/* Prints the collective table of a program: count and MiB per kind and phase. */
static void print_collectives(const spmd_program *p)
{
    printf("collectives (count, MiB per device):\n  %-15s", "");
    for (int ph = 0; ph < SPMD_N_PHASES; ph++) printf(" %18s", spmd_phase_name((spmd_phase)ph));
    printf("\n");
    for (int k = SPMD_ALL_GATHER; k < SPMD_N_KINDS; k++) {
        if (spmd_kind_is_p2p(k) && !p->stats.count[k][SPMD_FORWARD] && !p->stats.count[k][SPMD_BACKWARD] &&
            !p->stats.count[k][SPMD_OPTIMIZER])
            continue;
        printf("  %-15s", spmd_kind_name((spmd_kind)k));
        for (int ph = 0; ph < SPMD_N_PHASES; ph++)
            printf(" %6d %11.3f", p->stats.count[k][ph], p->stats.bytes[k][ph] / 1048576.0);
        printf("\n");
    }
}

int cmd_shard(const cli_opts *o)
{
    char cfg[512], err[512], buf[256], buf2[SCHED_STR_MAX];
    shard_mesh mesh;
    schedule sc;
    if (cli_mesh_schedule("shard", o->mesh, o->schedule, &mesh, &sc)) return CLI_BAD_INPUT;
    ir_graph *g = cli_load_step(o, cfg, sizeof cfg);
    if (!g) return CLI_BAD_INPUT;
    shard_state *st = shard_state_new(g, &mesh);
    int cap = g->n_values + 16, rc = CLI_OK;
    shard_decision *d = malloc((size_t)cap * sizeof *d);
    if (!d) abort();
    /* Decisions are written to memory first: on an error nothing reaches stdout. */
    char *dec_text = NULL;
    size_t dec_len = 0;
    FILE *dec = open_memstream(&dec_text, &dec_len);
    if (!dec) abort();
    view_doc_tactic *tac = ir_xcalloc((size_t)sc.n + 1, sizeof *tac);
    for (int t = 0; t < sc.n && rc == CLI_OK; t++) {
        int n = sched_expand(&sc.t[t], st, d, cap, err, sizeof err);
        if (n < 0) {
            cli_error("%s", err);
            rc = CLI_BAD_INPUT;
            break;
        }
        int applied = 0, blocked = 0;
        for (int k = 0; k < n; k++) {
            int r = shard_apply(st, &d[k], err, sizeof err);
            if (r < 0) {
                cli_error("%s", err);
                rc = CLI_BAD_INPUT;
                break;
            }
            applied += r == 0;
            blocked += r == 1;
            if (!o->summary) fprintf(dec, "  %-3s %s\n", r == 0 ? "" : "(=)", shard_decision_str(st, &d[k], buf, sizeof buf));
        }
        schedule one = {.n = 1};
        one.t[0] = sc.t[t];
        sched_str(&one, &mesh, tac[t].tactic, sizeof tac[t].tactic);
        tac[t].changed = applied;
        tac[t].unchanged = blocked;
        fprintf(dec, "  tactic %d: %d decision%s changed the sharding", t + 1, applied, applied == 1 ? "" : "s");
        if (blocked)
            fprintf(dec, "; %d changed nothing (already so, or blocked by an earlier decision: see conflicts)", blocked);
        fputc('\n', dec);
    }
    fclose(dec);
    if (rc == CLI_OK && o->json) {
        spmd_program *p = spmd_lower(st);
        if (view_doc_print(view_doc_shard(cfg, sched_str(&sc, &mesh, buf2, sizeof buf2), st, tac, sc.n, !o->summary, p), stdout) < 0) {
            cli_error("shard: cannot write the JSON document");
            rc = CLI_BAD_INPUT;
        }
        spmd_free(p);
    } else if (rc == CLI_OK) {
        printf("model %s\nmesh %s (%lld devices)\nschedule %s\n\ndecisions:\n%s", cfg, shard_mesh_str(&mesh, buf, sizeof buf),
               (long long)mesh.n_devices, sched_str(&sc, &mesh, buf2, sizeof buf2), dec_text);
        printf("\nconflicts: %d\n", st->n_conflicts);
        int shown = o->summary ? 5 : st->n_conflicts;
        for (int i = 0; i < st->n_conflicts && i < shown; i++) {
            const shard_conflict *c = &st->conflicts[i];
            printf("  %s%s: '%s' not sharded on %s: %s\n", c->op >= 0 ? "at " : "decision",
                   c->op >= 0 ? g->values[g->ops[c->op].out].name : "", g->values[c->value].name,
                   mesh.names[c->axis], c->why);
        }
        if (shown < st->n_conflicts) printf("  ... (%d more)\n", st->n_conflicts - shown);
        printf("\narguments:\n");
        double bytes[IR_N_ROLES] = {0}, global[IR_N_ROLES] = {0};
        for (int v = 0; v < g->n_values; v++) {
            const ir_value *x = &g->values[v];
            if (x->role == IR_INTERMEDIATE) continue;
            bytes[x->role] += (double)shard_local_bytes(&mesh, x, &st->spec[v]);
            global[x->role] += (double)ir_bytes(x);
            if (o->summary && (x->layer > 0 || x->role == IR_OPT_STATE)) continue;
            printf("  %-22s %-9s %-22s %s\n", x->name, ir_role_name(x->role), ir_type_str(x, buf2, sizeof buf2),
                   shard_spec_pspec(&mesh, &st->spec[v], x->rank, buf, sizeof buf));
        }
        if (o->summary)
            printf("  (optimizer states are not listed: each is sharded like its param%s)\n",
                   g->n_layers > 1 ? "; nor layers after 0, sharded like layer 0" : "");
        printf("per device: params %.4g MiB of %.4g MiB, optimizer states %.4g MiB of %.4g MiB, inputs %.4g MiB of %.4g MiB\n",
               bytes[IR_PARAM] / 1048576.0, global[IR_PARAM] / 1048576.0, bytes[IR_OPT_STATE] / 1048576.0, global[IR_OPT_STATE] / 1048576.0,
               bytes[IR_INPUT] / 1048576.0, global[IR_INPUT] / 1048576.0);
        spmd_program *p = spmd_lower(st);
        if (!o->summary) {
            printf("\nSPMD program (%d instructions):\n", p->n_instrs);
            spmd_print(p, stdout);
        }
        printf("\n");
        print_collectives(p);
        spmd_free(p);
    }
    free(tac);
    free(dec_text);
    free(d);
    shard_state_free(st);
    ir_free(g);
    return rc;
}
