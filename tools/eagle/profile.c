/* eagle profile: runs training steps of the MLP on synthetic data under the profiler and prints
 * where a step's time goes, op by op; optionally writes a Chrome trace. Needs no data set. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "mlp.h"

typedef struct profile_options {
    const char *trace_path;
    bool cpu_time;
    mlp_config model;
    long batch_size, steps, warmup, threads;
    unsigned long long seed;
} profile_options;

static void print_help(void) {
    printf("usage: eagle profile [options]\n"
           "\n"
           "Runs training steps of the MLP (784 inputs, Adam, sparse categorical cross-entropy)\n"
           "on random data under the profiler and prints, per op: calls, total and mean time, and\n"
           "its share of the time in ops and of a step. Ranges mark each step's phases.\n"
           "\n"
           "options:\n"
           "  --hidden LIST        hidden layer sizes, e.g. 64 or 512,512 (default 64)\n"
           "  --batch-size N       examples per step (default 32)\n"
           "  --steps N            profiled steps (default 20)\n"
           "  --warmup N           unprofiled steps first (default 2)\n"
           "  --threads N          CPU threads (default EG_NUM_THREADS or the core count)\n"
           "  --seed N             initialisation and data seed (default 42)\n"
           "  --trace FILE         also write a Chrome trace (open in https://ui.perfetto.dev)\n"
           "  --cpu-time           time ops and ranges by this thread's CPU time, not the wall\n"
           "                       clock: steady on a busy machine (use with --threads 1)\n"
           "  --help               this text\n");
}

static int parse_options(int argc, char **argv, profile_options *o) {
    enum { HIDDEN = 1000, BATCH, STEPS, WARMUP, THREADS, SEED, TRACE, CPU_TIME, HELP };
    static const struct option options[] = {{"hidden", required_argument, NULL, HIDDEN},
                                            {"batch-size", required_argument, NULL, BATCH},
                                            {"steps", required_argument, NULL, STEPS},
                                            {"warmup", required_argument, NULL, WARMUP},
                                            {"threads", required_argument, NULL, THREADS},
                                            {"seed", required_argument, NULL, SEED},
                                            {"trace", required_argument, NULL, TRACE},
                                            {"cpu-time", no_argument, NULL, CPU_TIME},
                                            {"help", no_argument, NULL, HELP},
                                            {NULL, 0, NULL, 0}};
    *o = (profile_options){
        .model = {1, {64}}, .batch_size = 32, .steps = 20, .warmup = 2, .seed = 42};
    optind = 1;
    opterr = 0;
    int option;
    long value;
    while ((option = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        switch (option) {
        case HIDDEN:
            if (!mlp_parse_hidden(optarg, &o->model))
                return cli_usage_error(
                    "profile", "--hidden expects sizes like 64 or 512,512, got '%s'", optarg);
            break;
        case BATCH:
            if (!cli_parse_int("profile", "--batch-size", optarg, 1, 1 << 20, &o->batch_size))
                return CLI_USAGE;
            break;
        case STEPS:
            if (!cli_parse_int("profile", "--steps", optarg, 1, 1000000, &o->steps))
                return CLI_USAGE;
            break;
        case WARMUP:
            if (!cli_parse_int("profile", "--warmup", optarg, 0, 1000000, &o->warmup))
                return CLI_USAGE;
            break;
        case THREADS:
            if (!cli_parse_int("profile", "--threads", optarg, 1, 256, &o->threads))
                return CLI_USAGE;
            break;
        case SEED:
            if (!cli_parse_int("profile", "--seed", optarg, 0, 0x7fffffffL, &value))
                return CLI_USAGE;
            o->seed = (unsigned long long)value;
            break;
        case TRACE:
            o->trace_path = optarg;
            break;
        case CPU_TIME:
            o->cpu_time = true;
            break;
        case 'h':
        case HELP:
            print_help();
            return -1;
        default:
            return cli_bad_option("profile", option, argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error("profile", "unexpected argument '%s'", argv[optind]);
    return CLI_OK;
}

/* A batch of random images (n, 784) in [0, 1) and labels (n,) u8 in [0, 10), owned by the
 * current scope. */
static eg_status synthetic_batch(eg_generator *generator, int64_t n, eg_tensor **x,
                                 eg_tensor **labels) {
    int64_t shape[2] = {n, 784};
    *x = eg_random_uniform(generator, EG_DTYPE_F32, 2, shape, 0.0, 1.0);
    /* floor of uniform [0, 10): casting to u8 truncates */
    *labels = eg_cast(eg_random_uniform(generator, EG_DTYPE_F32, 1, &n, 0.0, 9.999), EG_DTYPE_U8);
    return *x && *labels ? EG_OK : eg_last_status();
}

/* The step of `eagle train` (forward, loss, tape gradient, optimizer update, accuracy) on a
 * synthetic batch, with its phases marked as profiler ranges. */
static eg_status profile_step(eg_model *model, eg_optimizer *optimizer, eg_generator *generator,
                              int64_t n, double *loss_out) {
    eg_profiler_range_push("step");
    eg_scope_begin();
    eg_tensor *x, *y;
    eg_profiler_range_push("data");
    eg_status status = synthetic_batch(generator, n, &x, &y);
    eg_profiler_range_pop();
    if (status == EG_OK) {
        eg_tensor *in[2] = {x, y};
        eg_tensor *out[2] = {NULL, NULL};
        mlp_step_state state = {model, optimizer, false};
        status = mlp_step(in, out, &state);
        eg_profiler_range_push("metrics");
        if (status == EG_OK) *loss_out = eg_item(out[0]);
        eg_profiler_range_pop();
    }
    eg_scope_end();
    eg_profiler_range_pop();
    return status == EG_OK ? eg_last_status() : status;
}

int cli_profile(int argc, char **argv) {
    profile_options o;
    int parsed = parse_options(argc, argv, &o);
    if (parsed != CLI_OK) return parsed < 0 ? CLI_OK : parsed;
    if (o.threads) eg_set_num_threads((int)o.threads);
    eg_manual_seed(o.seed);
    eg_model *model = mlp_build(&o.model);
    eg_adam_options adam = eg_adam_options_default();
    eg_optimizer *optimizer = model ? eg_adam_new(&adam) : NULL;
    eg_generator *generator = eg_generator_new(o.seed + 1);
    int rc = CLI_FAILURE;
    bool profiling = false;
    if (!model || !optimizer || !generator) goto done;
    char hidden[128];
    mlp_format_hidden(&o.model, hidden, sizeof hidden);
    printf("eagle %s profile: MLP 784-%s-10, batch %ld, %ld step(s) after %ld warmup, %d "
           "thread(s)\n",
           eg_version(), hidden, o.batch_size, o.steps, o.warmup, eg_get_num_threads());
    double loss = 0;
    double warmup_seconds = cli_seconds();
    for (long step = 0; step < o.warmup; step++)
        if (profile_step(model, optimizer, generator, o.batch_size, &loss) != EG_OK) goto done;
    warmup_seconds = cli_seconds() - warmup_seconds;

    unsigned flags = EG_PROFILE_OPS | (o.trace_path ? EG_PROFILE_TRACE : 0) |
                     (o.cpu_time ? EG_PROFILE_CPU_TIME : 0);
    if (eg_profiler_start(flags) != EG_OK) goto done;
    profiling = true;
    double seconds = cli_seconds();
    for (long step = 0; step < o.steps; step++)
        if (profile_step(model, optimizer, generator, o.batch_size, &loss) != EG_OK) goto done;
    seconds = cli_seconds() - seconds;
    eg_profiler_stop();
    profiling = false;
    double step_seconds = seconds / (double)o.steps;
    printf("%ld step(s) in %.3f s: %.3f ms/step (%.3f ms/step unprofiled in warmup), %.0f "
           "samples/s, loss %.4f\n\n",
           o.steps, seconds, step_seconds * 1e3,
           o.warmup ? warmup_seconds / (double)o.warmup * 1e3 : 0.0,
           (double)(o.steps * o.batch_size) / seconds, loss);
    if (eg_profiler_report(stdout, step_seconds) != EG_OK) goto done;
    if (o.trace_path) {
        if (eg_profiler_write_trace(o.trace_path) != EG_OK) goto done;
        eg_profiler_summary summary;
        eg_profiler_stats(&summary, NULL, 0, NULL);
        printf("\nwrote %s (%llu events; open it in https://ui.perfetto.dev)\n", o.trace_path,
               (unsigned long long)summary.trace_events);
    }
    rc = CLI_OK;
done:
    if (profiling) eg_profiler_stop();
    if (rc != CLI_OK) fprintf(stderr, "eagle profile: %s\n", eg_last_error());
    eg_generator_free(generator);
    eg_optimizer_free(optimizer);
    eg_model_free(model);
    return rc;
}
