/* Strategies: which replicas exist, on which devices and threads, and the group that sums over
 * them (local.c for mirrored, mpi.c for multi-worker, none for the default strategy).
 *
 * Mirrored replicas run on worker threads of their own that live as long as the strategy: a
 * step's thread-local state that is costly to build (the products' packing buffers, a traced
 * function's tracing state) then survives from one step to the next. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "core/random.h"
#include "device/device.h"
#include "dist/strategy_internal.h"

#define DEFAULT_TIMEOUT_SECONDS    300.0
#define DEFAULT_BUCKET_BYTES       (25 << 20)
#define DEFAULT_FIRST_BUCKET_BYTES (1 << 20)

/* A positive number from the environment variable `name`, else 0. */
static double positive_setting(const char *name) {
    const char *text = getenv(name);
    char *end;
    double value = text ? strtod(text, &end) : 0;
    return text && end != text && *end == '\0' && value > 0 ? value : 0;
}

static double timeout_setting(double given) {
    if (given > 0) return given;
    double seconds = positive_setting("EG_DIST_TIMEOUT");
    return seconds > 0 ? seconds : DEFAULT_TIMEOUT_SECONDS;
}

static eg_strategy *strategy_new(eg__strategy_kind kind, const eg_strategy_options *options) {
    eg_strategy *s = calloc(1, sizeof *s);
    if (!s) {
        eg__error(EG_ERR_OUT_OF_MEMORY, "strategy: out of host memory");
        return NULL;
    }
    s->kind = kind;
    eg_strategy_options given = options ? *options : (eg_strategy_options){0};
    /* EG_DIST_BUCKET_BYTES sets both bucket sizes where the options leave them */
    int64_t bucket_setting = (int64_t)positive_setting("EG_DIST_BUCKET_BYTES");
    if (given.bucket_bytes <= 0 && given.first_bucket_bytes <= 0 && bucket_setting > 0)
        given.bucket_bytes = given.first_bucket_bytes = bucket_setting;
    s->options.timeout_seconds = timeout_setting(given.timeout_seconds);
    s->options.bucket_bytes = given.bucket_bytes > 0 ? given.bucket_bytes : DEFAULT_BUCKET_BYTES;
    s->options.first_bucket_bytes = given.first_bucket_bytes > 0 ? given.first_bucket_bytes
                                    : given.bucket_bytes > 0     ? given.bucket_bytes
                                                                 : DEFAULT_FIRST_BUCKET_BYTES;
    s->n_local = 1;
    s->n_replicas = 1;
    s->n_workers = 1;
    s->failed_local = -1;
    return s;
}

/* Registers each local replica's member with the kernels' table. */
static eg_status register_members(eg_strategy *s) {
    for (int i = 0; i < s->n_local; i++) {
        s->handles[i] = eg__collective_register(&s->ops->reduce, s->members[i]);
        if (!s->handles[i]) return eg_last_status();
    }
    return EG_OK;
}

eg_strategy *eg_strategy_default_new(void) {
    eg_strategy *s = strategy_new(EG__STRATEGY_DEFAULT, NULL);
    if (s) s->devices[0] = eg__device_current();
    return s;
}

eg_strategy *eg_strategy_mirrored_new(int n_devices, const eg_device *const *devices,
                                      const eg_strategy_options *options) {
    if (n_devices < 0 || n_devices > EG__MAX_LOCAL_REPLICAS) {
        eg__error(EG_ERR_INVALID_ARGUMENT, "mirrored: %d devices (1 to %d, or 0 for all)",
                  n_devices, EG__MAX_LOCAL_REPLICAS);
        return NULL;
    }
    eg_strategy *s = strategy_new(EG__STRATEGY_MIRRORED, options);
    if (!s) return NULL;
    if (!devices) {
        /* the first n (or all) visible devices of the current device's kind */
        eg_device_type kind = eg__device_current()->type;
        int wanted = n_devices, found = 0;
        for (int i = 0; i < eg_device_count() && found < EG__MAX_LOCAL_REPLICAS; i++) {
            const eg_device *d = eg_device_at(i);
            if (d->type == kind && (wanted == 0 || found < wanted)) s->devices[found++] = d;
        }
        if (wanted > found) {
            eg__error(EG_ERR_INVALID_ARGUMENT,
                      "mirrored: %d replicas asked, but only %d %s device(s) are visible (logical "
                      "CPU devices: EG_CPU_DEVICES=N or eg_device_configure_cpus)",
                      wanted, found, kind == EG_DEVICE_CPU ? "cpu" : "cuda");
            goto fail;
        }
        n_devices = found;
    } else {
        for (int i = 0; i < n_devices; i++) {
            if (!devices[i]) {
                eg__error(EG_ERR_NULL_ARGUMENT, "mirrored: device %d is NULL", i);
                goto fail;
            }
            for (int j = 0; j < i; j++)
                if (devices[j] == devices[i]) {
                    eg__error(EG_ERR_INVALID_ARGUMENT,
                              "mirrored: %s is given twice (devices %d and %d): one replica per "
                              "device",
                              eg_device_name(devices[i]), j, i);
                    goto fail;
                }
            s->devices[i] = devices[i];
        }
    }
    s->n_local = s->n_replicas = n_devices;
    if (n_devices > 1) {
        if (eg__local_group_new(n_devices, s->options.timeout_seconds, &s->local) != EG_OK)
            goto fail;
        s->ops = &eg__local_member_ops;
        for (int i = 0; i < n_devices; i++) s->members[i] = eg__local_group_member(s->local, i);
        if (register_members(s) != EG_OK || eg__strategy_start_workers(s) != EG_OK) goto fail;
    }
    return s;
fail:
    eg_strategy_free(s);
    return NULL;
}

eg_strategy *eg_strategy_multi_worker_new(const eg_device *device,
                                          const eg_strategy_options *options) {
    eg_strategy *s = strategy_new(EG__STRATEGY_MULTI_WORKER, options);
    if (!s) return NULL;
    s->devices[0] = device ? device : eg__device_current();
    if (eg__mpi_group_new(s->options.timeout_seconds, &s->mpi) != EG_OK) goto fail;
    s->worker = eg__mpi_group_rank(s->mpi);
    s->n_workers = s->n_replicas = eg__mpi_group_size(s->mpi);
    s->ops = &eg__mpi_member_ops;
    s->members[0] = eg__mpi_group_member(s->mpi);
    if (register_members(s) != EG_OK) goto fail;
    return s;
fail:
    eg_strategy_free(s);
    return NULL;
}

void eg_strategy_free(eg_strategy *strategy) {
    if (!strategy) return;
    eg__strategy_stop_workers(strategy);
    for (int i = 0; i < strategy->n_local; i++) {
        eg__collective_unregister(strategy->handles[i]);
        eg__reducer_free(strategy->reducers[i]);
        eg_generator_free(strategy->generators[i]);
    }
    eg__local_group_free(strategy->local);
    if (strategy->mpi) eg__mpi_group_free(strategy->mpi);
    free(strategy);
}

const char *eg_strategy_name(const eg_strategy *strategy) {
    if (!strategy) return "(null)";
    switch (strategy->kind) {
    case EG__STRATEGY_MIRRORED:
        return "mirrored";
    case EG__STRATEGY_MULTI_WORKER:
        return "multi_worker";
    default:
        return "default";
    }
}

int eg_strategy_num_replicas(const eg_strategy *strategy) {
    return strategy ? strategy->n_replicas : 0;
}

int eg_strategy_num_local_replicas(const eg_strategy *strategy) {
    return strategy ? strategy->n_local : 0;
}

int eg_strategy_worker(const eg_strategy *strategy) {
    return strategy ? strategy->worker : 0;
}

int eg_strategy_num_workers(const eg_strategy *strategy) {
    return strategy ? strategy->n_workers : 0;
}

bool eg_strategy_is_chief(const eg_strategy *strategy) {
    return strategy && strategy->worker == 0;
}

const eg_device *eg_strategy_device(const eg_strategy *strategy, int local_index) {
    if (!strategy || local_index < 0 || local_index >= strategy->n_local) return NULL;
    return strategy->devices[local_index];
}

int eg_strategy_replica_id(const eg_strategy *strategy, int local_index) {
    if (!strategy || local_index < 0 || local_index >= strategy->n_local) return -1;
    return strategy->worker * strategy->n_local + local_index;
}

eg_status eg_strategy_stats_get(eg_strategy *strategy, eg_strategy_stats *stats, bool reset) {
    if (!strategy || !stats)
        return eg__error(EG_ERR_NULL_ARGUMENT, "strategy_stats_get: NULL strategy or stats");
    eg__collective_stats sum = {0};
    for (int i = 0; strategy->ops && i < strategy->n_local; i++)
        eg__collective_stats_add(strategy->handles[i], &sum, reset);
    *stats = (eg_strategy_stats){.all_reduces = sum.reductions,
                                 .bytes = sum.bytes,
                                 .in_flight_seconds = (double)sum.in_flight_ns * 1e-9,
                                 .exposed_seconds = (double)sum.exposed_ns * 1e-9};
    return EG_OK;
}

void eg_strategy_split_batch(const eg_strategy *strategy, int64_t global_batch, int replica_id,
                             int64_t *start, int64_t *count) {
    int64_t n = strategy && strategy->n_replicas > 0 ? strategy->n_replicas : 1;
    int64_t r = replica_id < 0 ? 0 : replica_id >= n ? n - 1 : replica_id;
    int64_t base = global_batch / n, extra = global_batch % n;
    *start = r * base + (r < extra ? r : extra);
    *count = base + (r < extra ? 1 : 0);
}

const char *eg_distribute_info(void) {
    static char text[256];
    snprintf(text, sizeof text, "mirrored over local devices; multi-worker: %s", eg__mpi_info());
    return text;
}

/* ---- running a step on every local replica ---- */

/* Replica `id`'s stand-in for the default generator: a stream of its own, seeded from the
 * default generator's seed and the replica, so that dropout masks differ between replicas, do
 * not depend on which thread draws first, and are the same for replica `id` mirrored or
 * multi-worker. It continues from one run to the next until eg_manual_seed sets a new seed. */
static void use_replica_generator(eg_strategy *s, int i, int id) {
    uint64_t seed = eg__random_default_seed();
    if (!s->generators[i] || s->generator_seeds[i] != seed) {
        uint64_t z = seed + 0x9E3779B97F4A7C15ull * (uint64_t)(id + 1);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        eg_generator *fresh = eg_generator_new(z ^ (z >> 31));
        if (!fresh) return; /* out of memory: the default generator, shared */
        eg_generator_free(s->generators[i]);
        s->generators[i] = fresh;
        s->generator_seeds[i] = seed;
    }
    eg__random_set_thread_default(s->generators[i]);
}

/* Runs the step of local replica i on this thread: its device, its member, its context. On
 * failure the replica's message is kept for the caller, and the others stop waiting for it. */
static void run_replica(eg_strategy *s, int i) {
    eg_replica_context context = {s, i, eg_strategy_replica_id(s, i), s->n_replicas, s->devices[i]};
    eg_device_scope_begin(s->devices[i]);
    eg__collective_set_current(s->handles[i]);
    if (s->n_replicas > 1) use_replica_generator(s, i, context.replica_id);
    eg_scope_begin();
    eg__callback_frame frame;
    eg__callback_begin(&frame);
    eg_status status = s->job_fn(&context, s->job_user);
    eg__callback_end(&frame);
    eg_scope_end();
    eg__random_set_thread_default(NULL);
    eg__collective_set_current(0);
    eg_device_scope_end();
    s->status[i] = status;
    if (status != EG_OK) {
        const char *message = eg_last_error();
        snprintf(s->messages[i], sizeof s->messages[i], "%s",
                 *message ? message : eg_status_string(status));
        if (s->local) {
            pthread_mutex_lock(&s->job_lock);
            if (s->failed_local < 0) s->failed_local = i;
            pthread_mutex_unlock(&s->job_lock);
            eg__local_group_abort(s->local, i, s->messages[i]);
        }
    }
    if (s->n_local > 1) eg_clear_error();
}

static void *worker_main(void *arg) {
    worker_start *start = arg;
    eg_strategy *s = start->strategy;
    int i = start->index;
    int64_t seen = 0;
    pthread_mutex_lock(&s->job_lock);
    for (;;) {
        while (s->job_number == seen && !s->stopping)
            pthread_cond_wait(&s->job_posted, &s->job_lock);
        if (s->stopping) break;
        seen = s->job_number;
        pthread_mutex_unlock(&s->job_lock);
        run_replica(s, i);
        pthread_mutex_lock(&s->job_lock);
        if (++s->jobs_done == s->n_local) pthread_cond_broadcast(&s->job_finished);
    }
    pthread_mutex_unlock(&s->job_lock);
    return NULL;
}

eg_status eg__strategy_start_workers(eg_strategy *s) {
    pthread_mutex_init(&s->job_lock, NULL);
    pthread_cond_init(&s->job_posted, NULL);
    pthread_cond_init(&s->job_finished, NULL);
    s->workers_ready = true;
    for (int i = 0; i < s->n_local; i++) {
        s->starts[i] = (worker_start){s, i};
        if (pthread_create(&s->threads[i], NULL, worker_main, &s->starts[i]) != 0)
            return eg__error(EG_ERR_OUT_OF_MEMORY, "mirrored: cannot start replica %d's thread", i);
        s->n_threads++;
    }
    return EG_OK;
}

void eg__strategy_stop_workers(eg_strategy *s) {
    if (!s->workers_ready) return;
    pthread_mutex_lock(&s->job_lock);
    s->stopping = true;
    pthread_cond_broadcast(&s->job_posted);
    pthread_mutex_unlock(&s->job_lock);
    for (int i = 0; i < s->n_threads; i++) pthread_join(s->threads[i], NULL);
    pthread_cond_destroy(&s->job_finished);
    pthread_cond_destroy(&s->job_posted);
    pthread_mutex_destroy(&s->job_lock);
    s->workers_ready = false;
}

eg_status eg_strategy_run(eg_strategy *strategy, eg_replica_fn fn, void *user) {
    if (!strategy || !fn)
        return eg__error(EG_ERR_NULL_ARGUMENT, "strategy_run: strategy or function is NULL");
    eg_strategy *s = strategy;
    s->job_fn = fn;
    s->job_user = user;
    for (int i = 0; i < s->n_local; i++) s->status[i] = EG_OK;
    if (!s->workers_ready) {
        /* one local replica: this thread, with its own error state as the replica's */
        run_replica(s, 0);
        return s->status[0];
    }
    eg__local_group_reset(s->local);
    s->failed_local = -1;
    pthread_mutex_lock(&s->job_lock);
    s->jobs_done = 0;
    s->job_number++;
    pthread_cond_broadcast(&s->job_posted);
    while (s->jobs_done < s->n_local) pthread_cond_wait(&s->job_finished, &s->job_lock);
    pthread_mutex_unlock(&s->job_lock);
    /* The first replica to fail is the cause; the others failed waiting for it. */
    int first = s->failed_local;
    if (first < 0) return EG_OK;
    return eg__error(s->status[first], "replica %d: %s", first, s->messages[first]);
}
