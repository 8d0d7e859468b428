/* The C side of the tokenizer interop test (tests/interop/tokenizers.sh, driven by
 * check_tokenizers.py): trains and saves tokenizers for Hugging Face's `tokenizers` to load, and
 * encodes texts with tokenizers that it (or Eagle) wrote.
 *
 *   eagle_tokenizer_interop train-bpe CORPUS OUT VOCAB_SIZE MIN_FREQUENCY PREFIX_SPACE [SPECIAL...]
 *   eagle_tokenizer_interop train-char CORPUS OUT [SPECIAL... [--unk TOKEN]]
 *   eagle_tokenizer_interop encode TOKENIZER TEXTS
 *
 * TEXTS has one text per line, hex-encoded (so that any bytes fit). For each, `encode` prints one
 * line: the ids separated by spaces, " | ", the hex of decode(ids, skip_special = false), " | ",
 * the hex of decode(ids, skip_special = true). Exit status 0, or 1 with the error on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eagle.h"

static int fail(const char *what) {
    fprintf(stderr, "eagle_tokenizer_interop: %s: %s\n", what, eg_last_error());
    return 1;
}

static void print_hex(const char *bytes, size_t n) {
    for (size_t i = 0; i < n; i++) printf("%02x", (unsigned char)bytes[i]);
}

static int hex_value(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static int encode(const char *tokenizer_path, const char *texts_path) {
    eg_tokenizer *tok = eg_tokenizer_load(tokenizer_path);
    if (!tok) return fail("load");
    FILE *f = fopen(texts_path, "r");
    if (!f) {
        perror(texts_path);
        eg_tokenizer_free(tok);
        return 1;
    }
    size_t capacity = 1 << 16;
    char *line = malloc(capacity), *text = malloc(capacity);
    int status = 0;
    while (status == 0 && fgets(line, (int)capacity, f)) {
        size_t n = strcspn(line, "\n"), length = 0;
        if (n + 1 >= capacity) {
            fprintf(stderr, "eagle_tokenizer_interop: a text longer than %zu bytes\n",
                    capacity / 2);
            status = 1;
            break;
        }
        for (size_t i = 0; i + 1 < n; i += 2) {
            int hi = hex_value(line[i]), lo = hex_value(line[i + 1]);
            if (hi < 0 || lo < 0) {
                fprintf(stderr, "eagle_tokenizer_interop: bad hex in %s\n", texts_path);
                status = 1;
                break;
            }
            text[length++] = (char)(hi << 4 | lo);
        }
        int32_t *ids;
        size_t n_ids;
        if (status || eg_tokenizer_encode(tok, text, length, &ids, &n_ids) != EG_OK) {
            status = status ? status : fail("encode");
            break;
        }
        for (size_t i = 0; i < n_ids; i++) printf(i ? " %d" : "%d", (int)ids[i]);
        for (int skip = 0; skip < 2 && status == 0; skip++) {
            char *decoded;
            size_t decoded_n;
            if (eg_tokenizer_decode(tok, ids, n_ids, skip, &decoded, &decoded_n) != EG_OK) {
                status = fail("decode");
                break;
            }
            printf(" | ");
            print_hex(decoded, decoded_n);
            free(decoded);
        }
        printf("\n");
        free(ids);
    }
    free(line);
    free(text);
    fclose(f);
    eg_tokenizer_free(tok);
    return status;
}

int main(int argc, char **argv) {
    if (argc >= 7 && strcmp(argv[1], "train-bpe") == 0) {
        eg_bpe_options o = eg_bpe_options_default();
        o.vocab_size = atoi(argv[4]);
        o.min_frequency = atoll(argv[5]);
        o.add_prefix_space = strcmp(argv[6], "1") == 0;
        o.special_tokens = (const char *const *)argv + 7;
        o.n_special_tokens = argc - 7;
        eg_tokenizer *tok = eg_tokenizer_train_bpe_file(argv[2], &o);
        if (!tok) return fail("train-bpe");
        eg_status status = eg_tokenizer_save(tok, argv[3]);
        eg_tokenizer_free(tok);
        return status == EG_OK ? 0 : fail("save");
    }
    if (argc >= 4 && strcmp(argv[1], "train-char") == 0) {
        eg_char_options o = eg_char_options_default();
        int n = argc - 4;
        if (n >= 2 && strcmp(argv[argc - 2], "--unk") == 0) {
            o.unk_token = argv[argc - 1];
            n -= 2;
        }
        o.special_tokens = (const char *const *)argv + 4;
        o.n_special_tokens = n;
        eg_tokenizer *tok = eg_tokenizer_train_char_file(argv[2], &o);
        if (!tok) return fail("train-char");
        eg_status status = eg_tokenizer_save(tok, argv[3]);
        eg_tokenizer_free(tok);
        return status == EG_OK ? 0 : fail("save");
    }
    if (argc == 4 && strcmp(argv[1], "encode") == 0) return encode(argv[2], argv[3]);
    fprintf(stderr, "usage: eagle_tokenizer_interop train-bpe CORPUS OUT VOCAB_SIZE MIN_FREQUENCY "
                    "PREFIX_SPACE [SPECIAL...]\n"
                    "       eagle_tokenizer_interop train-char CORPUS OUT [SPECIAL... [--unk T]]\n"
                    "       eagle_tokenizer_interop encode TOKENIZER TEXTS\n");
    return 2;
}
