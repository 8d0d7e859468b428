/* The text corpora's readers: LZW streams (against an encoder whose output gzip -d accepts:
 * widths 9 to 16, clear codes, group padding), the Bible package's EC02 container, the KJV verse
 * lines and the held-out books, CMUdict's lines and its split of words, a file's bytes as ids;
 * malformed inputs of each with their messages; and, where the packages are installed, the real
 * files' counts. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "eagle.h"
#include "io/text_formats.h"

#include "data_test_util.h"
#include "lzw_test_util.h"

#define assert_error(status, prefix)                                                               \
    do {                                                                                           \
        assert_int_equal(eg_last_status(), (status));                                              \
        const char *message_ = eg_last_error();                                                    \
        if (strncmp(message_, (prefix), strlen(prefix)) != 0)                                      \
            fail_msg("error message\n  \"%s\"\ndoes not start with\n  \"%s\"", message_,           \
                     (prefix));                                                                    \
        eg_clear_error();                                                                          \
    } while (0)

/* The message contains `part`. */
#define assert_error_has(status, part)                                                             \
    do {                                                                                           \
        assert_int_equal(eg_last_status(), (status));                                              \
        if (!strstr(eg_last_error(), (part)))                                                      \
            fail_msg("error message\n  \"%s\"\ndoes not contain\n  \"%s\"", eg_last_error(),       \
                     (part));                                                                      \
        eg_clear_error();                                                                          \
    } while (0)

/* A temporary file holding bytes[0 .. n); its path in `path` (removed by the caller). */
static void write_temp(char *path, const void *bytes, size_t n) {
    strcpy(path, "/tmp/eagle_text_io_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, bytes, n), (ssize_t)n);
    close(fd);
}

/* Pseudo-English: words from a small list, so that LZW finds long repeats. */
static uint8_t *some_text(size_t n, uint32_t seed) {
    static const char *const words[] = {"and ", "the ",   "of ",   "LORD ", "unto ", "said, ",
                                        "he ",  "shall ", "that ", "in ",   "thou ", ".\n"};
    uint8_t *text = malloc(n + 1);
    size_t used = 0;
    while (used < n) {
        seed = seed * 1664525u + 1013904223u;
        const char *w = words[(seed >> 16) % 12];
        for (size_t i = 0; w[i] && used < n; i++) text[used++] = (uint8_t)w[i];
    }
    return text;
}

/* ---- LZW ---- */

static void check_round_trip(const uint8_t *in, size_t n, int width, bool block, int64_t clear) {
    size_t stream_n;
    uint8_t *stream = lzw_encode(in, n, width, block, clear, &stream_n);
    uint8_t *out = malloc(n + 1);
    size_t produced = 12345;
    if (eg__lzw_decode(stream, stream_n, out, n, &produced, "t") != EG_OK)
        fail_msg("width %d block %d clear %lld, %zu bytes: %s", width, block, (long long)clear, n,
                 eg_last_error());
    assert_int_equal(produced, n);
    if (n) assert_memory_equal(out, in, n);
    /* One byte less room is an error, not an overflow. */
    if (n > 0) {
        assert_int_equal(eg__lzw_decode(stream, stream_n, out, n - 1, &produced, "t"),
                         EG_ERR_FORMAT);
        assert_error(EG_ERR_FORMAT, "t: LZW stream decodes to more than");
        assert_int_equal(produced, 0);
    }
    free(out);
    free(stream);
}

static void test_lzw_round_trips(void **state) {
    (void)state;
    uint8_t *text = some_text(300000, 1);
    uint8_t *noise = malloc(150000);
    uint32_t seed = 9;
    for (size_t i = 0; i < 150000; i++) noise[i] = (uint8_t)((seed = seed * 69069u + 1) >> 24);
    uint8_t runs[20000];
    for (size_t i = 0; i < sizeof runs; i++) runs[i] = (i / 7) % 3 ? 'a' : 'b';
    const struct {
        int width;
        bool block;
        int64_t clear;
    } modes[] = {{16, true, 0}, {16, false, 0},  {12, true, 0}, {12, false, 0},
                 {9, true, 0},  {13, true, 777}, {9, true, 3},  {16, true, 1001}};
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        check_round_trip(text, 300000, modes[m].width, modes[m].block, modes[m].clear);
        check_round_trip(noise, 150000, modes[m].width, modes[m].block, modes[m].clear);
        check_round_trip(runs, sizeof runs, modes[m].width, modes[m].block, modes[m].clear);
        check_round_trip(text, 1, modes[m].width, modes[m].block, modes[m].clear);
        check_round_trip(text, 0, modes[m].width, modes[m].block, modes[m].clear);
    }
    free(text);
    free(noise);
}

static void test_lzw_malformed(void **state) {
    (void)state;
    uint8_t out[64];
    size_t produced;
    assert_int_equal(eg__lzw_decode((const uint8_t *)"\x1f\x8b\x08", 3, out, 64, &produced, "f"),
                     EG_ERR_FORMAT);
    assert_error(EG_ERR_FORMAT, "f: not a compress (LZW) stream: no 1F 9D magic");
    assert_int_equal(eg__lzw_decode((const uint8_t *)"\x1f\x9d", 2, out, 64, &produced, NULL),
                     EG_ERR_FORMAT);
    assert_error(EG_ERR_FORMAT, "data: not a compress (LZW) stream");
    const uint8_t widths[] = {0x88, 0x91, 0xB0, 0xD0};
    for (int i = 0; i < 4; i++) {
        uint8_t header[3] = {0x1F, 0x9D, widths[i]};
        assert_int_equal(eg__lzw_decode(header, 3, out, 64, &produced, "f"), EG_ERR_FORMAT);
        assert_error(EG_ERR_FORMAT, "f: LZW header flags");
    }
    /* 9-bit codes: 'a', then 300 (not yet defined: the table holds up to 257 after one code). */
    uint8_t stream[8] = {0x1F, 0x9D, 0x90};
    uint32_t codes = 'a' | 300u << 9;
    stream[3] = (uint8_t)codes;
    stream[4] = (uint8_t)(codes >> 8);
    stream[5] = (uint8_t)(codes >> 16);
    assert_int_equal(eg__lzw_decode(stream, 6, out, 64, &produced, "f"), EG_ERR_FORMAT);
    assert_error(EG_ERR_FORMAT, "f: LZW code 300 (number 1, 9 bits) is not in the table (257 "
                                "entries)");
    /* A first code that refers to an entry (there is no previous string to extend). */
    codes = 257;
    stream[3] = (uint8_t)codes;
    stream[4] = (uint8_t)(codes >> 8);
    assert_int_equal(eg__lzw_decode(stream, 5, out, 64, &produced, "f"), EG_ERR_FORMAT);
    assert_error(EG_ERR_FORMAT, "f: LZW code 257 (number 0, 9 bits) is not in the table");
    /* The same after a clear. */
    codes = 'a' | 256u << 9;
    memset(stream + 3, 0, 5);
    stream[3] = (uint8_t)codes;
    stream[4] = (uint8_t)(codes >> 8);
    stream[5] = (uint8_t)(codes >> 16);
    uint8_t long_stream[32] = {0};
    memcpy(long_stream, stream, 6);
    /* After the clear the codes resume at the next group of eight: 9 bytes after the start. */
    long_stream[3 + 9] = 0x01; /* code 257 */
    long_stream[3 + 10] = 0x01;
    assert_int_equal(eg__lzw_decode(long_stream, 3 + 11, out, 64, &produced, "f"), EG_ERR_FORMAT);
    assert_error(EG_ERR_FORMAT, "f: LZW code 257 (number 2, 9 bits) is not in the table");
    /* A stream cut short ends where its whole codes end. */
    size_t n;
    uint8_t *text = some_text(1000, 3);
    uint8_t *full = lzw_encode(text, 1000, 16, true, 0, &n);
    uint8_t *decoded = malloc(1000);
    assert_int_equal(eg__lzw_decode(full, n / 2, decoded, 1000, &produced, "f"), EG_OK);
    assert_true(produced > 0 && produced < 1000);
    assert_memory_equal(decoded, text, produced);
    free(decoded);
    free(full);
    free(text);
}

/* ---- the EC02 container ---- */

/* A container of text in blocks of block_size, built as bible.data is. */
static uint8_t *make_ec02(const uint8_t *text, size_t n, uint32_t block_size, size_t *out_n) {
    uint32_t n_blocks = (uint32_t)((n + block_size - 1) / block_size);
    size_t table_end = 0x5C + 4 * ((size_t)n_blocks + 1);
    size_t capacity = table_end + 3 + 2 * n + 1024, used = table_end + 3;
    uint8_t *out = calloc(capacity, 1);
    memcpy(out, "EC02Compressed Data File", 24);
    uint32_t header[2] = {block_size, n_blocks};
    for (int k = 0; k < 2; k++)
        for (int b = 0; b < 4; b++) out[0x54 + 4 * k + b] = (uint8_t)(header[k] >> (24 - 8 * b));
    out[table_end] = 0x1F;
    out[table_end + 1] = 0x9D;
    out[table_end + 2] = 0x90;
    for (uint32_t k = 0; k <= n_blocks; k++) {
        uint32_t offset = (uint32_t)used;
        for (int b = 0; b < 4; b++) out[0x5C + 4 * k + b] = (uint8_t)(offset >> (24 - 8 * b));
        if (k == n_blocks) break;
        size_t from = (size_t)k * block_size,
               length = n - from < block_size ? n - from : block_size;
        size_t stream_n;
        uint8_t *stream = lzw_encode(text + from, length, 16, true, 0, &stream_n);
        assert_true(used + stream_n - 3 <= capacity);
        memcpy(out + used, stream + 3, stream_n - 3);
        used += stream_n - 3;
        free(stream);
    }
    *out_n = used;
    return out;
}

static void put_be32(uint8_t *p, uint32_t v) {
    for (int b = 0; b < 4; b++) p[b] = (uint8_t)(v >> (24 - 8 * b));
}

static void test_ec02(void **state) {
    (void)state;
    uint8_t *text = some_text(10000, 5);
    size_t n;
    uint8_t *file = make_ec02(text, 10000, 4096, &n);
    char *decoded;
    size_t decoded_n;
    assert_int_equal(eg__ec02_decode(file, n, 1 << 20, &decoded, &decoded_n, "c"), EG_OK);
    assert_int_equal(decoded_n, 10000);
    assert_memory_equal(decoded, text, 10000);
    assert_int_equal(decoded[10000], '\0');
    free(decoded);

    /* Each damage with its message. */
    uint8_t *bad = malloc(n);
    memcpy(bad, file, n);
    bad[0] = 'X';
    assert_int_equal(eg__ec02_decode(bad, n, 1 << 20, &decoded, &decoded_n, "c"), EG_ERR_FORMAT);
    assert_error(EG_ERR_FORMAT, "c: not an EC02 container: no EC02 magic");
    assert_null(decoded);
    assert_int_equal(eg__ec02_decode(file, 40, 1 << 20, &decoded, &decoded_n, "c"), EG_ERR_FORMAT);
    assert_error(EG_ERR_FORMAT, "c: EC02 header truncated: 40 bytes, the header has 92");
    memcpy(bad, file, n);
    put_be32(bad + 0x58, 1000000);
    assert_int_equal(eg__ec02_decode(bad, n, 1 << 20, &decoded, &decoded_n, "c"), EG_ERR_FORMAT);
    assert_error(EG_ERR_FORMAT, "c: EC02 header: 1000000 blocks of 4096 bytes do not fit");
    assert_int_equal(eg__ec02_decode(file, n, 8000, &decoded, &decoded_n, "c"), EG_ERR_FORMAT);
    assert_error(EG_ERR_FORMAT, "c: EC02 header: 3 blocks of 4096 bytes, more than the 8000");
    memcpy(bad, file, n);
    put_be32(bad + 0x5C + 12, (uint32_t)n - 1);
    assert_int_equal(eg__ec02_decode(bad, n, 1 << 20, &decoded, &decoded_n, "c"), EG_ERR_FORMAT);
    assert_error(EG_ERR_FORMAT, "c: EC02 offsets: the first block starts at");
    memcpy(bad, file, n);
    put_be32(bad + 0x5C + 4, 0x5C); /* block 1 ends before block 0 starts... */
    assert_int_equal(eg__ec02_decode(bad, n, 1 << 20, &decoded, &decoded_n, "c"), EG_ERR_FORMAT);
    assert_error(EG_ERR_FORMAT, "c: EC02 block 0 ends (92) before it starts");
    memcpy(bad, file, n);
    put_be32(bad + 0x5C + 4, (uint32_t)n + 100); /* block 0 would end past the file */
    assert_int_equal(eg__ec02_decode(bad, n, 1 << 20, &decoded, &decoded_n, "c"), EG_ERR_FORMAT);
    assert_error(EG_ERR_FORMAT, "c: EC02 block 0 ends at");
    /* A block that decodes short (the first, cut to half its bytes). */
    memcpy(bad, file, n);
    uint32_t first = (uint32_t)bad[0x5C] << 24 | (uint32_t)bad[0x5D] << 16 |
                     (uint32_t)bad[0x5E] << 8 | bad[0x5F];
    uint32_t second = (uint32_t)bad[0x60] << 24 | (uint32_t)bad[0x61] << 16 |
                      (uint32_t)bad[0x62] << 8 | bad[0x63];
    put_be32(bad + 0x60, first + (second - first) / 2);
    assert_int_equal(eg__ec02_decode(bad, n, 1 << 20, &decoded, &decoded_n, "c"), EG_ERR_FORMAT);
    assert_error_has(EG_ERR_FORMAT, "every block but the last holds 4096");
    /* A block whose stream is damaged names the block. */
    memcpy(bad, file, n);
    for (uint32_t i = second; i < second + 40; i++) bad[i] = 0xFF;
    assert_int_equal(eg__ec02_decode(bad, n, 1 << 20, &decoded, &decoded_n, "c"), EG_ERR_FORMAT);
    assert_error(EG_ERR_FORMAT, "c: EC02 block 1: LZW code");
    free(bad);
    free(file);
    free(text);
}

/* ---- the KJV verse text ---- */

static const char *const abbreviations[66] = {
    "Ge",    "Exo",  "Lev",  "Num",  "Deu",  "Josh", "Jdgs", "Ruth", "1Sm",  "2Sm",   "1Ki",
    "2Ki",   "1Chr", "2Chr", "Ezra", "Neh",  "Est",  "Job",  "Psa",  "Prv",  "Eccl",  "SSol",
    "Isa",   "Jer",  "Lam",  "Eze",  "Dan",  "Hos",  "Joel", "Amos", "Obad", "Jonah", "Mic",
    "Nahum", "Hab",  "Zep",  "Hag",  "Zec",  "Mal",  "Mat",  "Mark", "Luke", "John",  "Acts",
    "Rom",   "1Cor", "2Cor", "Gal",  "Eph",  "Phi",  "Col",  "1Th",  "2Th",  "1Tim",  "2Tim",
    "Titus", "Phmn", "Heb",  "Jas",  "1Pet", "2Pet", "1Jn",  "2Jn",  "3Jn",  "Jude",  "Rev"};

/* Every book with verses 1:1, 1:2 and 2:1, whose texts name the book and the verse; `skip` (-1:
 * none) is left out. Lines end with `eol`. */
static char *synthetic_bible(int skip, const char *eol) {
    size_t capacity = 66 * 3 * 80 + 200, used = 0;
    char *text = malloc(capacity);
    used += (size_t)snprintf(text, capacity, "Holy Bible, a test edition.%s", eol);
    static const int refs[3][2] = {{1, 1}, {1, 2}, {2, 1}};
    for (int b = 0; b < 66; b++) {
        if (b == skip) continue;
        for (int v = 0; v < 3; v++)
            used += (size_t)snprintf(text + used, capacity - used, "%s%d:%d Text of %s %d:%d.%s",
                                     abbreviations[b], refs[v][0], refs[v][1], abbreviations[b],
                                     refs[v][0], refs[v][1], eol);
    }
    return text;
}

static void check_synthetic(const eg_kjv *k) {
    assert_int_equal(k->verses, 66 * 3);
    int64_t offset = 0, train = 0, test = 0, n_test = 0;
    for (int b = 0; b < 66; b++) {
        const eg_kjv_book *book = &k->books[b];
        assert_string_equal(book->abbreviation, abbreviations[b]);
        assert_int_equal(book->chapters, 2);
        assert_int_equal(book->verses, 3);
        assert_int_equal(book->offset, offset);
        char expected[200];
        int length = snprintf(expected, sizeof expected,
                              "Text of %s 1:1.\nText of %s 1:2.\nText of "
                              "%s 2:1.\n",
                              abbreviations[b], abbreviations[b], abbreviations[b]);
        assert_int_equal(book->length, length);
        assert_memory_equal(k->text + book->offset, expected, (size_t)length);
        /* train and test are the books in order, each in one of them */
        if (book->test) {
            assert_memory_equal(k->test + test, expected, (size_t)length);
            test += length;
            n_test++;
        } else {
            assert_memory_equal(k->train + train, expected, (size_t)length);
            train += length;
        }
        offset += length;
    }
    assert_int_equal(k->length, offset);
    assert_int_equal(k->train_length, train);
    assert_int_equal(k->test_length, test);
    assert_int_equal(strlen(k->text), k->length);
    assert_int_equal(strlen(k->train), k->train_length);
    assert_int_equal(strlen(k->test), k->test_length);
    assert_int_equal(n_test, 6);
    const char *held_out[] = {"Joshua", "Ecclesiastes", "Hosea", "John", "Romans", "James"};
    for (int b = 0, i = 0; b < 66; b++)
        if (k->books[b].test) assert_string_equal(k->books[b].name, held_out[i++]);
    assert_string_equal(k->books[0].name, "Genesis");
    assert_string_equal(k->books[65].name, "Revelation");
}

static void test_kjv_synthetic(void **state) {
    (void)state;
    char *text = synthetic_bible(-1, "\n");
    eg_kjv k;
    assert_int_equal(eg__kjv_parse(text, strlen(text), "t", &k), EG_OK);
    check_synthetic(&k);
    eg_kjv_free(&k);
    assert_null(k.text);
    eg_kjv_free(NULL);

    /* CRLF lines and blank lines; the same text inside a container, read from a file. */
    char *crlf = synthetic_bible(-1, "\r\n\n");
    assert_int_equal(eg__kjv_parse(crlf, strlen(crlf), "t", &k), EG_OK);
    check_synthetic(&k);
    eg_kjv_free(&k);
    size_t n;
    uint8_t *file = make_ec02((const uint8_t *)text, strlen(text), 1000, &n);
    char path[64];
    write_temp(path, file, n);
    assert_int_equal(eg_kjv_load(path, &k), EG_OK);
    check_synthetic(&k);
    eg_kjv_free(&k);
    unlink(path);
    write_temp(path, text, strlen(text));
    assert_int_equal(eg_kjv_load(path, &k), EG_OK);
    check_synthetic(&k);
    eg_kjv_free(&k);
    unlink(path);
    free(file);
    free(crlf);
    free(text);
}

/* Parsing text fails with EG_ERR_FORMAT and a message starting with `prefix`. */
static void expect_kjv_error(const char *text, const char *prefix) {
    eg_kjv k;
    memset(&k, 0x55, sizeof k);
    assert_int_equal(eg__kjv_parse(text, strlen(text), "t", &k), EG_ERR_FORMAT);
    assert_error(EG_ERR_FORMAT, prefix);
    assert_null(k.text);
    assert_int_equal(k.length, 0);
}

/* The synthetic Bible with the first occurrence of `from` replaced by `to`. */
static char *edited(const char *from, const char *to) {
    char *text = synthetic_bible(-1, "\n");
    char *at = strstr(text, from);
    assert_non_null(at);
    size_t n = strlen(text), from_n = strlen(from), to_n = strlen(to);
    char *out = malloc(n + to_n + 1);
    size_t head = (size_t)(at - text);
    memcpy(out, text, head);
    memcpy(out + head, to, to_n);
    strcpy(out + head + to_n, at + from_n);
    free(text);
    return out;
}

static void test_kjv_malformed(void **state) {
    (void)state;
    char *text = synthetic_bible(5, "\n"); /* no Joshua */
    expect_kjv_error(text, "t: line 17: book \"Jdgs\" out of order");
    free(text);
    text = synthetic_bible(65, "\n");
    expect_kjv_error(text, "t: line 196: the text ends before the book \"Rev\"");
    free(text);
    expect_kjv_error("", "t: line 0: the text ends before the book \"Ge\"");
    expect_kjv_error("Holy Bible\n", "t: line 1: the text ends before the book \"Ge\"");
    const struct {
        const char *from, *to, *message;
    } cases[] = {
        {"Exo1:1 ", "Exodus1:1 ", "t: line 5: unknown book \"Exodus\""},
        {"Ge1:2 ", "Ge1:3 ", "t: line 3: verse Ge 1:3 after 1:1: out of sequence"},
        {"Ge2:1 ", "Ge3:1 ", "t: line 4: verse Ge 3:1 after 1:2: out of sequence"},
        {"Ge1:1 ", "Ge2:1 ", "t: line 2: verse Ge 2:1 after 0:0: out of sequence"},
        {"Lev1:2 ", "Lev1:2", "t: line 9: not a verse"},
        {"Lev1:2 ", "and so on\nLev1:2 ", "t: line 9: not a verse"},
        {"Lev1:2 Text", "Lev1:2 Te\x01xt", "t: line 9: control byte 0x01 in the text"},
        {"Num1:1 ", "Num1:1", "t: line 11: not a verse"},
        {"Deu1:1 ", "Deu1234567:1 ", "t: line 14: not a verse"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *bad = edited(cases[i].from, cases[i].to);
        expect_kjv_error(bad, cases[i].message);
        free(bad);
    }
    /* A NUL byte inside the text. */
    text = synthetic_bible(-1, "\n");
    size_t n = strlen(text);
    text[40] = '\0';
    eg_kjv k;
    assert_int_equal(eg__kjv_parse(text, n, "t", &k), EG_ERR_FORMAT);
    assert_error(EG_ERR_FORMAT, "t: line 2: control byte 0x00");
    free(text);

    assert_int_equal(eg_kjv_load("/nonexistent/bible.data", &k), EG_ERR_IO);
    assert_error(EG_ERR_IO, "/nonexistent/bible.data: cannot open: No such file or directory");
    assert_int_equal(eg_kjv_load("/tmp", &k), EG_ERR_IO);
    assert_error(EG_ERR_IO, "/tmp: is a directory, not a Bible text");
    assert_int_equal(eg_kjv_load(NULL, NULL), EG_ERR_NULL_ARGUMENT);
    assert_error(EG_ERR_NULL_ARGUMENT, "kjv_load: out is NULL");
}

/* The package's file, where installed: the counts the headers state. */
static void test_kjv_package(void **state) {
    (void)state;
    if (access(EG_KJV_PATH, R_OK) != 0) {
        print_message("%s is missing (apt-get install bible-kjv-text)\n", EG_KJV_PATH);
        skip();
    }
    eg_kjv k;
    assert_int_equal(eg_kjv_load(NULL, &k), EG_OK);
    assert_int_equal(k.verses, 31102);
    assert_int_equal(k.length, 4137850);
    assert_int_equal(k.train_length, 3821840);
    assert_int_equal(k.test_length, 316010);
    const char *start = "In the beginning God created the heaven and the earth.\nAnd the earth";
    assert_memory_equal(k.text, start, strlen(start));
    const char *end = "The grace of our Lord Jesus Christ be with you all. Amen.\n";
    assert_string_equal(k.text + k.length - strlen(end), end);
    assert_int_equal(k.books[0].chapters, 50);
    assert_int_equal(k.books[0].verses, 1533);
    assert_int_equal(k.books[18].chapters, 150); /* Psalms */
    assert_int_equal(k.books[65].chapters, 22);
    /* John 1:1 opens the held-out John. */
    const char *john = "In the beginning was the Word, and the Word was with God";
    assert_memory_equal(k.text + k.books[42].offset, john, strlen(john));
    assert_true(k.books[42].test);
    int64_t held_out = 0;
    for (int b = 0; b < EG_KJV_BOOKS; b++) held_out += k.books[b].test ? k.books[b].length : 0;
    assert_int_equal(held_out, k.test_length);
    eg_kjv_free(&k);
}

/* ---- CMUdict ---- */

static const char small_dict[] = ";;; an old-style comment\n"
                                 "abbey AE1 B IY0\n"
                                 "read R IY1 D\n"
                                 "a AH0\n"
                                 "a(2) EY1 # letter\n"
                                 "\n"
                                 "read(2) R EH1 D\r\n"
                                 "zh ZH\n"
                                 "co-op K OW1 AA0 P\n";

static int phoneme(const char *name) {
    for (int id = 0; id < EG_CMUDICT_PHONEMES; id++)
        if (!strcmp(eg_cmudict_phoneme_name(id), name)) return id;
    fail_msg("no phoneme %s", name);
    return -1;
}

static void expect_entry(const eg_cmudict *d, int64_t e, const char *spelling, int variant,
                         const char *phonemes) {
    const eg_cmudict_entry *entry = &d->entries[e];
    assert_string_equal(d->words[entry->word].spelling, spelling);
    assert_int_equal(entry->variant, variant);
    char joined[128] = "";
    for (int i = 0; i < entry->n_phonemes; i++) {
        strcat(joined, i ? " " : "");
        strcat(joined, eg_cmudict_phoneme_name(entry->phonemes[i]));
    }
    assert_string_equal(joined, phonemes);
}

static void test_cmudict_parse(void **state) {
    (void)state;
    eg_cmudict d;
    assert_int_equal(eg__cmudict_parse(small_dict, strlen(small_dict), 0, 1, "d", &d), EG_OK);
    assert_int_equal(d.n_words, 5);
    assert_int_equal(d.n_entries, 7);
    assert_int_equal(d.n_test_words, 0);
    assert_int_equal(d.n_test_entries, 0);
    /* Words in order of their first line; a word's pronunciations together, stress removed. */
    const char *spellings[] = {"abbey", "read", "a", "zh", "co-op"};
    const int n_entries[] = {1, 2, 2, 1, 1};
    for (int w = 0; w < 5; w++) {
        assert_string_equal(d.words[w].spelling, spellings[w]);
        assert_int_equal(d.words[w].length, strlen(spellings[w]));
        assert_int_equal(d.words[w].n_entries, n_entries[w]);
        assert_false(d.words[w].test);
    }
    expect_entry(&d, 0, "abbey", 1, "AE B IY");
    expect_entry(&d, 1, "read", 1, "R IY D");
    expect_entry(&d, 2, "read", 2, "R EH D");
    expect_entry(&d, 3, "a", 1, "AH");
    expect_entry(&d, 4, "a", 2, "EY");
    expect_entry(&d, 5, "zh", 1, "ZH");
    expect_entry(&d, 6, "co-op", 1, "K OW AA P");
    assert_int_equal(d.words[1].first_entry, 1);
    assert_int_equal(d.words[2].first_entry, 3);
    assert_int_equal(d.entries[6].phonemes[0], phoneme("K"));
    eg_cmudict_free(&d);
    assert_null(d.words);
    eg_cmudict_free(NULL);
    assert_null(eg_cmudict_phoneme_name(-1));
    assert_null(eg_cmudict_phoneme_name(39));
    assert_string_equal(eg_cmudict_phoneme_name(0), "AA");
    assert_string_equal(eg_cmudict_phoneme_name(38), "ZH");

    /* Everything held out; an empty dictionary. */
    assert_int_equal(eg__cmudict_parse(small_dict, strlen(small_dict), 1, 1, "d", &d), EG_OK);
    assert_int_equal(d.n_test_words, 5);
    assert_int_equal(d.n_test_entries, 7);
    eg_cmudict_free(&d);
    assert_int_equal(eg__cmudict_parse("", 0, 0.5, 1, "d", &d), EG_OK);
    assert_int_equal(d.n_words, 0);
    eg_cmudict_free(&d);
}

/* A dictionary of n words "w<i>", word i with i % 3 + 1 pronunciations, lines in `order`. */
static char *numbered_dict(int n, bool reversed) {
    char *text = malloc((size_t)n * 3 * 32 + 1);
    size_t used = 0;
    for (int k = 0; k < n; k++) {
        int i = reversed ? n - 1 - k : k;
        for (int v = 1; v <= i % 3 + 1; v++) {
            if (v == 1)
                used += (size_t)sprintf(text + used, "w%d AA1 B\n", i);
            else
                used += (size_t)sprintf(text + used, "w%d(%d) AA%d B\n", i, v, v - 1);
        }
    }
    text[used] = '\0';
    return text;
}

static bool is_test_word(const eg_cmudict *d, const char *spelling) {
    for (int64_t w = 0; w < d->n_words; w++)
        if (!strcmp(d->words[w].spelling, spelling)) return d->words[w].test;
    fail_msg("no word %s", spelling);
    return false;
}

static void test_cmudict_split(void **state) {
    (void)state;
    char *text = numbered_dict(2000, false), *reversed = numbered_dict(2000, true);
    eg_cmudict d, again, other, backwards;
    assert_int_equal(eg__cmudict_parse(text, strlen(text), 0.05, 23, "d", &d), EG_OK);
    assert_int_equal(eg__cmudict_parse(text, strlen(text), 0.05, 23, "d", &again), EG_OK);
    assert_int_equal(eg__cmudict_parse(text, strlen(text), 0.05, 24, "d", &other), EG_OK);
    assert_int_equal(eg__cmudict_parse(reversed, strlen(reversed), 0.05, 23, "d", &backwards),
                     EG_OK);
    assert_int_equal(d.n_words, 2000);
    assert_int_equal(d.n_test_words, 100); /* exactly 5 % */
    int64_t test_entries = 0, differs = 0;
    for (int64_t w = 0; w < d.n_words; w++) {
        test_entries += d.words[w].test ? d.words[w].n_entries : 0;
        assert_int_equal(d.words[w].test, again.words[w].test);
        differs += d.words[w].test != other.words[w].test;
        /* The split depends on the words, not on the file's order. */
        assert_int_equal(d.words[w].test, is_test_word(&backwards, d.words[w].spelling));
    }
    assert_int_equal(d.n_test_entries, test_entries);
    assert_true(differs > 50);
    assert_true(test_entries > 100 && test_entries < 300);
    eg_cmudict_free(&d);
    eg_cmudict_free(&again);
    eg_cmudict_free(&other);
    eg_cmudict_free(&backwards);
    free(text);
    free(reversed);
}

static void test_cmudict_malformed(void **state) {
    (void)state;
    const struct {
        const char *text, *message;
    } cases[] = {
        {"a AH0\nb\n", "d: line 2: no phonemes after the word \"b\""},
        {"a # AH0\n", "d: line 1: no phonemes after the word \"a\""},
        {"a XX1\n", "d: line 1: unknown phoneme \"XX1\""},
        {"a B1\n", "d: line 1: unknown phoneme \"B1\""},
        {"a AA3\n", "d: line 1: unknown phoneme \"AA3\""},
        {"a ah0\n", "d: line 1: unknown phoneme \"ah0\""},
        {"a(x) AH0\n", "d: line 1: bad variant suffix (\"word(2)\" expected) in \"a(x)\""},
        {"a(0) AH0\n", "d: line 1: bad variant suffix"},
        {"a(2 AH0\n", "d: line 1: bad variant suffix"},
        {"(2) AH0\n", "d: line 1: bad variant suffix"},
        {"a(1234) AH0\n", "d: line 1: bad variant suffix"},
        {"a( AH0\n", "d: line 1: bad variant suffix"},
        {"a)b AH0\n", "d: line 1: stray ')' in the word \"a)b\""},
        {"a AH0\nb B\na EY1\n", "d: line 3: \"a\" is given twice"},
        {"a(2) AH0\na(2) EY1\n", "d: line 2: \"a(2)\" is given twice"},
        {"a AH0\nb B\x07\n", "d: line 2: control byte in \"b B\x07\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        eg_cmudict d;
        memset(&d, 0x55, sizeof d);
        assert_int_equal(eg__cmudict_parse(cases[i].text, strlen(cases[i].text), 0.05, 1, "d", &d),
                         EG_ERR_FORMAT);
        assert_error(EG_ERR_FORMAT, cases[i].message);
        assert_null(d.words);
        assert_null(d.entries);
        assert_null(d.storage);
    }
    eg_cmudict d;
    assert_int_equal(eg__cmudict_parse("a\0 AH0\n", 7, 0.05, 1, "d", &d), EG_ERR_FORMAT);
    assert_error(EG_ERR_FORMAT, "d: line 1: control byte in");
    const double fractions[] = {-0.01, 1.5, NAN};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(eg__cmudict_parse("a AH0\n", 6, fractions[i], 1, "d", &d),
                         EG_ERR_INVALID_ARGUMENT);
        assert_error(EG_ERR_INVALID_ARGUMENT, "cmudict: test_fraction is");
        assert_int_equal(eg_cmudict_load(NULL, fractions[i], 1, &d), EG_ERR_INVALID_ARGUMENT);
        assert_error(EG_ERR_INVALID_ARGUMENT, "cmudict_load: test_fraction is");
    }
    assert_int_equal(eg_cmudict_load("/nonexistent/cmudict.dict", 0.05, 1, &d), EG_ERR_IO);
    assert_error(EG_ERR_IO, "/nonexistent/cmudict.dict: cannot open");
    assert_int_equal(eg_cmudict_load(NULL, 0.05, 1, NULL), EG_ERR_NULL_ARGUMENT);
    assert_error(EG_ERR_NULL_ARGUMENT, "cmudict_load: out is NULL");
    /* Through a file. */
    char path[64];
    write_temp(path, small_dict, strlen(small_dict));
    assert_int_equal(eg_cmudict_load(path, 0, 1, &d), EG_OK);
    assert_int_equal(d.n_entries, 7);
    eg_cmudict_free(&d);
    unlink(path);
}

/* The installed dictionary, where scripts/install-deps.sh has put it. */
static void test_cmudict_installed(void **state) {
    (void)state;
    if (access(EG_CMUDICT_PATH, R_OK) != 0) {
        print_message("%s is missing (scripts/install-deps.sh installs it)\n", EG_CMUDICT_PATH);
        skip();
    }
    eg_cmudict d;
    assert_int_equal(eg_cmudict_load(NULL, EG_CMUDICT_TEST_FRACTION, EG_CMUDICT_SEED, &d), EG_OK);
    assert_int_equal(d.n_entries, 135166);
    assert_int_equal(d.n_words, 126052);
    assert_int_equal(d.n_test_words, 6303);
    assert_int_equal(d.n_test_entries, 6784);
    for (int64_t w = 0; w < d.n_words; w++)
        if (!strcmp(d.words[w].spelling, "abbreviation")) {
            expect_entry(&d, d.words[w].first_entry, "abbreviation", 1,
                         "AH B R IY V IY EY SH AH N");
            break;
        }
    eg_cmudict_free(&d);
}

/* ---- a file's bytes ---- */

static void test_text_file_bytes(void **state) {
    (void)state;
    uint8_t bytes[256];
    for (int i = 0; i < 256; i++) bytes[i] = (uint8_t)(255 - i);
    char path[64];
    write_temp(path, bytes, 256);
    const eg_dtype dtypes[3] = {EG_DTYPE_U8, EG_DTYPE_I32, EG_DTYPE_I64};
    for (int k = 0; k < 3; k++) {
        eg_tensor *t = eg_text_file_read_bytes(path, dtypes[k]);
        assert_non_null(t);
        assert_int_equal(eg_tensor_dtype(t), dtypes[k]);
        assert_int_equal(eg_tensor_n_dims(t), 1);
        assert_int_equal(eg_tensor_shape(t)[0], 256);
        for (int64_t i = 0; i < 256; i++)
            assert_int_equal((int64_t)eg_tensor_get(t, (int64_t[]){i}), 255 - i);
    }
    assert_null(eg_text_file_read_bytes(path, EG_DTYPE_F32));
    assert_error(EG_ERR_DTYPE, "text_file_read_bytes: dtype f32; byte ids are u8, i32 or i64");
    unlink(path);
    write_temp(path, "", 0);
    eg_tensor *empty = eg_text_file_read_bytes(path, EG_DTYPE_I32);
    assert_non_null(empty);
    assert_int_equal(eg_tensor_shape(empty)[0], 0);
    unlink(path);
    assert_null(eg_text_file_read_bytes(NULL, EG_DTYPE_U8));
    assert_error(EG_ERR_NULL_ARGUMENT, "text_file_read_bytes: path is NULL");
    assert_null(eg_text_file_read_bytes("/nonexistent/text", EG_DTYPE_U8));
    assert_error(EG_ERR_IO, "/nonexistent/text: cannot open: No such file or directory");
    assert_null(eg_text_file_read_bytes("/tmp", EG_DTYPE_U8));
    assert_error(EG_ERR_IO, "/tmp: is a directory, not a text file");

    /* A file longer than the read buffer's first size (64 KiB). */
    uint8_t *big = some_text(200000, 11);
    write_temp(path, big, 200000);
    eg_tensor *t = eg_text_file_read_bytes(path, EG_DTYPE_U8);
    assert_int_equal(eg_tensor_shape(t)[0], 200000);
    assert_memory_equal(eg_tensor_data(t), big, 200000);
    unlink(path);
    free(big);
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define CASE(name) cmocka_unit_test_setup_teardown(name, case_setup, case_teardown)
        CASE(test_lzw_round_trips),   CASE(test_lzw_malformed),   CASE(test_ec02),
        CASE(test_kjv_synthetic),     CASE(test_kjv_malformed),   CASE(test_kjv_package),
        CASE(test_cmudict_parse),     CASE(test_cmudict_split),   CASE(test_cmudict_malformed),
        CASE(test_cmudict_installed), CASE(test_text_file_bytes),
#undef CASE
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
