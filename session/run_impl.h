/* run_impl.h - a checked run's state, shared by run.c (which runs it) and
 * run_view.c (which explains it: view/run.h).  Private to session/. */
#ifndef CARVE_SESSION_RUN_IMPL_H
#define CARVE_SESSION_RUN_IMPL_H

#include "session/session.h"

struct session_run {
    session_world *w;
    const pipe_program *pp; /* the program run */
    const spmd_program *p;  /* pp->prog (a pipeline's body) */
    ir_graph *ref_g;        /* the step the check compares with when it is not p's (a pipeline's unrolled
                               step), owned; else NULL */
    const char *label;
    uint64_t seed;
    session_run_memory mem;
    exec_ref *ref;          /* rank 0 only */
    exec_spmd *rt;
    exec_spmd_check c;
    int check_ready;
    const cost_hw *hw;      /* the predictions' profile (the caller's), or NULL: the `cpu` preset */
    struct session_oracle *oracle; /* the check against the plain step (oracle.c), or NULL */
    view_run v;             /* the run's explanation (run_view.c) */
    view_explanation x;     /* kind VIEW_RUN, x.run = &v */
    int *grad_value;        /* per view_run param: the check graph's value holding its gradient */
};

/* Fills r->v.param_names and r->grad_value (each param's gradient in the
 * check's graph), once (run_view.c). */
void session_run_find_params(session_run *r);

/* Records step `step` just run (times t, the check's losses) in r->v. */
void session_run_record_step(session_run *r, int64_t step, const session_step_times *t);

#endif
