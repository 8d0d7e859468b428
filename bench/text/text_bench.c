/* Eagle's side of bench/text (run.sh): trains a character LM for timed repeats of a fixed number
 * of steps and prints one machine-readable line per repeat, which torch_text.py prints the same
 * way for PyTorch:
 *   bench_text --model lstm|transformer [--threads N] [--steps N] [--warmup N] [--repeat N]
 *              [--batch N] [--seq-len N] [--learning-rate X] [--seed N] [--data FILE]
 *              [--profile 1]                 Eagle's per-op profile of the timed steps, at the end
 *              [--policy mixed_bfloat16]     the layers' mixed-precision policy (nn.h)
 *   bench_text --dump-text FILE [--data FILE]    the training text, for torch_text.py
 *   bench_text --attention-memory [--length T]   the fused attention's memory (one head of 64)
 * lstm is `eagle train --model charlm`'s model (tools/eagle/charlm.c): Embedding(256, 64) ->
 * LSTM(512, return_sequences) -> Dense(256), Adam with global clipnorm 1. transformer is
 * Embedding(256, 256) + PositionEmbedding -> 4 causal post-LN TransformerEncoder blocks (4 heads,
 * feed-forward 1024, no dropout) -> Dense(256), the same optimizer. The batches are windows of the
 * King James Bible's training books at offsets drawn by splitmix64 from the seed, step after step
 * (warm-up steps first), which torch_text.py draws alike; the "batches" line's hash of every
 * offset lets report.py check that both sides trained on the same windows. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "eagle.h"

enum { VOCAB = 256, MAX_VARS = 128 };

typedef struct options {
    const char *model, *data_path, *dump_path, *policy;
    long threads, steps, warmup, repeat, batch, seq_len, length, profile;
    double learning_rate;
    unsigned long long seed;
    bool attention_memory;
} options;

static double clock_seconds(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int fail(const char *what) {
    fprintf(stderr, "bench_text: %s: %s\n", what, eg_last_error());
    return 1;
}

static eg_model *build_lstm(void) {
    eg_model *m = eg_sequential_new("charlm");
    eg_rnn_options ro = eg_rnn_options_default();
    ro.return_sequences = true;
    bool ok = m && eg_sequential_add(m, eg_embedding_new(VOCAB, 64, NULL)) == EG_OK &&
              eg_sequential_add(m, eg_lstm_new(512, &ro)) == EG_OK &&
              eg_sequential_add(m, eg_dense_new(VOCAB, EG_ACTIVATION_NONE)) == EG_OK;
    return ok ? m : NULL;
}

static eg_model *build_transformer(int64_t seq_len) {
    enum { WIDTH = 256, BLOCKS = 4, HEADS = 4, FFN = 1024 };
    eg_model *m = eg_sequential_new("transformer_lm");
    bool ok = m && eg_sequential_add(m, eg_embedding_new(VOCAB, WIDTH, NULL)) == EG_OK &&
              eg_sequential_add(m, eg_position_embedding_new(seq_len, NULL)) == EG_OK;
    eg_transformer_options to = eg_transformer_options_default(HEADS, FFN);
    to.causal = true;
    for (int b = 0; ok && b < BLOCKS; b++)
        ok = eg_sequential_add(m, eg_transformer_encoder_new(&to)) == EG_OK;
    ok = ok && eg_sequential_add(m, eg_dense_new(VOCAB, EG_ACTIVATION_NONE)) == EG_OK;
    return ok ? m : NULL;
}

/* Mean cross-entropy in nats of predicting y (B, T) from x (B, T), as charlm trains it. */
static eg_tensor *sequence_loss(eg_model *model, const eg_tensor *x, const eg_tensor *y) {
    const int64_t *shape = eg_tensor_shape(x);
    int64_t rows = shape[0] * shape[1];
    eg_tensor *logits = eg_model_call(model, x, true);
    eg_tensor *flat = logits ? eg_reshape(logits, 2, (const int64_t[]){rows, VOCAB}) : NULL;
    /* under a mixed policy the logits are 16-bit: the loss is computed in f32 */
    if (flat && eg_tensor_dtype(flat) != EG_DTYPE_F32) flat = eg_cast(flat, EG_DTYPE_F32);
    eg_tensor *labels = eg_reshape(y, 1, &rows);
    return flat && labels ? eg_mean(eg_sparse_softmax_cross_entropy(flat, labels), 0, NULL, false)
                          : NULL;
}

/* One training step on the next batch of windows; *loss gets its mean cross-entropy (nats). */
static bool train_step(eg_model *model, eg_optimizer *adam, const eg_kjv *kjv, const options *o,
                       uint64_t *rng, uint64_t *hash, int32_t *x, int32_t *y, double *loss_out) {
    uint64_t span = (uint64_t)(kjv->train_length - o->seq_len - 1);
    for (long r = 0; r < o->batch; r++) {
        uint64_t offset = splitmix64(rng) % span;
        *hash = (*hash ^ offset) * 0x100000001B3ull; /* FNV-1a over the offsets */
        for (long t = 0; t < o->seq_len; t++) {
            x[r * o->seq_len + t] = (unsigned char)kjv->train[offset + (uint64_t)t];
            y[r * o->seq_len + t] = (unsigned char)kjv->train[offset + (uint64_t)t + 1];
        }
    }
    eg_scope_begin();
    int64_t shape[2] = {o->batch, o->seq_len};
    eg_tensor *xt = eg_tensor_from_data(x, EG_DTYPE_I32, 2, shape);
    eg_tensor *yt = eg_tensor_from_data(y, EG_DTYPE_I32, 2, shape);
    int n_vars = 0;
    eg_tensor *const *vars = eg_model_trainable_variables(model, &n_vars);
    eg_tensor *grads[MAX_VARS] = {NULL};
    eg_tape *tape = eg_tape_begin(false);
    eg_tensor *loss = xt && yt ? sequence_loss(model, xt, yt) : NULL;
    bool ok = loss && vars && n_vars <= MAX_VARS &&
              eg_tape_gradient(tape, loss, n_vars, vars, grads, EG_UNCONNECTED_ZERO) == EG_OK &&
              eg_optimizer_apply_gradients(adam, n_vars, grads, vars) == EG_OK;
    eg_tape_free(tape);
    if (ok) *loss_out = eg_item(loss);
    eg_scope_end();
    return ok;
}

static int run_training(const options *o) {
    bool lstm = !strcmp(o->model, "lstm");
    if (!lstm && strcmp(o->model, "transformer")) {
        fprintf(stderr, "bench_text: --model %s: lstm or transformer\n", o->model);
        return 2;
    }
    eg_kjv kjv;
    if (eg_kjv_load(o->data_path, &kjv) != EG_OK) return fail("the King James Bible");
    eg_manual_seed(o->seed);
    eg_policy policy = EG_POLICY_FLOAT32;
    if (o->policy &&
        (eg_policy_from_name(o->policy, &policy) != EG_OK || eg_set_global_policy(policy) != EG_OK))
        return fail("--policy");
    /* the model's name in the results says its precision: "transformer-bf16" */
    const char *suffix = policy == EG_POLICY_MIXED_BFLOAT16  ? "-bf16"
                         : policy == EG_POLICY_MIXED_FLOAT16 ? "-f16"
                                                             : "";
    eg_model *model = lstm ? build_lstm() : build_transformer(o->seq_len);
    eg_adam_options ao = eg_adam_options_default();
    ao.learning_rate = eg_schedule_constant(o->learning_rate);
    ao.clipping.global_clipnorm = 1.0;
    eg_optimizer *adam = eg_adam_new(&ao);
    int32_t *x = malloc(sizeof *x * (size_t)(o->batch * o->seq_len));
    int32_t *y = malloc(sizeof *y * (size_t)(o->batch * o->seq_len));
    int status = 0;
    if (!model || !adam || !x || !y ||
        eg_model_build(model, 2, (const int64_t[]){-1, o->seq_len}) != EG_OK) {
        status = fail(o->model);
        goto done;
    }
    printf("eagle %s, %d thread(s), %lld parameters\n", o->model, eg_get_num_threads(),
           (long long)eg_model_count_params(model));
    uint64_t rng = o->seed, hash = 0xCBF29CE484222325ull;
    double loss = NAN;
    for (long s = 0; s < o->warmup; s++)
        if (!train_step(model, adam, &kjv, o, &rng, &hash, x, y, &loss)) {
            status = fail("warm-up step");
            goto done;
        }
    if (o->profile) eg_profiler_start(EG_PROFILE_OPS);
    for (long r = 0; r < o->repeat; r++) {
        double wall = clock_seconds(CLOCK_MONOTONIC), cpu = clock_seconds(CLOCK_PROCESS_CPUTIME_ID),
               total = 0;
        for (long s = 0; s < o->steps; s++) {
            if (!train_step(model, adam, &kjv, o, &rng, &hash, x, y, &loss)) {
                status = fail("train step");
                goto done;
            }
            total += loss;
        }
        wall = clock_seconds(CLOCK_MONOTONIC) - wall;
        cpu = clock_seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu;
        printf("result framework=eagle model=%s%s threads=%d batch=%ld seq=%ld steps=%ld "
               "repeat=%ld seconds=%.6f cpu_seconds=%.6f bits_per_char=%.4f\n",
               o->model, suffix, eg_get_num_threads(), o->batch, o->seq_len, o->steps, r, wall, cpu,
               total / (double)o->steps / log(2.0));
        fflush(stdout);
    }
    if (o->profile) {
        eg_profiler_stop();
        eg_profiler_report(stdout, 0);
    }
    printf("batches framework=eagle model=%s%s threads=%d seed=%llu hash=%016llx\n", o->model,
           suffix, eg_get_num_threads(), o->seed, (unsigned long long)hash);
done:
    free(x);
    free(y);
    eg_optimizer_free(adam);
    eg_model_free(model);
    eg_kjv_free(&kjv);
    return status;
}

static int dump_text(const options *o) {
    eg_kjv kjv;
    if (eg_kjv_load(o->data_path, &kjv) != EG_OK) return fail("the King James Bible");
    FILE *f = fopen(o->dump_path, "wb");
    bool ok = f && fwrite(kjv.train, 1, (size_t)kjv.train_length, f) == (size_t)kjv.train_length;
    ok = f && !fclose(f) && ok;
    eg_kjv_free(&kjv);
    if (!ok) perror(o->dump_path);
    return ok ? 0 : 1;
}

/* The process's resident set (VmRSS) and its peak (VmHWM) from /proc/self/status, in bytes. */
static bool resident_bytes(double *rss, double *peak) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb;
    int found = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) *rss = 1024.0 * (double)kb, found++;
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1) *peak = 1024.0 * (double)kb, found++;
    }
    if (f) fclose(f);
    return found == 2;
}

/* Writing 5 to clear_refs sets the peak resident set to the present one (Linux 4.0 on). */
static bool reset_resident_peak(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    return f && fputs("5", f) >= 0 && !fclose(f);
}

/* tests/test_attention.c's figure: what a causal forward and backward at length T (one head of
 * 64) allocate beyond their inputs, by Eagle's allocator; and the resident set's growth over the
 * same, as torch_text.py measures PyTorch's. A inputs call first loads the code paths. */
static int attention_memory(const options *o) {
    const int64_t t = o->length, d = 64;
    eg_generator *g = eg_generator_new(o->seed);
    eg_tensor *qkv[3], *grads[3] = {NULL};
    for (int i = 0; i < 3; i++)
        qkv[i] = eg_random_uniform(g, EG_DTYPE_F32, 4, (const int64_t[]){1, 1, t, d}, -1, 1);
    for (int pass = 0; pass < 2; pass++) {
        eg_tensor *inputs[3];
        for (int i = 0; i < 3; i++) inputs[i] = pass ? qkv[i] : eg_slice(qkv[i], 2, 0, 64, 1);
        eg_memory_stats before, after;
        double rss = 0, peak = 0;
        eg_memory_stats_get(eg_device_cpu(), &before);
        eg_memory_reset_peak(eg_device_cpu());
        bool ok = reset_resident_peak() && resident_bytes(&rss, &peak);
        eg_scope_begin();
        eg_tape *tape = eg_tape_begin(false);
        for (int i = 0; i < 3; i++) eg_tape_watch(tape, inputs[i]);
        eg_tensor *yv =
            eg_scaled_dot_product_attention(inputs[0], inputs[1], inputs[2], NULL, true, 0);
        eg_tensor *loss = eg_sum(yv, 0, NULL, false);
        ok = ok && eg_tape_gradient(tape, loss, 3, inputs, grads, EG_UNCONNECTED_ZERO) == EG_OK;
        eg_tape_free(tape);
        eg_scope_end();
        eg_memory_stats_get(eg_device_cpu(), &after);
        double rss_after = 0;
        ok = ok && resident_bytes(&rss_after, &peak);
        if (!ok) return fail("attention");
        if (pass) {
            double used = (double)after.peak_bytes_in_use - (double)before.bytes_in_use;
            printf("memory framework=eagle method=allocator_peak T=%lld D=%lld bytes=%.0f\n",
                   (long long)t, (long long)d, used);
            printf("memory framework=eagle method=rss_peak T=%lld D=%lld bytes=%.0f\n",
                   (long long)t, (long long)d, peak - rss);
        } else {
            for (int i = 0; i < 3; i++) eg_release(inputs[i]);
        }
    }
    for (int i = 0; i < 3; i++) eg_release(qkv[i]);
    eg_generator_free(g);
    return 0;
}

int main(int argc, char **argv) {
    options o = {.model = "lstm",
                 .steps = 20,
                 .warmup = 3,
                 .repeat = 3,
                 .batch = 32,
                 .seq_len = 128,
                 .length = 4096,
                 .learning_rate = 0,
                 .seed = 42};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--attention-memory")) {
            o.attention_memory = true;
            continue;
        }
        const char *v = i + 1 < argc ? argv[++i] : NULL;
        if (!v) {
            fprintf(stderr, "bench_text: usage: see the top of bench/text/text_bench.c\n");
            return 2;
        }
        if (!strcmp(a, "--model"))
            o.model = v;
        else if (!strcmp(a, "--threads"))
            o.threads = atol(v);
        else if (!strcmp(a, "--steps"))
            o.steps = atol(v);
        else if (!strcmp(a, "--warmup"))
            o.warmup = atol(v);
        else if (!strcmp(a, "--repeat"))
            o.repeat = atol(v);
        else if (!strcmp(a, "--batch"))
            o.batch = atol(v);
        else if (!strcmp(a, "--seq-len"))
            o.seq_len = atol(v);
        else if (!strcmp(a, "--length"))
            o.length = atol(v);
        else if (!strcmp(a, "--learning-rate"))
            o.learning_rate = atof(v);
        else if (!strcmp(a, "--seed"))
            o.seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--data"))
            o.data_path = v;
        else if (!strcmp(a, "--policy"))
            o.policy = v;
        else if (!strcmp(a, "--profile"))
            o.profile = atol(v);
        else if (!strcmp(a, "--dump-text"))
            o.dump_path = v;
        else {
            fprintf(stderr, "bench_text: unknown option '%s'\n", a);
            return 2;
        }
    }
    if (o.batch < 1 || o.seq_len < 2 || o.steps < 1 || o.repeat < 1 || o.warmup < 0 ||
        o.length < 64) {
        fprintf(stderr, "bench_text: batch, steps and repeat >= 1, seq-len >= 2, length >= 64\n");
        return 2;
    }
    if (o.threads > 0 && eg_set_num_threads((int)o.threads) != EG_OK) return fail("--threads");
    if (o.learning_rate <= 0) o.learning_rate = strcmp(o.model, "lstm") ? 1e-3 : 2e-3;
    if (o.dump_path) return dump_text(&o);
    if (o.attention_memory) return attention_memory(&o);
    return run_training(&o);
}
