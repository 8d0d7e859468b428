/* What a replica's step calls: the bucketed gradient sum, the variable broadcast and average, the
 * sums of host numbers, the barrier.
 *
 * Buckets form in the order the backward pass finishes the gradients (which is the same on every
 * replica: the same model makes the same tape), closing when they hold bucket_bytes (the first
 * one first_bucket_bytes) or when the dtype changes, so communication starts after the last
 * layers' gradients while the first layers' are still being computed. A bucket is one
 * all_reduce_start op: an eager step starts the sum at once, a lazy or traced one records it
 * where the gradients are made, so a replay starts it at the same place of its schedule. Every
 * element is summed in replica order whatever bucket holds it, so the bucket sizes never change
 * the bits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "core/tensor_internal.h"
#include "dist/strategy_internal.h"
#include "eagle/ops.h"

struct eg__reducer {
    uint64_t checked; /* hash of the sources last agreed on by every replica (0: none yet) */
};

void eg__reducer_free(eg__reducer *reducer) {
    free(reducer);
}

static eg_strategy *strategy_of(const eg_replica_context *replica) {
    return replica ? replica->strategy : NULL;
}

static bool alone(const eg_replica_context *replica) {
    return !replica->strategy->ops;
}

static void *member_of(const eg_replica_context *replica) {
    return replica->strategy->members[replica->local_index];
}

static const char *replica_word(const eg_strategy *s) {
    return s->kind == EG__STRATEGY_MULTI_WORKER ? "rank" : "replica";
}

static eg_status check_context(const eg_replica_context *replica, const char *what) {
    eg_strategy *s = strategy_of(replica);
    if (!s || replica->local_index < 0 || replica->local_index >= s->n_local)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: not a replica context of a strategy", what);
    return EG_OK;
}

/* n tensors at `tensors`, none NULL ("source" or "variable" names them in the error). */
static eg_status check_tensors(const char *what, const char *noun, int n,
                               eg_tensor *const *tensors) {
    if (n < 0 || (n > 0 && !tensors))
        return eg__error(EG_ERR_NULL_ARGUMENT, "%s: no %ss", what, noun);
    for (int i = 0; i < n; i++)
        if (!tensors[i]) return eg__error(EG_ERR_NULL_ARGUMENT, "%s: %s %d is NULL", what, noun, i);
    return EG_OK;
}

/* ---- comparing the replicas' variables ---- */

/* "name f32 (784, 512)\n" per tensor; malloc'd. */
static char *describe(int n, eg_tensor *const *tensors, size_t *length) {
    size_t size = 64, used = 0;
    char *text = malloc(size);
    for (int i = 0; text && i < n; i++) {
        char line[384], shape[192];
        const char *name = eg_is_variable(tensors[i]) ? eg_variable_name(tensors[i]) : "";
        eg_tensor_shape_string(tensors[i], shape, sizeof shape);
        int len = snprintf(line, sizeof line, "'%s' %s %s\n", *name ? name : "(unnamed)",
                           eg_dtype_name(eg_tensor_dtype(tensors[i])), shape);
        if (used + (size_t)len + 1 > size) {
            while (used + (size_t)len + 1 > size) size *= 2;
            char *grown = realloc(text, size);
            if (!grown) {
                free(text);
                return NULL;
            }
            text = grown;
        }
        memcpy(text + used, line, (size_t)len);
        used += (size_t)len;
    }
    if (text) text[used] = '\0';
    *length = used;
    return text;
}

static uint64_t hash_text(const char *text, size_t length) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < length; i++) h = (h ^ (unsigned char)text[i]) * 0x100000001B3ull;
    return h ? h : 1;
}

/* Line `index` of a description into buf ("(none)" past its end). */
static void line_at(const char *text, int index, char *buf, size_t size) {
    for (int i = 0; i < index && text; i++) {
        text = strchr(text, '\n');
        if (text) text++;
    }
    if (!text || !*text) {
        snprintf(buf, size, "nothing (it has fewer tensors)");
        return;
    }
    const char *end = strchr(text, '\n');
    int len = end ? (int)(end - text) : (int)strlen(text);
    snprintf(buf, size, "%.*s", len, text);
}

/* The replicas' tensors must agree in names, dtypes, shapes and order: every replica learns the
 * others' description, so all of them fail alike, naming the first difference. */
static eg_status compare_tensors(const eg_replica_context *replica, const char *what, int n,
                                 eg_tensor *const *tensors, uint64_t *agreed) {
    eg_strategy *s = replica->strategy;
    size_t length;
    char *mine = describe(n, tensors, &length);
    if (!mine) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
    uint64_t hash = hash_text(mine, length);
    if (agreed && *agreed == hash) {
        free(mine);
        return EG_OK;
    }
    int p = s->n_replicas;
    void *member = member_of(replica);
    uint64_t key[2] = {hash, (uint64_t)length};
    uint64_t *keys = malloc(sizeof key * (size_t)p);
    char *all = NULL;
    eg_status status = keys ? s->ops->all_gather(member, key, sizeof key, keys)
                            : eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
    bool same = status == EG_OK;
    size_t longest = 0;
    for (int r = 0; same && r < p; r++) same = keys[2 * r] == hash;
    for (int r = 0; status == EG_OK && r < p; r++)
        longest = keys[2 * r + 1] > longest ? keys[2 * r + 1] : longest;
    if (status == EG_OK && !same) {
        /* every description, padded to the longest, to name the difference */
        char *padded = calloc(longest + 1, 1);
        all = calloc((longest + 1) * (size_t)p, 1);
        if (!padded || !all) {
            status = eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
        } else {
            memcpy(padded, mine, length);
            status = s->ops->all_gather(member, padded, longest + 1, all);
        }
        free(padded);
        for (int r = 1; status == EG_OK && r < p; r++) {
            const char *first = all, *other = all + (size_t)r * (longest + 1);
            if (!strcmp(first, other)) continue;
            int line = 0;
            for (size_t k = 0; first[k] == other[k] && first[k]; k++) line += first[k] == '\n';
            char a[400], b[400];
            line_at(first, line, a, sizeof a);
            line_at(other, line, b, sizeof b);
            const char *word = replica_word(s);
            status = eg__error(EG_ERR_SHAPE,
                               "%s: the replicas' models differ at variable %d: %s 0 has %s, %s "
                               "%d has %s",
                               what, line, word, a, word, r, b);
        }
    }
    if (status == EG_OK && agreed) *agreed = hash;
    free(all);
    free(keys);
    free(mine);
    return status;
}

/* ---- the bucketed gradient ---- */

typedef struct bucket {
    int first, n; /* positions in the ready order */
    eg_tensor *started;
    int64_t tag;
} bucket;

typedef struct gathering {
    const eg_replica_context *replica;
    int n_sources;
    int *order;              /* sources in the order their gradients were finished */
    const eg_tensor **ready; /* their gradients, borrowed, by position */
    int n_ready;
    bucket *buckets;
    int n_buckets;
    int open_first; /* position of the open bucket's first gradient */
    int64_t open_bytes;
} gathering;

static eg_status close_bucket(gathering *g) {
    int n = g->n_ready - g->open_first;
    if (n == 0) return EG_OK;
    bucket *b = &g->buckets[g->n_buckets];
    b->first = g->open_first;
    b->n = n;
    b->started = eg_all_reduce_start(n, eg__tensor_handles(g->ready + g->open_first), &b->tag);
    if (!b->started) return eg_last_status();
    g->n_buckets++;
    g->open_first = g->n_ready;
    g->open_bytes = 0;
    return EG_OK;
}

static eg_status on_ready(int source, const eg_tensor *gradient, void *user) {
    gathering *g = user;
    if (!gradient)
        return eg__error(EG_ERR_INTERNAL, "replica_gradient: source %d has no gradient", source);
    eg_dtype dtype = eg_tensor_dtype(gradient);
    if (dtype != EG_DTYPE_F32 && dtype != EG_DTYPE_F64)
        return eg__error(EG_ERR_DTYPE,
                         "replica_gradient: source %d's gradient is %s; replicas sum f32 or f64",
                         source, eg_dtype_name(dtype));
    if (g->n_ready > g->open_first && eg_tensor_dtype(g->ready[g->open_first]) != dtype) {
        eg_status status = close_bucket(g);
        if (status != EG_OK) return status;
    }
    g->order[g->n_ready] = source;
    g->ready[g->n_ready++] = gradient;
    g->open_bytes += eg_tensor_n_elems(gradient) * (int64_t)eg_dtype_size(dtype);
    const eg_strategy_options *o = &g->replica->strategy->options;
    int64_t cap = g->n_buckets == 0 ? o->first_bucket_bytes : o->bucket_bytes;
    return g->open_bytes >= cap ? close_bucket(g) : EG_OK;
}

/* grads[order[k]] = the summed gradients, cut out of the buckets' sums. */
static eg_status finish_buckets(gathering *g, eg_tensor *const *sources, eg_tensor **grads) {
    eg_status status = EG_OK;
    for (int k = 0; k < g->n_buckets && status == EG_OK; k++) {
        bucket *b = &g->buckets[k];
        eg_tensor *sum = eg_all_reduce_done(b->started, b->tag);
        int64_t offset = 0;
        for (int j = 0; j < b->n && sum; j++) {
            int s = g->order[b->first + j];
            const eg_tensor *source = sources[s];
            int64_t n = eg_tensor_n_elems(source);
            eg_tensor *piece = eg_slice(sum, 0, offset, offset + n, 1);
            eg_tensor *shaped =
                eg_reshape(piece, eg_tensor_n_dims(source), eg_tensor_shape(source));
            eg_release(piece);
            eg_release(grads[s]);
            grads[s] = shaped;
            offset += n;
        }
        eg_release(sum);
        status = eg_last_status();
        for (int j = 0; j < b->n && status == EG_OK; j++)
            if (!grads[g->order[b->first + j]]) status = eg_last_status();
    }
    return status;
}

eg_status eg_replica_gradient(const eg_replica_context *replica, eg_tape *tape,
                              const eg_tensor *target, int n_sources, eg_tensor *const *sources,
                              eg_tensor **grads) {
    eg_status status = check_context(replica, "replica_gradient");
    if (status != EG_OK) return status;
    if (n_sources < 0 || (n_sources > 0 && (!sources || !grads)))
        return eg__error(EG_ERR_NULL_ARGUMENT, "replica_gradient: sources/grads arrays are NULL");
    if (alone(replica))
        return eg_tape_gradient(tape, target, n_sources, sources, grads, EG_UNCONNECTED_ZERO);
    for (int i = 0; i < n_sources; i++) grads[i] = NULL;
    if ((status = check_tensors("replica_gradient", "source", n_sources, sources)) != EG_OK)
        return status;
    eg_strategy *s = replica->strategy;
    eg__reducer **reducer = &s->reducers[replica->local_index];
    if (!*reducer && !(*reducer = calloc(1, sizeof **reducer)))
        return eg__error(EG_ERR_OUT_OF_MEMORY, "replica_gradient: out of host memory");
    status = compare_tensors(replica, "replica_gradient", n_sources, sources, &(*reducer)->checked);
    if (status != EG_OK) return status;

    gathering g = {.replica = replica, .n_sources = n_sources};
    g.order = malloc(sizeof *g.order * (size_t)(n_sources + 1));
    g.ready = malloc(sizeof *g.ready * (size_t)(n_sources + 1));
    g.buckets = calloc((size_t)n_sources + 1, sizeof *g.buckets);
    if (!g.order || !g.ready || !g.buckets) {
        status = eg__error(EG_ERR_OUT_OF_MEMORY, "replica_gradient: out of host memory");
    } else {
        status = eg_tape_gradient_notify(tape, target, n_sources, sources, grads,
                                         EG_UNCONNECTED_ZERO, on_ready, &g);
        if (status == EG_OK) status = close_bucket(&g);
        if (status == EG_OK && g.n_ready != n_sources)
            status = eg__error(EG_ERR_INTERNAL, "replica_gradient: %d of %d gradients were told",
                               g.n_ready, n_sources);
        if (status == EG_OK) status = finish_buckets(&g, sources, grads);
    }
    for (int k = 0; g.buckets && k < g.n_buckets; k++) eg_release(g.buckets[k].started);
    if (status != EG_OK)
        for (int i = 0; i < n_sources; i++) {
            eg_release(grads[i]);
            grads[i] = NULL;
        }
    free(g.order);
    free(g.ready);
    free(g.buckets);
    return status;
}

/* ---- variables and host values ---- */

eg_status eg_replica_broadcast_variables(const eg_replica_context *replica, int n,
                                         eg_tensor *const *variables) {
    eg_status status = check_context(replica, "replica_broadcast_variables");
    if (status != EG_OK || alone(replica)) return status;
    if ((status = check_tensors("replica_broadcast_variables", "variable", n, variables)) != EG_OK)
        return status;
    status = compare_tensors(replica, "replica_broadcast_variables", n, variables, NULL);
    void *member = member_of(replica);
    for (int i = 0; i < n && status == EG_OK; i++) {
        eg_tensor *v = variables[i];
        size_t bytes = (size_t)eg_tensor_n_elems(v) * eg_dtype_size(eg_tensor_dtype(v));
        void *staging = malloc(bytes ? bytes : 1);
        if (!staging) {
            status = eg__error(EG_ERR_OUT_OF_MEMORY, "replica_broadcast_variables: out of host "
                                                     "memory");
            break;
        }
        status = eg_tensor_copy_to_host(v, staging, bytes);
        if (status == EG_OK) status = replica->strategy->ops->broadcast(member, staging, bytes, 0);
        if (status == EG_OK && replica->replica_id != 0) {
            eg_tensor *value = eg_tensor_from_data(staging, eg_tensor_dtype(v), eg_tensor_n_dims(v),
                                                   eg_tensor_shape(v));
            status = value ? eg_assign(v, value) : eg_last_status();
            eg_release(value);
        }
        free(staging);
    }
    return status;
}

eg_status eg_replica_average_variables(const eg_replica_context *replica, int n,
                                       eg_tensor *const *variables) {
    eg_status status = check_context(replica, "replica_average_variables");
    if (status != EG_OK || alone(replica)) return status;
    if ((status = check_tensors("replica_average_variables", "variable", n, variables)) != EG_OK)
        return status;
    status = compare_tensors(replica, "replica_average_variables", n, variables, NULL);
    double scale = 1.0 / replica->num_replicas;
    for (int i = 0; i < n && status == EG_OK; i++) {
        eg_tensor *sum = eg_all_reduce(variables[i]);
        eg_tensor *mean = eg_mul_scalar(sum, scale);
        status = mean ? eg_assign(variables[i], mean) : eg_last_status();
        eg_release(mean);
        eg_release(sum);
    }
    return status;
}

eg_status eg_replica_sum(const eg_replica_context *replica, int n, double *values) {
    eg_status status = check_context(replica, "replica_sum");
    if (status != EG_OK || alone(replica) || n == 0) return status;
    if (n < 0 || !values) return eg__error(EG_ERR_NULL_ARGUMENT, "replica_sum: no values");
    int p = replica->num_replicas;
    double *all = malloc(sizeof *all * (size_t)n * (size_t)p);
    if (!all) return eg__error(EG_ERR_OUT_OF_MEMORY, "replica_sum: out of host memory");
    status = replica->strategy->ops->all_gather(member_of(replica), values,
                                                sizeof *values * (size_t)n, all);
    for (int k = 0; k < n && status == EG_OK; k++) {
        double acc = all[k];
        for (int r = 1; r < p; r++) acc += all[(size_t)r * (size_t)n + (size_t)k];
        values[k] = acc;
    }
    free(all);
    return status;
}

eg_status eg_replica_barrier(const eg_replica_context *replica) {
    eg_status status = check_context(replica, "replica_barrier");
    if (status != EG_OK || alone(replica)) return status;
    unsigned char mine = 1, *all = malloc((size_t)replica->num_replicas);
    if (!all) return eg__error(EG_ERR_OUT_OF_MEMORY, "replica_barrier: out of host memory");
    status = replica->strategy->ops->all_gather(member_of(replica), &mine, 1, all);
    free(all);
    return status;
}
