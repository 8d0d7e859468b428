#define _POSIX_C_SOURCE 200809L
/* The input pipeline, measured two ways (medians; the machine is shared and small, so single runs
 * are noisy):
 *
 *   bench_pipeline synthetic [ELEMENTS] [ROUNDS] [WORK_US]
 *     range(ELEMENTS) -> map(WORK_US microseconds of CPU work per element) -> prefetch(AUTOTUNE),
 *     consumed by a loop that does nothing else; elements per second with the map's parallelism
 *     AUTOTUNE and fixed 1..4 (and sequential), the configurations interleaved round by round.
 *     One line per configuration: "name elements_per_second chosen_parallelism".
 *
 *   bench_pipeline train [EPOCHS] [LIMIT]
 *     The seed model (Dense(64, relu) -> Dense(10), Adam, batches of 32) trained on Fashion-MNIST
 *     with the step of train.c, its batches made three ways: inline as train.c makes them today
 *     (mlp_batch in the loop), by `eagle train`'s pipeline (tools/eagle/pipeline.c: map +
 *     prefetch, AUTOTUNE), and by that pipeline with augmentation. For each: samples per second of
 *     the step loop and the fraction of its time spent on data: making the batch inline; in
 *     eg_dataset_iterator_next with the pipeline (wall time: on a loaded machine this includes
 *     being descheduled, typically right after waking the pipeline's threads) and, of that, the
 *     time it was starved (blocked because the prefetch buffer was empty). One line per way:
 *     "name samples_per_second data_fraction starved_fraction". The pipeline's stage table is
 *     printed to stderr. */
#include <eagle.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The CLI's model, batches and pipeline, exactly as `eagle train` uses them. */
#include "../../tools/eagle/mlp.c"
#include "../../tools/eagle/pipeline.c"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *values, int n) {
    qsort(values, (size_t)n, sizeof *values, compare_doubles);
    return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

static void check(bool ok, const char *what) {
    if (ok) return;
    fprintf(stderr, "bench_pipeline: %s: %s\n", what, eg_last_error());
    exit(1);
}

/* ---- synthetic ---- */

static int64_t work_us = 200;

/* work_us microseconds of CPU time of the calling thread, spent in a loop. */
static void burn_cpu(int64_t us) {
    struct timespec start, now;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
    volatile uint64_t x = 0;
    do {
        /* ~1 us of arithmetic per look at the clock (reading a thread's CPU time is a system
         * call: checking it too often would turn the work into kernel time). */
        for (int i = 0; i < 1000; i++) x = x * 6364136223846793005ull + 1442695040888963407ull;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000000 + (now.tv_nsec - start.tv_nsec) / 1000 < us);
}

static eg_status expensive(const eg_element *in, eg_element *out, const eg_dataset_call_info *info,
                           void *context) {
    (void)info, (void)context;
    burn_cpu(work_us);
    *out = *in;
    return EG_OK;
}

/* No work: the pipeline's own cost per element. */
static eg_status identity(const eg_element *in, eg_element *out, const eg_dataset_call_info *info,
                          void *context) {
    (void)info, (void)context;
    *out = *in;
    return EG_OK;
}

/* Elements per second of one pass; *chosen gets the map's parallelism at the end. */
static double synthetic_pass(eg_dataset *ds, int *chosen) {
    double start = now_seconds();
    eg_dataset_iterator *it = eg_dataset_iterator_new(ds);
    check(it != NULL, "iterator");
    int64_t n = 0;
    for (;;) {
        eg_element e;
        bool end;
        check(eg_dataset_iterator_next(it, &e, &end) == EG_OK, "next");
        if (end) break;
        eg_element_release(&e);
        n++;
    }
    double seconds = now_seconds() - start;
    eg_dataset_stage_stats stats[4];
    int stages = eg_dataset_stats(it, stats, 4);
    *chosen = stages >= 2 ? stats[1].parallelism : 0;
    eg_dataset_iterator_free(it);
    return (double)n / seconds;
}

static int run_synthetic(int64_t elements, int rounds) {
    enum { CONFIGS = 7 };
    const int parallelism[CONFIGS] = {EG_AUTOTUNE, 1, 2, 3, 4, 0, EG_AUTOTUNE};
    const char *names[CONFIGS] = {"eagle AUTOTUNE",         "eagle fixed 1", "eagle fixed 2",
                                  "eagle fixed 3",          "eagle fixed 4", "eagle sequential",
                                  "eagle AUTOTUNE, no work"};
    eg_dataset *datasets[CONFIGS];
    for (int c = 0; c < CONFIGS; c++) {
        eg_dataset_map_fn fn = c == CONFIGS - 1 ? identity : expensive;
        datasets[c] = eg_dataset_prefetch(
            eg_dataset_map(eg_dataset_range(0, elements, 1), fn, NULL, parallelism[c], true),
            EG_AUTOTUNE);
        check(datasets[c] != NULL, "dataset");
    }
    double *rates = calloc((size_t)(CONFIGS * rounds), sizeof *rates);
    int chosen[CONFIGS] = {0};
    int warm;
    synthetic_pass(datasets[0], &warm); /* page in, start the pool once */
    for (int r = 0; r < rounds; r++)
        for (int c = 0; c < CONFIGS; c++)
            rates[c * rounds + r] = synthetic_pass(datasets[c], &chosen[c]);
    printf("# synthetic: %lld elements of %lld us CPU work, %ld cores, median of %d rounds\n",
           (long long)elements, (long long)work_us, sysconf(_SC_NPROCESSORS_ONLN), rounds);
    for (int c = 0; c < CONFIGS; c++)
        printf("%-20s %10.0f %d\n", names[c], median(rates + c * rounds, rounds), chosen[c]);
    for (int c = 0; c < CONFIGS; c++) eg_dataset_free(datasets[c]);
    free(rates);
    return 0;
}

/* ---- training the seed model ---- */

/* train.c's step on a ready batch (mlp_step: forward, loss, tape gradient, Adam update). */
static void train_step(eg_model *model, eg_optimizer *optimizer, eg_tensor *x, eg_tensor *y) {
    mlp_step_state state = {model, optimizer, false};
    eg_tensor *in[2] = {x, y};
    eg_tensor *out[2] = {NULL, NULL};
    check(mlp_step(in, out, &state) == EG_OK, "train step");
}

typedef enum feed { FEED_INLINE, FEED_PIPELINE, FEED_AUGMENTED } feed;

/* One epoch; returns samples/s of the step loop, *wait_fraction the share spent on data. */
static double train_epoch(const mlp_data *train, feed how, int epoch, double *wait_fraction,
                          double *starved_fraction, bool print_stats) {
    enum { BATCH = 32 };
    mlp_config config = {1, {64}};
    eg_manual_seed(42);
    eg_model *model = mlp_build(&config);
    eg_adam_options options = eg_adam_options_default();
    eg_optimizer *optimizer = eg_adam_new(&options);
    check(model && optimizer, "model");
    int64_t *order = malloc((size_t)train->n * sizeof *order);
    cli_shuffle_order(order, train->n, 42, epoch);
    eg_dataset *ds = how == FEED_INLINE
                         ? NULL
                         : cli_training_pipeline(train, BATCH, 42, how == FEED_AUGMENTED, false, epoch);
    eg_dataset_iterator *it = ds ? eg_dataset_iterator_new(ds) : NULL;
    check(how == FEED_INLINE || it != NULL, "pipeline");
    int64_t steps = (train->n + BATCH - 1) / BATCH;
    double waited = 0, start = now_seconds();
    for (int64_t step = 0; step < steps; step++) {
        eg_scope_begin();
        eg_tensor *x, *y;
        double data_start = now_seconds();
        if (how == FEED_INLINE) {
            int64_t first = step * BATCH;
            int64_t n = train->n - first < BATCH ? train->n - first : BATCH;
            check(mlp_batch(train, order + first, n, &x, &y) == EG_OK, "batch");
        } else {
            eg_element batch;
            bool end;
            check(eg_dataset_iterator_next(it, &batch, &end) == EG_OK && !end, "next");
            x = batch.tensors[0];
            y = batch.tensors[1];
        }
        waited += now_seconds() - data_start;
        train_step(model, optimizer, x, y);
        eg_scope_end();
    }
    double seconds = now_seconds() - start;
    *starved_fraction = 0;
    eg_dataset_stage_stats root;
    if (it && eg_dataset_stats(it, &root, 1) >= 1) *starved_fraction = root.wait_seconds / seconds;
    if (it && print_stats) {
        fprintf(stderr, "%s pipeline, epoch %d:\n", how == FEED_AUGMENTED ? "augmented" : "plain",
                epoch);
        eg_dataset_stats_print(it, stderr);
    }
    eg_dataset_iterator_free(it);
    eg_dataset_free(ds);
    free(order);
    eg_optimizer_free(optimizer);
    eg_model_free(model);
    *wait_fraction = waited / seconds;
    return (double)train->n / seconds;
}

static int run_train(int epochs, int64_t limit) {
    mlp_data train;
    if (!mlp_data_load(NULL, true, limit, &train)) return 1;
    const char *names[3] = {"inline (train.c)", "pipeline", "pipeline+augment"};
    enum { MAX_EPOCHS = 32 };
    if (epochs > MAX_EPOCHS) epochs = MAX_EPOCHS;
    double rates[3][MAX_EPOCHS], waits[3][MAX_EPOCHS], starved[3][MAX_EPOCHS];
    for (int e = 0; e < epochs; e++) /* interleaved, so that load changes hit all alike */
        for (int f = 0; f < 3; f++)
            rates[f][e] =
                train_epoch(&train, (feed)f, e + 1, &waits[f][e], &starved[f][e], e == epochs - 1);
    printf("# train: seed model, %lld examples, batch 32, %d thread(s), median of %d epochs\n",
           (long long)train.n, eg_get_num_threads(), epochs);
    for (int f = 0; f < 3; f++)
        printf("%-20s %10.0f %.4f %.4f\n", names[f], median(rates[f], epochs),
               median(waits[f], epochs), median(starved[f], epochs));
    mlp_data_free(&train);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "synthetic")) {
        int64_t elements = argc >= 3 ? atoll(argv[2]) : 2000;
        int rounds = argc >= 4 ? atoi(argv[3]) : 5;
        if (argc >= 5) work_us = atoll(argv[4]);
        return run_synthetic(elements, rounds < 1 ? 1 : rounds);
    }
    if (argc >= 2 && !strcmp(argv[1], "train")) {
        int epochs = argc >= 3 ? atoi(argv[2]) : 3;
        int64_t limit = argc >= 4 ? atoll(argv[3]) : 0;
        return run_train(epochs < 1 ? 1 : epochs, limit);
    }
    fprintf(stderr, "usage: bench_pipeline synthetic [ELEMENTS] [ROUNDS] [WORK_US]\n"
                    "       bench_pipeline train [EPOCHS] [LIMIT]\n");
    return 2;
}
