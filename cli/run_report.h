/* run_report.h - what `carve run` prints about a checked run (run_report.c). */
#ifndef CARVE_CLI_RUN_REPORT_H
#define CARVE_CLI_RUN_REPORT_H

#include "cli/cli.h"
#include "session/session.h"

/* The run's inputs and the memory it needs (printed before it is refused
 * for lack of memory, if it is). */
void run_print_header(const cli_opts *o, const session_world *w, const spmd_program *p, const char *cfg,
                      const session_run_memory *m);
/* The head of the steps' table, and one step's line. */
void run_print_step_head(void);
void run_print_step(int64_t step, const exec_spmd_check *c, const session_step_times *t);
/* The last step per device: timings, compute by op kind, collectives. */
void run_print_timings(const session_world *w, const session_run *r);
/* Per stage (a program of one stage: per device) its memory, predicted,
 * laid out and measured; a pipeline's stages also their bubble (predicted,
 * replayed from the devices' CPU time, wall-clock), waits and bytes sent. */
void run_print_stages(const session_world *w, session_run *r);
/* The check's figures; returns CLI_OK when it passed, else CLI_CHECK_FAILED. */
int run_print_check(const ir_graph *g, const session_run *r);

#endif
