/* `eagle train --model charlm` and `eagle generate`: a character language model on the King James
 * Bible (Debian's bible-kjv-text), trained for a time budget and scored in bits per character on
 * the held-out books (eagle/io.h names them); generation samples from a saved model with
 * temperature and top-k, carrying the LSTM's states from one character to the next.
 *
 * Characters are bytes (ids 0..255: the text is ASCII), so the model needs no vocabulary file:
 * Embedding(256, E) -> LSTM(H, return_sequences) -> Dense(256). */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "eagle.h"

enum { VOCAB = 256 };

typedef struct charlm_options {
    const char *data_path; /* NULL: the installed Bible */
    const char *save_path;
    const char *checkpoint; /* generate */
    const char *prompt;
    long hidden, embedding, seq_len, batch, steps, threads, length, top_k, eval_chars;
    /* --state carry: streams with carried states; reset (default): random windows. Carrying
     * lowers the training loss but scored worse on the held-out books in a 5-minute run
     * (bench/RESULTS.md): its batches follow the text's order instead of being shuffled. */
    bool carry_state;
    bool state_given; /* --state was given (eval's default is carry) */
    bool bf16;        /* --precision bf16: the mixed_bfloat16 policy */
    double minutes, learning_rate, temperature;
    unsigned long long seed;
} charlm_options;

/* The model's three layers, kept apart so that generation can run the LSTM one step at a time. */
typedef struct charlm {
    eg_model *model;
    eg_layer *embedding, *lstm, *output;
} charlm;

/* The logits as f32 (under a mixed policy the output layer's are bf16): the loss's softmax needs
 * f32's range. A new reference, or NULL. */
static eg_tensor *wide_logits(eg_tensor *logits) {
    return logits && eg_tensor_dtype(logits) != EG_DTYPE_F32 ? eg_cast(logits, EG_DTYPE_F32)
                                                             : logits;
}

static bool charlm_build(charlm *m, long hidden, long embedding, bool bf16) {
    m->model = eg_sequential_new("charlm");
    eg_rnn_options ro = eg_rnn_options_default();
    ro.return_sequences = true;
    m->embedding = eg_embedding_new(VOCAB, embedding, NULL);
    m->lstm = eg_lstm_new(hidden, &ro);
    m->output = eg_dense_new(VOCAB, EG_ACTIVATION_NONE);
    return m->model && eg_sequential_add(m->model, m->embedding) == EG_OK &&
           eg_sequential_add(m->model, m->lstm) == EG_OK &&
           eg_sequential_add(m->model, m->output) == EG_OK &&
           eg_model_build(m->model, 2, (const int64_t[]){-1, 8}) == EG_OK &&
           (!bf16 || eg_model_set_policy(m->model, EG_POLICY_MIXED_BFLOAT16) == EG_OK);
}

/* Bytes of text as an i32 tensor of ids. */
static eg_tensor *ids_of(const char *text, int64_t n) {
    int32_t *ids = malloc(sizeof *ids * (size_t)(n ? n : 1));
    if (!ids) return NULL;
    for (int64_t i = 0; i < n; i++) ids[i] = (unsigned char)text[i];
    eg_tensor *t = eg_tensor_from_data(ids, EG_DTYPE_I32, 1, &n);
    free(ids);
    return t;
}

/* Mean cross-entropy in nats of predicting targets (B, T) from inputs (B, T). */
static eg_tensor *sequence_loss(charlm *m, const eg_tensor *x, const eg_tensor *y, bool training) {
    const int64_t *shape = eg_tensor_shape(x);
    int64_t rows = shape[0] * shape[1];
    eg_tensor *logits = wide_logits(eg_model_call(m->model, x, training));
    eg_tensor *flat = logits ? eg_reshape(logits, 2, (const int64_t[]){rows, VOCAB}) : NULL;
    eg_tensor *labels = eg_reshape(y, 1, &rows);
    return flat && labels ? eg_mean(eg_sparse_softmax_cross_entropy(flat, labels), 0, NULL, false)
                          : NULL;
}

/* The cross-entropy (nats) of predicting y from x, both (rows, width) ids on the host, summed
 * (sum) or averaged, the LSTM starting from states (entries NULL: zeros) and carrying on: its
 * final states replace them (kept out of the scope; the caller releases the last ones). NULL
 * with an error. A tape that records sees the whole computation but not the states' pasts. */
static eg_tensor *window_loss(charlm *m, const int32_t *x, const int32_t *y, int64_t rows,
                              int64_t width, bool training, bool sum, eg_tensor **states) {
    int64_t shape[2] = {rows, width}, flat = rows * width;
    eg_tensor *ids = eg_tensor_from_data(x, EG_DTYPE_I32, 2, shape);
    eg_tensor *labels = eg_tensor_from_data(y, EG_DTYPE_I32, 1, &flat);
    eg_tensor *h = ids ? eg_layer_call(m->embedding, ids, training) : NULL, *seq = NULL;
    eg_tensor *next[2] = {NULL, NULL};
    bool ok =
        h && labels &&
        eg_rnn_call(m->lstm, h, NULL, states[0] ? states : NULL, training, &seq, next) == EG_OK;
    eg_tensor *logits = ok ? wide_logits(eg_layer_call(m->output, seq, training)) : NULL;
    eg_tensor *rows_logits = logits ? eg_reshape(logits, 2, (const int64_t[]){flat, VOCAB}) : NULL;
    eg_tensor *each = rows_logits ? eg_sparse_softmax_cross_entropy(rows_logits, labels) : NULL;
    eg_tensor *loss = !each ? NULL
                      : sum ? eg_sum(each, 0, NULL, false)
                            : eg_mean(each, 0, NULL, false);
    for (int i = 0; loss && i < 2; i++) {
        eg_scope_keep(next[i]);
        eg_release(states[i]);
        states[i] = next[i];
    }
    return loss;
}

/* Adds window_loss's sum to *total (an evaluation: no training, in a scope of its own). */
static bool score_window(charlm *m, const int32_t *x, const int32_t *y, int64_t rows, int64_t width,
                         eg_tensor **states, double *total) {
    eg_scope_begin();
    eg_tensor *loss = window_loss(m, x, y, rows, width, false, true, states);
    if (loss) *total += eg_item(loss);
    eg_scope_end();
    return loss != NULL;
}

/* Training windows taken in order from `rows` contiguous streams of the text, the LSTM's states
 * carried from each window to the next (truncated back-propagation through time, as char-rnn
 * trains): every position is trained with the context that precedes it, as the held-out score
 * predicts, instead of from zero states at a random window's start. At the end of a pass the
 * streams start again from their beginnings, shifted by a random offset, with zero states. */
typedef struct stream_batches {
    const char *text;
    int64_t rows, width, length, position, shift;
    int32_t *x, *y;
    eg_tensor *states[2];
    uint64_t random;
} stream_batches;

static bool streams_init(stream_batches *s, const char *text, int64_t n, int64_t rows,
                         int64_t width, uint64_t seed) {
    *s = (stream_batches){.text = text, .rows = rows, .width = width, .random = seed};
    s->length = (n - 1 - width) / rows; /* room for a shift of up to `width` */
    s->x = malloc(sizeof *s->x * (size_t)(rows * width));
    s->y = malloc(sizeof *s->y * (size_t)(rows * width));
    return s->x && s->y && s->length > width;
}

static void streams_next(stream_batches *s) {
    if (s->position + s->width > s->length) {
        s->position = 0;
        s->random = s->random * 6364136223846793005ULL + 1442695040888963407ULL;
        s->shift = (int64_t)((s->random >> 33) % (uint64_t)s->width);
        for (int i = 0; i < 2; i++) {
            eg_release(s->states[i]);
            s->states[i] = NULL;
        }
    }
    for (int64_t r = 0; r < s->rows; r++)
        for (int64_t t = 0; t < s->width; t++) {
            int64_t at = s->shift + r * s->length + s->position + t;
            s->x[r * s->width + t] = (unsigned char)s->text[at];
            s->y[r * s->width + t] = (unsigned char)s->text[at + 1];
        }
    s->position += s->width;
}

static void streams_free(stream_batches *s) {
    eg_release(s->states[0]);
    eg_release(s->states[1]);
    free(s->x);
    free(s->y);
}

/* Bits per character on text, each character predicted from all that precede it: the text is
 * cut into STREAMS contiguous parts run side by side in windows of seq_len characters, the
 * LSTM's states carried from one window to the next (as generation carries them), and the few
 * characters past the last whole part are scored after the last part, from its states. */
static bool charlm_bpc(charlm *m, const char *text, int64_t n, long seq_len, bool carry,
                       double *bpc) {
    enum { STREAMS = 64 };
    int64_t predicted = n - 1;
    int64_t streams = predicted < STREAMS ? predicted : STREAMS;
    int64_t length = streams ? predicted / streams : 0, rest = predicted - streams * length;
    int64_t window = seq_len > length ? length : seq_len;
    if (window < 1) return false;
    size_t cells = (size_t)(streams * window > rest ? streams * window : rest);
    int32_t *x = malloc(cells * sizeof *x), *y = malloc(cells * sizeof *y);
    eg_tensor *states[2] = {NULL, NULL};
    double total = 0;
    bool ok = x && y;
    for (int64_t t0 = 0; ok && t0 < length; t0 += window) {
        int64_t w = length - t0 < window ? length - t0 : window;
        for (int64_t r = 0; r < streams; r++)
            for (int64_t t = 0; t < w; t++) {
                x[r * w + t] = (unsigned char)text[r * length + t0 + t];
                y[r * w + t] = (unsigned char)text[r * length + t0 + t + 1];
            }
        ok = score_window(m, x, y, streams, w, states, &total);
        for (int i = 0; !carry && i < 2; i++) { /* each window from zero states */
            eg_release(states[i]);
            states[i] = NULL;
        }
    }
    if (ok && rest > 0) {
        eg_tensor *last[2] = {NULL, NULL};
        for (int i = 0; carry && i < 2; i++) {
            eg_tensor *row = eg_slice(states[i], 0, streams - 1, streams, 1);
            last[i] = row ? eg_contiguous(row) : NULL;
            eg_release(row);
            ok = ok && last[i];
        }
        for (int64_t t = 0; t < rest; t++) {
            x[t] = (unsigned char)text[streams * length + t];
            y[t] = (unsigned char)text[streams * length + t + 1];
        }
        ok = ok && score_window(m, x, y, 1, rest, last, &total);
        eg_release(last[0]);
        eg_release(last[1]);
    }
    eg_release(states[0]);
    eg_release(states[1]);
    free(x);
    free(y);
    *bpc = total / (double)predicted / log(2.0);
    return ok;
}

static int charlm_fail(const char *what) {
    fprintf(stderr, "eagle: %s: %s\n", what, eg_last_error());
    return CLI_FAILURE;
}

static int run_training(const charlm_options *o) {
    eg_kjv kjv;
    if (eg_kjv_load(o->data_path, &kjv) != EG_OK) return charlm_fail("the King James Bible");
    int64_t test_n = kjv.test_length;
    if (o->eval_chars > 0 && o->eval_chars < test_n) test_n = o->eval_chars;
    printf("King James Bible: %lld training characters, %lld held out (%s)\n",
           (long long)kjv.train_length, (long long)kjv.test_length,
           "Joshua, Ecclesiastes, Hosea, John, Romans, James");
    eg_manual_seed(o->seed);
    charlm m = {0};
    eg_adam_options ao = eg_adam_options_default();
    ao.learning_rate = eg_schedule_constant(o->learning_rate);
    ao.clipping.global_clipnorm = 1.0;
    eg_optimizer *adam = eg_adam_new(&ao);
    eg_tensor *ids = ids_of(kjv.train, kjv.train_length);
    eg_dataset *ds =
        ids ? eg_dataset_from_token_windows(ids, o->seq_len, o->seq_len, true, o->seed) : NULL;
    ds = eg_dataset_shuffle(ds, 100000, o->seed, true);
    ds = eg_dataset_batch(ds, o->batch, true);
    ds = eg_dataset_repeat(ds, -1);
    ds = eg_dataset_prefetch(ds, 2);
    stream_batches streams = {0};
    if (!charlm_build(&m, o->hidden, o->embedding, o->bf16) || !adam || !ds ||
        (o->carry_state &&
         !streams_init(&streams, kjv.train, kjv.train_length, o->batch, o->seq_len, o->seed))) {
        streams_free(&streams);
        eg_kjv_free(&kjv);
        return charlm_fail("charlm");
    }
    eg_model_summary(m.model, stdout);
    eg_dataset_iterator *it = o->carry_state ? NULL : eg_dataset_iterator_new(ds);
    cli_interrupt_install();
    double start = cli_seconds(), budget = o->minutes * 60, recent = 0;
    long step = 0, recent_n = 0;
    int status = CLI_OK;
    while ((o->steps <= 0 || step < o->steps) && (o->steps > 0 || cli_seconds() - start < budget) &&
           !cli_interrupted()) {
        /* cosine decay over the run (its steps, or its time budget) to a twentieth of the rate:
         * the last part of a short run at a small rate settles into a lower loss */
        double done = cli_run_progress(step, o->steps, start, budget);
        double rate = o->learning_rate * cli_cosine_decay(done, 0.05);
        if (eg_optimizer_set_learning_rate(adam, eg_schedule_constant(rate)) != EG_OK) {
            status = charlm_fail("learning rate");
            break;
        }
        eg_scope_begin();
        eg_element batch;
        bool end = false, ok = true;
        if (o->carry_state)
            streams_next(&streams);
        else
            ok = eg_dataset_iterator_next(it, &batch, &end) == EG_OK && !end;
        eg_tape *tape = ok ? eg_tape_begin(false) : NULL;
        eg_tensor *loss = !ok ? NULL
                          : o->carry_state
                              ? window_loss(&m, streams.x, streams.y, o->batch, o->seq_len, true,
                                            false, streams.states)
                              : sequence_loss(&m, batch.tensors[0], batch.tensors[1], true);
        int n = 0;
        eg_tensor *const *vars = eg_model_trainable_variables(m.model, &n);
        eg_tensor *grads[8] = {NULL};
        ok = loss && vars && n <= 8 &&
             eg_tape_gradient(tape, loss, n, vars, grads, EG_UNCONNECTED_ZERO) == EG_OK &&
             eg_optimizer_apply_gradients(adam, n, grads, vars) == EG_OK;
        eg_tape_free(tape);
        if (ok) {
            recent += eg_item(loss) / log(2.0);
            recent_n++;
        }
        eg_scope_end();
        if (!ok) {
            status = charlm_fail("train step");
            break;
        }
        step++;
        if (step % 50 == 0) {
            double seconds = cli_seconds() - start;
            printf("step %ld  %.1f s  train %.3f bits/char  %.0f chars/s  lr %.2g\n", step,
                   seconds, recent / (double)recent_n,
                   (double)step * (double)(o->batch * o->seq_len) / seconds,
                   eg_optimizer_learning_rate(adam));
            fflush(stdout);
            recent = 0;
            recent_n = 0;
        }
    }
    eg_dataset_iterator_free(it);
    streams_free(&streams);
    double bpc = NAN;
    if (status == CLI_OK && !charlm_bpc(&m, kjv.test, test_n, o->seq_len, true, &bpc))
        status = charlm_fail("evaluation");
    if (status == CLI_OK) {
        printf("held-out books: %.4f bits per character over %lld characters after %ld steps in "
               "%.1f s (bzip2 -9: 1.68, xz -9e: 1.75, gzip -9: 2.33)\n",
               bpc, (long long)test_n, step, cli_seconds() - start);
        if (o->save_path && eg_model_save_weights(m.model, o->save_path) != EG_OK)
            status = charlm_fail(o->save_path);
        else if (o->save_path)
            printf("saved %s\n", o->save_path);
    }
    eg_dataset_free(ds);
    eg_release(ids);
    eg_optimizer_free(adam);
    eg_model_free(m.model);
    eg_kjv_free(&kjv);
    return status;
}

/* Runs the prompt through the model once, then samples one character at a time, carrying the
 * LSTM's states. */
static int run_generate(const charlm_options *o) {
    charlm m = {0};
    if (!charlm_build(&m, o->hidden, o->embedding, o->bf16)) return charlm_fail("charlm");
    if (eg_model_load_weights(m.model, o->checkpoint) != EG_OK) {
        eg_model_free(m.model);
        return charlm_fail(o->checkpoint);
    }
    eg_generator *g = eg_generator_new(o->seed);
    const char *prompt = o->prompt && o->prompt[0] ? o->prompt : "\n";
    int64_t n = (int64_t)strlen(prompt);
    fputs(o->prompt ? o->prompt : "", stdout);
    eg_tensor *states[2] = {NULL, NULL};
    eg_tensor *x = ids_of(prompt, n);
    int status = CLI_OK;
    for (long produced = 0; produced <= o->length && status == CLI_OK; produced++) {
        eg_scope_begin();
        eg_tensor *ids = eg_reshape(x, 2, (const int64_t[]){1, eg_tensor_n_elems(x)});
        eg_tensor *h = eg_layer_call(m.embedding, ids, false), *seq = NULL, *next[2] = {0};
        bool ok = h && eg_rnn_call(m.lstm, h, NULL, states[0] ? states : NULL, false, &seq, next) ==
                           EG_OK;
        int64_t steps = ok ? eg_tensor_shape(seq)[1] : 0;
        eg_tensor *last = ok ? eg_reshape(eg_slice(seq, 1, steps - 1, steps, 1), 2,
                                          (const int64_t[]){1, o->hidden})
                             : NULL;
        eg_tensor *logits = last ? eg_layer_call(m.output, last, false) : NULL;
        eg_tensor *token = logits && produced < o->length
                               ? eg_sample_logits(logits, o->temperature, o->top_k, g)
                               : NULL;
        if (!logits || (produced < o->length && !token)) {
            status = charlm_fail("generate");
        } else if (token) {
            int64_t id = ((const int64_t *)eg_tensor_data(token))[0];
            putchar((int)id);
            int32_t id32 = (int32_t)id;
            eg_release(x);
            eg_scope_keep(next[0]);
            eg_scope_keep(next[1]);
            eg_release(states[0]);
            eg_release(states[1]);
            states[0] = next[0];
            states[1] = next[1];
            x = eg_tensor_from_data(&id32, EG_DTYPE_I32, 1, (const int64_t[]){1});
            eg_scope_keep(x);
        }
        eg_scope_end();
    }
    putchar('\n');
    eg_release(x);
    eg_release(states[0]);
    eg_release(states[1]);
    eg_generator_free(g);
    eg_model_free(m.model);
    return status;
}

enum {
    OPT_HIDDEN = 1000,
    OPT_EMBEDDING,
    OPT_SEQ_LEN,
    OPT_BATCH,
    OPT_STEPS,
    OPT_MINUTES,
    OPT_LR,
    OPT_SAVE,
    OPT_DATA,
    OPT_SEED,
    OPT_THREADS,
    OPT_EVAL_CHARS,
    OPT_CHECKPOINT,
    OPT_PROMPT,
    OPT_LENGTH,
    OPT_TEMPERATURE,
    OPT_TOP_K,
    OPT_MODEL,
    OPT_STATE,
    OPT_PRECISION,
};

static void print_help(const char *command) {
    printf("usage: eagle %s [options]\n\n", command);
    if (!strcmp(command, "train"))
        printf("Trains a character LSTM on the King James Bible (bible-kjv-text) and reports bits\n"
               "per character on the held-out books.\n\n"
               "  --model charlm       this model (eagle train --help: the image models)\n"
               "  --minutes M          training time budget (default 20)\n"
               "  --steps N            train N steps instead of for a time\n"
               "  --seq-len N          characters per window (default 128)\n"
               "  --batch N            windows per step (default 32)\n"
               "  --state reset|carry  reset: random windows, each from zero states (default);\n"
               "                       carry: the windows follow each other in --batch\n"
               "                       contiguous streams, the LSTM's states carried between\n"
               "                       them (truncated BPTT, in the text's order)\n"
               "  --learning-rate LR   Adam's (default 0.002), cosine decay to 1/20 over the run,\n"
               "                       global clipnorm 1\n"
               "  --eval-chars N       score only the first N held-out characters\n"
               "  --save FILE          the weights as safetensors\n"
               "  --data FILE          the Bible (default /usr/lib/bible.data)\n");
    else if (!strcmp(command, "eval"))
        printf("Scores a model saved by 'eagle train --model charlm --save FILE' in bits per\n"
               "character on the held-out books.\n\n"
               "  --model charlm       this model (eagle eval --help: the image models)\n"
               "  --checkpoint FILE    the saved weights (required)\n"
               "  --state carry|reset  carry: each character from all before it, the LSTM's\n"
               "                       states carried (default); reset: from the start of its\n"
               "                       window of --seq-len characters\n"
               "  --seq-len N          characters per window (default 128)\n"
               "  --eval-chars N       score only the first N held-out characters\n"
               "  --data FILE          the Bible (default /usr/lib/bible.data)\n");
    else
        printf("Samples text from a model saved by 'eagle train --model charlm --save FILE'.\n\n"
               "  --checkpoint FILE    the saved weights (required)\n"
               "  --prompt TEXT        text to start from\n"
               "  --length N           characters to generate (default 300)\n"
               "  --temperature T      0: greedy (default 0.8)\n"
               "  --top-k K            sample among the K likeliest (default 0: all)\n");
    printf("  --precision f32|bf16 bf16: the mixed_bfloat16 policy, products in bf16 with f32\n"
           "                       sums, states and weights in f32 (default f32)\n"
           "  --hidden N           LSTM units (default 512)\n"
           "  --embedding N        character embedding size (default 64)\n"
           "  --seed N             (default 42)\n"
           "  --threads N          compute threads\n");
}

static int parse(const char *command, int argc, char **argv, charlm_options *o) {
    static const struct option options[] = {
        {"model", required_argument, NULL, OPT_MODEL},
        {"hidden", required_argument, NULL, OPT_HIDDEN},
        {"embedding", required_argument, NULL, OPT_EMBEDDING},
        {"seq-len", required_argument, NULL, OPT_SEQ_LEN},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"steps", required_argument, NULL, OPT_STEPS},
        {"minutes", required_argument, NULL, OPT_MINUTES},
        {"learning-rate", required_argument, NULL, OPT_LR},
        {"save", required_argument, NULL, OPT_SAVE},
        {"data", required_argument, NULL, OPT_DATA},
        {"seed", required_argument, NULL, OPT_SEED},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"eval-chars", required_argument, NULL, OPT_EVAL_CHARS},
        {"checkpoint", required_argument, NULL, OPT_CHECKPOINT},
        {"prompt", required_argument, NULL, OPT_PROMPT},
        {"length", required_argument, NULL, OPT_LENGTH},
        {"temperature", required_argument, NULL, OPT_TEMPERATURE},
        {"top-k", required_argument, NULL, OPT_TOP_K},
        {"state", required_argument, NULL, OPT_STATE},
        {"precision", required_argument, NULL, OPT_PRECISION},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (charlm_options){.hidden = 512,
                          .embedding = 64,
                          .seq_len = 128,
                          .batch = 32,
                          .minutes = 20,
                          .learning_rate = 2e-3,
                          .length = 300,
                          .temperature = 0.8,
                          .seed = 42};
    optind = 1;
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, ":h", options, NULL)) != -1;) {
        long v = 0;
        double d = 0;
        bool ok = true;
        switch (c) {
        case OPT_MODEL:
            if (strcmp(optarg, "charlm"))
                return cli_usage_error(command, "--model %s: this command trains charlm", optarg);
            break;
        case OPT_HIDDEN:
            ok = cli_parse_int(command, "--hidden", optarg, 1, 8192, &o->hidden);
            break;
        case OPT_EMBEDDING:
            ok = cli_parse_int(command, "--embedding", optarg, 1, 4096, &o->embedding);
            break;
        case OPT_SEQ_LEN:
            ok = cli_parse_int(command, "--seq-len", optarg, 2, 100000, &o->seq_len);
            break;
        case OPT_BATCH:
            ok = cli_parse_int(command, "--batch", optarg, 1, 1 << 20, &o->batch);
            break;
        case OPT_STEPS:
            ok = cli_parse_int(command, "--steps", optarg, 1, 1L << 40, &o->steps);
            break;
        case OPT_MINUTES:
            ok = cli_parse_double(command, "--minutes", optarg, 0, 1e6, &o->minutes);
            break;
        case OPT_PRECISION:
            if (strcmp(optarg, "f32") && strcmp(optarg, "bf16"))
                return cli_usage_error(command, "--precision %s: f32 or bf16", optarg);
            o->bf16 = !strcmp(optarg, "bf16");
            break;
        case OPT_STATE:
            if (strcmp(optarg, "carry") && strcmp(optarg, "reset"))
                return cli_usage_error(command, "--state %s: carry or reset", optarg);
            o->carry_state = !strcmp(optarg, "carry");
            o->state_given = true;
            break;
        case OPT_LR:
            ok = cli_parse_double(command, "--learning-rate", optarg, 1e-9, 10, &o->learning_rate);
            break;
        case OPT_SAVE:
            o->save_path = optarg;
            ok = cli_check_output_path(command, "--save", optarg);
            if (!ok) return CLI_USAGE;
            break;
        case OPT_DATA:
            o->data_path = optarg;
            break;
        case OPT_SEED:
            ok = cli_parse_int(command, "--seed", optarg, 0, 1L << 62, &v);
            o->seed = (unsigned long long)v;
            break;
        case OPT_THREADS:
            ok = cli_parse_int(command, "--threads", optarg, 1, 1024, &o->threads);
            break;
        case OPT_EVAL_CHARS:
            ok = cli_parse_int(command, "--eval-chars", optarg, 2, 1L << 40, &o->eval_chars);
            break;
        case OPT_CHECKPOINT:
            o->checkpoint = optarg;
            break;
        case OPT_PROMPT:
            o->prompt = optarg;
            break;
        case OPT_LENGTH:
            ok = cli_parse_int(command, "--length", optarg, 0, 1 << 24, &o->length);
            break;
        case OPT_TEMPERATURE:
            ok = cli_parse_double(command, "--temperature", optarg, 0, 100, &d);
            o->temperature = d;
            break;
        case OPT_TOP_K:
            ok = cli_parse_int(command, "--top-k", optarg, 0, VOCAB, &o->top_k);
            break;
        case 'h':
            print_help(command);
            return -1;
        default:
            return cli_bad_option(command, c == ':' ? optopt : c, argv[optind - 1]);
        }
        if (!ok) return CLI_USAGE;
    }
    if (optind < argc) return cli_usage_error(command, "unexpected argument '%s'", argv[optind]);
    return CLI_OK;
}

int cli_train_charlm(int argc, char **argv) {
    charlm_options o;
    int parsed = parse("train", argc, argv, &o);
    if (parsed != CLI_OK) return parsed < 0 ? CLI_OK : parsed;
    if (o.threads > 0 && eg_set_num_threads((int)o.threads) != EG_OK)
        return charlm_fail("--threads");
    return run_training(&o);
}

/* eagle eval --model charlm: a saved model's bits per character on the held-out books, each
 * character predicted from all before it (--state carry, the default here) or from the start of
 * its window of --seq-len characters (reset). */
int cli_eval_charlm(int argc, char **argv) {
    charlm_options o;
    int parsed = parse("eval", argc, argv, &o);
    if (parsed != CLI_OK) return parsed < 0 ? CLI_OK : parsed;
    if (!o.checkpoint) return cli_usage_error("eval", "--checkpoint FILE is required");
    if (o.threads > 0 && eg_set_num_threads((int)o.threads) != EG_OK)
        return charlm_fail("--threads");
    bool carry = !o.state_given || o.carry_state;
    eg_kjv kjv;
    if (eg_kjv_load(o.data_path, &kjv) != EG_OK) return charlm_fail("the King James Bible");
    int64_t test_n =
        o.eval_chars > 0 && o.eval_chars < kjv.test_length ? o.eval_chars : kjv.test_length;
    charlm m = {0};
    int status = CLI_OK;
    double bpc = NAN;
    if (!charlm_build(&m, o.hidden, o.embedding, o.bf16))
        status = charlm_fail("charlm");
    else if (eg_model_load_weights(m.model, o.checkpoint) != EG_OK)
        status = charlm_fail(o.checkpoint);
    else if (!charlm_bpc(&m, kjv.test, test_n, o.seq_len, carry, &bpc))
        status = charlm_fail("evaluation");
    else
        printf("held-out books: %.4f bits per character over %lld characters (%s)\n", bpc,
               (long long)test_n,
               carry ? "each from all before it" : "each from the start of its window");
    eg_model_free(m.model);
    eg_kjv_free(&kjv);
    return status;
}

int cli_generate(int argc, char **argv) {
    charlm_options o;
    int parsed = parse("generate", argc, argv, &o);
    if (parsed != CLI_OK) return parsed < 0 ? CLI_OK : parsed;
    if (!o.checkpoint) return cli_usage_error("generate", "--checkpoint FILE is required");
    if (o.threads > 0 && eg_set_num_threads((int)o.threads) != EG_OK)
        return charlm_fail("--threads");
    return run_generate(&o);
}
