/* oracle.h - session/'s own interface to the check against the plain step
 * (oracle.c); run.c drives it, commands read session_run_plain (session.h). */
#ifndef CARVE_SESSION_ORACLE_H
#define CARVE_SESSION_ORACLE_H

#include "session/session.h"

typedef struct session_oracle session_oracle;

/* The check of a run whose devices run run_g (a pipeline's body), whose
 * first reference runs check_g, against `plain` (taken over).  root: this
 * process holds the references.  Never NULL; its state says whether it runs
 * (SESSION_PLAIN_CHECKED), cannot (SKIPPED) or failed already (MISSING). */
session_oracle *session_oracle_new(ir_graph *plain, const ir_graph *run_g, const ir_graph *check_g, int root);
/* The plain step's reference bytes (0 when it does not run). */
size_t session_oracle_bytes(const session_oracle *o);
/* The plain reference made (root), its args seeded and its inputs put
 * together from the first reference's micro-batches (check_ref, of
 * check_g).  Returns 0, or -1 with a message. */
int session_oracle_start(session_oracle *o, exec_ref *check_ref, const ir_graph *check_g, uint64_t seed, char *err, size_t errlen);
/* One step of the plain reference (root); then, on every process, the
 * run's outputs compared with it.  Each returns 0, or -1 with a message. */
int session_oracle_run(session_oracle *o, char *err, size_t errlen);
int session_oracle_compare(session_oracle *o, exec_spmd *rt, char *err, size_t errlen);
/* The plain reference's next step starts from the run's params and states. */
void session_oracle_advance(session_oracle *o, exec_spmd *rt);
/* 1 when the check passed (or could not run: SKIPPED says why). */
int session_oracle_ok(const session_oracle *o);
session_plain_check session_oracle_report(const session_oracle *o);
void session_oracle_free(session_oracle *o);

#endif
