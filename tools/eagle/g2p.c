/* `eagle train|eval|generate --model g2p`: grapheme-to-phoneme conversion on CMUdict
 * (eagle/io.h), a Transformer encoder-decoder from spelling to phonemes trained for a time budget
 * with teacher forcing and scored by greedy decoding (or beam search) on the held-out words: word
 * error rate (a word is right only when its whole phoneme sequence is) and phoneme error rate
 * (edit distance over reference phonemes).
 *
 * A held-out word with several pronunciations counts as right when the output is any of them,
 * and its phoneme errors are counted against the closest one (fewest edits), as Phonetisaurus'
 * and the published Transformer scores on CMUdict count them.
 *
 * Spelling ids: 0 padding, 1..29 "a".."z", "'", "-", ".", 30 anything else. Phoneme ids: 0
 * padding, 1 start, 2 end, 3 + the loader's phoneme id. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "eagle.h"

enum {
    SRC_VOCAB = 31,
    TGT_VOCAB = 3 + EG_CMUDICT_PHONEMES,
    PAD = 0,
    START = 1,
    END = 2,
    MAX_LEN = 48, /* the position tables; CMUdict's longest spelling and pronunciation are 28 */
    MAX_LAYERS = 8,
};

static const char ALPHABET[] = "abcdefghijklmnopqrstuvwxyz'-.";

typedef struct g2p_options {
    const char *data_path; /* NULL: the installed dictionary */
    const char *save_path;
    const char *checkpoint; /* generate */
    const char *words[64];  /* generate: decoded together, in one batch */
    int n_words;
    long d_model, layers, heads, batch, steps, threads, eval_words, eval_every, warmup, beam;
    double minutes, learning_rate, dropout, label_smoothing;
    unsigned long long seed;
} g2p_options;

typedef struct g2p {
    eg_model *model; /* owns the layers: their variables, saving and loading */
    eg_layer *src_embedding, *src_position, *tgt_embedding, *tgt_position, *dropout, *output;
    eg_layer *encoder[MAX_LAYERS], *decoder[MAX_LAYERS];
    int layers;
} g2p;

static int g2p_fail(const char *what) {
    fprintf(stderr, "eagle: %s: %s\n", what, eg_last_error());
    return CLI_FAILURE;
}

static int32_t spelling_id(char c) {
    if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
    const char *at = c ? strchr(ALPHABET, c) : NULL;
    return at ? (int32_t)(at - ALPHABET) + 1 : SRC_VOCAB - 1;
}

/* The graph is made with the functional API so that one model holds every variable (listed,
 * summarized, saved and loaded by name); training and decoding call the layers themselves, so
 * that decoding runs the encoder once per word and the decoder once per output phoneme. */
static bool g2p_build(g2p *m, const g2p_options *o) {
    memset(m, 0, sizeof *m);
    m->layers = (int)o->layers;
    eg_embedding_options eo = eg_embedding_options_default();
    eo.mask_zero = true;
    m->src_embedding = eg_embedding_new(SRC_VOCAB, o->d_model, &eo);
    m->tgt_embedding = eg_embedding_new(TGT_VOCAB, o->d_model, &eo);
    m->src_position = eg_position_embedding_new(MAX_LEN, "spelling_position");
    m->tgt_position = eg_position_embedding_new(MAX_LEN, "phoneme_position");
    m->dropout = eg_dropout_new(o->dropout, NULL);
    m->output = eg_dense_new(TGT_VOCAB, EG_ACTIVATION_NONE);
    eg_transformer_options to = eg_transformer_options_default((int)o->heads, 4 * o->d_model);
    to.dropout = o->dropout;
    for (int l = 0; l < m->layers; l++) {
        m->encoder[l] = eg_transformer_encoder_new(&to);
        m->decoder[l] = eg_transformer_decoder_new(&to);
    }
    eg_symbol *src = eg_input(1, (const int64_t[]){-1}, EG_DTYPE_I32, "spelling");
    eg_symbol *src_mask = eg_input(1, (const int64_t[]){-1}, EG_DTYPE_BOOL, "spelling_mask");
    eg_symbol *tgt = eg_input(1, (const int64_t[]){-1}, EG_DTYPE_I32, "phonemes");
    eg_symbol *tgt_mask = eg_input(1, (const int64_t[]){-1}, EG_DTYPE_BOOL, "phonemes_mask");
    eg_symbol *h = eg_layer_apply(
        m->dropout, eg_layer_apply(m->src_position, eg_layer_apply(m->src_embedding, src)));
    for (int l = 0; l < m->layers && h; l++)
        h = eg_layer_apply_multi(m->encoder[l], 2, (const eg_symbol *[]){h, src_mask});
    eg_symbol *g = eg_layer_apply(
        m->dropout, eg_layer_apply(m->tgt_position, eg_layer_apply(m->tgt_embedding, tgt)));
    for (int l = 0; l < m->layers && g && h; l++)
        g = eg_layer_apply_multi(m->decoder[l], 4, (const eg_symbol *[]){g, h, tgt_mask, src_mask});
    eg_symbol *logits = g ? eg_layer_apply(m->output, g) : NULL;
    if (!logits) return false;
    m->model = eg_functional_model_new(4, (const eg_symbol *[]){src, src_mask, tgt, tgt_mask}, 1,
                                       (const eg_symbol *[]){logits}, "g2p");
    return m->model != NULL;
}

/* The encoder's outputs (B, S, d) for spellings (B, S) and their mask. */
static eg_tensor *encode(g2p *m, const eg_tensor *src, const eg_tensor *src_mask, bool training) {
    eg_tensor *h = eg_layer_call(
        m->dropout,
        eg_layer_call(m->src_position, eg_layer_call(m->src_embedding, src, training), training),
        training);
    for (int l = 0; l < m->layers && h; l++)
        h = eg_layer_call_multi(m->encoder[l], 2, (eg_tensor *const[]){h, (eg_tensor *)src_mask},
                                training);
    return h;
}

/* Logits (B, T, TGT_VOCAB) of the phoneme after each of tgt (B, T), reading the encoder's. */
static eg_tensor *decode(g2p *m, const eg_tensor *tgt, const eg_tensor *tgt_mask,
                         const eg_tensor *encoded, const eg_tensor *src_mask, bool training) {
    eg_tensor *g = eg_layer_call(
        m->dropout,
        eg_layer_call(m->tgt_position, eg_layer_call(m->tgt_embedding, tgt, training), training),
        training);
    for (int l = 0; l < m->layers && g; l++)
        g = eg_layer_call_multi(m->decoder[l], 4,
                                (eg_tensor *const[]){g, (eg_tensor *)encoded, (eg_tensor *)tgt_mask,
                                                     (eg_tensor *)src_mask},
                                training);
    return g ? eg_layer_call(m->output, g, training) : NULL;
}

/* ---- batches ---- */

static uint64_t splitmix(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void shuffle(int64_t *a, int64_t n, uint64_t *rng) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(splitmix(rng) % (uint64_t)(i + 1)), t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* A batch's tensors: spellings and their mask (B, S), decoder inputs (start + phonemes) and
 * their mask (B, T), targets (phonemes + end) and their weights (B * T,), 0 at padding. */
typedef struct batch {
    eg_tensor *src, *src_mask, *tgt, *tgt_mask, *labels, *weights;
    int64_t tokens;
} batch;

static bool make_batch(const eg_cmudict *d, const int64_t *entries, int64_t n, batch *b) {
    int64_t S = 1, T = 1;
    for (int64_t i = 0; i < n; i++) {
        const eg_cmudict_entry *e = &d->entries[entries[i]];
        if (d->words[e->word].length > S) S = d->words[e->word].length;
        if (e->n_phonemes + 1 > T) T = e->n_phonemes + 1;
    }
    if (S > MAX_LEN || T > MAX_LEN) {
        fprintf(stderr, "eagle: a word longer than %d letters or phonemes\n", MAX_LEN);
        return false;
    }
    size_t ns = (size_t)(n * S), nt = (size_t)(n * T);
    int32_t *src = calloc(ns, sizeof *src), *tgt = calloc(nt, sizeof *tgt);
    int32_t *labels = calloc(nt, sizeof *labels);
    bool *src_mask = calloc(ns, sizeof *src_mask), *tgt_mask = calloc(nt, sizeof *tgt_mask);
    float *weights = calloc(nt, sizeof *weights);
    bool ok = src && tgt && labels && src_mask && tgt_mask && weights;
    b->tokens = 0;
    for (int64_t i = 0; ok && i < n; i++) {
        const eg_cmudict_entry *e = &d->entries[entries[i]];
        const eg_cmudict_word *w = &d->words[e->word];
        for (int64_t s = 0; s < w->length; s++) {
            src[i * S + s] = spelling_id(w->spelling[s]);
            src_mask[i * S + s] = true;
        }
        for (int64_t t = 0; t <= e->n_phonemes; t++) {
            tgt[i * T + t] = t ? 3 + e->phonemes[t - 1] : START;
            tgt_mask[i * T + t] = true;
            labels[i * T + t] = t < e->n_phonemes ? 3 + e->phonemes[t] : END;
            weights[i * T + t] = 1;
        }
        b->tokens += e->n_phonemes + 1;
    }
    int64_t ss[2] = {n, S}, ts[2] = {n, T}, flat = n * T;
    if (ok) {
        b->src = eg_tensor_from_data(src, EG_DTYPE_I32, 2, ss);
        b->src_mask = eg_tensor_from_data(src_mask, EG_DTYPE_BOOL, 2, ss);
        b->tgt = eg_tensor_from_data(tgt, EG_DTYPE_I32, 2, ts);
        b->tgt_mask = eg_tensor_from_data(tgt_mask, EG_DTYPE_BOOL, 2, ts);
        b->labels = eg_tensor_from_data(labels, EG_DTYPE_I32, 1, &flat);
        b->weights = eg_tensor_from_data(weights, EG_DTYPE_F32, 1, &flat);
        ok = b->src && b->src_mask && b->tgt && b->tgt_mask && b->labels && b->weights;
    }
    free(src);
    free(tgt);
    free(labels);
    free(src_mask);
    free(tgt_mask);
    free(weights);
    return ok;
}

/* Training batches of similar lengths (little padding): each epoch the entries are shuffled,
 * sorted by spelling length (stable, so the order within a length stays random), cut into
 * batches, and the batches shuffled. */
typedef struct batcher {
    int64_t *order, n, next, end, batch;
    uint64_t rng;
    const eg_cmudict *dict;
} batcher;

/* qsort's comparison takes no context: the lengths it ranks by. */
static int64_t *by_length_scratch_lengths;
static int by_length(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    int64_t lx = by_length_scratch_lengths[x], ly = by_length_scratch_lengths[y];
    return lx != ly ? (lx < ly ? -1 : 1) : (x < y ? -1 : x > y);
}

/* Batches of bt->batch entries; the last, partial one of each epoch is left out. */
static bool batcher_epoch(batcher *bt) {
    int64_t n = bt->n, n_batches = n / bt->batch;
    int64_t *rank = malloc(sizeof *rank * (size_t)n),
            *lengths = malloc(sizeof *lengths * (size_t)n);
    int64_t *batches = malloc(sizeof *batches * (size_t)(n_batches ? n_batches : 1));
    int64_t *sorted = malloc(sizeof *sorted * (size_t)n);
    bool ok = rank && lengths && batches && sorted;
    if (ok) {
        shuffle(bt->order, n, &bt->rng);
        for (int64_t i = 0; i < n; i++) {
            const eg_cmudict_entry *e = &bt->dict->entries[bt->order[i]];
            lengths[i] = bt->dict->words[e->word].length;
            rank[i] = i;
        }
        by_length_scratch_lengths = lengths;
        qsort(rank, (size_t)n, sizeof *rank, by_length);
        for (int64_t i = 0; i < n_batches; i++) batches[i] = i;
        shuffle(batches, n_batches, &bt->rng);
        int64_t at = 0;
        for (int64_t i = 0; i < n_batches; i++)
            for (int64_t j = batches[i] * bt->batch; j < (batches[i] + 1) * bt->batch; j++)
                sorted[at++] = bt->order[rank[j]];
        memcpy(bt->order, sorted, sizeof *sorted * (size_t)at);
        bt->next = 0;
        bt->end = at;
    }
    free(rank);
    free(lengths);
    free(batches);
    free(sorted);
    return ok;
}

/* The next batch's entries (bt->batch of them), starting a new epoch when one is used up. */
static const int64_t *batcher_next(batcher *bt) {
    if (bt->next + bt->batch > bt->end && !batcher_epoch(bt)) return NULL;
    const int64_t *entries = bt->order + bt->next;
    bt->next += bt->batch;
    return entries;
}

/* ---- scoring ---- */

static int edit_distance(const uint8_t *a, int na, const uint8_t *b, int nb) {
    int row[MAX_LEN + 1];
    for (int j = 0; j <= nb; j++) row[j] = j;
    for (int i = 1; i <= na; i++) {
        int diagonal = row[0];
        row[0] = i;
        for (int j = 1; j <= nb; j++) {
            int up = row[j];
            int best = diagonal + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diagonal = up;
        }
    }
    return row[nb];
}

/* The K best continuations of one word's beams: candidates (score, beam, token) kept sorted. */
typedef struct candidate {
    double score;
    int beam, token; /* token -1: the beam had ended and carries over */
} candidate;

static void offer(candidate *best, int k, int *count, candidate c) {
    if (*count == k && c.score <= best[k - 1].score) return;
    int i = *count < k ? (*count)++ : k - 1;
    while (i > 0 && best[i - 1].score < c.score) {
        best[i] = best[i - 1];
        i--;
    }
    best[i] = c;
}

/* Beam search (beam 1: greedy decoding) over n spellings, each word's `beam` hypotheses ranked by
 * the sum of their phonemes' log-probabilities: out[i * MAX_LEN ...] gets word i's best phoneme
 * ids (the loader's), lengths[i] their count. A hypothesis ends at the end symbol or after the
 * spelling's length + 8 phonemes. The decoder reruns on the whole prefix at each step (no cache:
 * the prefixes are a few phonemes). */
static bool beam_decode(g2p *m, const char *const *spellings, int64_t n, int beam, uint8_t *out,
                        int *lengths) {
    int64_t S = 1, K = beam, R = n * K;
    for (int64_t i = 0; i < n; i++) {
        int64_t len = (int64_t)strlen(spellings[i]);
        if (len > S) S = len;
    }
    if (S > MAX_LEN) {
        fprintf(stderr, "eagle: a spelling longer than %d letters\n", MAX_LEN);
        return false;
    }
    int64_t limit = S + 9 < MAX_LEN ? S + 9 : MAX_LEN;
    int32_t *src = calloc((size_t)(R * S), sizeof *src);
    int32_t *prefix = calloc((size_t)(R * limit), sizeof *prefix);
    int32_t *next_prefix = calloc((size_t)(R * limit), sizeof *next_prefix);
    int32_t *window = calloc((size_t)(R * limit), sizeof *window);
    bool *src_mask = calloc((size_t)(R * S), sizeof *src_mask);
    bool *ended = calloc((size_t)R, sizeof *ended), *next_ended = calloc((size_t)R, 1);
    bool *visible = malloc((size_t)(R * limit));
    double *scores = malloc(sizeof *scores * (size_t)R),
           *next_scores = malloc(sizeof *scores * (size_t)R);
    candidate *best = malloc(sizeof *best * (size_t)K);
    bool ok = src && prefix && next_prefix && window && src_mask && ended && next_ended &&
              visible && scores && next_scores && best;
    for (int64_t r = 0; ok && r < R; r++) {
        const char *w = spellings[r / K];
        for (int64_t s = 0; w[s]; s++) {
            src[r * S + s] = spelling_id(w[s]);
            src_mask[r * S + s] = true;
        }
        prefix[r * limit] = START;
        scores[r] = r % K ? -INFINITY : 0; /* the beams start as one */
    }
    for (int64_t i = 0; ok && i < R * limit; i++) visible[i] = true;
    eg_scope_begin();
    eg_tensor *src_t =
        ok ? eg_tensor_from_data(src, EG_DTYPE_I32, 2, (const int64_t[]){R, S}) : NULL;
    eg_tensor *mask_t =
        ok ? eg_tensor_from_data(src_mask, EG_DTYPE_BOOL, 2, (const int64_t[]){R, S}) : NULL;
    eg_tensor *encoded = src_t && mask_t ? encode(m, src_t, mask_t, false) : NULL;
    ok = encoded != NULL;
    int64_t t = 1;
    for (bool all_ended = false; ok && t < limit && !all_ended; t++) {
        eg_scope_begin();
        for (int64_t r = 0; r < R; r++)
            memcpy(window + r * t, prefix + r * limit, sizeof *window * (size_t)t);
        eg_tensor *tgt_t = eg_tensor_from_data(window, EG_DTYPE_I32, 2, (const int64_t[]){R, t});
        eg_tensor *tgt_mask =
            eg_tensor_from_data(visible, EG_DTYPE_BOOL, 2, (const int64_t[]){R, t});
        eg_tensor *logits =
            tgt_t && tgt_mask ? decode(m, tgt_t, tgt_mask, encoded, mask_t, false) : NULL;
        eg_tensor *last =
            logits ? eg_contiguous(eg_log_softmax(eg_slice(logits, 1, t - 1, t, 1), -1)) : NULL;
        ok = last != NULL;
        const float *logp = ok ? eg_tensor_data(last) : NULL;
        all_ended = true;
        for (int64_t i = 0; ok && i < n; i++) {
            int count = 0;
            for (int k = 0; k < K; k++) {
                int64_t r = i * K + k;
                if (ended[r]) {
                    offer(best, (int)K, &count, (candidate){scores[r], k, -1});
                    continue;
                }
                for (int v = END; v < TGT_VOCAB; v++)
                    offer(best, (int)K, &count,
                          (candidate){scores[r] + logp[r * TGT_VOCAB + v], k, v});
            }
            for (int j = 0; j < K; j++) {
                int64_t to = i * K + j, from = i * K + (j < count ? best[j].beam : 0);
                memcpy(next_prefix + to * limit, prefix + from * limit,
                       sizeof *prefix * (size_t)limit);
                next_scores[to] = j < count ? best[j].score : -INFINITY;
                next_ended[to] = j >= count || best[j].token < 0 || best[j].token == END;
                if (j < count && best[j].token >= 0) next_prefix[to * limit + t] = best[j].token;
                all_ended = all_ended && next_ended[to];
            }
        }
        int32_t *swap_prefix = prefix;
        prefix = next_prefix;
        next_prefix = swap_prefix;
        double *swap_scores = scores;
        scores = next_scores;
        next_scores = swap_scores;
        bool *swap_ended = ended;
        ended = next_ended;
        next_ended = swap_ended;
        eg_scope_end();
    }
    eg_scope_end();
    /* each word's beam 0 ranks first */
    for (int64_t i = 0; ok && i < n; i++) {
        const int32_t *p = prefix + i * K * limit;
        lengths[i] = 0;
        for (int64_t j = 1; j < t && p[j] >= 3; j++)
            out[i * MAX_LEN + lengths[i]++] = (uint8_t)(p[j] - 3);
    }
    free(src);
    free(prefix);
    free(next_prefix);
    free(window);
    free(src_mask);
    free(ended);
    free(next_ended);
    free(visible);
    free(scores);
    free(next_scores);
    free(best);
    return ok;
}

typedef struct score {
    int64_t words, wrong_words, phonemes, phoneme_errors;
} score;

/* Decodes the first n held-out words in batches of similar lengths and scores them. */
static bool evaluate(g2p *m, const eg_cmudict *d, int64_t n, int beam, score *sc) {
    enum { EVAL_BATCH = 256 };
    memset(sc, 0, sizeof *sc);
    int64_t *test = malloc(sizeof *test * (size_t)(d->n_test_words ? d->n_test_words : 1));
    int64_t *lengths = malloc(sizeof *lengths * (size_t)(d->n_words ? d->n_words : 1));
    uint8_t *out = malloc((size_t)EVAL_BATCH * MAX_LEN);
    int found[EVAL_BATCH];
    const char *spellings[EVAL_BATCH];
    bool ok = test && lengths && out;
    int64_t k = 0;
    for (int64_t w = 0; ok && w < d->n_words && k < n; w++)
        if (d->words[w].test) test[k++] = w;
    n = k;
    for (int64_t w = 0; ok && w < d->n_words; w++) lengths[w] = d->words[w].length;
    if (ok) {
        by_length_scratch_lengths = lengths;
        qsort(test, (size_t)n, sizeof *test, by_length);
    }
    for (int64_t first = 0; ok && first < n; first += EVAL_BATCH) {
        int64_t count = n - first < EVAL_BATCH ? n - first : EVAL_BATCH;
        for (int64_t i = 0; i < count; i++) spellings[i] = d->words[test[first + i]].spelling;
        ok = beam_decode(m, spellings, count, beam, out, found);
        for (int64_t i = 0; ok && i < count; i++) {
            const eg_cmudict_word *w = &d->words[test[first + i]];
            int best = -1, best_length = 0;
            for (int32_t r = 0; r < w->n_entries; r++) {
                const eg_cmudict_entry *e = &d->entries[w->first_entry + r];
                int dist = edit_distance(out + i * MAX_LEN, found[i], e->phonemes, e->n_phonemes);
                if (best < 0 || dist < best) {
                    best = dist;
                    best_length = e->n_phonemes;
                }
            }
            sc->words++;
            sc->wrong_words += best != 0;
            sc->phonemes += best_length;
            sc->phoneme_errors += best;
        }
    }
    free(test);
    free(lengths);
    free(out);
    return ok;
}

static void print_score(const char *when, const score *sc) {
    printf("%s: WER %.2f %%  PER %.2f %%  (%lld words, %lld reference phonemes)\n", when,
           100.0 * (double)sc->wrong_words / (double)(sc->words ? sc->words : 1),
           100.0 * (double)sc->phoneme_errors / (double)(sc->phonemes ? sc->phonemes : 1),
           (long long)sc->words, (long long)sc->phonemes);
}

/* ---- training ---- */

/* Mean over the batch's phonemes of the cross-entropy, label-smoothed: (1 - eps) of the target's
 * and eps of the uniform distribution's. */
static eg_tensor *batch_loss(g2p *m, const batch *b, double smoothing) {
    eg_tensor *encoded = encode(m, b->src, b->src_mask, true);
    eg_tensor *logits = encoded ? decode(m, b->tgt, b->tgt_mask, encoded, b->src_mask, true) : NULL;
    int64_t rows = eg_tensor_n_elems(b->labels);
    eg_tensor *flat = logits ? eg_reshape(logits, 2, (const int64_t[]){rows, TGT_VOCAB}) : NULL;
    eg_tensor *ce = flat ? eg_sparse_softmax_cross_entropy(flat, b->labels) : NULL;
    if (ce && smoothing > 0) {
        eg_tensor *uniform = eg_neg(eg_mean(eg_log_softmax(flat, -1), 1, (const int[]){1}, false));
        ce = uniform ? eg_add(eg_mul_scalar(ce, 1 - smoothing), eg_mul_scalar(uniform, smoothing))
                     : NULL;
    }
    eg_tensor *sum = ce ? eg_sum(eg_mul(ce, b->weights), 0, NULL, false) : NULL;
    return sum ? eg_mul_scalar(sum, 1.0 / (double)b->tokens) : NULL;
}

/* Linear warmup, then a cosine decay to 2 % over the run (its steps, or its time budget). */
static double learning_rate(const g2p_options *o, long step, double progress) {
    double warm = step < o->warmup ? (double)(step + 1) / (double)o->warmup : 1;
    return o->learning_rate * warm * cli_cosine_decay(progress, 0.02);
}

static int run_training(const g2p_options *o) {
    eg_cmudict d;
    if (eg_cmudict_load(o->data_path, EG_CMUDICT_TEST_FRACTION, EG_CMUDICT_SEED, &d) != EG_OK)
        return g2p_fail("CMUdict");
    for (int64_t e = 0; e < d.n_entries; e++) {
        const eg_cmudict_entry *entry = &d.entries[e];
        if (d.words[entry->word].length > MAX_LEN || entry->n_phonemes + 1 > MAX_LEN) {
            fprintf(stderr,
                    "eagle: CMUdict: '%s' is longer than g2p takes (%d letters, %d "
                    "phonemes)\n",
                    d.words[entry->word].spelling, MAX_LEN, MAX_LEN - 1);
            eg_cmudict_free(&d);
            return CLI_FAILURE;
        }
    }
    int64_t n_train = d.n_entries - d.n_test_entries;
    printf("CMUdict: %lld training words (%lld pronunciations), %lld held out (%lld); stress "
           "removed, %d phonemes\n",
           (long long)(d.n_words - d.n_test_words), (long long)n_train, (long long)d.n_test_words,
           (long long)d.n_test_entries, EG_CMUDICT_PHONEMES);
    eg_manual_seed(o->seed);
    g2p m = {0};
    batcher bt = {.n = n_train,
                  .batch = o->batch < n_train ? o->batch : n_train,
                  .rng = o->seed ^ 0x6732705ull,
                  .dict = &d};
    bt.order = malloc(sizeof *bt.order * (size_t)(n_train ? n_train : 1));
    eg_adam_options ao = eg_adam_options_default();
    ao.beta_2 = 0.98;
    ao.epsilon = 1e-9;
    ao.clipping.global_clipnorm = 1.0;
    eg_optimizer *adam = eg_adam_new(&ao);
    int status = CLI_OK;
    if (!bt.order || !adam || !g2p_build(&m, o)) {
        status = g2p_fail("g2p");
        goto done;
    }
    if (o->checkpoint && eg_model_load_weights(m.model, o->checkpoint) != EG_OK) {
        status = g2p_fail(o->checkpoint);
        goto done;
    }
    for (int64_t e = 0, k = 0; e < d.n_entries; e++)
        if (!d.words[d.entries[e].word].test) bt.order[k++] = e;
    eg_model_summary(m.model, stdout);
    int n_vars = 0;
    eg_tensor *const *vars = eg_model_trainable_variables(m.model, &n_vars);
    eg_tensor **grads = calloc((size_t)n_vars, sizeof *grads);
    if (!grads) {
        status = g2p_fail("g2p");
        goto done;
    }
    int64_t eval_n = o->eval_words > 0 ? o->eval_words : d.n_test_words;
    cli_interrupt_install();
    double start = cli_seconds(), budget = o->minutes * 60, recent = 0, tokens = 0;
    long step = 0, recent_n = 0;
    while (!o->checkpoint && (o->steps <= 0 || step < o->steps) &&
           (o->steps > 0 || cli_seconds() - start < budget) && !cli_interrupted()) {
        double lr = learning_rate(o, step, cli_run_progress(step, o->steps, start, budget));
        eg_scope_begin();
        batch b = {0};
        const int64_t *entries = batcher_next(&bt);
        bool ok = entries && make_batch(&d, entries, bt.batch, &b) &&
                  eg_optimizer_set_learning_rate(adam, eg_schedule_constant(lr)) == EG_OK;
        eg_tape *tape = ok ? eg_tape_begin(false) : NULL;
        eg_tensor *loss = tape ? batch_loss(&m, &b, o->label_smoothing) : NULL;
        ok = loss &&
             eg_tape_gradient(tape, loss, n_vars, vars, grads, EG_UNCONNECTED_ZERO) == EG_OK &&
             eg_optimizer_apply_gradients(adam, n_vars, grads, vars) == EG_OK;
        eg_tape_free(tape);
        if (ok) {
            recent += eg_item(loss);
            recent_n++;
            tokens += (double)b.tokens;
        }
        eg_scope_end();
        if (!ok) {
            status = g2p_fail("train step");
            break;
        }
        step++;
        if (step % 100 == 0) {
            double seconds = cli_seconds() - start;
            printf("step %ld  %.1f s  epoch %.2f  train loss %.4f  lr %.2e  %.0f phonemes/s\n",
                   step, seconds, (double)step * (double)bt.batch / (double)n_train,
                   recent / (double)recent_n, lr, tokens / seconds);
            fflush(stdout);
            recent = 0;
            recent_n = 0;
        }
        if (o->eval_every > 0 && step % o->eval_every == 0) {
            score sc;
            char when[64];
            snprintf(when, sizeof when, "step %ld (%.0f s)", step, cli_seconds() - start);
            if (!evaluate(&m, &d, eval_n < 1000 ? eval_n : 1000, (int)o->beam, &sc)) {
                status = g2p_fail("evaluation");
                break;
            }
            print_score(when, &sc);
            fflush(stdout);
        }
    }
    double train_seconds = cli_seconds() - start;
    score sc;
    double eval_start = cli_seconds();
    if (status == CLI_OK && !evaluate(&m, &d, eval_n, (int)o->beam, &sc))
        status = g2p_fail("evaluation");
    if (status == CLI_OK) {
        if (o->checkpoint)
            printf("%s: ", o->checkpoint);
        else
            printf("trained %ld steps (%.2f epochs) in %.1f s, %.0f phonemes/s; ", step,
                   (double)step * (double)bt.batch / (double)n_train, train_seconds,
                   tokens / train_seconds);
        printf("%s decoding (beam %ld) of %lld held-out words in %.1f s\n",
               o->beam > 1 ? "beam" : "greedy", o->beam, (long long)sc.words,
               cli_seconds() - eval_start);
        print_score("held-out words", &sc);
        printf("(a word with several pronunciations is right if the output is any of them; its "
               "PER counts the edits to the closest one. Published on CMUdict: Phonetisaurus "
               "33.9 %% WER, a 2-layer Transformer ~31 %%)\n");
        if (o->save_path && !o->checkpoint && eg_model_save_weights(m.model, o->save_path) != EG_OK)
            status = g2p_fail(o->save_path);
        else if (o->save_path)
            printf("saved %s\n", o->save_path);
    }
    free(grads);
done:
    free(bt.order);
    eg_optimizer_free(adam);
    eg_model_free(m.model);
    eg_cmudict_free(&d);
    return status;
}

static int run_generate(const g2p_options *o) {
    g2p m;
    if (!g2p_build(&m, o)) {
        eg_model_free(m.model);
        return g2p_fail("g2p");
    }
    if (eg_model_load_weights(m.model, o->checkpoint) != EG_OK) {
        eg_model_free(m.model);
        return g2p_fail(o->checkpoint);
    }
    uint8_t out[64 * MAX_LEN];
    int lengths[64];
    int status = CLI_OK;
    if (!beam_decode(&m, o->words, o->n_words, (int)o->beam, out, lengths)) {
        status = g2p_fail("generate");
    } else {
        for (int w = 0; w < o->n_words; w++) {
            fputs(o->words[w], stdout);
            for (int i = 0; i < lengths[w]; i++)
                printf(" %s", eg_cmudict_phoneme_name(out[w * MAX_LEN + i]));
            putchar('\n');
        }
    }
    eg_model_free(m.model);
    return status;
}

enum {
    OPT_D_MODEL = 1000,
    OPT_LAYERS,
    OPT_HEADS,
    OPT_BATCH,
    OPT_STEPS,
    OPT_MINUTES,
    OPT_LR,
    OPT_WARMUP,
    OPT_DROPOUT,
    OPT_SMOOTHING,
    OPT_SAVE,
    OPT_DATA,
    OPT_SEED,
    OPT_THREADS,
    OPT_EVAL_WORDS,
    OPT_EVAL_EVERY,
    OPT_CHECKPOINT,
    OPT_WORD,
    OPT_MODEL,
    OPT_BEAM,
};

static void print_help(const char *command) {
    printf("usage: eagle %s --model g2p [options]\n\n", command);
    if (!strcmp(command, "train"))
        printf("Trains a Transformer from spelling to phonemes on CMUdict and reports the word\n"
               "and phoneme error rates of its decoding on the held-out 5 %% of words.\n\n"
               "  --minutes M          training time budget (default 30)\n"
               "  --steps N            train N steps instead of for a time\n"
               "  --batch N            pronunciations per step (default 128)\n"
               "  --learning-rate LR   Adam's peak (default 0.002), global clipnorm 1\n"
               "  --warmup N           steps of linear warmup (default 400), then cosine decay\n"
               "  --dropout P          (default 0)\n"
               "  --label-smoothing E  (default 0.1)\n"
               "  --eval-words N       score only the first N held-out words\n"
               "  --eval-every N       also score 1000 held-out words every N steps (in the time)\n"
               "  --save FILE          the weights as safetensors\n"
               "  --beam K             beam search of K hypotheses (default 1: greedy)\n"
               "  --data FILE          the dictionary (default " EG_CMUDICT_PATH ")\n");
    else if (!strcmp(command, "eval"))
        printf("Scores a model saved by 'eagle train --model g2p --save FILE' on the held-out\n"
               "words.\n\n"
               "  --checkpoint FILE    the saved weights (required)\n"
               "  --beam K             beam search of K hypotheses (default 1: greedy)\n"
               "  --eval-words N       score only the first N held-out words\n");
    else
        printf("Prints the phonemes a model saved by 'eagle train --model g2p --save FILE' reads\n"
               "for a word.\n\n"
               "  --checkpoint FILE    the saved weights (required)\n"
               "  --word WORD          the spelling (required; several: one batch, a line each)\n"
               "  --beam K             beam search of K hypotheses (default 1: greedy)\n");
    printf("  --d-model N          model width (default 128)\n"
           "  --layers N           encoder and decoder blocks each (default 2)\n"
           "  --heads N            attention heads (default 4)\n"
           "  --seed N             (default 42)\n"
           "  --threads N          compute threads\n");
}

static int parse(const char *command, int argc, char **argv, g2p_options *o) {
    static const struct option options[] = {
        {"model", required_argument, NULL, OPT_MODEL},
        {"d-model", required_argument, NULL, OPT_D_MODEL},
        {"layers", required_argument, NULL, OPT_LAYERS},
        {"heads", required_argument, NULL, OPT_HEADS},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"steps", required_argument, NULL, OPT_STEPS},
        {"minutes", required_argument, NULL, OPT_MINUTES},
        {"learning-rate", required_argument, NULL, OPT_LR},
        {"warmup", required_argument, NULL, OPT_WARMUP},
        {"dropout", required_argument, NULL, OPT_DROPOUT},
        {"label-smoothing", required_argument, NULL, OPT_SMOOTHING},
        {"save", required_argument, NULL, OPT_SAVE},
        {"data", required_argument, NULL, OPT_DATA},
        {"seed", required_argument, NULL, OPT_SEED},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"eval-words", required_argument, NULL, OPT_EVAL_WORDS},
        {"eval-every", required_argument, NULL, OPT_EVAL_EVERY},
        {"checkpoint", required_argument, NULL, OPT_CHECKPOINT},
        {"word", required_argument, NULL, OPT_WORD},
        {"beam", required_argument, NULL, OPT_BEAM},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (g2p_options){.d_model = 128,
                       .layers = 2,
                       .heads = 4,
                       .batch = 128,
                       .minutes = 30,
                       .learning_rate = 2e-3,
                       .warmup = 400,
                       .dropout = 0,
                       .label_smoothing = 0.1,
                       .beam = 1,
                       .seed = 42};
    optind = 1;
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, ":h", options, NULL)) != -1;) {
        long v = 0;
        bool ok = true;
        switch (c) {
        case OPT_MODEL:
            if (strcmp(optarg, "g2p"))
                return cli_usage_error(command, "--model %s: this command runs g2p", optarg);
            break;
        case OPT_D_MODEL:
            ok = cli_parse_int(command, "--d-model", optarg, 1, 8192, &o->d_model);
            break;
        case OPT_LAYERS:
            ok = cli_parse_int(command, "--layers", optarg, 1, MAX_LAYERS, &o->layers);
            break;
        case OPT_HEADS:
            ok = cli_parse_int(command, "--heads", optarg, 1, 256, &o->heads);
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
        case OPT_LR:
            ok = cli_parse_double(command, "--learning-rate", optarg, 1e-9, 10, &o->learning_rate);
            break;
        case OPT_WARMUP:
            ok = cli_parse_int(command, "--warmup", optarg, 1, 1L << 40, &o->warmup);
            break;
        case OPT_DROPOUT:
            ok = cli_parse_double(command, "--dropout", optarg, 0, 0.9, &o->dropout);
            break;
        case OPT_SMOOTHING:
            ok =
                cli_parse_double(command, "--label-smoothing", optarg, 0, 0.9, &o->label_smoothing);
            break;
        case OPT_SAVE:
            o->save_path = optarg;
            if (!cli_check_output_path(command, "--save", optarg)) return CLI_USAGE;
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
        case OPT_EVAL_WORDS:
            ok = cli_parse_int(command, "--eval-words", optarg, 1, 1L << 40, &o->eval_words);
            break;
        case OPT_EVAL_EVERY:
            ok = cli_parse_int(command, "--eval-every", optarg, 1, 1L << 40, &o->eval_every);
            break;
        case OPT_CHECKPOINT:
            o->checkpoint = optarg;
            break;
        case OPT_BEAM:
            ok = cli_parse_int(command, "--beam", optarg, 1, 64, &o->beam);
            break;
        case OPT_WORD:
            if (o->n_words == 64) return cli_usage_error(command, "--word: at most 64 words");
            if (!optarg[0] || strlen(optarg) > MAX_LEN)
                return cli_usage_error(command, "--word '%s': 1 to %d letters", optarg, MAX_LEN);
            o->words[o->n_words++] = optarg;
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
    if (o->d_model % o->heads)
        return cli_usage_error(command, "--d-model %ld is not a multiple of --heads %ld",
                               o->d_model, o->heads);
    return CLI_OK;
}

int cli_train_g2p(int argc, char **argv) {
    g2p_options o;
    int parsed = parse("train", argc, argv, &o);
    if (parsed != CLI_OK) return parsed < 0 ? CLI_OK : parsed;
    if (o.checkpoint) return cli_usage_error("train", "--checkpoint is for eval and generate");
    if (o.threads > 0 && eg_set_num_threads((int)o.threads) != EG_OK) return g2p_fail("--threads");
    return run_training(&o);
}

int cli_generate_g2p(int argc, char **argv) {
    g2p_options o;
    int parsed = parse("generate", argc, argv, &o);
    if (parsed != CLI_OK) return parsed < 0 ? CLI_OK : parsed;
    if (!o.checkpoint) return cli_usage_error("generate", "--checkpoint FILE is required");
    if (!o.n_words) return cli_usage_error("generate", "--word WORD is required");
    if (o.threads > 0 && eg_set_num_threads((int)o.threads) != EG_OK) return g2p_fail("--threads");
    return run_generate(&o);
}

int cli_eval_g2p(int argc, char **argv) {
    g2p_options o;
    int parsed = parse("eval", argc, argv, &o);
    if (parsed != CLI_OK) return parsed < 0 ? CLI_OK : parsed;
    if (!o.checkpoint) return cli_usage_error("eval", "--checkpoint FILE is required");
    if (o.threads > 0 && eg_set_num_threads((int)o.threads) != EG_OK) return g2p_fail("--threads");
    return run_training(&o);
}
