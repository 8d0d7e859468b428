/* The multi-worker group's jobs (see mpi.c): what each one sends and receives, how a reduction
 * adds, and how a job fails. They are made by the calling thread and run by the progress thread
 * (mpi_engine.c).
 *
 * A reduction is a direct reduce-scatter then all-gather: the buffer splits into one contiguous
 * chunk per rank (bounds from the count and the rank count only); rank r receives chunk r from
 * every rank, adds the values of each element in rank order, rank 0 first, and sends the sum to
 * every rank. Not MPI_Allreduce: its algorithm, hence its order of addition, depends on the
 * message size and the rank count. Chunks travel in pieces, so that a piece is added and sent
 * on while the next ones arrive.
 *
 * Every job first swaps a small header (kind, dtype, size, root, tag) with each peer, so that
 * ranks that disagree fail with both sizes named rather than with a truncated message; a job not
 * done by its deadline names the ranks it heard nothing (or too little) from. Either failure
 * breaks the group: messages of the failed job may still be on their way, so later calls fail at
 * once and the group's free skips MPI_Finalize, which would wait for the silent rank. */
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(EG_HAVE_MPI)

#include "dist/mpi_internal.h"

/* The size of the pieces a chunk travels in: small enough that adding one piece overlaps the
 * transfer of the next in a large bucket, large enough that a gradient bucket of a few megabytes
 * goes in one message per peer and phase — each message is a rendezvous round trip between the
 * progress threads, which cost more than the overlap gained (allreduce_bandwidth.c and
 * bench/distributed/run.sh decided it). */
#define PIECE_BYTES (4 * 1024 * 1024)
/* Sends in flight per peer and phase (see push_scatter). */
#define SEND_WINDOW 1

static int mpi_tag(int64_t tag, int phase) {
    return (int)(((uint64_t)tag % (uint64_t)eg__mpi_engine.tag_slots) * N_PHASES + (uint64_t)phase);
}

const char *eg__mpi_error_text(int rc, char *text) {
    int length = 0;
    if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS)
        snprintf(text, MPI_MAX_ERROR_STRING, "MPI error %d", rc);
    return text;
}

const char *eg__mpi_kind_name(int64_t kind) {
    static const char *names[] = {"?", "all_reduce", "broadcast", "all_gather"};
    return kind >= JOB_REDUCE && kind <= JOB_ALL_GATHER ? names[kind] : names[0];
}

static bool is_receive(int r) {
    return r != ROLE_JOIN && r % 2 == 0;
}

/* ---- jobs: made by the calling thread, run by the progress thread ---- */

/* `bytes` from block at *used, 16-aligned; NULL while block is (only measuring). */
static void *carve(char *block, size_t *used, size_t bytes) {
    size_t at = (*used + 15) & ~(size_t)15;
    *used = at + bytes;
    return block ? block + at : NULL;
}

static int64_t chunk_length(int64_t count, int p, int j) {
    return count / p + (j < count % p ? 1 : 0);
}

void eg__mpi_control_job(job *j, eg__mpi_group *g, job_kind kind) {
    memset(j, 0, sizeof *j);
    j->group = g;
    j->kind = kind;
    j->n_slots = 1;
    j->requests = &j->one_request;
    j->one_request = MPI_REQUEST_NULL;
    j->slots = &j->one_slot;
    j->indices = &j->one_index;
    j->statuses = &j->one_status;
    j->bad_peer = -1;
    snprintf(j->name, sizeof j->name, "multi-worker");
}

/* A job of `count` elements of dtype (reductions) or bytes, or NULL when out of memory or too
 * large for MPI's int counts. */
job *eg__mpi_job_new(eg__mpi_group *g, job_kind kind, int64_t tag, int64_t count, eg_dtype dtype,
                     int root) {
    int p = g->size, r = g->rank;
    size_t elem = kind == JOB_REDUCE ? eg_dtype_size(dtype) : 1;
    int64_t piece = PIECE_BYTES / (int64_t)elem, total = 0, own = 0, per_peer = 0;
    if (kind == JOB_REDUCE) {
        for (int q = 0; q < p; q++) {
            int64_t pieces = (chunk_length(count, p, q) + piece - 1) / piece;
            total += pieces;
            if (q == r) own = pieces;
        }
    } else {
        per_peer = (count + piece - 1) / piece;
    }
    int64_t n_slots =
        2 * (int64_t)p + (kind == JOB_REDUCE ? 2 * total + 2 * p * own : 2 * p * per_peer);
    if (n_slots > INT_MAX / 4) return NULL;
    /* one block: pass 0 measures it, pass 1 carves the arrays from it */
    char *block = NULL;
    job *j = NULL, measure;
    for (int pass = 0; pass < 2; pass++) {
        job *t = pass ? j : &measure;
        size_t used = sizeof(job);
        t->requests = carve(block, &used, (size_t)n_slots * sizeof(MPI_Request));
        t->slots = carve(block, &used, (size_t)n_slots * sizeof(slot));
        t->indices = carve(block, &used, (size_t)n_slots * sizeof(int));
        t->statuses = carve(block, &used, (size_t)n_slots * sizeof(MPI_Status));
        t->peer_headers = carve(block, &used, (size_t)p * HEADER_WORDS * sizeof(int64_t));
        t->header_in = carve(block, &used, (size_t)p * sizeof(bool));
        t->bytes_in = carve(block, &used, (size_t)p * 2 * sizeof(int64_t));
        t->chunk = carve(block, &used, (size_t)(p + 1) * sizeof(int64_t));
        t->piece_base = carve(block, &used, (size_t)(p + 1) * sizeof(int));
        t->arrived = carve(block, &used, (size_t)own * sizeof(int));
        t->sent = carve(block, &used, (size_t)total * sizeof(uint8_t));
        t->next_gather = carve(block, &used, (size_t)p * 5 * sizeof(int));
        t->sources = carve(block, &used, (size_t)p * sizeof(void *));
        if (pass == 0 && !(j = (job *)(block = calloc(1, used)))) return NULL;
    }
    j->bytes_due = j->bytes_in + p;
    j->scatter_next = j->next_gather + p;
    j->scatter_flight = j->scatter_next + p;
    j->gather_next = j->scatter_flight + p;
    j->gather_flight = j->gather_next + p;
    for (int64_t i = 0; i < n_slots; i++) j->requests[i] = MPI_REQUEST_NULL;
    j->n_slots = (int)n_slots;
    j->group = g;
    j->kind = kind;
    j->tag = tag;
    j->count = count;
    j->dtype = dtype;
    j->elem = elem;
    j->root = root;
    j->piece = piece;
    j->bad_peer = -1;
    j->own_pieces = (int)own;
    j->n_pieces = (int)per_peer;
    if (kind == JOB_REDUCE)
        snprintf(j->name, sizeof j->name, "all_reduce (tag %lld)", (long long)tag);
    else
        snprintf(j->name, sizeof j->name, "%s (exchange %lld)", eg__mpi_kind_name(kind),
                 (long long)tag);
    j->header[0] = kind;
    j->header[1] = kind == JOB_REDUCE ? (int64_t)dtype : -1;
    j->header[2] = count;
    j->header[3] = root;
    j->header[4] = tag;
    int64_t header_bytes = HEADER_WORDS * (int64_t)sizeof(int64_t);
    if (kind == JOB_REDUCE) {
        for (int q = 0; q < p; q++) {
            j->chunk[q + 1] = j->chunk[q] + chunk_length(count, p, q);
            j->piece_base[q + 1] =
                j->piece_base[q] + (int)((chunk_length(count, p, q) + piece - 1) / piece);
        }
        int64_t own_length = j->chunk[r + 1] - j->chunk[r];
        for (int q = 0; q < p; q++)
            j->bytes_due[q] =
                header_bytes + (own_length + j->chunk[q + 1] - j->chunk[q]) * (int64_t)elem;
        j->base_a = 2 * p;
        j->base_b = j->base_a + (int)total;
        j->base_c = j->base_b + p * (int)own;
        j->base_d = j->base_c + p * (int)own;
        j->n_expected = 2 * (p - 1) + 2 * (int)(total - own) + 2 * (p - 1) * (int)own;
        j->scratch_bytes = (size_t)(p - 1) * (size_t)own_length * elem;
    } else {
        j->base_a = 2 * p;
        j->base_b = j->base_a + p * (int)per_peer;
        for (int q = 0; q < p; q++)
            j->bytes_due[q] = header_bytes + (kind == JOB_ALL_GATHER || q == root ? count : 0);
        if (kind == JOB_ALL_GATHER)
            j->n_expected = 2 * (p - 1) * (1 + (int)per_peer);
        else
            j->n_expected = 2 * (p - 1) + (r == root ? p - 1 : 1) * (int)per_peer;
    }
    return j;
}

void *eg__mpi_scratch_take(eg__mpi_group *g, size_t bytes) {
    int best = -1;
    for (int i = 0; i < SCRATCH_POOL; i++)
        if (g->pool[i].data && g->pool[i].bytes >= bytes &&
            (best < 0 || g->pool[i].bytes < g->pool[best].bytes))
            best = i;
    if (best < 0) return malloc(bytes);
    void *data = g->pool[best].data;
    g->pool[best].data = NULL;
    return data;
}

static void scratch_give(eg__mpi_group *g, void *data, size_t bytes) {
    if (!data) return;
    int smallest = 0;
    for (int i = 0; i < SCRATCH_POOL; i++) {
        if (!g->pool[i].data) {
            smallest = i;
            break;
        }
        if (g->pool[i].bytes < g->pool[smallest].bytes) smallest = i;
    }
    if (g->pool[smallest].data && g->pool[smallest].bytes >= bytes) {
        free(data);
        return;
    }
    free(g->pool[smallest].data);
    g->pool[smallest] = (scratch_buffer){data, bytes};
}

void eg__mpi_job_free(eg__mpi_group *g, job *j) {
    if (!j->scratch_unsafe) scratch_give(g, j->scratch, j->scratch_bytes);
    free(j);
}

void eg__mpi_fail(job *j, eg_status status, const char *fmt, ...) {
    if (j->finished) return;
    va_list args;
    va_start(args, fmt);
    vsnprintf(j->message, sizeof j->message, fmt, args);
    va_end(args);
    j->status = status;
    j->finished = true;
}

static bool posted(job *j, int rc, const char *what, int peer) {
    if (rc == MPI_SUCCESS) return true;
    char text[MPI_MAX_ERROR_STRING];
    eg__mpi_fail(j, EG_ERR_IO, "%s: MPI failed %s rank %d: %s", j->name, what, peer,
                 eg__mpi_error_text(rc, text));
    return false;
}

static bool post_send(job *j, int index, role r, int peer, int piece, const void *data, int n,
                      MPI_Datatype type, int phase) {
    j->slots[index] = (slot){r, peer, piece};
    return posted(
        j,
        MPI_Isend(data, n, type, peer, mpi_tag(j->tag, phase), j->group->comm, &j->requests[index]),
        "sending to", peer);
}

static bool post_receive(job *j, int index, role r, int peer, int piece, void *data, int n,
                         MPI_Datatype type, int phase) {
    j->slots[index] = (slot){r, peer, piece};
    return posted(
        j,
        MPI_Irecv(data, n, type, peer, mpi_tag(j->tag, phase), j->group->comm, &j->requests[index]),
        "receiving from", peer);
}

static MPI_Datatype element_type(const job *j) {
    if (j->kind != JOB_REDUCE) return MPI_BYTE;
    return j->dtype == EG_DTYPE_F64 ? MPI_DOUBLE : MPI_FLOAT;
}

/* Elements of piece k of a stretch of `length` elements. */
static int piece_length(const job *j, int64_t length, int k) {
    int64_t left = length - (int64_t)k * j->piece;
    return (int)(left < j->piece ? left : j->piece);
}

/* The scratch slot holding peer q's values of the own chunk. */
static char *scratch_of(const job *j, int q) {
    int r = j->group->rank;
    int64_t own_length = j->chunk[r + 1] - j->chunk[r];
    return (char *)j->scratch + (size_t)(q < r ? q : q - 1) * (size_t)own_length * j->elem;
}

/* Gather receives into chunk jj go into the buffer chunk jj was sent from, so each is posted
 * once that piece's send is complete, in piece order (same tag: they match in posting order). */
static void post_gathers(job *j, int jj) {
    int pieces = j->piece_base[jj + 1] - j->piece_base[jj];
    int64_t length = j->chunk[jj + 1] - j->chunk[jj];
    while (!j->finished && j->next_gather[jj] < pieces &&
           j->sent[j->piece_base[jj] + j->next_gather[jj]]) {
        int k = j->next_gather[jj]++;
        char *at = (char *)j->data + (size_t)(j->chunk[jj] + k * j->piece) * j->elem;
        post_receive(j, j->base_d + j->piece_base[jj] + k, ROLE_GATHER_RECV, jj, k, at,
                     piece_length(j, length, k), element_type(j), PHASE_GATHER);
    }
}

/* Sends to one peer go in piece order (the receiver matches same-tag messages in the order
 * they were sent) and at most SEND_WINDOW at a time: MPI moves concurrent large messages side by
 * side, so with every piece posted at once the first would arrive nearly last, and summing could
 * not overlap the transfer. */
static void push_scatter(job *j, int q) {
    int pieces = j->piece_base[q + 1] - j->piece_base[q];
    int64_t length = j->chunk[q + 1] - j->chunk[q];
    while (!j->finished && j->scatter_next[q] < pieces && j->scatter_flight[q] < SEND_WINDOW) {
        int k = j->scatter_next[q]++;
        j->scatter_flight[q]++;
        post_send(j, j->base_a + j->piece_base[q] + k, ROLE_SCATTER_SEND, q, k,
                  (char *)j->data + (size_t)(j->chunk[q] + k * j->piece) * j->elem,
                  piece_length(j, length, k), element_type(j), PHASE_SCATTER);
    }
}

static void push_gather(job *j, int q) {
    int r = j->group->rank;
    int64_t own_length = j->chunk[r + 1] - j->chunk[r];
    char *own = (char *)j->data + (size_t)j->chunk[r] * j->elem;
    while (!j->finished && j->gather_next[q] < j->summed && j->gather_flight[q] < SEND_WINDOW) {
        int k = j->gather_next[q]++;
        j->gather_flight[q]++;
        post_send(j, j->base_c + q * j->own_pieces + k, ROLE_GATHER_SEND, q, k,
                  own + (size_t)(k * j->piece) * j->elem, piece_length(j, own_length, k),
                  element_type(j), PHASE_GATHER);
    }
}

/* Piece k of the own chunk is here from every peer: its sum, in rank order, goes out to all
 * (in piece order: large transfers may complete out of order). */
static void reduce_piece(job *j, int k) {
    eg__mpi_group *g = j->group;
    int p = g->size, r = g->rank;
    int64_t own_length = j->chunk[r + 1] - j->chunk[r];
    char *own = (char *)j->data + (size_t)j->chunk[r] * j->elem;
    for (int q = 0; q < p; q++) j->sources[q] = q == r ? own : scratch_of(j, q);
    int64_t offset = k * j->piece;
    int n = piece_length(j, own_length, k);
    eg__sum_in_replica_order(j->dtype, own, (const void *const *)j->sources, p, offset, n);
    j->arrived[k] = p; /* summed */
    while (j->summed < j->own_pieces && j->arrived[j->summed] == p) j->summed++;
    for (int i = 1; i < p; i++) push_gather(j, (r + i) % p);
}

/* Posts what the job can post at its start. */
void eg__mpi_begin_job(job *j) {
    eg__mpi_group *g = j->group;
    int p = g->size, r = g->rank;
    if (j->kind == JOB_JOIN) {
        j->slots[0] = (slot){ROLE_JOIN, -1, 0};
        j->n_expected = 1;
        char text[MPI_MAX_ERROR_STRING];
        int rc = MPI_Comm_idup(MPI_COMM_WORLD, &g->comm, &j->requests[0]);
        if (rc != MPI_SUCCESS)
            eg__mpi_fail(j, EG_ERR_IO, "multi-worker: MPI_Comm_idup failed: %s",
                         eg__mpi_error_text(rc, text));
        return;
    }
    int header_phase = j->kind == JOB_REDUCE ? PHASE_HEADER : PHASE_EXCHANGE_HEADER;
    for (int i = 1; i < p && !j->finished; i++) {
        int q = (r - i + p) % p;
        post_receive(j, p + q, ROLE_HEADER_RECV, q, 0, j->peer_headers + q * HEADER_WORDS,
                     HEADER_WORDS, MPI_INT64_T, header_phase);
    }
    for (int i = 1; i < p && !j->finished; i++) {
        int q = (r + i) % p;
        post_send(j, q, ROLE_HEADER_SEND, q, 0, j->header, HEADER_WORDS, MPI_INT64_T, header_phase);
    }
    MPI_Datatype type = element_type(j);
    if (j->kind == JOB_REDUCE) {
        int64_t own_length = j->chunk[r + 1] - j->chunk[r];
        for (int i = 1; i < p; i++) {
            int q = (r - i + p) % p;
            for (int k = 0; k < j->own_pieces && !j->finished; k++)
                post_receive(j, j->base_b + q * j->own_pieces + k, ROLE_SCATTER_RECV, q, k,
                             scratch_of(j, q) + (size_t)(k * j->piece) * j->elem,
                             piece_length(j, own_length, k), type, PHASE_SCATTER);
        }
        for (int i = 1; i < p; i++) push_scatter(j, (r + i) % p);
        return;
    }
    /* broadcast and all_gather: every message can go at once */
    for (int i = 1; i < p; i++) {
        int q = (r - i + p) % p;
        if (j->kind == JOB_BROADCAST && q != j->root) continue;
        char *into = (char *)j->data + (j->kind == JOB_ALL_GATHER ? (size_t)q * j->count : 0);
        for (int k = 0; k < j->n_pieces && !j->finished; k++)
            post_receive(j, j->base_b + q * j->n_pieces + k, ROLE_DATA_RECV, q, k,
                         into + (size_t)(k * j->piece), piece_length(j, j->count, k), type,
                         PHASE_EXCHANGE);
    }
    if (j->kind == JOB_BROADCAST && r != j->root) return;
    const char *from =
        (const char *)j->data + (j->kind == JOB_ALL_GATHER ? (size_t)r * j->count : 0);
    for (int i = 1; i < p; i++) {
        int q = (r + i) % p;
        for (int k = 0; k < j->n_pieces && !j->finished; k++)
            post_send(j, j->base_a + q * j->n_pieces + k, ROLE_DATA_SEND, q, k,
                      from + (size_t)(k * j->piece), piece_length(j, j->count, k), type,
                      PHASE_EXCHANGE);
    }
}

static void describe_mismatch(job *j, int q) {
    const int64_t *mine = j->header, *theirs = j->peer_headers + q * HEADER_WORDS;
    int r = j->group->rank;
    int lo = r < q ? r : q, hi = r < q ? q : r;
    const int64_t *a = r < q ? mine : theirs, *b = r < q ? theirs : mine;
    if (a[0] != b[0]) {
        eg__mpi_fail(j, EG_ERR_STATE, "%s: rank %d calls %s, rank %d %s (the ranks' steps differ)",
                     j->name, lo, eg__mpi_kind_name(a[0]), hi, eg__mpi_kind_name(b[0]));
    } else if (a[4] != b[4]) {
        eg__mpi_fail(j, EG_ERR_INTERNAL, "%s: rank %d's tag %lld met rank %d's tag %lld", j->name,
                     lo, (long long)a[4], hi, (long long)b[4]);
    } else if (j->kind == JOB_REDUCE) {
        eg__mpi_fail(
            j, a[1] != b[1] ? EG_ERR_DTYPE : EG_ERR_SHAPE,
            "%s: rank %d sums %lld %s elements, rank %d %lld %s elements (the ranks' steps "
            "differ)",
            j->name, lo, (long long)a[2], eg_dtype_name((eg_dtype)a[1]), hi, (long long)b[2],
            eg_dtype_name((eg_dtype)b[1]));
    } else if (a[3] != b[3]) {
        eg__mpi_fail(j, EG_ERR_INVALID_ARGUMENT,
                     "%s: rank %d broadcasts from root %lld, rank %d from %lld", j->name, lo,
                     (long long)a[3], hi, (long long)b[3]);
    } else {
        eg__mpi_fail(j, EG_ERR_SHAPE,
                     "%s: rank %d gives %lld bytes, rank %d %lld bytes (the ranks' steps "
                     "differ)",
                     j->name, lo, (long long)a[2], hi, (long long)b[2]);
    }
}

/* A data message from q had the wrong size: the header (sent before it) says why. */
static void wrong_size(job *j, int q, int got, int expected) {
    if (j->bad_peer >= 0) return;
    j->bad_peer = q;
    snprintf(j->bad_detail, sizeof j->bad_detail,
             "%s: rank %d sent a piece of %d elements where %d were due", j->name, q, got,
             expected);
    if (j->header_in[q]) eg__mpi_fail(j, EG_ERR_INTERNAL, "%s", j->bad_detail);
}

static void joined(job *j) {
    eg__mpi_group *g = j->group;
    char text[MPI_MAX_ERROR_STRING];
    int rc = MPI_Comm_set_errhandler(g->comm, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(g->comm, &g->rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(g->comm, &g->size);
    if (rc != MPI_SUCCESS)
        eg__mpi_fail(j, EG_ERR_IO, "multi-worker: MPI failed to set up the communicator: %s",
                     eg__mpi_error_text(rc, text));
}

static void on_complete(job *j, int index, const MPI_Status *status, int error) {
    slot s = j->slots[index];
    char text[MPI_MAX_ERROR_STRING];
    if (error != MPI_SUCCESS && j->requests[index] != MPI_REQUEST_NULL)
        MPI_Request_free(&j->requests[index]); /* requests completed in error stay allocated */
    j->n_done++;
    if (error != MPI_SUCCESS && !(is_receive(s.role) && error == MPI_ERR_TRUNCATE)) {
        eg__mpi_fail(j, EG_ERR_IO, "%s: MPI failed %s rank %d: %s", j->name,
                     is_receive(s.role) ? "receiving from" : "sending to", s.peer,
                     eg__mpi_error_text(error, text));
        return;
    }
    int got = 0, expected = 0;
    if (is_receive(s.role) && s.role != ROLE_HEADER_RECV) {
        int r = j->group->rank;
        if (s.role == ROLE_SCATTER_RECV)
            expected = piece_length(j, j->chunk[r + 1] - j->chunk[r], s.piece);
        else if (s.role == ROLE_GATHER_RECV)
            expected = piece_length(j, j->chunk[s.peer + 1] - j->chunk[s.peer], s.piece);
        else
            expected = piece_length(j, j->count, s.piece);
        if (error == MPI_ERR_TRUNCATE ||
            MPI_Get_count(status, element_type(j), &got) != MPI_SUCCESS || got != expected) {
            wrong_size(j, s.peer, error == MPI_ERR_TRUNCATE ? expected + 1 : got, expected);
            return;
        }
        j->bytes_in[s.peer] += (int64_t)got * (int64_t)j->elem;
    }
    switch (s.role) {
    case ROLE_JOIN:
        joined(j);
        break;
    case ROLE_HEADER_RECV: {
        j->header_in[s.peer] = true;
        j->bytes_in[s.peer] += HEADER_WORDS * (int64_t)sizeof(int64_t);
        const int64_t *theirs = j->peer_headers + s.peer * HEADER_WORDS;
        if (memcmp(theirs, j->header, sizeof j->header) != 0)
            describe_mismatch(j, s.peer);
        else if (j->bad_peer == s.peer)
            eg__mpi_fail(j, EG_ERR_INTERNAL, "%s", j->bad_detail);
        break;
    }
    case ROLE_SCATTER_SEND:
        j->sent[j->piece_base[s.peer] + s.piece] = 1;
        j->scatter_flight[s.peer]--;
        post_gathers(j, s.peer);
        push_scatter(j, s.peer);
        break;
    case ROLE_GATHER_SEND:
        j->gather_flight[s.peer]--;
        push_gather(j, s.peer);
        break;
    case ROLE_SCATTER_RECV:
        if (++j->arrived[s.piece] == j->group->size - 1) reduce_piece(j, s.piece);
        break;
    default:
        break;
    }
}

/* Polls the job's messages; returns how many completed. */
int eg__mpi_poll_job(job *j) {
    int outcount = 0;
    int rc = MPI_Testsome(j->n_slots, j->requests, &outcount, j->indices, j->statuses);
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
        char text[MPI_MAX_ERROR_STRING];
        eg__mpi_fail(j, EG_ERR_IO, "%s: MPI_Testsome failed: %s", j->name,
                     eg__mpi_error_text(rc, text));
        return 1;
    }
    if (outcount == MPI_UNDEFINED) outcount = 0;
    for (int i = 0; i < outcount && !j->finished; i++)
        on_complete(j, j->indices[i], &j->statuses[i],
                    rc == MPI_ERR_IN_STATUS ? j->statuses[i].MPI_ERROR : MPI_SUCCESS);
    if (!j->finished && j->n_done == j->n_expected) j->finished = true; /* status EG_OK */
    return outcount;
}

static void append(char *list, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append(char *list, size_t size, const char *fmt, ...) {
    size_t used = strlen(list);
    if (used >= size - 1) return;
    va_list args;
    va_start(args, fmt);
    vsnprintf(list + used, size - used, fmt, args);
    va_end(args);
}

/* The deadline passed: names the ranks that sent nothing, or too little. */
void eg__mpi_time_out(job *j) {
    eg__mpi_group *g = j->group;
    double seconds = g->timeout_seconds;
    if (j->kind == JOB_JOIN) {
        eg__mpi_fail(
            j, EG_ERR_STATE,
            "multi-worker: not every rank joined within %g s (MPI_Comm_dup of MPI_COMM_WORLD; the "
            "strategy's timeout): a rank died, hangs, or did not create its multi-worker "
            "strategy",
            seconds);
        return;
    }
    char silent[256] = "", partial[512] = "", sinks[256] = "";
    int n_silent = 0, n_partial = 0, n_sinks = 0;
    for (int q = 0; q < g->size; q++) {
        if (q == g->rank) continue;
        if (!j->header_in[q] && j->bytes_in[q] == 0) {
            append(silent, sizeof silent, "%s%d", n_silent++ ? ", " : "", q);
        } else if (j->bytes_in[q] < j->bytes_due[q]) {
            append(partial, sizeof partial, "%srank %d sent %lld of %lld bytes",
                   n_partial++ ? ", " : "", q, (long long)j->bytes_in[q],
                   (long long)j->bytes_due[q]);
        } else {
            for (int i = 0; i < j->n_slots; i++)
                if (j->requests[i] != MPI_REQUEST_NULL && !is_receive(j->slots[i].role) &&
                    j->slots[i].peer == q) {
                    append(sinks, sizeof sinks, "%s%d", n_sinks++ ? ", " : "", q);
                    break;
                }
        }
    }
    if (n_silent)
        eg__mpi_fail(j, EG_ERR_STATE,
                     "%s: rank%s %s sent nothing within %g s (the strategy's timeout): %s", j->name,
                     n_silent > 1 ? "s" : "", silent, seconds,
                     n_silent > 1 ? "they died, hang, or run a different step"
                                  : "it died, hangs, or runs a different step");
    else if (n_partial)
        eg__mpi_fail(
            j, EG_ERR_STATE,
            "%s: %s within %g s (the strategy's timeout): it died, hangs, or runs a different "
            "step",
            j->name, partial, seconds);
    else
        eg__mpi_fail(j, EG_ERR_STATE,
                     "%s: rank%s %s did not take what this rank sent within %g s (the strategy's "
                     "timeout): it died, hangs, or runs a different step",
                     j->name, n_sinks > 1 ? "s" : "", n_sinks ? sinks : "?", seconds);
}

/* A failed job's messages: receives are cancelled (their buffers may be freed once the waiter
 * returns), sends are left to MPI. A receive that cannot be cancelled (a transfer under way) is
 * abandoned with its buffer; the group is broken, and the process should exit. */
void eg__mpi_cancel_requests(job *j) {
    if (j->kind == JOB_JOIN) return; /* a pending collective can be neither cancelled nor freed */
    bool pending = false;
    for (int i = 0; i < j->n_slots; i++) {
        if (j->requests[i] == MPI_REQUEST_NULL) continue;
        if (is_receive(j->slots[i].role)) {
            MPI_Cancel(&j->requests[i]);
            pending = true;
        } else {
            MPI_Request_free(&j->requests[i]);
        }
    }
    for (int attempt = 0; attempt < 200 && pending; attempt++) {
        pending = false;
        for (int i = 0; i < j->n_slots; i++) {
            if (j->requests[i] == MPI_REQUEST_NULL) continue;
            int flag = 0;
            int rc = MPI_Test(&j->requests[i], &flag, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS && j->requests[i] != MPI_REQUEST_NULL)
                MPI_Request_free(&j->requests[i]);
            else if (!flag)
                pending = true;
        }
        if (pending) nanosleep(&(struct timespec){0, 50000}, NULL);
    }
    for (int i = 0; i < j->n_slots; i++)
        if (j->requests[i] != MPI_REQUEST_NULL) {
            MPI_Request_free(&j->requests[i]);
            j->scratch_unsafe = true;
        }
}

#endif /* EG_HAVE_MPI */
