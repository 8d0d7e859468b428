/* eagle train: the seed example — Dense(64, relu) -> Dense(10), sparse categorical
 * cross-entropy from logits, Adam, batches of 32 — or the CNN of cnn.h on Fashion-MNIST, trained
 * by the library's eg_model_fit (eagle/fit.h): this file gives it the model, the input pipeline,
 * the test split as validation data and a callback for what the command adds (its progress
 * lines, a per-step seed, Ctrl-C, TensorBoard histograms, checkpoints that are rescued when
 * their path fails). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "approx_train.h"
#include "cli.h"
#include "cnn.h"
#include "mlp.h"
#include "pipeline.h"
#include "train_options.h"
#include "train_state.h"

/* The default generator's seed for update number `iteration`: what a step draws (dropout masks)
 * depends on the run's seed and the step only, so a resumed run draws what the uninterrupted one
 * did (splitmix64 of the pair). */
static uint64_t step_seed(uint64_t seed, int64_t iteration) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + (uint64_t)iteration * 0xD1B54A32D192ED03ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The strategy of the run: multi-worker (--distributed), mirrored (--replicas N) or alone. */
static eg_strategy *make_strategy(const train_options *o, const eg_device *device) {
    if (o->distributed) return eg_strategy_multi_worker_new(device, NULL);
    if (o->replicas > 1) return eg_strategy_mirrored_new((int)o->replicas, NULL, NULL);
    return eg_strategy_default_new();
}

/* TensorBoard: per-epoch scalars and weight histograms. */
/* optimizer: its loss scale and skipped steps are logged when it scales the loss. */
static eg_status log_epoch(eg_summary_writer *w, eg_model *model, const eg_optimizer *optimizer,
                           bool loss_scaling, int epoch, double train_loss, double train_accuracy,
                           double test_accuracy, double test_loss, double samples_per_second) {
    eg_memory_stats memory;
    eg_memory_stats_get(NULL, &memory);
    eg_status status = EG_OK;
    const char *tags[6] = {"epoch/train_loss",         "epoch/train_accuracy",
                           "epoch/test_accuracy",      "epoch/test_loss",
                           "epoch/samples_per_second", "epoch/memory_in_use_bytes"};
    double values[6] = {train_loss, train_accuracy,     test_accuracy,
                        test_loss,  samples_per_second, (double)memory.bytes_in_use};
    for (int i = 0; i < 6 && status == EG_OK; i++)
        status = eg_summary_scalar(w, tags[i], epoch, values[i]);
    if (status == EG_OK && loss_scaling)
        status =
            eg_summary_scalar(w, "epoch/loss_scale", epoch, eg_optimizer_loss_scale(optimizer));
    if (status == EG_OK && loss_scaling)
        status = eg_summary_scalar(w, "epoch/skipped_steps", epoch,
                                   (double)eg_optimizer_skipped_steps(optimizer));
    int n_vars;
    eg_tensor *const *vars = eg_model_trainable_variables(model, &n_vars);
    for (int i = 0; i < n_vars && status == EG_OK; i++)
        status = eg_summary_histogram(w, eg_variable_name(vars[i]), epoch, vars[i]);
    return status == EG_OK ? eg_summary_flush(w) : status;
}

/* Where a run stands: epochs completed, then the steps of the next epoch trained and the sums
 * behind its log so far (a run interrupted within an epoch). */
typedef struct run_position {
    long epochs_done;
    int64_t step;
    eg_metric_mean loss;
    double hits;
    int64_t samples;
} run_position;

/* What a checkpoint of this run records besides the model and the optimizer. */
typedef struct run_record {
    const train_options *o;
    double initial_rate;
    int64_t decay_steps;
    int64_t train_examples;
    const char *train_data; /* mlp_data_fingerprint */
} run_record;

static eg_status save_checkpoint(const char *path, eg_model *model, const eg_optimizer *optimizer,
                                 const run_record *r, const run_position *at) {
    const train_options *o = r->o;
    train_meta meta = {.model = o->model,
                       .learning_rate = r->initial_rate,
                       .decay_steps = r->decay_steps,
                       .batch_size = o->batch_size,
                       .seed = o->seed,
                       .train_examples = r->train_examples,
                       .epoch = at->epochs_done,
                       .epochs = o->epochs,
                       .augment = o->augment,
                       .has_loss_scale = o->precision == EG_POLICY_MIXED_FLOAT16,
                       .step = at->step,
                       .loss = at->loss,
                       .hits = at->hits,
                       .samples = at->samples};
    snprintf(meta.model_kind, sizeof meta.model_kind, "%s", o->model_kind);
    snprintf(meta.train_data, sizeof meta.train_data, "%s", r->train_data);
    snprintf(meta.precision, sizeof meta.precision, "%s", eg_policy_name(o->precision));
    return train_state_save(path, model, optimizer, &meta);
}

/* A file written for the run: a checkpoint or a profile trace. */
typedef struct output_file {
    const char *what; /* "checkpoint", "profile trace" */
    eg_status (*write)(const char *path, void *context);
    void *context;
} output_file;

typedef enum { WROTE, RESCUED, LOST } write_result;

/* Writes out to path; when that fails (the directory went away, the disk filled up, ...), to
 * "eagle-train-rescued-<pid>-<name of path>" in $TMPDIR, /tmp or the current directory, whichever
 * works first, so that hours of training are not lost to a typo or a full disk. *written gets the
 * path the file went to. A second Ctrl-C meanwhile waits for the write and then stops the
 * process, saying where the file is. */
static write_result write_or_rescue(const output_file *out, const char *path, char *written,
                                    size_t size) {
    snprintf(written, size, "%s", path);
    cli_write_begin();
    eg_status status = out->write(path, out->context);
    write_result result = WROTE;
    if (status != EG_OK) {
        fprintf(stderr, "eagle train: cannot write the %s to %s: %s\n", out->what, path,
                eg_last_status() != EG_OK ? eg_last_error() : eg_status_string(status));
        eg_clear_error();
        const char *slash = strrchr(path, '/');
        const char *name = slash ? slash + 1 : path;
        const char *tmpdir = getenv("TMPDIR");
        const char *places[3] = {tmpdir && *tmpdir ? tmpdir : "/tmp", "/tmp", "."};
        result = LOST;
        for (int i = 0; i < 3 && result == LOST; i++) {
            if (i == 1 && !strcmp(places[0], "/tmp")) continue;
            snprintf(written, size, "%s/eagle-train-rescued-%ld-%s", places[i], (long)getpid(),
                     name);
            if (out->write(written, out->context) == EG_OK) {
                result = RESCUED;
            } else {
                fprintf(stderr, "eagle train: cannot write it to %s either: %s\n", written,
                        eg_last_error());
                eg_clear_error();
            }
        }
        if (result == RESCUED)
            fprintf(stderr, "eagle train: the %s is saved to %s instead\n", out->what, written);
        else
            fprintf(stderr, "eagle train: the %s could not be written anywhere\n", out->what);
    }
    if (cli_write_end()) {
        fprintf(stderr, "eagle train: interrupted again: stopped%s%s\n",
                result == LOST ? "" : "; the file is ", result == LOST ? "" : written);
        fflush(stdout);
        _exit(CLI_INTERRUPTED); /* at once: no clean-up while the pipeline's threads still run */
    }
    return result;
}

typedef struct checkpoint_context {
    eg_model *model;
    const eg_optimizer *optimizer;
    const run_record *record;
    const run_position *at;
} checkpoint_context;

static eg_status write_checkpoint(const char *path, void *context) {
    const checkpoint_context *c = context;
    return save_checkpoint(path, c->model, c->optimizer, c->record, c->at);
}

static eg_status write_trace(const char *path, void *context) {
    (void)context;
    return eg_profiler_write_trace(path);
}

static double monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* EG_STARTUP_TIMING=1: one line on stderr when the first training step begins, with the
 * CLOCK_MONOTONIC time (so that a harness that noted the time before exec gets exec -> first
 * step: bench/startup/run.sh) and the milliseconds since `eagle train` began. */
static void report_first_step(double train_began_ns) {
    const char *on = getenv("EG_STARTUP_TIMING");
    if (!on || !*on || !strcmp(on, "0")) return;
    double now = monotonic_ns();
    struct rusage usage; /* CPU time tells the cost on a loaded machine, where wall time does not */
    getrusage(RUSAGE_SELF, &usage);
    double user_ms = (double)usage.ru_utime.tv_sec * 1e3 + (double)usage.ru_utime.tv_usec / 1e3;
    double cpu_ms = (double)(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e3 +
                    (double)(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e3;
    fprintf(stderr,
            "startup: first step begins at monotonic %.0f ns, %.1f ms after eagle train began, "
            "%.1f ms of CPU time since exec (%.1f user)\n",
            now, (now - train_began_ns) / 1e6, cpu_ms, user_ms);
}

/* The run is over after the first Ctrl-C: write the checkpoint of where it stands (unless the
 * last one written already is) and the profile, say how to go on. */
static int stop_interrupted(const train_options *o, const output_file *checkpoint,
                            const run_position *at, int64_t steps, bool already_saved) {
    char where[96], written[4096] = "";
    if (at->step > 0)
        snprintf(where, sizeof where, "in epoch %ld after step %lld of %lld", at->epochs_done + 1,
                 (long long)at->step, (long long)steps);
    else if (at->epochs_done > 0)
        snprintf(where, sizeof where, "after epoch %ld", at->epochs_done);
    else
        snprintf(where, sizeof where, "before the first step");
    write_result saved = LOST;
    if (o->save_path && already_saved) {
        saved = WROTE;
        snprintf(written, sizeof written, "%s", o->save_path);
    } else if (o->save_path) {
        saved = write_or_rescue(checkpoint, o->save_path, written, sizeof written);
    }
    if (!o->save_path)
        fprintf(stderr, "eagle train: interrupted %s; no checkpoint written (no --save given)\n",
                where);
    else if (saved == LOST)
        fprintf(stderr, "eagle train: interrupted %s; the checkpoint could not be written\n",
                where);
    else
        fprintf(stderr,
                "eagle train: interrupted %s; checkpoint saved to %s; resume with --resume %s\n",
                where, written, written);
    if (o->profile_path) {
        eg_profiler_stop();
        output_file trace = {"profile trace", write_trace, NULL};
        char trace_written[4096];
        if (write_or_rescue(&trace, o->profile_path, trace_written, sizeof trace_written) != LOST)
            printf("wrote profile trace %s\n", trace_written);
    }
    return CLI_INTERRUPTED;
}

/* What every replica's model and optimizer are made of: the run's model on the current device,
 * its policy, its optimizer (with loss scaling for mixed_float16). */
typedef struct build_context {
    const train_options *o;
    bool cnn, loss_scaling;
    int64_t decay_steps;
    double initial_rate;
} build_context;

static eg_status build_model(const build_context *b, eg_model **model, eg_optimizer **optimizer,
                             double *initial_rate) {
    *model = b->cnn ? cnn_build(b->o->sync_batch_norm) : mlp_build(&b->o->model);
    *optimizer = *model ? train_make_optimizer(b->o, b->decay_steps, initial_rate) : NULL;
    if (!*model || !*optimizer) return eg_last_status() ? eg_last_status() : EG_ERR_INTERNAL;
    /* Set on the built model: the variables stay f32 masters, the calls change dtype. */
    eg_status status = eg_model_set_policy(*model, b->o->precision);
    if (status == EG_OK && b->o->sample_fraction > 0)
        status = eg_model_set_gradient_sampling(*model, b->o->sample_fraction, false, 64, NULL);
    if (status == EG_OK && b->loss_scaling)
        status = eg_optimizer_enable_loss_scaling(*optimizer, NULL);
    return status;
}

/* fit's build_replica for --replicas N: replicas 1 .. N-1, each on its logical CPU device. */
static eg_status build_replica(int local_index, eg_model **model, eg_optimizer **optimizer,
                               void *user) {
    (void)local_index;
    double rate;
    eg_status status = build_model(user, model, optimizer, &rate);
    if (status != EG_OK) {
        eg_model_free(*model);
        eg_optimizer_free(*optimizer);
        *model = NULL;
        *optimizer = NULL;
    }
    return status;
}

/* Prints what this process's all-reduces cost over the run (eg_strategy_stats_get): their count
 * and bytes, the time they were in flight and how much of it the replicas waited for; nothing for
 * a single replica. */
static void print_strategy_stats(eg_strategy *strategy) {
    eg_strategy_stats stats;
    if (eg_strategy_num_replicas(strategy) < 2 ||
        eg_strategy_stats_get(strategy, &stats, false) != EG_OK || stats.all_reduces == 0)
        return;
    double hidden =
        stats.in_flight_seconds > 0 ? 1.0 - stats.exposed_seconds / stats.in_flight_seconds : 0.0;
    printf("all-reduce (this process): %lld reductions, %.1f MiB; in flight %.3f s, waited for "
           "%.3f s: %.0f%% hidden behind computation\n",
           (long long)stats.all_reduces, (double)stats.bytes / (1 << 20), stats.in_flight_seconds,
           stats.exposed_seconds, 100.0 * (hidden > 0 ? hidden : 0.0));
}

/* The test split as fit's validation data: (x, labels) batches of 1000 (500 for the CNN), x as
 * the training batches have it. NULL with the library's error. */
static eg_dataset *test_batches(const mlp_data *test, bool cnn) {
    int64_t *indices = malloc((size_t)(test->n ? test->n : 1) * sizeof *indices);
    if (!indices) return NULL;
    for (int64_t i = 0; i < test->n; i++) indices[i] = i;
    eg_dataset *batches = NULL;
    eg_scope_begin();
    eg_tensor *x = NULL, *y = NULL;
    if ((cnn ? cnn_batch : mlp_batch)(test, indices, test->n, &x, &y) == EG_OK)
        batches = eg_dataset_batch(eg_dataset_from_tensor_slices(2, (eg_tensor *[]){x, y}),
                                   cnn ? 500 : 1000, false);
    eg_scope_end();
    free(indices);
    return batches;
}

/* The run as fit's callbacks see it: the progress lines, the per-step seed, Ctrl-C, the epoch's
 * test line, TensorBoard, the per-epoch checkpoint. */
typedef struct run_context {
    train_options *o;
    eg_summary_writer *summary;
    bool loss_scaling;
    int64_t steps; /* batches per epoch */
    double train_began_ns;
    bool first_step_reported;
    cli_progress progress;
    double epoch_start, last_batch_end; /* cli_seconds */
    int64_t samples_before;             /* examples of the epoch trained by an earlier process */
    double train_seconds;
    int64_t samples_trained;
    long epochs_run;
    run_position *at;      /* where the run stands, what a save records */
    const mlp_data *train; /* --approx's shadow check reads its first batch */
    bool cnn, shadow;
    const output_file *checkpoint;
    bool interrupted, save_failed, saved_here;
} run_context;

static eg_status on_epoch_begin(eg_fit_state *state, int epoch, void *user) {
    run_context *r = user;
    eg_fit_progress p;
    eg_fit_state_progress(state, &p);
    cli_progress_begin(&r->progress, epoch + 1, (int)r->o->epochs, r->steps);
    r->samples_before = (int64_t)p.loss.count;
    if (p.step > 0) cli_progress_continue(&r->progress, p.step, r->samples_before);
    r->epoch_start = r->last_batch_end = cli_seconds();
    return EG_OK;
}

static eg_status on_batch_begin(eg_fit_state *state, int64_t batch, void *user) {
    (void)batch;
    run_context *r = user;
    if (!r->first_step_reported) report_first_step(r->train_began_ns);
    r->first_step_reported = true;
    eg_manual_seed(step_seed(r->o->seed, eg_optimizer_iterations(eg_fit_state_optimizer(state))));
    return EG_OK;
}

/* Where the run stands after the batch fit reported last. */
static run_position position_of(const eg_fit_progress *p) {
    return (run_position){p->epoch, p->step, p->loss, p->accuracy.total, (int64_t)p->loss.count};
}

static eg_status on_batch_end(eg_fit_state *state, int64_t batch, const eg_logs *logs, void *user) {
    run_context *r = user;
    eg_fit_progress p;
    eg_fit_state_progress(state, &p);
    double loss = 0, accuracy = 0;
    eg_logs_get(logs, "loss", &loss);
    eg_logs_get(logs, "accuracy", &accuracy);
    cli_progress_update(&r->progress, batch + 1, (int64_t)p.loss.count, loss, accuracy);
    r->last_batch_end = cli_seconds();
    /* the epoch's line now: its time is the training's, without the validation after it */
    if (p.step == r->steps) cli_progress_end(&r->progress, (int64_t)p.loss.count, loss, accuracy);
    r->saved_here = false;
    /* Checked between steps: the state is whole here. Several processes agree on the step to
     * stop after (fit carries the request with the next step's sums). */
    if (cli_interrupted()) {
        r->interrupted = true;
        eg_fit_state_stop(state);
    }
    *r->at = position_of(&p);
    return EG_OK;
}

static eg_status on_epoch_end(eg_fit_state *state, int epoch, const eg_logs *logs, void *user) {
    run_context *r = user;
    eg_fit_progress p;
    eg_fit_state_progress(state, &p);
    if (p.step < r->steps) return EG_OK; /* stopped within the epoch: it is not over */
    double loss = 0, accuracy = 0, test_loss = 0, test_accuracy = 0;
    eg_logs_get(logs, "loss", &loss);
    eg_logs_get(logs, "accuracy", &accuracy);
    eg_logs_get(logs, "val_loss", &test_loss);
    eg_logs_get(logs, "val_accuracy", &test_accuracy);
    int64_t seen = (int64_t)p.loss.count;
    double epoch_seconds = r->last_batch_end - r->epoch_start;
    r->train_seconds += epoch_seconds;
    r->samples_trained += seen - r->samples_before;
    printf("  test accuracy %.4f  test loss %.4f\n", test_accuracy, test_loss);
    eg_status status = EG_OK;
    if (r->shadow)
        status = approx_train_shadow(eg_fit_state_model(state), r->train, r->cnn, r->o->batch_size,
                                     step_seed(r->o->seed, -1 - epoch));
    eg_optimizer *optimizer = eg_fit_state_optimizer(state);
    if (r->loss_scaling)
        printf("  loss scale %g, %lld step(s) skipped for inf/NaN gradients so far\n",
               eg_optimizer_loss_scale(optimizer),
               (long long)eg_optimizer_skipped_steps(optimizer));
    if (status == EG_OK && r->summary)
        status =
            log_epoch(r->summary, eg_fit_state_model(state), optimizer, r->loss_scaling, epoch + 1,
                      loss, accuracy, test_accuracy, test_loss,
                      epoch_seconds > 0 ? (double)(seen - r->samples_before) / epoch_seconds : 0);
    r->epochs_run++;
    *r->at = (run_position){.epochs_done = epoch + 1};
    if (status == EG_OK && r->o->save_every_epoch) {
        char written[4096];
        write_result saved =
            write_or_rescue(r->checkpoint, r->o->save_path, written, sizeof written);
        r->save_failed = saved != WROTE;
        r->saved_here = saved == WROTE; /* a rescued one is written again on Ctrl-C */
        if (saved != LOST) printf("  saved checkpoint %s\n", written);
    }
    fflush(stdout);
    if (cli_interrupted()) {
        r->interrupted = true;
        eg_fit_state_stop(state);
    }
    return status;
}

int cli_train(int argc, char **argv) {
    if (cli_wants_model(argc, argv, "charlm")) return cli_train_charlm(argc, argv);
    if (cli_wants_model(argc, argv, "g2p")) return cli_train_g2p(argc, argv);
    double train_began_ns = monotonic_ns();
    train_options o;
    int parsed = train_parse_options(argc, argv, &o);
    if (parsed != CLI_OK) return parsed < 0 ? CLI_OK : parsed;
    /* Before any work: a run must not end with its result unwritable (--logdir is opened before
     * training too). */
    if ((o.save_path && !cli_check_output_path("train", "--save", o.save_path)) ||
        (o.profile_path && !cli_check_output_path("train", "--profile", o.profile_path)))
        return CLI_FAILURE;
    eg_safetensors *resume = NULL;
    train_meta resumed = {0};
    if (o.resume_path) {
        resume = eg_safetensors_open(o.resume_path);
        if (!resume) {
            fprintf(stderr, "eagle train: %s\n", eg_last_error());
            return CLI_FAILURE;
        }
        parsed = train_state_read_meta(resume, o.resume_path, &resumed)
                     ? train_adopt_settings(&o, &resumed)
                     : CLI_FAILURE;
        if (parsed != CLI_OK) {
            eg_safetensors_close(resume);
            return parsed;
        }
    }
    if (o.threads) eg_set_num_threads((int)o.threads);
    if (o.replicas > 1 && eg_device_configure_cpus((int)o.replicas) != EG_OK) {
        fprintf(stderr, "eagle train: %s\n", eg_last_error());
        eg_safetensors_close(resume);
        return CLI_FAILURE;
    }
    eg_manual_seed(o.seed);
    /* Named before the data is read: a missing GPU is reported at once. */
    const eg_device *train_device = NULL;
    if (o.device && !(train_device = eg_device_get(o.device))) {
        fprintf(stderr, "eagle train: %s\n", eg_last_error());
        eg_safetensors_close(resume);
        return CLI_FAILURE;
    }

    mlp_data train = {0}, test = {0};
    eg_strategy *strategy = NULL;
    eg_dataset *batches = NULL, *validation = NULL;
    eg_summary_writer *summary = NULL;
    eg_model *model = NULL;
    eg_optimizer *optimizer = NULL;
    eg_history *history = NULL;
    bool cnn = !strcmp(o.model_kind, "cnn");
    int rc = CLI_FAILURE;
    bool in_device_scope = false;
    /* the data's own errors are printed where they are found, once */
    if (!mlp_data_load(o.data_dir, true, o.limit, &train) ||
        !mlp_data_load(o.data_dir, false, o.test_limit, &test)) {
        eg_clear_error();
        goto done;
    }
    if (resume && train.n != resumed.train_examples) {
        fprintf(stderr,
                "eagle train: %s was trained on %lld examples, this run has %lld (use the same "
                "--limit)\n",
                o.resume_path, (long long)resumed.train_examples, (long long)train.n);
        goto done;
    }
    char train_data[24] = "";
    if ((o.save_path || resume) && !mlp_data_fingerprint(&train, train_data, sizeof train_data))
        goto done;
    if (resume && resumed.train_data[0] && strcmp(resumed.train_data, train_data)) {
        fprintf(stderr,
                "eagle train: %s was trained on other examples than this run's (data fingerprint "
                "%s, now %s; use the same --data and --limit)\n",
                o.resume_path, resumed.train_data, train_data);
        goto done;
    }
    int64_t steps = (train.n + o.batch_size - 1) / o.batch_size;
    if (resume && (resumed.step > steps || resumed.samples > train.n)) {
        fprintf(stderr,
                "eagle train: %s: eagle.step %lld is past the end of an epoch (%lld steps)\n",
                o.resume_path, (long long)resumed.step, (long long)steps);
        goto done;
    }
    /* The CNN's rate decays over the whole run (--epochs), also across --stop-after/--resume. */
    int64_t decay_steps = cnn ? o.epochs * steps : 0;
    if (o.resume_path && resumed.decay_steps != decay_steps)
        printf("note: the learning-rate schedule of %s spanned %lld steps; it now spans %lld\n",
               o.resume_path, (long long)resumed.decay_steps, (long long)decay_steps);
    if (train_device) {
        if (eg_device_scope_begin(train_device) != EG_OK) goto done;
        in_device_scope = true;
    }
    bool loss_scaling = o.precision == EG_POLICY_MIXED_FLOAT16;
    build_context build = {&o, cnn, loss_scaling, decay_steps, 0};
    if (!(strategy = make_strategy(&o, train_device))) goto done;
    if (eg_strategy_num_local_replicas(strategy) > 1)
        eg_device_scope_begin(eg_strategy_device(strategy, 0));
    eg_status built = build_model(&build, &model, &optimizer, &build.initial_rate);
    if (built == EG_OK && eg_strategy_is_chief(strategy)) approx_train_describe(model);
    if (eg_strategy_num_local_replicas(strategy) > 1) eg_device_scope_end();
    eg_execution_mode mode = !strcmp(o.mode, "graph")  ? EG_EXECUTION_GRAPH
                             : !strcmp(o.mode, "lazy") ? EG_EXECUTION_LAZY
                                                       : EG_EXECUTION_EAGER;
    if (built != EG_OK ||
        eg_model_compile(model, optimizer,
                         &(eg_compile_options){.loss = EG_FIT_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY,
                                               .from_logits = true,
                                               .accuracy = true,
                                               .mode = mode}) != EG_OK)
        goto done;
    bool chief = eg_strategy_is_chief(strategy);
    int n_replicas = eg_strategy_num_replicas(strategy);
    if (!chief) { /* rank 0 alone prints, logs and saves */
        if (!freopen("/dev/null", "w", stdout)) goto done;
        o.save_path = o.logdir = o.profile_path = NULL;
        o.save_every_epoch = false;
    }
    if (o.logdir && !(summary = eg_summary_writer_new(o.logdir))) goto done;
    if (resume) { /* replica 0 from the checkpoint; fit gives the others its state */
        if (train_state_restore(resume, model, optimizer, &resumed) != EG_OK) goto done;
        eg_safetensors_close(resume);
        resume = NULL;
    }
    if (n_replicas > 1)
        printf("%s strategy: %d replicas (%s), global batch %ld split among them\n",
               eg_strategy_name(strategy), n_replicas,
               o.distributed ? "one per MPI process" : "one per logical CPU device", o.batch_size);
    printf("eagle %s: %lld training / %lld test examples, %d thread(s), %s, optimizer %s%s, %s "
           "mode%s%s%s%s\n",
           eg_version(), (long long)train.n, (long long)test.n, eg_get_num_threads(), o.model_kind,
           eg_optimizer_name(optimizer), decay_steps > 0 ? " (cosine decay)" : "", o.mode,
           o.augment ? ", random flips and crops" : "",
           o.precision != EG_POLICY_FLOAT32 ? ", precision " : "",
           o.precision != EG_POLICY_FLOAT32 ? eg_policy_name(o.precision) : "",
           loss_scaling ? " (dynamic loss scale)" : "");
    if (o.resume_path && resumed.step > 0)
        printf("resumed from %s in epoch %ld after step %lld (%lld steps)\n", o.resume_path,
               resumed.epoch + 1, (long long)resumed.step, (long long)resumed.iterations);
    else if (o.resume_path)
        printf("resumed from %s after epoch %ld (%lld steps)\n", o.resume_path, resumed.epoch,
               (long long)resumed.iterations);
    eg_model_summary(model, stdout);

    long epochs_done = o.resume_path ? resumed.epoch : 0;
    int64_t first_step = o.resume_path ? resumed.step : 0;
    run_record record = {&o, build.initial_rate, decay_steps, train.n, train_data};
    /* Where the run stands, what a save records: the checkpoint's position until a step is run. */
    run_position at = {epochs_done, first_step, resumed.loss, resumed.hits, resumed.samples};
    checkpoint_context checkpoint_state = {model, optimizer, &record, &at};
    output_file checkpoint = {"checkpoint", write_checkpoint, &checkpoint_state};
    if (o.profile_path &&
        eg_profiler_start(EG_PROFILE_OPS | EG_PROFILE_TRACE |
                          (o.profile_cpu_time ? EG_PROFILE_CPU_TIME : 0)) != EG_OK)
        goto done;
    /* Batches in train.c's historical order (cli_shuffle_order): results do not depend on
     * whether the pipeline or the step loop made them. fit takes one iterator per epoch. */
    batches = cli_training_pipeline_from(&train, o.batch_size, o.seed, o.augment, cnn,
                                         (int)epochs_done + 1, first_step);
    if (!batches || !(validation = test_batches(&test, cnn))) goto done;
    long last_epoch = o.stop_after && o.stop_after < o.epochs ? o.stop_after : o.epochs;
    run_context run = {.o = &o,
                       .summary = summary,
                       .loss_scaling = loss_scaling,
                       .steps = steps,
                       .train_began_ns = train_began_ns,
                       .at = &at,
                       .checkpoint = &checkpoint,
                       .train = &train,
                       .cnn = cnn,
                       /* one replica: the others' shadows would repeat it */
                       .shadow = o.sample_fraction > 0 && eg_strategy_num_replicas(strategy) == 1};
    eg_callback callback = {.name = "eagle train",
                            .user = &run,
                            .epoch_begin = on_epoch_begin,
                            .batch_begin = on_batch_begin,
                            .batch_end = on_batch_end,
                            .epoch_end = on_epoch_end};
    eg_callback *callbacks[1] = {&callback};
    eg_fit_options fit = eg_fit_options_default();
    fit.verbose = 0; /* the progress lines are the callback's */
    fit.epochs = (int)(last_epoch - epochs_done);
    fit.initial_epoch = (int)epochs_done;
    fit.validation_data = validation;
    fit.steps_per_epoch = steps;
    fit.n_callbacks = 1;
    fit.callbacks = callbacks;
    fit.strategy = strategy;
    fit.build_replica = build_replica;
    fit.build_replica_user = &build;
    if (first_step > 0) {
        fit.initial_step = first_step;
        fit.initial_progress = (eg_fit_progress){
            .epoch = (int)epochs_done,
            .step = first_step,
            .loss = resumed.loss,
            .accuracy = {.total = resumed.hits, .count = (double)resumed.samples}};
    }
    /* From here a Ctrl-C stops the run at the next step and saves it (before, nothing is lost). */
    cli_interrupt_install();
    if (fit.epochs > 0 && !(history = eg_model_fit(model, batches, &fit))) goto done;
    if (run.interrupted) {
        rc = stop_interrupted(&o, &checkpoint, &at, steps, run.saved_here);
        goto done;
    }
    printf("trained %ld epoch(s) in %.2f s: %.0f samples/s\n", run.epochs_run, run.train_seconds,
           run.train_seconds > 0 ? (double)run.samples_trained / run.train_seconds : 0.0);
    print_strategy_stats(strategy);
    char written[4096];
    bool save_failed = run.save_failed;
    if (o.save_path && !(o.save_every_epoch && run.epochs_run > 0)) {
        write_result saved = write_or_rescue(&checkpoint, o.save_path, written, sizeof written);
        save_failed = saved != WROTE;
        if (saved != LOST) printf("saved checkpoint to %s\n", written);
    }
    if (o.profile_path) {
        eg_profiler_stop();
        if (eg_profiler_report(stdout, 0) != EG_OK) goto done;
        output_file trace = {"profile trace", write_trace, NULL};
        write_result wrote = write_or_rescue(&trace, o.profile_path, written, sizeof written);
        save_failed |= wrote != WROTE;
        if (wrote != LOST) printf("wrote profile trace %s\n", written);
    }
    eg_function_stats fs;
    if (mode == EG_EXECUTION_GRAPH && eg_model_train_step_stats(model, &fs) == EG_OK)
        printf("graph: %d trace(s), %lld ops in %lld kernels, arena %.1f KiB%s%s\n", fs.n_traces,
               (long long)fs.n_nodes, (long long)fs.n_kernels, (double)fs.arena_bytes / 1024.0,
               fs.retrace_warning[0] ? "\nwarning: " : "", fs.retrace_warning);
    char report[1024];
    if (eg_memory_format_stats(NULL, report, sizeof report) == EG_OK) printf("%s\n", report);
    rc = save_failed ? CLI_FAILURE : CLI_OK;
done:
    if (eg_profiler_flags()) eg_profiler_stop();
    eg_history_free(history);
    eg_dataset_free(batches);
    eg_dataset_free(validation);
    eg_summary_writer_free(summary);
    if (rc != CLI_OK && rc != CLI_INTERRUPTED && eg_last_status() != EG_OK)
        fprintf(stderr, "eagle train: %s\n", eg_last_error());
    eg_safetensors_close(resume);
    eg_model_free(model);
    eg_optimizer_free(optimizer);
    eg_strategy_free(strategy);
    if (in_device_scope) eg_device_scope_end();
    mlp_data_free(&train);
    mlp_data_free(&test);
    return rc;
}
