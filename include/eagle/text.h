/* Eagle — tokenizers: text to token ids and back, trained in C on a corpus, saved and loaded in
 * Hugging Face's tokenizer.json format.
 *
 * Two kinds are trained here, both held by one opaque eg_tokenizer:
 *   - character level (eg_tokenizer_train_char): one token per Unicode character (code point) of
 *     the corpus, sorted by code point after the special tokens;
 *   - byte-level BPE (eg_tokenizer_train_bpe), as GPT-2 and Hugging Face's ByteLevel
 *     pre-tokenizer + BPE model do it: the text is split into words by GPT-2's pattern
 *     ('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+), each word's
 *     bytes become 256 base tokens, and the most frequent adjacent pairs are merged into new
 *     tokens until the vocabulary has the size asked for.
 * Files that Hugging Face's `tokenizers` writes for a byte-level BPE load too (eg_tokenizer_load),
 * and give the same ids for the same text as `Tokenizer.encode(text).ids` there; what Eagle saves
 * loads there with `Tokenizer.from_file` and gives Eagle's ids (tests/interop/tokenizers.sh).
 *
 *     eg_bpe_options o = eg_bpe_options_default();
 *     o.vocab_size = 4096;
 *     const char *specials[] = {"<|endoftext|>"};
 *     o.special_tokens = specials;
 *     o.n_special_tokens = 1;
 *     eg_tokenizer *tok = eg_tokenizer_train_bpe(text, length, &o);
 *     int32_t *ids; size_t n;
 *     eg_tokenizer_encode(tok, "Hello world", 11, &ids, &n);   // free(ids) afterwards
 *     eg_tokenizer_save(tok, "tokenizer.json");
 *     eg_tokenizer_free(tok);
 *
 * Text is bytes with a length (NUL bytes included); it need not be valid UTF-8. A byte-level
 * tokenizer encodes any bytes and decodes its ids back to exactly those bytes; a character-level
 * one maps what is not a character of its vocabulary (an unknown character, or a byte that is not
 * part of well-formed UTF-8) to its unknown token when it has one, and leaves it out otherwise, as
 * Hugging Face's BPE model does.
 *
 * SPECIAL TOKENS ("<pad>", "<|endoftext|>") have the first ids, in the order given. Where their
 * text appears in the input it becomes that token (leftmost, longest first), never the characters
 * it is made of; decoding may skip them.
 *
 * Threads: a tokenizer may encode and decode from several threads at once; adding a token
 * (eg_tokenizer_add_special_token) must not overlap any other use. Arrays and strings the library
 * returns are the caller's, freed with free(). */
#ifndef EAGLE_TEXT_H
#define EAGLE_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "eagle/dtype.h"
#include "eagle/status.h"
#include "eagle/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A tokenizer. Opaque; free with eg_tokenizer_free(). */
typedef struct eg_tokenizer eg_tokenizer;

/* ---- training ---- */

/* Special tokens and the unknown token of a character-level tokenizer. */
typedef struct eg_char_options {
    /* n_special_tokens distinct, non-empty, well-formed UTF-8, NUL-terminated strings; they get
     * ids 0 .. n_special_tokens - 1. Borrowed for the call. */
    const char *const *special_tokens;
    int32_t n_special_tokens;
    /* One of special_tokens, which unknown characters become; NULL: none (they are left out). */
    const char *unk_token;
} eg_char_options;

/* {NULL, 0, NULL}. */
eg_char_options eg_char_options_default(void);

/* A character-level tokenizer whose vocabulary is the special tokens, then every distinct code
 * point of text[0 .. length) in increasing order (a character equal to a one-character special
 * token is not added twice). options NULL means eg_char_options_default(). text may be NULL only
 * when length is 0 (the vocabulary is then the special tokens alone). In tokenizer.json it is a
 * BPE model without merges, no pre-tokenizer and the Fuse decoder.
 * Returns a tokenizer the caller owns, or NULL with an error: EG_ERR_NULL_ARGUMENT (text NULL with
 * length > 0), EG_ERR_FORMAT (text is not well-formed UTF-8; the message gives the byte offset),
 * EG_ERR_INVALID_ARGUMENT (bad special tokens: empty, ill-formed, repeated, a negative count, an
 * unk_token that is not among them), EG_ERR_OUT_OF_MEMORY. */
eg_tokenizer *eg_tokenizer_train_char(const char *text, size_t length,
                                      const eg_char_options *options);

/* eg_tokenizer_train_char on the whole file's bytes (at most 1 GiB). Errors: those of
 * eg_tokenizer_train_char, EG_ERR_NULL_ARGUMENT (path), EG_ERR_IO (cannot open or read). */
eg_tokenizer *eg_tokenizer_train_char_file(const char *path, const eg_char_options *options);

/* What eg_tokenizer_train_bpe is told. */
typedef struct eg_bpe_options {
    /* The vocabulary's size: special tokens + the 256 byte tokens + one per merge. Training stops
     * earlier when no pair is left that occurs min_frequency times; a size at or below
     * n_special_tokens + 256 gives no merges. */
    int32_t vocab_size;
    /* A pair is merged only when it occurs at least this often (counting every occurrence in
     * every word of the corpus); 0 and 1 both mean "at least once". */
    int64_t min_frequency;
    /* As in eg_char_options: ids 0 .. n_special_tokens - 1; borrowed for the call. */
    const char *const *special_tokens;
    int32_t n_special_tokens;
    /* The ByteLevel pre-tokenizer's add_prefix_space: a space is put before every text that does
     * not start with one (so that a text's first word is split like the words after a space). */
    bool add_prefix_space;
} eg_bpe_options;

/* {1000, 2, NULL, 0, false}. */
eg_bpe_options eg_bpe_options_default(void);

/* Trains a byte-level BPE tokenizer on text[0 .. length), taken as one text (not split into
 * lines), as Hugging Face's BpeTrainer does with the ByteLevel pre-tokenizer and the full byte
 * alphabet (ByteLevel.alphabet()) as its initial alphabet. Special tokens in the corpus are
 * trained on as plain text.
 * Vocabulary: the special tokens, the 256 byte tokens in the order of the code points that
 * GPT-2's byte-to-character table gives them ('!' .. '~' first), then the merged tokens in the
 * order they were made.
 * Each step merges the pair of adjacent tokens that occurs most often in the words of the corpus
 * (a word counted as often as it occurs); TIES go to the pair whose left token has the smaller
 * id, then the one whose right token has the smaller id. The result therefore depends only on
 * the text and the options, never on the machine, the thread count or hash order. A merge whose
 * joined text is already a token reuses that token's id (and adds no new token).
 * Returns a tokenizer the caller owns, or NULL with an error: EG_ERR_NULL_ARGUMENT (text NULL with
 * length > 0), EG_ERR_INVALID_ARGUMENT (vocab_size < 1, min_frequency < 0, bad special tokens),
 * EG_ERR_OUT_OF_MEMORY. */
eg_tokenizer *eg_tokenizer_train_bpe(const char *text, size_t length,
                                     const eg_bpe_options *options);

/* eg_tokenizer_train_bpe on the whole file's bytes (at most 1 GiB); options NULL means
 * eg_bpe_options_default(). Errors: those of eg_tokenizer_train_bpe, EG_ERR_NULL_ARGUMENT (path),
 * EG_ERR_IO (cannot open or read). */
eg_tokenizer *eg_tokenizer_train_bpe_file(const char *path, const eg_bpe_options *options);

/* ---- tokenizer.json ---- */

/* Reads a Hugging Face tokenizer.json. Eagle reads the BPE model (vocab; merges as "a b" strings
 * or as ["a", "b"] pairs; unk_token, fuse_unk, ignore_merges; dropout null, byte_fallback false,
 * no continuing_subword_prefix or end_of_word_suffix), added_tokens (lstrip, rstrip, normalized,
 * special; not single_word), the ByteLevel pre-tokenizer (add_prefix_space, use_regex) or none,
 * the ByteLevel or Fuse decoder or none, the ByteLevel post-processor or none, no normalizer,
 * truncation or padding. The ids of vocab and added_tokens together must be 0 .. N-1, each id
 * naming one text. Every merge must join two tokens of the vocabulary into a third; a pair given
 * twice takes its last place, as in Hugging Face.
 * Returns a tokenizer the caller owns, or NULL with an error naming the file and what is wrong:
 * EG_ERR_NULL_ARGUMENT (path), EG_ERR_IO (cannot open or read), EG_ERR_FORMAT (not JSON, a field
 * missing or of the wrong type, a merge naming an unknown token, ids with holes or repeated,
 * e.g. "t.json: model.merges[3]: \"Ġx\" is not in model.vocab"), EG_ERR_UNSUPPORTED (a component
 * or option Eagle does not implement, named), EG_ERR_OUT_OF_MEMORY. */
eg_tokenizer *eg_tokenizer_load(const char *path);

/* eg_tokenizer_load from json[0 .. length) in memory; messages start with "tokenizer.json". */
eg_tokenizer *eg_tokenizer_from_json(const char *json, size_t length);

/* Writes tok as tokenizer.json (atomically: a reader sees the old file or the whole new one).
 * Merges are written as "a b" strings, which every version of Hugging Face's tokenizers reads, or
 * as ["a", "b"] pairs when a merged token contains a space. Errors: EG_ERR_NULL_ARGUMENT,
 * EG_ERR_INVALID_ARGUMENT (path empty), EG_ERR_IO (naming the path and the reason),
 * EG_ERR_OUT_OF_MEMORY. */
eg_status eg_tokenizer_save(const eg_tokenizer *tok, const char *path);

/* The text eg_tokenizer_save writes: *json (NUL-terminated, *length bytes without the NUL) is the
 * caller's, freed with free(). On failure *json is NULL. Errors: EG_ERR_NULL_ARGUMENT,
 * EG_ERR_OUT_OF_MEMORY. */
eg_status eg_tokenizer_to_json(const eg_tokenizer *tok, char **json, size_t *length);

/* Frees the tokenizer. NULL is ignored. */
void eg_tokenizer_free(eg_tokenizer *tok);

/* ---- encoding and decoding ---- */

/* Encodes text[0 .. length) (text may be NULL only when length is 0): special and added tokens
 * where their text appears, then the pre-tokenizer's words, each through the BPE merges (in rank
 * order, leftmost first among equal ranks). Words' results are cached inside the tokenizer.
 * On success *ids is a new array of *n_ids ids that the caller frees with free() (NULL when
 * *n_ids is 0). On failure *ids is NULL and *n_ids 0. Errors: EG_ERR_NULL_ARGUMENT (tok, ids,
 * n_ids, or text with length > 0), EG_ERR_OUT_OF_MEMORY. */
eg_status eg_tokenizer_encode(const eg_tokenizer *tok, const char *text, size_t length,
                              int32_t **ids, size_t *n_ids);

/* The ids of eg_tokenizer_encode as a new 1-d CPU tensor (n_ids,) of dtype I32 or I64 (a NEW
 * reference, owned by the innermost scope), e.g. for eg_dataset_from_token_windows. Errors: those
 * of eg_tokenizer_encode, EG_ERR_DTYPE (another dtype). */
eg_tensor *eg_tokenizer_encode_tensor(const eg_tokenizer *tok, const char *text, size_t length,
                                      eg_dtype dtype);

/* Decodes ids[0 .. n_ids) back to bytes, leaving out special tokens when skip_special. With the
 * ByteLevel decoder each token's characters become the bytes they stand for (a token with a
 * character outside GPT-2's byte table, such as an added token, gives its own text); with Fuse
 * the tokens' texts are joined; without a decoder they are joined with single spaces (as
 * Hugging Face does). For a byte-level tokenizer, decoding the ids of a text gives the text back,
 * byte for byte, also when it is not well-formed UTF-8.
 * On success *text is a new NUL-terminated buffer of *length bytes (NUL not counted) that the
 * caller frees with free(). On failure *text is NULL and *length 0. Errors: EG_ERR_NULL_ARGUMENT
 * (tok, text, length, or ids with n_ids > 0), EG_ERR_INVALID_ARGUMENT (an id outside
 * 0 .. vocab size - 1, naming it and its position), EG_ERR_OUT_OF_MEMORY. */
eg_status eg_tokenizer_decode(const eg_tokenizer *tok, const int32_t *ids, size_t n_ids,
                              bool skip_special, char **text, size_t *length);

/* ---- the vocabulary ---- */

/* The number of ids (the model's tokens and the added ones); 0 for NULL. */
int32_t eg_tokenizer_vocab_size(const eg_tokenizer *tok);

/* The text of token id, as the vocabulary spells it (a byte-level token in GPT-2's characters:
 * "Ġthe" for " the"); *length (when not NULL) gets its size in bytes, and the text is followed by
 * a NUL. Valid until the tokenizer is freed or a token is added. NULL when tok is NULL or id is
 * not an id of the vocabulary (no error is raised). */
const char *eg_tokenizer_id_to_token(const eg_tokenizer *tok, int32_t id, size_t *length);

/* The id of the token whose text is token[0 .. length) (an added token's, else the model's), or
 * -1 when there is none (or tok or token is NULL). No error is raised. */
int32_t eg_tokenizer_token_to_id(const eg_tokenizer *tok, const char *token, size_t length);

/* Whether id is a special token; false for NULL or an id outside the vocabulary. */
bool eg_tokenizer_is_special(const eg_tokenizer *tok, int32_t id);

/* The number of merges (ranks 0 .. n - 1); 0 for a character-level tokenizer or NULL. */
int32_t eg_tokenizer_n_merges(const eg_tokenizer *tok);

/* Merge `rank`: the ids of its left and right tokens and of the token they make (any of the
 * pointers may be NULL). Errors: EG_ERR_NULL_ARGUMENT (tok), EG_ERR_INVALID_ARGUMENT (rank
 * outside 0 .. n_merges - 1). */
eg_status eg_tokenizer_merge(const eg_tokenizer *tok, int32_t rank, int32_t *left, int32_t *right,
                             int32_t *merged);

/* Adds a special token (NUL-terminated, non-empty, well-formed UTF-8) with the next id, or, when
 * that text is already a token, makes that token special; its id goes to *id (when not NULL).
 * Errors: EG_ERR_NULL_ARGUMENT (tok, token), EG_ERR_INVALID_ARGUMENT (empty or ill-formed),
 * EG_ERR_OUT_OF_MEMORY. */
eg_status eg_tokenizer_add_special_token(eg_tokenizer *tok, const char *token, int32_t *id);

#if !defined(EG_NO_CALLSITE)
#define eg_tokenizer_train_char(...)      EG_CALLSITE_(eg_tokenizer_train_char(__VA_ARGS__))
#define eg_tokenizer_train_char_file(...) EG_CALLSITE_(eg_tokenizer_train_char_file(__VA_ARGS__))
#define eg_tokenizer_train_bpe(...)       EG_CALLSITE_(eg_tokenizer_train_bpe(__VA_ARGS__))
#define eg_tokenizer_train_bpe_file(...)  EG_CALLSITE_(eg_tokenizer_train_bpe_file(__VA_ARGS__))
#define eg_tokenizer_load(...)            EG_CALLSITE_(eg_tokenizer_load(__VA_ARGS__))
#define eg_tokenizer_from_json(...)       EG_CALLSITE_(eg_tokenizer_from_json(__VA_ARGS__))
#define eg_tokenizer_save(...)            EG_CALLSITE_(eg_tokenizer_save(__VA_ARGS__))
#define eg_tokenizer_to_json(...)         EG_CALLSITE_(eg_tokenizer_to_json(__VA_ARGS__))
#define eg_tokenizer_encode(...)          EG_CALLSITE_(eg_tokenizer_encode(__VA_ARGS__))
#define eg_tokenizer_encode_tensor(...)   EG_CALLSITE_(eg_tokenizer_encode_tensor(__VA_ARGS__))
#define eg_tokenizer_decode(...)          EG_CALLSITE_(eg_tokenizer_decode(__VA_ARGS__))
#define eg_tokenizer_merge(...)           EG_CALLSITE_(eg_tokenizer_merge(__VA_ARGS__))
#define eg_tokenizer_add_special_token(...)                                                        \
    EG_CALLSITE_(eg_tokenizer_add_special_token(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif
#endif
