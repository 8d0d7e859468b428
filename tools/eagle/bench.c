/* eagle bench modes: the same training step run eagerly, lazily and as a traced graph, with
 * what each costs — step time, peak memory of a step, memory reserved, allocator calls per
 * step — and the accuracy each reaches (they must agree: the modes compute the same bits). */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "mlp.h"

typedef enum { MODE_EAGER, MODE_LAZY, MODE_GRAPH, N_MODES } mode;
static const char *const mode_names[N_MODES] = {"eager", "lazy", "graph"};

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* CPU time of the calling thread: unlike wall time it does not count the time other jobs on a
 * loaded machine hold the core (with --threads 1 the whole step runs on this thread). */
static double thread_cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct mode_result {
    eg_function_stats graph;
    double median_step_us;
    double median_step_cpu_us; /* the calling thread's CPU time */
    size_t peak_step_bytes;
    size_t reserved_bytes;
    double allocator_calls_per_step;
    double test_accuracy;
    double final_loss;
} mode_result;

static bool run_mode(mode m, const mlp_config *config, const mlp_data *train, const mlp_data *test,
                     int64_t batch, int64_t steps, mode_result *r) {
    eg_manual_seed(42);
    mlp_step_state s = {mlp_build(config), eg_adam_new(NULL), false};
    eg_function *f = m == MODE_GRAPH ? eg_function_new("train_step", mlp_step, 2, 2, &s) : NULL;
    double *times = malloc(sizeof *times * (size_t)steps);
    double *cpu_times = malloc(sizeof *cpu_times * (size_t)steps);
    int64_t *indices = malloc(sizeof *indices * (size_t)batch);
    bool ok = s.model && s.optimizer && times && cpu_times && indices && (m != MODE_GRAPH || f);
    uint64_t calls = 0;
    size_t peak = 0;
    eg_memory_trim(NULL);
    for (int64_t step = 0; step < steps && ok; step++) {
        int64_t start = (step * batch) % (train->n - batch + 1);
        for (int64_t i = 0; i < batch; i++) indices[i] = start + i;
        eg_scope_begin();
        eg_tensor *x, *y, *out[2] = {NULL, NULL};
        ok = mlp_batch(train, indices, batch, &x, &y) == EG_OK;
        eg_memory_stats before, after;
        eg_memory_reset_peak(NULL);
        eg_memory_stats_get(NULL, &before);
        double t0 = cli_seconds(), cpu0 = thread_cpu_seconds();
        eg_tensor *in[2] = {x, y};
        if (ok && m == MODE_EAGER) ok = mlp_step(in, out, &s) == EG_OK;
        if (ok && m == MODE_LAZY) {
            eg_lazy_begin();
            ok = mlp_step(in, out, &s) == EG_OK;
            eg_lazy_end();
        }
        if (ok && m == MODE_GRAPH) ok = eg_function_call(f, in, out) == EG_OK;
        if (ok) r->final_loss = eg_item(out[0]); /* reading the loss is part of every step */
        times[step] = cli_seconds() - t0;
        cpu_times[step] = thread_cpu_seconds() - cpu0;
        eg_memory_stats_get(NULL, &after);
        /* steady state only: the first steps create optimizer slots, traces and arenas */
        if (step >= 2) {
            calls += after.n_allocs - before.n_allocs;
            size_t step_peak = after.peak_bytes_in_use - before.bytes_in_use;
            if (m ==
                MODE_GRAPH) { /* the graph's activations live in its arena, held across calls */
                eg_function_stats fs;
                eg_function_stats_get(f, &fs);
                step_peak += fs.arena_bytes;
            }
            if (step_peak > peak) peak = step_peak;
        }
        eg_scope_end();
        ok = ok && eg_last_status() == EG_OK;
    }
    if (ok) {
        qsort(times, (size_t)steps, sizeof *times, compare_doubles);
        r->median_step_us = times[steps / 2] * 1e6;
        qsort(cpu_times, (size_t)steps, sizeof *cpu_times, compare_doubles);
        r->median_step_cpu_us = cpu_times[steps / 2] * 1e6;
        r->peak_step_bytes = peak;
        r->allocator_calls_per_step = steps > 2 ? (double)calls / (double)(steps - 2) : 0;
        eg_memory_stats stats;
        eg_memory_stats_get(NULL, &stats);
        r->reserved_bytes = stats.bytes_reserved;
        double loss;
        ok = mlp_evaluate(s.model, test, &r->test_accuracy, &loss) == EG_OK;
        if (f) eg_function_stats_get(f, &r->graph);
    }
    if (!ok) fprintf(stderr, "eagle bench modes (%s): %s\n", mode_names[m], eg_last_error());
    eg_function_free(f);
    eg_optimizer_free(s.optimizer);
    eg_model_free(s.model);
    free(times);
    free(cpu_times);
    free(indices);
    return ok;
}

static void print_help(void) {
    printf("usage: eagle bench modes [--hidden LIST] [--batch-size N] [--steps N] [--data DIR]\n"
           "                         [--threads N]\n"
           "\n"
           "Trains the same MLP on Fashion-MNIST for N steps (default 1875: one epoch of\n"
           "batches of 32) three times — eager, lazy and graph mode — and prints, per mode,\n"
           "the median step time (wall clock, and CPU time of the calling thread, which is\n"
           "the whole step with --threads 1 and does not grow with the machine's load), the\n"
           "peak memory a step uses, the memory reserved, the allocator calls per step and\n"
           "the test accuracy reached.\n");
}

int cli_bench(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "modes") != 0) {
        if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
            print_help();
            return CLI_OK;
        }
        return cli_usage_error("bench", "expects a benchmark name: modes");
    }
    enum { HIDDEN = 1000, BATCH, STEPS, DATA, THREADS, HELP };
    static const struct option options[] = {{"hidden", required_argument, NULL, HIDDEN},
                                            {"batch-size", required_argument, NULL, BATCH},
                                            {"steps", required_argument, NULL, STEPS},
                                            {"data", required_argument, NULL, DATA},
                                            {"threads", required_argument, NULL, THREADS},
                                            {"help", no_argument, NULL, HELP},
                                            {NULL, 0, NULL, 0}};
    mlp_config config = {1, {64}};
    long batch = 32, steps = 1875, threads = 0;
    const char *data_dir = NULL;
    optind = 1;
    opterr = 0;
    int option;
    argc--;
    argv++;
    while ((option = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        switch (option) {
        case HIDDEN:
            if (!mlp_parse_hidden(optarg, &config))
                return cli_usage_error("bench", "--hidden expects sizes like 64 or 512,512");
            break;
        case BATCH:
            if (!cli_parse_int("bench", "--batch-size", optarg, 1, 60000, &batch)) return CLI_USAGE;
            break;
        case STEPS:
            if (!cli_parse_int("bench", "--steps", optarg, 3, 1000000, &steps)) return CLI_USAGE;
            break;
        case DATA:
            data_dir = optarg;
            break;
        case THREADS:
            if (!cli_parse_int("bench", "--threads", optarg, 1, 256, &threads)) return CLI_USAGE;
            break;
        case 'h':
        case HELP:
            print_help();
            return CLI_OK;
        default:
            return cli_bad_option("bench", option, argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error("bench", "unexpected argument '%s'", argv[optind]);
    if (threads) eg_set_num_threads((int)threads);
    mlp_data train, test;
    if (!mlp_data_load(data_dir, true, 0, &train)) return CLI_FAILURE;
    if (!mlp_data_load(data_dir, false, 0, &test)) {
        mlp_data_free(&train);
        return CLI_FAILURE;
    }
    char hidden[128];
    mlp_format_hidden(&config, hidden, sizeof hidden);
    printf("eagle bench modes: MLP 784-%s-10, batch %ld, %ld steps, %d thread(s)\n"
           "(act. peak: peak activation memory of a steady-state step: the most memory it uses\n"
           " above what it started with (variables, optimizer slots and the batch are already\n"
           " there and the same in every mode), so forward activations kept for the backward\n"
           " pass, temporaries and gradients until their update; for graph mode plus its arena,\n"
           " which holds all of those and is kept between calls)\n",
           hidden, batch, steps, eg_get_num_threads());
    printf("%-6s %12s %12s %16s %16s %16s %10s %12s\n", "mode", "step (us)", "cpu (us)",
           "act. peak (KiB)", "reserved (KiB)", "alloc calls/step", "test acc", "last loss");
    mode_result results[N_MODES] = {0};
    int rc = CLI_OK;
    for (int m = 0; m < N_MODES; m++) {
        if (!run_mode((mode)m, &config, &train, &test, batch, steps, &results[m])) {
            rc = CLI_FAILURE;
            break;
        }
        const mode_result *r = &results[m];
        printf("%-6s %12.1f %12.1f %16.1f %16.1f %16.2f %10.4f %12.6f\n", mode_names[m],
               r->median_step_us, r->median_step_cpu_us, (double)r->peak_step_bytes / 1024.0,
               (double)r->reserved_bytes / 1024.0, r->allocator_calls_per_step, r->test_accuracy,
               r->final_loss);
        fflush(stdout);
    }
    if (rc == CLI_OK) {
        const eg_function_stats *g = &results[MODE_GRAPH].graph;
        printf("graph: %lld ops -> %lld kernels (%lld fused), arena %.1f KiB (unshared %.1f KiB, "
               "every op result %.1f KiB), %d trace(s), %llu arena allocation(s)\n",
               (long long)g->n_nodes, (long long)g->n_kernels, (long long)g->n_fused_nodes,
               (double)g->arena_bytes / 1024.0, (double)g->unplanned_bytes / 1024.0,
               (double)g->eager_bytes / 1024.0, g->n_traces,
               (unsigned long long)g->n_arena_allocations);
        printf("graph: %lld updates run as soon as their gradient was ready, %lld of them "
               "consuming it tile by tile (%.1f KiB of tiles); %lld common subexpressions "
               "merged; %lld results written in place\n",
               (long long)g->n_early_updates, (long long)g->n_tiled_updates,
               (double)g->scratch_bytes / 1024.0, (long long)g->n_cse_merged,
               (long long)g->n_in_place);
    }
    if (rc == CLI_OK)
        printf("graph/eager: step time %.2fx (cpu %.2fx), peak activation memory %.2fx; lazy/eager "
               "step time %.2fx (cpu %.2fx)\n",
               results[MODE_GRAPH].median_step_us / results[MODE_EAGER].median_step_us,
               results[MODE_GRAPH].median_step_cpu_us / results[MODE_EAGER].median_step_cpu_us,
               (double)results[MODE_GRAPH].peak_step_bytes /
                   (double)results[MODE_EAGER].peak_step_bytes,
               results[MODE_LAZY].median_step_us / results[MODE_EAGER].median_step_us,
               results[MODE_LAZY].median_step_cpu_us / results[MODE_EAGER].median_step_cpu_us);
    mlp_data_free(&train);
    mlp_data_free(&test);
    return rc;
}
