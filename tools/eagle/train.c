/* eagle train's options: the help text, the flags, the optimizer they name, and how --resume
 * takes the saved run's settings. The run itself is train_run.c. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "approx_train.h"
#include "cli.h"
#include "cnn.h"
#include "mlp.h"
#include "train_options.h"

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
        "  --model NAME         mlp (default) or cnn; charlm: a character language model on\n"
        "                       the King James Bible (eagle train --model charlm --help)\n"
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
        "  --approx sample:F    estimate the kernel gradients of the Dense layers of 64 or\n"
        "                       more units from the fraction F of each batch's rows\n"
        "                       (column-row sampling, unbiased); at each epoch's end a shadow\n"
        "                       check prints each layer's gradient error against the exact\n"
        "                       gradient on one batch, and both times\n"
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

int train_parse_options(int argc, char **argv, train_options *o) {
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
        APPROX,
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
        {"approx", required_argument, NULL, APPROX},
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
    while ((option = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
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
        case APPROX:
            if (!approx_train_parse(optarg, &o->sample_fraction))
                return cli_usage_error("train",
                                       "--approx takes sample:F (0 < F <= 1) in training; int8, "
                                       "lowrank and budget are eagle eval's, got '%s'",
                                       optarg);
            break;
        case RESUME:
            o->resume_path = optarg;
            break;
        case REPLICAS:
            if (!cli_parse_int("train", "--replicas", optarg, 1, 16, &o->replicas))
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
            return cli_bad_option("train", option, argv[optind - 1]);
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

eg_optimizer *train_make_optimizer(const train_options *o, int64_t decay_steps,
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

int train_adopt_settings(train_options *o, const train_meta *m) {
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
