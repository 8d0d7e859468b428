/* `eagle train`'s options: what the flags set (train.c parses them) and what the run
 * (train_run.c) reads. */
#ifndef EAGLE_TOOLS_TRAIN_OPTIONS_H
#define EAGLE_TOOLS_TRAIN_OPTIONS_H

#include <stdbool.h>

#include "mlp.h"
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
    double sample_fraction;   /* --approx sample:F (0: exact gradients) */
    long replicas;            /* --replicas: mirrored over this many logical CPU devices */
    bool distributed;         /* --distributed: one replica per MPI process */
    bool sync_batch_norm;     /* --sync-batch-norm: the CNN's statistics over every replica */
} train_options;

/* Parses argv into *o. CLI_OK to train; -1 after --help; CLI_USAGE after a usage error printed. */
int train_parse_options(int argc, char **argv, train_options *o);

/* --resume: the run's settings come from the checkpoint's meta; flags given must agree with it
 * (CLI_USAGE, printed, otherwise). */
int train_adopt_settings(train_options *o, const train_meta *m);

/* The optimizer with its Keras defaults or --learning-rate; with decay_steps > 0 the rate then
 * falls from there to 0 along a cosine over decay_steps updates. *initial_rate gets the rate of
 * the first update (what a checkpoint records). NULL with the library's error. */
eg_optimizer *train_make_optimizer(const train_options *o, int64_t decay_steps,
                                   double *initial_rate);

#endif
