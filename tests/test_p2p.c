/* test_p2p.c - point-to-point send and recv of the SPMD backends
 * (exec/runtime.h: exec_spmd_send, exec_spmd_recv through the backend table of
 * exec/spmd_impl.h): the transfers pipeline stages make between neighbours.
 *
 * Each case is a function every device runs during one step of the backend
 * (exec_spmd_run_each), on data it allocates itself: a ring where every device
 * sends before it receives (deadlocks unless sends are eager), neighbours
 * exchanging 1.2 MB both ways at once (1F1B's steady state; above MPI's
 * eager limit), one sender's messages received in the reverse order of
 * their tags, ping-pong (the receiver usually waits first: the send copies
 * straight into its buffer), empty messages, 16 devices on this machine's
 * 2 cores.  Then what must fail with a message instead of hanging or
 * passing: a message never received, a receive whose send never comes
 * (deadlock), a receive of another size, a device that fails while its
 * neighbour waits for it, a bad tag.
 *
 * Run directly, it runs the cases on the threads backend, then (when carve
 * was built with MPI and mpirun is there) runs itself under mpirun
 * (`test_p2p --mpi`, 4 ranks: the same cases on the MPI backend, one device
 * per rank) and once for each failure MPI must turn into an abort of every
 * rank, and counts what those runs report.  tests/e2e_netns.sh runs
 * `test_p2p --mpi` across two network namespaces.
 */
#include "exec/runtime.h"
#include "tests/util.h"

#include <stdlib.h>
#include <string.h>

/* The value device `from` sends in element i of the message with `tag`:
 * distinct for every (sender, tag, element). */
static float payload(int from, int tag, int64_t i) { return (float)from * 1000.0f + (float)tag + (float)(i % 977) * 1e-3f; }

static void fill(float *x, int64_t n, int from, int tag)
{
    for (int64_t i = 0; i < n; i++) x[i] = payload(from, tag, i);
}

/* Elements of x that differ from what `from` sent with `tag`. */
static int64_t wrong(const float *x, int64_t n, int from, int tag)
{
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += x[i] != payload(from, tag, i);
    return bad;
}

/* Per device: failed checks, messages received intact, bytes sent, seconds waited. */
typedef struct dev_result {
    int bad, ok;
    double moved, wait_s;
    int rc; /* the first send or recv that returned -1 */
} dev_result;

static dev_result *results;
static void (*current_case)(exec_spmd *r, int dev, dev_result *out);

static void run_case(exec_spmd *r, int dev) { current_case(r, dev, &results[dev]); }

static int send_to(exec_spmd *r, int dev, int peer, int tag, float *x, int64_t n, dev_result *out)
{
    double moved = 0;
    int rc = exec_spmd_send(r, dev, peer, tag, x, n, &moved);
    out->moved += moved;
    if (rc < 0 && !out->rc) out->rc = -1;
    return rc;
}

/* Receives into x and checks the data; returns the backend's rc. */
static int recv_from(exec_spmd *r, int dev, int peer, int tag, float *x, int64_t n, dev_result *out)
{
    double wait_s = 0;
    int rc = exec_spmd_recv(r, dev, peer, tag, x, n, &wait_s);
    out->wait_s += wait_s;
    if (rc < 0) {
        if (!out->rc) out->rc = -1;
        return rc;
    }
    if (wrong(x, n, peer, tag)) out->bad++;
    else out->ok++;
    return 0;
}

/* ---- the cases ---------------------------------------------------------- */

/* Every device sends to the next, then receives from the one before. */
static void ring(exec_spmd *r, int dev, dev_result *out)
{
    int n = exec_spmd_devices(r);
    int64_t len = 1000 + dev;
    float *x = malloc(4 * 1001 + 4 * (size_t)n), *y = malloc(4 * 1001 + 4 * (size_t)n);
    fill(x, len, dev, 7);
    send_to(r, dev, (dev + 1) % n, 7, x, len, out);
    memset(x, 0, 4 * (size_t)len); /* the send is done with it: the receiver must see the values sent */
    recv_from(r, dev, (dev + n - 1) % n, 7, y, 1000 + (dev + n - 1) % n, out);
    free(x);
    free(y);
}

/* Neighbouring pairs (0,1), (2,3)...: both send 1.2 MB, then both receive,
 * three times with the tags of three micro-batches. */
#define BIG (300 * 1000)
static void exchange(exec_spmd *r, int dev, dev_result *out)
{
    int peer = dev ^ 1;
    if (peer >= exec_spmd_devices(r)) return;
    float *x = malloc(4 * (size_t)BIG), *y = malloc(4 * (size_t)BIG);
    for (int mb = 0; mb < 3; mb++) {
        fill(x, BIG, dev, 100 + mb);
        send_to(r, dev, peer, 100 + mb, x, BIG, out);
        recv_from(r, dev, peer, 100 + mb, y, BIG, out);
    }
    free(x);
    free(y);
}

/* Device 0 sends tags 0..7 to device 1, which receives them 7..0. */
static void reversed(exec_spmd *r, int dev, dev_result *out)
{
    float x[64];
    for (int tag = 0; tag < 8 && dev == 0; tag++) {
        fill(x, 64, 0, tag);
        send_to(r, 0, 1, tag, x, 64 - tag, out);
    }
    for (int tag = 7; tag >= 0 && dev == 1; tag--) recv_from(r, 1, 0, tag, x, 64 - tag, out);
}

/* 0 and 1 bounce a message 50 times; the others pass. */
static void ping_pong(exec_spmd *r, int dev, dev_result *out)
{
    float x[256];
    if (dev > 1) return;
    for (int k = 0; k < 50; k++) {
        int tag = 2 * k;
        if (dev == 0) {
            fill(x, 256, 0, tag);
            send_to(r, 0, 1, tag, x, 256, out);
            recv_from(r, 0, 1, tag + 1, x, 256, out);
        } else {
            recv_from(r, 1, 0, tag, x, 256, out);
            fill(x, 256, 1, tag + 1);
            send_to(r, 1, 0, tag + 1, x, 256, out);
        }
    }
}

/* Messages of no elements, each way between 0 and the last device. */
static void empty(exec_spmd *r, int dev, dev_result *out)
{
    int last = exec_spmd_devices(r) - 1;
    if (dev != 0 && dev != last) return;
    int peer = dev == 0 ? last : 0;
    send_to(r, dev, peer, 3, NULL, 0, out);
    recv_from(r, dev, peer, 3, NULL, 0, out);
}

/* ---- what must fail ------------------------------------------------------ */

static void unreceived(exec_spmd *r, int dev, dev_result *out)
{
    float x[4] = {0};
    if (dev == 0) send_to(r, 0, 1, 9, x, 4, out);
}

/* Devices 0 and 1 each wait for the other first. */
static void both_wait(exec_spmd *r, int dev, dev_result *out)
{
    float x[4] = {0};
    if (dev > 1) return;
    recv_from(r, dev, dev ^ 1, 5, x, 4, out);
    send_to(r, dev, dev ^ 1, 5, x, 4, out);
}

/* Device 1 waits for 4 elements, device 0 sends 8. */
static void wrong_size(exec_spmd *r, int dev, dev_result *out)
{
    float x[8] = {0};
    if (dev == 0) send_to(r, 0, 1, 2, x, 8, out);
    if (dev == 1) recv_from(r, 1, 0, 2, x, 4, out);
}

/* Device 1 fails (as a kernel error does) while device 0 waits for it. */
static void peer_fails(exec_spmd *r, int dev, dev_result *out)
{
    float x[4] = {0};
    if (dev == 0) recv_from(r, 0, 1, 1, x, 4, out);
    if (dev == 1) exec_spmd_fail(r, 1, "a kernel failed (on purpose)");
}

static void bad_tag(exec_spmd *r, int dev, dev_result *out)
{
    float x[4] = {0};
    if (dev == 0) send_to(r, 0, 1, 32767 + 1, x, 4, out); /* (spmd_impl.h's SPMD_P2P_MAX_TAG: MPI's least MPI_TAG_UB) */
}

/* ---- running them ---------------------------------------------------------- */

/* A runtime of n devices on backend be: a replicated 1-layer MLP whose
 * program nobody runs here (the cases bring their own data). */
static exec_spmd *runtime(int n, exec_backend be, ir_graph **g, spmd_program **p, shard_state **st)
{
    char text[32], err[512];
    shard_mesh mesh;
    snprintf(text, sizeof text, "x=%d", n);
    *g = test_build_step("mlp-tiny");
    if (shard_mesh_parse(text, &mesh, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    *st = shard_state_new(*g, &mesh);
    *p = spmd_lower(*st);
    exec_spmd *r = exec_spmd_new_on(*p, be, 0, err, sizeof err);
    CHECKF(r != NULL, "%s", err);
    return r;
}

/* Runs one case on every device; returns the step's rc, message in err. */
static int step(exec_spmd *r, void (*fn)(exec_spmd *, int, dev_result *), char *err, size_t errlen)
{
    memset(results, 0, (size_t)exec_spmd_devices(r) * sizeof *results);
    current_case = fn;
    return exec_spmd_run_each(r, run_case, err, errlen);
}

/* The case runs, and every message arrives intact: `want_ok` of them on
 * the local devices (-1: not counted). */
static void must_pass(exec_spmd *r, const char *name, void (*fn)(exec_spmd *, int, dev_result *), int want_ok)
{
    char err[600];
    const int *local;
    int rc = step(r, fn, err, sizeof err), n = exec_spmd_devices(r), n_local = exec_spmd_local_devices(r, &local);
    const char *be = exec_spmd_backend_name(r);
    CHECKF(rc == 0, "%s on %d devices (%s): %s", name, n, be, err);
    int ok = 0, bad = 0, rcs = 0;
    double moved = 0;
    for (int k = 0; k < n_local; k++) {
        const dev_result *x = &results[local[k]];
        ok += x->ok;
        bad += x->bad;
        rcs += x->rc != 0;
        moved += x->moved;
    }
    CHECKF(bad == 0 && rcs == 0, "%s on %d devices (%s): %d messages wrong, %d calls failed", name, n, be, bad, rcs);
    if (want_ok >= 0) CHECKF(ok == want_ok, "%s (%s): %d messages arrived, want %d", name, be, ok, want_ok);
    if (!strcmp(name, "exchange") && n_local == n) CHECKF(moved == 2.0 * 3 * BIG * 4 * (n / 2), "exchange: %.0f bytes sent", moved);
}

static void must_fail(exec_spmd *r, const char *name, void (*fn)(exec_spmd *, int, dev_result *), const char *says)
{
    char err[600];
    int rc = step(r, fn, err, sizeof err);
    CHECKF(rc < 0 && strstr(err, says), "%s: rc %d, message '%s', want one with '%s'", name, rc, err, says);
}

/* The cases every backend passes, on a runtime of n devices. */
static void passing_cases(exec_spmd *r)
{
    const int *local;
    int n = exec_spmd_devices(r), mine = exec_spmd_local_devices(r, &local) == n, me = local[0];
    must_pass(r, "ring", ring, mine ? n : 1);
    must_pass(r, "exchange", exchange, mine ? 3 * (n - n % 2) : (me ^ 1) < n ? 3 : 0);
    must_pass(r, "reversed", reversed, mine ? 8 : me == 1 ? 8 : 0);
    must_pass(r, "ping-pong", ping_pong, mine ? 100 : me < 2 ? 50 : 0);
    must_pass(r, "empty", empty, mine ? 2 : me == 0 || me == n - 1 ? 1 : 0);
    must_pass(r, "ring again", ring, -1); /* the runtime is reusable after every case */
}

static void threads_cases(void)
{
    int sizes[] = {2, 3, 16};
    for (int k = 0; k < 3; k++) {
        ir_graph *g;
        spmd_program *p;
        shard_state *st;
        results = calloc((size_t)sizes[k], sizeof *results);
        exec_spmd *r = runtime(sizes[k], EXEC_THREADS, &g, &p, &st);
        if (r) {
            passing_cases(r);
            must_fail(r, "unreceived", unreceived, "device 0 sent device 1 a message (tag 9) that was never received");
            must_fail(r, "both wait", both_wait, "deadlock");
            must_fail(r, "both wait", both_wait, "device 1 for a message from device 0 (tag 5)");
            must_fail(r, "wrong size", wrong_size, "has 8 elements, the receive expects 4");
            must_fail(r, "peer fails", peer_fails, "a kernel failed (on purpose)");
            must_fail(r, "bad tag", bad_tag, "a tag outside 0..32767");
            must_pass(r, "ring after failures", ring, sizes[k]);
            /* the recv's wait is measured: in ping-pong someone always waits */
            step(r, ping_pong, (char[600]){0}, 600);
            CHECK(results[0].wait_s + results[1].wait_s > 0);
            CHECK(results[0].moved == 50 * 256 * 4.0 && results[1].moved == 50 * 256 * 4.0);
        }
        exec_spmd_free(r);
        spmd_free(p);
        shard_state_free(st);
        ir_free(g);
        free(results);
    }
}

/* ---- under mpirun ------------------------------------------------------- */

/* `test_p2p --mpi [CASE]`: one rank of the MPI run.  Without CASE, the
 * passing cases; the closing line (rank 0) counts rank 0's checks passed
 * and the most checks any rank failed.  With CASE, that failing case, which
 * must end every rank through MPI_Abort. */
static int mpi_child(const char *fail_case)
{
    int rank = 0, size = 1;
    char err[512];
    if (exec_mpi_init(&rank, &size, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    ir_graph *g;
    spmd_program *p;
    shard_state *st;
    results = calloc((size_t)size, sizeof *results);
    exec_spmd *r = runtime(size, EXEC_MPI, &g, &p, &st);
    if (r && !fail_case) passing_cases(r);
    if (r && fail_case) {
        void (*fn)(exec_spmd *, int, dev_result *) = !strcmp(fail_case, "unreceived")   ? unreceived
                                                      : !strcmp(fail_case, "wrong-size") ? wrong_size
                                                                                          : bad_tag;
        step(r, fn, err, sizeof err);
        test_failed++; /* MPI_Abort should have ended this rank */
    }
    int failed = exec_mpi_agree(test_failed);
    exec_spmd_free(r);
    spmd_free(p);
    shard_state_free(st);
    ir_free(g);
    free(results);
    exec_mpi_finalize();
    if (rank == 0) printf("%d passed, %d failed\n", test_passed, failed);
    return failed != 0;
}

static void mpi_cases(const char *self)
{
    if (!test_have_mpi("the MPI cases")) return;
    static char out[1 << 16];
    int rc = test_mpirun(self, 4, "", out, sizeof out);
    test_count_child("mpirun -n 4 test_p2p --mpi", rc, out);
    struct {
        const char *arg, *says;
    } fails[] = {
        {"unreceived", "device 0 sent device 1 1 messages, 0 of them received"},
        {"wrong-size", "the message from device 0 (tag 2): MPI_Recv failed"},
        {"bad-tag", "a tag outside 0..32767"},
    };
    for (int k = 0; k < 3; k++) {
        rc = test_mpirun(self, 2, fails[k].arg, out, sizeof out);
        CHECKF(rc != 0 && strstr(out, fails[k].says) && strstr(out, "stopping every rank"), "mpirun %s: exit %d, output:\n%s",
               fails[k].arg, rc, out);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--mpi")) return mpi_child(argc > 2 ? argv[2] : NULL);
    threads_cases();
    mpi_cases(argv[0]);
    return test_done();
}
