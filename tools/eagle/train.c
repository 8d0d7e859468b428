/* eagle train: the seed example — Dense(64, relu) -> Dense(10), sparse categorical
 * cross-entropy from logits, Adam, batches of 32 — or the CNN of cnn.h on Fashion-MNIST. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "cnn.h"
#include "mlp.h"
#include "pipeline.h"
#include "replicas.h"
#include "train_state.h"

/* Options that --resume takes from the checkpoint unless given (then they must agree). */
enum {
    GIVEN_HIDDEN = 1,
    GIVEN_OPTIMIZER = 2,
    GIVEN_LR = 4,
    GIVEN_BATCH = 8,
    GIVEN_SEED = 16,
    GIVEN_MODEL = 32,
    GIVEN_EPOCHS = 64,
    GIVEN_PRECISION = 128
};

typedef struct train_options {
    const char *data_dir;
    const char *save_path;
    const char *resume_path;
    bool save_every_epoch;
    const char *optimizer;
    const char *model_kind; /* "mlp" or "cnn" */
    mlp_config model;
    long epochs, batch_size, threads, limit, test_limit;
    long stop_after; /* end after this epoch (0: run to --epochs) */
    unsigned long long seed;
    double learning_rate;     /* < 0: the optimizer's Keras default */
    unsigned given;           /* GIVEN_* bits */
    const char *mode;         /* eager, lazy or graph */
    const char *logdir;       /* TensorBoard event files, or NULL */
    const char *profile_path; /* Chrome trace, or NULL */
    bool profile_cpu_time;    /* the per-op table in thread CPU time */
    bool augment;             /* random flips and crops of the training images */
    const char *device;       /* --device: where the model trains (NULL: the host) */
    eg_policy precision;      /* --precision */
    long replicas;            /* --replicas: mirrored over this many logical CPU devices */
    bool distributed;         /* --distributed: one replica per MPI process */
    bool sync_batch_norm;     /* --sync-batch-norm: the CNN's statistics over every replica */
} train_options;

static void print_help(void) {
    printf(
        "usage: eagle train [options]\n"
        "\n"
        "Trains a model on Fashion-MNIST and reports test accuracy after each epoch.\n"
        "The MLP's defaults reproduce TensorFlow's eager example: Dense(64, relu) ->\n"
        "Dense(10), Adam, batches of 32. The CNN: two blocks of two 3x3 convolutions with\n"
        "batch normalization and ReLU, max pooling and dropout, then Dense(256) and\n"
        "Dense(10); Adam with a cosine-decaying learning rate, batches of 64.\n"
        "\n"
        "options:\n"
        "  --model NAME         mlp (default) or cnn\n"
        "  --data DIR           data directory (default " EG_FASHION_MNIST_DIR ")\n"
        "  --hidden LIST        the MLP's hidden layer sizes, e.g. 64 or 512,512 (default 64)\n"
        "  --epochs N           passes over the training set (default: mlp 5, cnn %d)\n"
        "  --batch-size N       examples per step (default: mlp 32, cnn %d)\n"
        "  --learning-rate X    (default: the optimizer's Keras default); the CNN's decays\n"
        "                       from it to 0 along a cosine over the run\n"
        "  --optimizer NAME     adam, adamw, sgd or rmsprop (default adam)\n"
        "  --threads N          CPU threads (default EG_NUM_THREADS or the core count)\n"
        "  --seed N             initialisation and shuffling seed (default 42)\n"
        "  --limit N            train on the first N examples only\n"
        "  --test-limit N       evaluate on the first N test examples only\n"
        "  --save FILE          write a checkpoint at the end: the weights (which 'eagle eval'\n"
        "                       reads), the optimizer's state and the run's settings. Its\n"
        "                       directory is checked before training; should the write still\n"
        "                       fail, the checkpoint goes to eagle-train-rescued-PID-NAME in\n"
        "                       $TMPDIR, /tmp or the current directory (the same for --profile)\n"
        "  --save-every-epoch   also write the --save checkpoint after every epoch\n"
        "  --stop-after N       end the run after epoch N as if interrupted there; --resume\n"
        "                       continues it (the learning-rate schedule spans --epochs)\n"
        "  --resume FILE        continue the run saved in FILE where it stopped, up to\n"
        "                       --epochs in all (default: the saved run's); model, optimizer,\n"
        "                       learning rate, batch size, seed and --augment come from FILE\n"
        "                       (flags given must agree), --data and --limit must give the same\n"
        "                       training examples. The losses are exactly those of the\n"
        "                       uninterrupted run\n"
        "  --precision POLICY   float32 (default), mixed_bfloat16 or mixed_float16: layers\n"
        "                       compute in bf16 / f16 from f32 master weights (losses and\n"
        "                       batch normalization stay f32); mixed_float16 scales the loss\n"
        "                       dynamically (from 2^15; halved and the step skipped on inf/NaN\n"
        "                       gradients, doubled after 2000 finite steps)\n"
        "  --mode MODE          eager (default), lazy or graph: the same step run op by op,\n"
        "                       lazily (fused, memory on demand) or traced once and replayed\n"
        "  --device NAME        where the model trains: cpu (default), cuda or cuda:N\n"
        "  --replicas N         data parallel over N logical CPU devices of this process (the\n"
        "                       mirrored strategy): each replica trains on its share of every\n"
        "                       batch and the gradients are summed\n"
        "  --distributed        data parallel over the processes of an MPI job, one replica\n"
        "                       each (mpirun -np N eagle train --distributed ...); rank 0 prints\n"
        "                       and saves\n"
        "  --sync-batch-norm    the CNN's batch normalizations use the mean and variance of the\n"
        "                       whole global batch (all replicas') while training, not each\n"
        "                       replica's share\n"
        "  --augment            random horizontal flips and padded crops of training images\n"
        "  --logdir DIR         write TensorBoard scalars and weight histograms to DIR\n"
        "  --profile FILE       time every op; print the per-op table and write a Chrome trace\n"
        "  --profile-cpu-time   the table in this thread's CPU time rather than wall time\n"
        "                       (steady on a busy machine; pool workers' shares left out)\n"
        "  --help               this text\n"
        "\n"
        "Ctrl-C stops the run after the current step, writes the --save checkpoint (which\n"
        "--resume continues from that step, in the middle of the epoch) and exits with status\n"
        "130; a second Ctrl-C stops at once (after a file being written is complete).\n",
        CNN_DEFAULT_EPOCHS, CNN_DEFAULT_BATCH_SIZE);
}

/* The CNN's own defaults for what was not given; --hidden is the MLP's only. */
static int apply_model_defaults(train_options *o) {
    if (strcmp(o->model_kind, "cnn")) return CLI_OK;
    if (o->given & GIVEN_HIDDEN)
        return cli_usage_error("train", "--hidden sets the MLP's layers; --model cnn has its own");
    if (!(o->given & GIVEN_EPOCHS)) o->epochs = CNN_DEFAULT_EPOCHS;
    if (!(o->given & GIVEN_BATCH)) o->batch_size = CNN_DEFAULT_BATCH_SIZE;
    return CLI_OK;
}

static int parse_options(int argc, char **argv, train_options *o) {
    enum {
        DATA = 1000,
        HIDDEN,
        EPOCHS,
        BATCH,
        LR,
        OPTIMIZER,
        THREADS,
        SEED,
        LIMIT,
        SAVE,
        SAVE_EVERY_EPOCH,
        RESUME,
        MODE,
        LOGDIR,
        PROFILE,
        PROFILE_CPU_TIME,
        AUGMENT,
        MODEL,
        TEST_LIMIT,
        STOP_AFTER,
        DEVICE,
        PRECISION,
        REPLICAS,
        DISTRIBUTED,
        SYNC_BATCH_NORM,
        HELP
    };
    static const struct option options[] = {
        {"data", required_argument, NULL, DATA},
        {"hidden", required_argument, NULL, HIDDEN},
        {"epochs", required_argument, NULL, EPOCHS},
        {"batch-size", required_argument, NULL, BATCH},
        {"learning-rate", required_argument, NULL, LR},
        {"optimizer", required_argument, NULL, OPTIMIZER},
        {"threads", required_argument, NULL, THREADS},
        {"seed", required_argument, NULL, SEED},
        {"limit", required_argument, NULL, LIMIT},
        {"save", required_argument, NULL, SAVE},
        {"save-every-epoch", no_argument, NULL, SAVE_EVERY_EPOCH},
        {"resume", required_argument, NULL, RESUME},
        {"mode", required_argument, NULL, MODE},
        {"logdir", required_argument, NULL, LOGDIR},
        {"profile", required_argument, NULL, PROFILE},
        {"profile-cpu-time", no_argument, NULL, PROFILE_CPU_TIME},
        {"augment", no_argument, NULL, AUGMENT},
        {"model", required_argument, NULL, MODEL},
        {"test-limit", required_argument, NULL, TEST_LIMIT},
        {"stop-after", required_argument, NULL, STOP_AFTER},
        {"device", required_argument, NULL, DEVICE},
        {"precision", required_argument, NULL, PRECISION},
        {"replicas", required_argument, NULL, REPLICAS},
        {"distributed", no_argument, NULL, DISTRIBUTED},
        {"sync-batch-norm", no_argument, NULL, SYNC_BATCH_NORM},
        {"help", no_argument, NULL, HELP},
        {NULL, 0, NULL, 0}};
    *o = (train_options){.optimizer = "adam",
                         .model_kind = "mlp",
                         .model = {1, {64}},
                         .epochs = 5,
                         .batch_size = 32,
                         .seed = 42,
                         .learning_rate = -1,
                         .mode = "eager"};
    optind = 1;
    opterr = 0;
    int option;
    long value;
    while ((option = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (option) {
        case DATA:
            o->data_dir = optarg;
            break;
        case MODE:
            if (strcmp(optarg, "eager") && strcmp(optarg, "lazy") && strcmp(optarg, "graph"))
                return cli_usage_error("train", "--mode expects eager, lazy or graph, got '%s'",
                                       optarg);
            o->mode = optarg;
            break;
        case LOGDIR:
            o->logdir = optarg;
            break;
        case PROFILE:
            o->profile_path = optarg;
            break;
        case PROFILE_CPU_TIME:
            o->profile_cpu_time = true;
            break;
        case AUGMENT:
            o->augment = true;
            break;
        case MODEL:
            if (strcmp(optarg, "mlp") && strcmp(optarg, "cnn"))
                return cli_usage_error("train", "--model expects mlp or cnn, got '%s'", optarg);
            o->model_kind = optarg;
            o->given |= GIVEN_MODEL;
            break;
        case HIDDEN: {
            char why[128];
            if (!mlp_parse_hidden_why(optarg, &o->model, why, sizeof why))
                return cli_usage_error("train",
                                       "--hidden '%s': %s (it expects sizes like 64 or 512,512)",
                                       optarg, why);
            o->given |= GIVEN_HIDDEN;
            break;
        }
        case EPOCHS:
            if (!cli_parse_int("train", "--epochs", optarg, 1, 100000, &o->epochs))
                return CLI_USAGE;
            o->given |= GIVEN_EPOCHS;
            break;
        case BATCH:
            if (!cli_parse_int("train", "--batch-size", optarg, 1, 1 << 20, &o->batch_size))
                return CLI_USAGE;
            o->given |= GIVEN_BATCH;
            break;
        case LR:
            if (!cli_parse_double("train", "--learning-rate", optarg, 1e-12, 1e3,
                                  &o->learning_rate))
                return CLI_USAGE;
            o->given |= GIVEN_LR;
            break;
        case OPTIMIZER:
            if (strcmp(optarg, "adam") && strcmp(optarg, "adamw") && strcmp(optarg, "sgd") &&
                strcmp(optarg, "rmsprop"))
                return cli_usage_error("train",
                                       "unknown optimizer '%s' (adam, adamw, sgd, "
                                       "rmsprop)",
                                       optarg);
            o->optimizer = optarg;
            o->given |= GIVEN_OPTIMIZER;
            break;
        case THREADS:
            if (!cli_parse_int("train", "--threads", optarg, 1, 256, &o->threads)) return CLI_USAGE;
            break;
        case SEED:
            if (!cli_parse_int("train", "--seed", optarg, 0, 0x7fffffffL, &value)) return CLI_USAGE;
            o->seed = (unsigned long long)value;
            o->given |= GIVEN_SEED;
            break;
        case LIMIT:
            if (!cli_parse_int("train", "--limit", optarg, 1, 1L << 40, &o->limit))
                return CLI_USAGE;
            break;
        case TEST_LIMIT:
            if (!cli_parse_int("train", "--test-limit", optarg, 1, 1L << 40, &o->test_limit))
                return CLI_USAGE;
            break;
        case STOP_AFTER:
            if (!cli_parse_int("train", "--stop-after", optarg, 1, 100000, &o->stop_after))
                return CLI_USAGE;
            break;
        case SAVE:
            o->save_path = optarg;
            break;
        case SAVE_EVERY_EPOCH:
            o->save_every_epoch = true;
            break;
        case DEVICE:
            o->device = optarg;
            break;
        case PRECISION:
            if (eg_policy_from_name(optarg, &o->precision) != EG_OK) {
                eg_clear_error();
                return cli_usage_error("train",
                                       "--precision expects float32, mixed_bfloat16 or "
                                       "mixed_float16, got '%s'",
                                       optarg);
            }
            o->given |= GIVEN_PRECISION;
            break;
        case RESUME:
            o->resume_path = optarg;
            break;
        case REPLICAS:
            if (!cli_parse_int("train", "--replicas", optarg, 1, REPLICAS_MAX, &o->replicas))
                return CLI_USAGE;
            break;
        case DISTRIBUTED:
            o->distributed = true;
            break;
        case SYNC_BATCH_NORM:
            o->sync_batch_norm = true;
            break;
        case 'h':
        case HELP:
            print_help();
            return -1;
        default:
            return cli_usage_error("train", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error("train", "unexpected argument '%s'", argv[optind]);
    if (o->profile_cpu_time && !o->profile_path)
        return cli_usage_error("train", "--profile-cpu-time needs --profile FILE");
    if (o->save_every_epoch && !o->save_path)
        return cli_usage_error("train", "--save-every-epoch needs --save FILE");
    if (o->replicas > 1 && o->distributed)
        return cli_usage_error("train", "--replicas and --distributed do not combine (one replica "
                                        "per process)");
    if (o->replicas > 1 && o->device)
        return cli_usage_error("train", "--replicas splits the host into logical CPU devices; it "
                                        "does not take --device");
    if (o->sync_batch_norm && strcmp(o->model_kind, "cnn") != 0)
        return cli_usage_error("train", "--sync-batch-norm needs --model cnn (the MLP has no batch "
                                        "normalization)");
    return apply_model_defaults(o);
}

static eg_optimizer *make_constant_optimizer(const train_options *o) {
    if (!strcmp(o->optimizer, "sgd")) {
        eg_sgd_options options = eg_sgd_options_default();
        if (o->learning_rate > 0) options.learning_rate = eg_schedule_constant(o->learning_rate);
        return eg_sgd_new(&options);
    }
    if (!strcmp(o->optimizer, "rmsprop")) {
        eg_rmsprop_options options = eg_rmsprop_options_default();
        if (o->learning_rate > 0) options.learning_rate = eg_schedule_constant(o->learning_rate);
        return eg_rmsprop_new(&options);
    }
    bool adamw = !strcmp(o->optimizer, "adamw");
    eg_adam_options options = adamw ? eg_adamw_options_default() : eg_adam_options_default();
    if (o->learning_rate > 0) options.learning_rate = eg_schedule_constant(o->learning_rate);
    return adamw ? eg_adamw_new(&options) : eg_adam_new(&options);
}

/* The optimizer with its Keras defaults or --learning-rate; with decay_steps > 0 the rate then
 * falls from there to 0 along a cosine over decay_steps updates. *initial_rate gets the rate of
 * the first update (what a checkpoint records). */
static eg_optimizer *make_optimizer(const train_options *o, int64_t decay_steps,
                                    double *initial_rate) {
    eg_optimizer *optimizer = make_constant_optimizer(o);
    if (!optimizer) return NULL;
    *initial_rate = eg_optimizer_learning_rate(optimizer);
    if (decay_steps > 0 &&
        eg_optimizer_set_learning_rate(
            optimizer, eg_schedule_cosine_decay(*initial_rate, decay_steps, 0.0)) != EG_OK) {
        eg_optimizer_free(optimizer);
        return NULL;
    }
    return optimizer;
}

/* The default generator's seed for update number `iteration`: what a step draws (dropout masks)
 * depends on the run's seed and the step only, so a resumed run draws what the uninterrupted one
 * did (splitmix64 of the pair). */
static uint64_t step_seed(uint64_t seed, int64_t iteration) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + (uint64_t)iteration * 0xD1B54A32D192ED03ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* One step on the next batch of the input pipeline (which prepares batches on other cores while
 * this one trains), every replica its share; *n_out receives the global batch size, *stop
 * whether any process asked to stop after this step. */
static eg_status train_step(replicas *r, uint64_t seed, eg_dataset_iterator *batches,
                            bool stop_here, int64_t *n_out, double *loss_out, double *hits_out,
                            bool *stop) {
    eg_profiler_range_push("step");
    eg_scope_begin();
    eg_element batch = {0};
    bool end = false;
    eg_profiler_range_push("data");
    eg_status status = eg_dataset_iterator_next(batches, &batch, &end);
    eg_profiler_range_pop();
    if (status == EG_OK && (end || batch.n_tensors != 2)) {
        fprintf(stderr, "eagle train: the input pipeline ended before the epoch did\n");
        status = EG_ERR_STATE;
    }
    if (status == EG_OK) *n_out = eg_tensor_dim(batch.tensors[0], 0);
    eg_manual_seed(step_seed(seed, eg_optimizer_iterations(r->state[0].optimizer)));
    if (status == EG_OK)
        status = replicas_step(r, batch.tensors[0], batch.tensors[1], stop_here, loss_out,
                               hits_out, stop);
    eg_scope_end();
    eg_profiler_range_pop();
    return status == EG_OK ? eg_last_status() : status;
}

/* What every replica's model and optimizer are made of (replicas_build_fn). */
typedef struct build_context {
    const train_options *o;
    bool cnn, loss_scaling;
    int64_t decay_steps;
    double initial_rate;
} build_context;

static eg_status build_replica_model(eg_model **model, eg_optimizer **optimizer, void *user) {
    build_context *b = user;
    *model = b->cnn ? cnn_build(b->o->sync_batch_norm) : mlp_build(&b->o->model);
    *optimizer = *model ? make_optimizer(b->o, b->decay_steps, &b->initial_rate) : NULL;
    if (!*model || !*optimizer) return eg_last_status() ? eg_last_status() : EG_ERR_INTERNAL;
    /* Set on the built model: the variables stay f32 masters, the calls change dtype. */
    eg_status status = eg_model_set_policy(*model, b->o->precision);
    if (status == EG_OK && b->loss_scaling)
        status = eg_optimizer_enable_loss_scaling(*optimizer, NULL);
    return status;
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
        status = eg_summary_scalar(w, "epoch/loss_scale", epoch, eg_optimizer_loss_scale(optimizer));
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

/* --resume: the run's settings come from the checkpoint; flags given must agree with it. */
static int adopt_settings(train_options *o, const train_meta *m) {
    char saved[128], given[128];
    mlp_format_hidden(&m->model, saved, sizeof saved);
    mlp_format_hidden(&o->model, given, sizeof given);
    bool cnn = !strcmp(m->model_kind, "cnn");
    if (cnn) snprintf(saved, sizeof saved, "none (cnn)");
    const char *conflict =
        (o->given & GIVEN_MODEL) && strcmp(o->model_kind, m->model_kind)     ? "--model"
        : (o->given & GIVEN_HIDDEN) && strcmp(saved, given)                  ? "--hidden"
        : (o->given & GIVEN_OPTIMIZER) && strcmp(o->optimizer, m->optimizer) ? "--optimizer"
        : (o->given & GIVEN_LR) && o->learning_rate != m->learning_rate      ? "--learning-rate"
        : (o->given & GIVEN_BATCH) && o->batch_size != m->batch_size         ? "--batch-size"
        : (o->given & GIVEN_SEED) && o->seed != m->seed                      ? "--seed"
        : o->augment && m->augment_known && !m->augment                      ? "--augment"
                                                                             : NULL;
    if (conflict)
        return cli_usage_error("train",
                               "%s differs from the checkpoint %s (hidden %s, optimizer %s, "
                               "learning rate %g, batch size %ld, seed %llu, %s); --resume "
                               "continues that run",
                               conflict, o->resume_path, saved, m->optimizer, m->learning_rate,
                               m->batch_size, m->seed,
                               !m->augment_known ? "augmentation not recorded"
                               : m->augment      ? "with --augment"
                                                 : "without --augment");
    eg_policy saved_precision = EG_POLICY_FLOAT32;
    if (m->precision[0]) (void)eg_policy_from_name(m->precision, &saved_precision);
    if ((o->given & GIVEN_PRECISION) && o->precision != saved_precision)
        return cli_usage_error("train",
                               "--precision %s differs from the checkpoint %s (%s); --resume "
                               "continues that run",
                               eg_policy_name(o->precision), o->resume_path,
                               eg_policy_name(saved_precision));
    o->precision = saved_precision;
    if (!m->augment_known)
        printf("note: %s does not record whether --augment was used; continuing %s it\n",
               o->resume_path, o->augment ? "with" : "without");
    o->model_kind = cnn ? "cnn" : "mlp";
    if (!(o->given & GIVEN_EPOCHS) && m->epochs > 0) o->epochs = m->epochs;
    o->model = m->model;
    o->optimizer = m->optimizer;
    o->learning_rate = m->learning_rate;
    o->batch_size = m->batch_size;
    o->seed = m->seed;
    if (m->augment_known) o->augment = m->augment;
    return CLI_OK;
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

int cli_train(int argc, char **argv) {
    double train_began_ns = monotonic_ns();
    train_options o;
    int parsed = parse_options(argc, argv, &o);
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
                     ? adopt_settings(&o, &resumed)
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
    replicas reps = {0};
    eg_dataset *batches = NULL;
    eg_dataset_iterator *epoch_batches = NULL;
    eg_summary_writer *summary = NULL;
    eg_model *model = NULL;
    eg_optimizer *optimizer = NULL;
    bool cnn = !strcmp(o.model_kind, "cnn");
    eg_status (*evaluate)(eg_model *, const mlp_data *, double *, double *) =
        cnn ? cnn_evaluate : mlp_evaluate;
    int rc = CLI_FAILURE;
    bool in_device_scope = false;
    if (!mlp_data_try_load(o.data_dir, true, o.limit, &train) ||
        !mlp_data_try_load(o.data_dir, false, o.test_limit, &test))
        goto done;
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
    double initial_rate = 0;
    if (train_device) {
        if (eg_device_scope_begin(train_device) != EG_OK) goto done;
        in_device_scope = true;
    }
    bool loss_scaling = o.precision == EG_POLICY_MIXED_FLOAT16;
    build_context build = {&o, cnn, loss_scaling, decay_steps, 0};
    if (!replicas_init(&reps, make_strategy(&o, train_device), o.mode, loss_scaling,
                       build_replica_model, &build, !resume))
        goto done;
    initial_rate = build.initial_rate;
    model = reps.state[0].model;
    optimizer = reps.state[0].optimizer;
    bool chief = eg_strategy_is_chief(reps.strategy);
    int n_replicas = eg_strategy_num_replicas(reps.strategy);
    if (!chief) { /* rank 0 alone prints, logs and saves */
        if (!freopen("/dev/null", "w", stdout)) goto done;
        o.save_path = o.logdir = o.profile_path = NULL;
        o.save_every_epoch = false;
    }
    if (o.logdir && !(summary = eg_summary_writer_new(o.logdir))) goto done;
    if (resume) { /* every replica from the same checkpoint */
        for (int i = 0; i < reps.n_local; i++) {
            eg_device_scope_begin(eg_strategy_device(reps.strategy, i));
            eg_status restored = train_state_restore(resume, reps.state[i].model,
                                                     reps.state[i].optimizer, &resumed);
            eg_device_scope_end();
            if (restored != EG_OK) goto done;
        }
        eg_safetensors_close(resume);
        resume = NULL;
    }
    if (n_replicas > 1)
        printf("%s strategy: %d replicas (%s), global batch %ld split among them\n",
               eg_strategy_name(reps.strategy), n_replicas,
               o.distributed ? "one per MPI process" : "one per logical CPU device",
               o.batch_size);
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

    double train_seconds = 0;
    int64_t samples_trained = 0;
    long epochs_done = o.resume_path ? resumed.epoch : 0, epochs_run = 0;
    int64_t first_step = o.resume_path ? resumed.step : 0;
    run_record record = {&o, initial_rate, decay_steps, train.n, train_data};
    /* Where the run stands, what a save records: the checkpoint's position until a step is run. */
    run_position at = {epochs_done, first_step, resumed.loss, resumed.hits, resumed.samples};
    checkpoint_context checkpoint_state = {model, optimizer, &record, &at};
    output_file checkpoint = {"checkpoint", write_checkpoint, &checkpoint_state};
    char written[4096];
    /* The last save did not reach --save; --save holds `at` as it is now. */
    bool save_failed = false, saved_here = false;
    if (o.profile_path &&
        eg_profiler_start(EG_PROFILE_OPS | EG_PROFILE_TRACE |
                          (o.profile_cpu_time ? EG_PROFILE_CPU_TIME : 0)) != EG_OK)
        goto done;
    /* Batches in train.c's historical order (cli_shuffle_order): results do not depend on
     * whether the pipeline or the step loop made them. */
    batches = cli_training_pipeline_from(&train, o.batch_size, o.seed, o.augment, cnn,
                                         (int)epochs_done + 1, first_step);
    if (!batches) goto done;
    long last_epoch = o.stop_after && o.stop_after < o.epochs ? o.stop_after : o.epochs;
    /* From here a Ctrl-C stops the run at the next step and saves it (before, nothing is lost). */
    cli_interrupt_install();
    bool interrupted = false;
    const long first_epoch = epochs_done + 1; /* epochs_done moves on */
    for (int epoch = (int)first_epoch; epoch <= last_epoch && !interrupted; epoch++) {
        eg_dataset_iterator_free(epoch_batches);
        epoch_batches = eg_dataset_iterator_new(batches);
        if (!epoch_batches) goto done;
        cli_progress progress;
        cli_progress_begin(&progress, epoch, (int)o.epochs, steps);
        eg_metric_mean loss_mean = {0};
        double hits = 0;
        int64_t seen = 0, step = 0;
        if (epoch == first_epoch && first_step > 0) { /* the rest of an interrupted epoch */
            loss_mean = resumed.loss;
            hits = resumed.hits;
            seen = resumed.samples;
            step = first_step;
            cli_progress_continue(&progress, step, seen);
        }
        int64_t seen_before = seen;
        double epoch_start = cli_seconds();
        for (;; step++) {
            /* Checked between steps: the state is whole here. Several processes agree on the
             * step to stop after (each tells the others through the step's sums). */
            bool stop_here = cli_interrupted();
            if (stop_here && eg_strategy_num_workers(reps.strategy) == 1) {
                at = (run_position){epoch - 1, step, loss_mean, hits, seen};
                interrupted = true;
                break;
            }
            if (step == steps) break;
            int64_t n = 0;
            double loss, batch_hits;
            bool stop = false;
            if (epoch == first_epoch && step == first_step) report_first_step(train_began_ns);
            if (train_step(&reps, o.seed, epoch_batches, stop_here, &n, &loss, &batch_hits,
                           &stop) != EG_OK)
                goto done;
            saved_here = false;
            eg_metric_mean_add(&loss_mean, loss, (double)n);
            hits += batch_hits;
            seen += n;
            cli_progress_update(&progress, step + 1, seen, eg_metric_mean_result(&loss_mean),
                                hits / (double)seen);
            if (stop) {
                at = (run_position){epoch - 1, step + 1, loss_mean, hits, seen};
                interrupted = true;
                break;
            }
        }
        if (interrupted) break;
        double epoch_seconds = cli_seconds() - epoch_start;
        train_seconds += epoch_seconds;
        samples_trained += seen - seen_before;
        cli_progress_end(&progress, seen, eg_metric_mean_result(&loss_mean), hits / (double)seen);
        double test_accuracy = 0, test_loss = 0;
        if (o.profile_path) eg_profiler_pause();
        if (replicas_average_statistics(&reps) != EG_OK) goto done;
        if (chief && evaluate(model, &test, &test_accuracy, &test_loss) != EG_OK) goto done;
        if (o.profile_path) eg_profiler_resume();
        printf("  test accuracy %.4f  test loss %.4f\n", test_accuracy, test_loss);
        if (loss_scaling)
            printf("  loss scale %g, %lld step(s) skipped for inf/NaN gradients so far\n",
                   eg_optimizer_loss_scale(optimizer), (long long)eg_optimizer_skipped_steps(optimizer));
        if (summary && log_epoch(summary, model, optimizer, loss_scaling, epoch, eg_metric_mean_result(&loss_mean),
                                 hits / (double)seen, test_accuracy, test_loss,
                                 epoch_seconds > 0 ? (double)(seen - seen_before) / epoch_seconds
                                                   : 0) != EG_OK)
            goto done;
        epochs_done = epoch;
        epochs_run++;
        at = (run_position){.epochs_done = epochs_done};
        if (o.save_every_epoch) {
            write_result saved = write_or_rescue(&checkpoint, o.save_path, written, sizeof written);
            save_failed = saved != WROTE;
            saved_here = saved == WROTE; /* a rescued one is written again on Ctrl-C */
            if (saved != LOST) printf("  saved checkpoint %s\n", written);
            fflush(stdout);
        }
        if (cli_interrupted()) interrupted = true;
    }
    if (interrupted) {
        rc = stop_interrupted(&o, &checkpoint, &at, steps, saved_here);
        goto done;
    }
    printf("trained %ld epoch(s) in %.2f s: %.0f samples/s\n", epochs_run, train_seconds,
           train_seconds > 0 ? (double)samples_trained / train_seconds : 0.0);
    replicas_print_stats(&reps, stdout);
    if (o.save_path && !(o.save_every_epoch && epochs_run > 0)) {
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
    if (reps.graph[0]) {
        eg_function_stats fs;
        eg_function_stats_get(reps.graph[0], &fs);
        printf("graph: %d trace(s), %lld ops in %lld kernels, arena %.1f KiB%s%s\n", fs.n_traces,
               (long long)fs.n_nodes, (long long)fs.n_kernels, (double)fs.arena_bytes / 1024.0,
               fs.retrace_warning[0] ? "\nwarning: " : "", fs.retrace_warning);
    }
    char report[1024];
    if (eg_memory_format_stats(NULL, report, sizeof report) == EG_OK) printf("%s\n", report);
    rc = save_failed ? CLI_FAILURE : CLI_OK;
done:
    if (eg_profiler_flags()) eg_profiler_stop();
    eg_dataset_iterator_free(epoch_batches);
    eg_dataset_free(batches);
    eg_summary_writer_free(summary);
    if (rc != CLI_OK && rc != CLI_INTERRUPTED && eg_last_status() != EG_OK)
        fprintf(stderr, "eagle train: %s\n", eg_last_error());
    eg_safetensors_close(resume);
    replicas_free(&reps); /* the models and optimizers too */
    if (in_device_scope) eg_device_scope_end();
    mlp_data_free(&train);
    mlp_data_free(&test);
    return rc;
}
