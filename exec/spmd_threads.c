/* spmd_threads.c - the threads backend: every device is an OpenMP thread of
 * this process, and collectives go through shared memory.
 *
 * Every collective is "wait until the whole device group has written its
 * input buffer, then read the peers' buffers directly".  Buffers are SSA (a
 * step writes each one once), so within a step no device overwrites a buffer
 * a peer may still read, and one barrier before reading is enough; the
 * all-reduce of a large buffer uses two (reduce one chunk each, then gather
 * the chunks).  Barriers block on a condition variable: with 16 devices on 2
 * cores a spinning barrier would starve the device it waits for.  Sums run
 * over the peers in group-rank order on every device, so replicas of a
 * reduced value agree bit for bit.
 *
 * Point-to-point: every device has a mailbox (mutex, condition variable).
 * A recv first looks for its message among those queued; when it is not
 * there it posts where the data should go and waits.  A send that finds its
 * receiver waiting copies straight into the posted buffer (one copy);
 * otherwise it queues a copy of the data and returns (two copies: eager, so
 * a send never waits for its recv).
 *
 * A device whose kernel fails sets the runtime's abort flag and wakes every
 * barrier and mailbox; the others stop at their next instruction, barrier
 * or recv.
 *
 * Deadlock: a count of the devices that can make progress (running: not
 * finished, not blocked in a barrier or a recv) falls by one when a device
 * blocks or finishes, and rises when a device wakes another (the last
 * member of a barrier, a send to a waiting recv) before it wakes it.  When
 * it reaches 0 while a device is still blocked, nothing can ever wake it (a
 * recv whose send never comes, members of a group at different barriers):
 * the run fails with a message naming what each blocked device waits for,
 * instead of hanging.
 */
#include "exec/spmd_impl.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* A reusable blocking barrier for one device group. */
typedef struct barrier {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int size, count;
    unsigned gen;
} barrier;

/* A receive waiting for its message (on the receiver's stack), or a message
 * sent before its receive (queued, with a copy of the data). */
typedef struct p2p_msg {
    struct p2p_msg *next;
    int from, tag;
    int64_t n;
    float *dst;    /* a posted receive: where the data goes */
    int done;      /* a posted receive: the data is there */
    float data[];  /* a queued message: the data */
} p2p_msg;

/* One device's incoming messages. */
typedef struct mailbox {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* only the owner waits on it */
    p2p_msg *queued;        /* sent, not yet received, oldest first */
    p2p_msg *posted;        /* the owner's receive while it waits with nothing queued */
} mailbox;

/* What a blocked device waits for (for the deadlock message). */
typedef struct blocked_on {
    int what;  /* 0 nothing, 1 a recv, 2 a barrier */
    int peer, tag;
    unsigned mask;
} blocked_on;

typedef struct threads_state {
    int mask_slot[SPMD_N_MASKS]; /* barrier slot of each axes mask, -1 unused */
    barrier *bars;               /* n_slots * n_dev (indexed by slot * n_dev + leader) */
    int n_bars;
    mailbox *box;                /* per device */
    blocked_on *blocked;         /* per device */
    atomic_int running, finished;
} threads_state;

static void threads_close(exec_spmd *r)
{
    threads_state *s = r->be_state;
    if (!s) return;
    for (int i = 0; i < s->n_bars; i++) {
        if (!s->bars[i].size) continue;
        pthread_mutex_destroy(&s->bars[i].mu);
        pthread_cond_destroy(&s->bars[i].cv);
    }
    free(s->bars);
    for (int d = 0; s->box && d < r->n_dev; d++) {
        for (p2p_msg *m = s->box[d].queued, *next; m; m = next) {
            next = m->next;
            free(m);
        }
        pthread_mutex_destroy(&s->box[d].mu);
        pthread_cond_destroy(&s->box[d].cv);
    }
    free(s->box);
    free(s->blocked);
    free(s);
    r->be_state = NULL;
}

static int threads_open(exec_spmd *r, char *err, size_t errlen)
{
    const spmd_program *p = r->p;
    threads_state *s = calloc(1, sizeof *s);
    r->local = calloc((size_t)r->n_dev, sizeof *r->local);
    if (!s || !r->local) goto oom;
    r->be_state = s;
    r->n_local = r->n_dev;
    r->root = 1;
    for (int d = 0; d < r->n_dev; d++) r->local[d] = d;
    int n_slots = 0;
    for (int k = 0; k < SPMD_N_MASKS; k++) s->mask_slot[k] = -1;
    for (int i = 0; i < p->n_instrs; i++) {
        const spmd_instr *in = &p->instrs[i];
        if (in->kind == SPMD_COMPUTE || in->kind == SPMD_SLICE || spmd_kind_is_p2p(in->kind)) continue;
        if (s->mask_slot[in->axes & (SPMD_N_MASKS - 1)] < 0) s->mask_slot[in->axes & (SPMD_N_MASKS - 1)] = n_slots++;
    }
    s->bars = calloc((size_t)(n_slots * r->n_dev + 1), sizeof *s->bars);
    s->box = calloc((size_t)r->n_dev, sizeof *s->box);
    s->blocked = calloc((size_t)r->n_dev, sizeof *s->blocked);
    if (!s->bars || !s->box || !s->blocked) {
        free(s->box); /* threads_close destroys only a whole set of mailboxes */
        s->box = NULL;
        goto oom;
    }
    for (int d = 0; d < r->n_dev; d++) {
        pthread_mutex_init(&s->box[d].mu, NULL);
        pthread_cond_init(&s->box[d].cv, NULL);
    }
    s->n_bars = n_slots * r->n_dev;
    for (int k = 0; k < SPMD_N_MASKS; k++) {
        if (s->mask_slot[k] < 0) continue;
        int size = (int)shard_axes_size(&p->mesh, (unsigned)k);
        for (int d = 0; d < r->n_dev; d++) {
            barrier *b = &s->bars[s->mask_slot[k] * r->n_dev + d];
            pthread_mutex_init(&b->mu, NULL);
            pthread_cond_init(&b->cv, NULL);
            b->size = size;
        }
    }
    return 0;
oom:
    if (!r->be_state) free(s);
    return ir_errf(err, errlen, "out of memory preparing %d device threads", r->n_dev);
}

/* The calling device stops making progress (it blocks, or has finished).
 * Returns 1 when then no device can run while one is blocked: a deadlock. */
static int progress_stops(exec_spmd *r)
{
    threads_state *s = r->be_state;
    return atomic_fetch_sub(&s->running, 1) == 1 && atomic_load(&s->finished) < r->n_dev && !atomic_load(&r->abort);
}

/* Fails the run with what every blocked device waits for.  Called holding
 * no barrier or mailbox lock. */
static void deadlock(exec_spmd *r)
{
    threads_state *s = r->be_state;
    char msg[400];
    int len = snprintf(msg, sizeof msg, "deadlock: every device that has not finished waits:");
    for (int d = 0; d < r->n_dev && len < (int)sizeof msg; d++) {
        const blocked_on *b = &s->blocked[d];
        if (b->what == 1)
            len += snprintf(msg + len, sizeof msg - (size_t)len, " device %d for a message from device %d (tag %d);", d, b->peer, b->tag);
        else if (b->what == 2)
            len += snprintf(msg + len, sizeof msg - (size_t)len, " device %d at a barrier of axes mask %u;", d, b->mask);
    }
    if (len < (int)sizeof msg && len > 0 && msg[len - 1] == ';') msg[len - 1] = 0;
    spmd_set_error(r, "%s", msg);
    r->be->fail(r);
}

/* Waits until every member of the group of `leader` for `mask` arrives.
 * Returns 0, or -1 when the run was aborted.  Adds the time blocked to *wait_s. */
static int barrier_wait(exec_spmd *r, int dev, unsigned mask, int leader, double *wait_s)
{
    threads_state *s = r->be_state;
    int slot = s->mask_slot[mask & (SPMD_N_MASKS - 1)];
    if (slot < 0) return -1; /* cannot happen: every collective's mask has a slot */
    barrier *b = &s->bars[slot * r->n_dev + leader];
    double t0 = exec_spmd_now();
    int rc = 0, stuck = 0;
    pthread_mutex_lock(&b->mu);
    if (atomic_load(&r->abort)) rc = -1;
    else if (++b->count == b->size) {
        b->count = 0;
        b->gen++;
        atomic_fetch_add(&s->running, b->size - 1); /* the members it wakes */
        pthread_cond_broadcast(&b->cv);
    } else {
        unsigned gen = b->gen;
        s->blocked[dev] = (blocked_on){.what = 2, .mask = mask};
        stuck = progress_stops(r);
        while (!stuck && gen == b->gen && !atomic_load(&r->abort)) pthread_cond_wait(&b->cv, &b->mu);
        if (gen == b->gen) rc = -1;
    }
    pthread_mutex_unlock(&b->mu);
    if (stuck) deadlock(r);
    s->blocked[dev].what = 0;
    *wait_s += exec_spmd_now() - t0;
    return rc;
}

static void threads_fail(exec_spmd *r)
{
    threads_state *s = r->be_state;
    atomic_store(&r->abort, 1);
    /* Taking each mutex before broadcasting means a device that checked the
     * flag before we set it is already waiting, so it gets the wake-up. */
    for (int i = 0; i < s->n_bars; i++) {
        if (!s->bars[i].size) continue;
        pthread_mutex_lock(&s->bars[i].mu);
        pthread_cond_broadcast(&s->bars[i].cv);
        pthread_mutex_unlock(&s->bars[i].mu);
    }
    for (int d = 0; d < r->n_dev; d++) {
        pthread_mutex_lock(&s->box[d].mu);
        pthread_cond_broadcast(&s->box[d].cv);
        pthread_mutex_unlock(&s->box[d].mu);
    }
}

/* Drops every queued message.  Returns the first one's sender and receiver
 * and tag in *m (from -1 when there was none). */
static void drop_messages(exec_spmd *r, p2p_msg *first)
{
    threads_state *s = r->be_state;
    first->from = -1;
    for (int d = 0; d < r->n_dev; d++) {
        for (p2p_msg *m = s->box[d].queued, *next; m; m = next) {
            next = m->next;
            if (first->from < 0) *first = (p2p_msg){.from = m->from, .tag = m->tag, .n = d};
            free(m);
        }
        s->box[d].queued = s->box[d].posted = NULL;
    }
}

static void threads_run(exec_spmd *r, spmd_device_fn fn)
{
    threads_state *s = r->be_state;
    p2p_msg left;
    for (int i = 0; i < s->n_bars; i++) s->bars[i].count = 0;
    drop_messages(r, &left); /* an aborted step's */
    atomic_store(&s->running, r->n_dev);
    atomic_store(&s->finished, 0);
    int team = r->n_dev;
    double t0 = exec_spmd_now();
#pragma omp parallel num_threads(r->n_dev)
    {
        /* every device must have its thread, or barriers would never fill */
        if (omp_get_num_threads() == r->n_dev) {
            fn(r, omp_get_thread_num());
            atomic_fetch_add(&s->finished, 1);
            if (progress_stops(r)) deadlock(r);
        } else if (omp_get_thread_num() == 0) {
            team = omp_get_num_threads();
        }
    }
    r->stats.wall_s = exec_spmd_now() - t0;
    if (team != r->n_dev) {
        spmd_set_error(r, "could start only %d threads for %d devices (OMP_THREAD_LIMIT, or called inside a parallel region?)",
                       team, r->n_dev);
        atomic_store(&r->abort, 1);
    }
    drop_messages(r, &left);
    if (left.from >= 0 && !atomic_load(&r->abort)) {
        spmd_set_error(r, "device %d sent device %d a message (tag %d) that was never received", left.from, (int)left.n, left.tag);
        atomic_store(&r->abort, 1);
    }
}

/* ---- point to point ----------------------------------------------------- */

static int threads_send(exec_spmd *r, spmd_p2p *m)
{
    threads_state *s = r->be_state;
    if (spmd_p2p_bad(r, m)) return -1;
    mailbox *mb = &s->box[m->peer];
    size_t bytes = (size_t)m->n * sizeof(float);
    pthread_mutex_lock(&mb->mu);
    p2p_msg *rec = mb->posted;
    if (rec && rec->from == m->dev && rec->tag == m->tag) { /* the receiver waits: straight into its buffer */
        mb->posted = NULL;
        atomic_fetch_add(&s->running, 1);
        pthread_mutex_unlock(&mb->mu);
        if (rec->n == m->n && bytes) memcpy(rec->dst, m->data, bytes);
        pthread_mutex_lock(&mb->mu);
        rec->done = rec->n == m->n ? 1 : -1;
        rec->n = m->n;
        pthread_cond_broadcast(&mb->cv);
        pthread_mutex_unlock(&mb->mu);
        m->moved += (double)bytes;
        return 0;
    }
    pthread_mutex_unlock(&mb->mu);
    p2p_msg *q = malloc(sizeof *q + bytes);
    if (!q) {
        spmd_set_error(r, "device %d: out of memory queueing a message of %zu bytes to device %d", m->dev, bytes, m->peer);
        r->be->fail(r);
        return -1;
    }
    *q = (p2p_msg){.from = m->dev, .tag = m->tag, .n = m->n};
    if (bytes) memcpy(q->data, m->data, bytes);
    pthread_mutex_lock(&mb->mu);
    p2p_msg **tail = &mb->queued;
    while (*tail) tail = &(*tail)->next;
    *tail = q;
    rec = mb->posted; /* the receiver may have started waiting for it meanwhile */
    if (rec && rec->from == m->dev && rec->tag == m->tag) {
        mb->posted = NULL;
        atomic_fetch_add(&s->running, 1);
        pthread_cond_broadcast(&mb->cv);
    }
    pthread_mutex_unlock(&mb->mu);
    m->moved += (double)bytes;
    return 0;
}

/* The queued message from `from` with `tag`, unlinked; NULL when none. */
static p2p_msg *take_queued(mailbox *mb, int from, int tag)
{
    for (p2p_msg **at = &mb->queued; *at; at = &(*at)->next) {
        p2p_msg *q = *at;
        if (q->from != from || q->tag != tag) continue;
        *at = q->next;
        return q;
    }
    return NULL;
}

static int threads_recv(exec_spmd *r, spmd_p2p *m)
{
    threads_state *s = r->be_state;
    if (spmd_p2p_bad(r, m)) return -1;
    mailbox *mb = &s->box[m->dev];
    p2p_msg rec = {.from = m->peer, .tag = m->tag, .n = m->n, .dst = m->data}, *q = NULL;
    double t0 = exec_spmd_now();
    int posted = 0, stuck = 0;
    pthread_mutex_lock(&mb->mu);
    for (;;) {
        if (rec.done) break;
        if (mb->posted != &rec && (q = take_queued(mb, m->peer, m->tag))) break;
        /* a send that took the posted receive is copying into it: wait for it even when aborting */
        if (atomic_load(&r->abort) && (!posted || mb->posted == &rec)) break;
        if (!posted) { /* nothing yet: wait for it */
            posted = 1;
            mb->posted = &rec;
            s->blocked[m->dev] = (blocked_on){.what = 1, .peer = m->peer, .tag = m->tag};
            if ((stuck = progress_stops(r))) break;
        }
        pthread_cond_wait(&mb->cv, &mb->mu);
    }
    if (mb->posted == &rec) mb->posted = NULL;
    pthread_mutex_unlock(&mb->mu);
    m->wait_s += exec_spmd_now() - t0;
    if (stuck) deadlock(r); /* names this device too */
    s->blocked[m->dev].what = 0;
    int64_t got = q ? q->n : rec.n;
    if (q && q->n == m->n && m->n) memcpy(m->data, q->data, (size_t)m->n * sizeof(float));
    free(q);
    if (!q && rec.done == 0) return -1; /* aborted */
    if (got != m->n) {
        spmd_set_error(r, "device %d: the message from device %d (tag %d) has %lld elements, the receive expects %lld", m->dev,
                       m->peer, m->tag, (long long)got, (long long)m->n);
        r->be->fail(r);
        return -1;
    }
    return 0;
}

/* ---- the collectives ---------------------------------------------------- */

/* All-gather, all-to-all: copy into my output block the part of each
 * member's input block that falls in it. */
static double redistribute(exec_spmd *r, const spmd_instr *in, int dev, const spmd_group *gr)
{
    int rank = r->g->values[in->value].rank;
    spmd_block out, src;
    spmd_block_of(r, in->out, dev, &out);
    double moved = 0;
    for (int j = 0; j < gr->n; j++) {
        spmd_block_of(r, in->in[0], gr->members[j], &src);
        int64_t lo[IR_MAX_RANK], len[IR_MAX_RANK];
        if (spmd_box_meet(rank, &out, &src, lo, len))
            moved += 4.0 * (double)spmd_box_apply(SPMD_BOX_COPY, rank, lo, len, &src, &out);
    }
    return moved;
}

/* The group waits until every member has read what it needed when the
 * memory read is reused later in the step (c->release). */
static int finish(exec_spmd *r, spmd_call *c)
{
    return c->release ? barrier_wait(r, c->dev, c->in->axes, c->gr.leader, &c->wait_s) : 0;
}

static int threads_redistribute(exec_spmd *r, spmd_call *c)
{
    if (barrier_wait(r, c->dev, c->in->axes, c->gr.leader, &c->wait_s) < 0) return -1;
    c->moved += redistribute(r, c->in, c->dev, &c->gr);
    return finish(r, c);
}

static int threads_halo(exec_spmd *r, spmd_call *c)
{
    if (barrier_wait(r, c->dev, c->in->axes, c->gr.leader, &c->wait_s) < 0) return -1;
    c->moved += spmd_halo_copy(r, c->in, c->dev, &c->gr);
    return finish(r, c);
}

/* Reduce-scatter: my output box, summed (or maxed) over the members' inputs;
 * a bucket's members one after the other after one barrier. */
static int threads_reduce_scatter(exec_spmd *r, spmd_call *c)
{
    if (barrier_wait(r, c->dev, c->in->axes, c->gr.leader, &c->wait_s) < 0) return -1;
    for (int m = 0; m < c->n_in; m++) {
        const spmd_instr *in = c->in + m;
        int rank = r->g->values[in->value].rank;
        spmd_block out, src;
        spmd_block_of(r, in->out, c->dev, &out);
        for (int j = 0; j < c->gr.n; j++) {
            spmd_block_of(r, in->in[0], c->gr.members[j], &src);
            spmd_box_kind k = j == 0 ? SPMD_BOX_COPY : in->reduce_max ? SPMD_BOX_MAX : SPMD_BOX_ADD;
            c->moved += 4.0 * (double)spmd_box_apply(k, rank, out.org, out.valid, &src, &out);
        }
    }
    return finish(r, c);
}

/* out[lo, hi) = reduction over the members of in[lo, hi) (flat ranges). */
static double reduce_range(exec_spmd *r, const spmd_instr *in, int dev, const spmd_group *gr, int64_t lo, int64_t hi)
{
    float *out = spmd_buf(r, dev, in->out);
    for (int j = 0; j < gr->n; j++) {
        const float *src = spmd_buf(r, gr->members[j], in->in[0]);
        spmd_box_kind k = j == 0 ? SPMD_BOX_COPY : in->reduce_max ? SPMD_BOX_MAX : SPMD_BOX_ADD;
        if (hi > lo) spmd_run_op(k, src + lo, out + lo, hi - lo);
    }
    return 4.0 * (double)(hi > lo ? hi - lo : 0) * gr->n;
}

/* A bucket's all-reduces are one flat range: member m's elements follow
 * member m-1's.  Applies to [lo, hi) of that range either the reduction
 * (gather < 0) or, for gather = group rank j, a copy of member j's results
 * into mine.  Returns the bytes read. */
static double bucket_range(exec_spmd *r, spmd_call *c, int64_t lo, int64_t hi, int gather)
{
    double moved = 0;
    int64_t start = 0;
    for (int m = 0; m < c->n_in && start < hi; m++) {
        const spmd_instr *in = c->in + m;
        int64_t n = r->numel[in->out], a = lo > start ? lo - start : 0, b = hi - start < n ? hi - start : n;
        if (b > a && gather < 0) {
            moved += reduce_range(r, in, c->dev, &c->gr, a, b);
        } else if (b > a) {
            memcpy(spmd_buf(r, c->dev, in->out) + a, spmd_buf(r, c->gr.members[gather], in->out) + a, (size_t)(b - a) * 4);
            moved += 4.0 * (double)(b - a);
        }
        start += n;
    }
    return moved;
}

/* Below this many bytes an all-reduce sums the whole buffer on every device
 * (one barrier) instead of reduce-then-gather (two barriers). */
#define SMALL_ALL_REDUCE 16384

/* An all-reduce, or a bucket of them as one over the members' concatenated
 * elements (bucket_range): the same barriers as one all-reduce of the
 * bucket's summed size, and every element summed in the same order (group
 * rank 0 first) as the members would be one by one, so the bits agree. */
static int threads_all_reduce(exec_spmd *r, spmd_call *c)
{
    const spmd_group *gr = &c->gr;
    if (barrier_wait(r, c->dev, c->in->axes, gr->leader, &c->wait_s) < 0) return -1;
    int64_t n = 0;
    for (int m = 0; m < c->n_in; m++) n += r->numel[c->in[m].out];
    if (n * 4 < SMALL_ALL_REDUCE || gr->n == 1) {
        c->moved += bucket_range(r, c, 0, n, -1);
        return finish(r, c);
    }
    /* each member reduces one chunk, then copies the others' chunks */
    int64_t chunk = (n + gr->n - 1) / gr->n;
    int64_t lo = chunk * gr->rank, hi = lo + chunk < n ? lo + chunk : n;
    c->moved += bucket_range(r, c, lo, hi, -1);
    if (barrier_wait(r, c->dev, c->in->axes, gr->leader, &c->wait_s) < 0) return -1;
    for (int j = 0; j < gr->n; j++) {
        int64_t l = chunk * j, h = l + chunk < n ? l + chunk : n;
        if (j != gr->rank && h > l) c->moved += bucket_range(r, c, l, h, j);
    }
    return finish(r, c);
}

/* ---- the check ---------------------------------------------------------- */

static const void *threads_fetch(exec_spmd *r, int b, int from, int to, void *tmp) { return spmd_buf(r, from, b); }

static double threads_max_all(exec_spmd *r, double x) { return x; }

static void threads_gather(exec_spmd *r, void *all, size_t each) {} /* one process holds every device */

const spmd_backend spmd_threads_backend = {
    .name = "threads",
    .open = threads_open,
    .close = threads_close,
    .run = threads_run,
    .all_gather = threads_redistribute,
    .all_reduce = threads_all_reduce,
    .reduce_scatter = threads_reduce_scatter,
    .all_to_all = threads_redistribute,
    .halo = threads_halo,
    .send = threads_send,
    .recv = threads_recv,
    .fail = threads_fail,
    .fetch = threads_fetch,
    .max_all = threads_max_all,
    .gather = threads_gather,
};
