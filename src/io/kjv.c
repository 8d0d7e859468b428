/* The King James Bible of Debian's bible-kjv-text: its container (EC02, LZW blocks), its verse
 * lines, and the split into training text and held-out books (documented in include/eagle/io.h).
 */

#ifndef EG_NO_CALLSITE
#define EG_NO_CALLSITE
#endif

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "eagle/io.h"
#include "io/text_formats.h"

/* ---- the container ---- */

#define EC02_BLOCK_SIZE_AT 0x54
#define EC02_BLOCKS_AT     0x58
#define EC02_OFFSETS_AT    0x5C
#define LZW_HEADER_BYTES   3

static uint32_t read_be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

eg_status eg__ec02_decode(const uint8_t *bytes, size_t n, size_t max_bytes, char **text,
                          size_t *text_n, const char *name) {
    if (!name) name = "data";
    *text = NULL;
    *text_n = 0;
    if (n < 4 || memcmp(bytes, EG__EC02_MAGIC, 4) != 0)
        return eg__error(EG_ERR_FORMAT, "%s: not an EC02 container: no EC02 magic", name);
    if (n < EC02_OFFSETS_AT)
        return eg__error(EG_ERR_FORMAT, "%s: EC02 header truncated: %zu bytes, the header has %d",
                         name, n, EC02_OFFSETS_AT);
    uint32_t block_size = read_be32(bytes + EC02_BLOCK_SIZE_AT);
    uint32_t n_blocks = read_be32(bytes + EC02_BLOCKS_AT);
    /* The offset table, then the shared LZW header, must lie inside the file. */
    uint64_t table_end = EC02_OFFSETS_AT + 4 * ((uint64_t)n_blocks + 1);
    if (block_size == 0 || n_blocks == 0 || table_end + LZW_HEADER_BYTES > n)
        return eg__error(EG_ERR_FORMAT,
                         "%s: EC02 header: %u blocks of %u bytes do not fit a %zu-byte file", name,
                         n_blocks, block_size, n);
    if ((uint64_t)block_size * n_blocks > max_bytes)
        return eg__error(EG_ERR_FORMAT,
                         "%s: EC02 header: %u blocks of %u bytes, more than the %zu bytes allowed",
                         name, n_blocks, block_size, max_bytes);
    const uint8_t *offsets = bytes + EC02_OFFSETS_AT;
    if (read_be32(offsets) != table_end + LZW_HEADER_BYTES ||
        read_be32(offsets + 4 * (size_t)n_blocks) != n)
        return eg__error(EG_ERR_FORMAT,
                         "%s: EC02 offsets: the first block starts at %u (expected %llu, after "
                         "the table and the LZW header) and the last ends at %u (the file has %zu "
                         "bytes)",
                         name, read_be32(offsets), (unsigned long long)table_end + LZW_HEADER_BYTES,
                         read_be32(offsets + 4 * (size_t)n_blocks), n);
    size_t capacity = (size_t)block_size * n_blocks;
    char *out = malloc(capacity + 1);
    /* Each block's stream is the shared header followed by the block's bytes. */
    uint8_t *stream = malloc((size_t)block_size * 2 + 64);
    if (!out || !stream) {
        free(out);
        free(stream);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", name);
    }
    size_t stream_capacity = (size_t)block_size * 2 + 64, used = 0;
    eg_status status = EG_OK;
    for (uint32_t b = 0; b < n_blocks && status == EG_OK; b++) {
        uint32_t begin = read_be32(offsets + 4 * (size_t)b), end = read_be32(offsets + 4 * (b + 1));
        if (end < begin) {
            status = eg__error(EG_ERR_FORMAT, "%s: EC02 block %u ends (%u) before it starts (%u)",
                               name, b, end, begin);
            break;
        }
        /* Only the first and the last offsets were checked above: every block must lie inside
         * the file. */
        if (end > n) {
            status = eg__error(EG_ERR_FORMAT,
                               "%s: EC02 block %u ends at %u, past the end of the %zu-byte file",
                               name, b, end, n);
            break;
        }
        size_t length = end - begin;
        if (length + LZW_HEADER_BYTES > stream_capacity) {
            uint8_t *bigger = realloc(stream, length + LZW_HEADER_BYTES);
            if (!bigger) {
                status = eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", name);
                break;
            }
            stream = bigger;
            stream_capacity = length + LZW_HEADER_BYTES;
        }
        memcpy(stream, bytes + table_end, LZW_HEADER_BYTES);
        memcpy(stream + LZW_HEADER_BYTES, bytes + begin, length);
        char block_name[300];
        snprintf(block_name, sizeof block_name, "%s: EC02 block %u", name, b);
        size_t produced = 0;
        status = eg__lzw_decode(stream, length + LZW_HEADER_BYTES, (uint8_t *)out + used,
                                block_size, &produced, block_name);
        if (status == EG_OK && produced != block_size && b + 1 < n_blocks)
            status = eg__error(EG_ERR_FORMAT,
                               "%s: EC02 block %u decodes to %zu bytes; every block but the last "
                               "holds %u",
                               name, b, produced, block_size);
        used += produced;
    }
    free(stream);
    if (status != EG_OK) {
        free(out);
        return status;
    }
    out[used] = '\0';
    *text = out;
    *text_n = used;
    return EG_OK;
}

/* ---- the books ---- */

typedef struct book_info {
    const char *abbreviation, *name;
    bool test;
} book_info;

/* The file's abbreviations, in its order; `test` marks the held-out books (see io.h). */
static const book_info book_table[EG_KJV_BOOKS] = {
    {"Ge", "Genesis", false},
    {"Exo", "Exodus", false},
    {"Lev", "Leviticus", false},
    {"Num", "Numbers", false},
    {"Deu", "Deuteronomy", false},
    {"Josh", "Joshua", true},
    {"Jdgs", "Judges", false},
    {"Ruth", "Ruth", false},
    {"1Sm", "1 Samuel", false},
    {"2Sm", "2 Samuel", false},
    {"1Ki", "1 Kings", false},
    {"2Ki", "2 Kings", false},
    {"1Chr", "1 Chronicles", false},
    {"2Chr", "2 Chronicles", false},
    {"Ezra", "Ezra", false},
    {"Neh", "Nehemiah", false},
    {"Est", "Esther", false},
    {"Job", "Job", false},
    {"Psa", "Psalms", false},
    {"Prv", "Proverbs", false},
    {"Eccl", "Ecclesiastes", true},
    {"SSol", "Song of Solomon", false},
    {"Isa", "Isaiah", false},
    {"Jer", "Jeremiah", false},
    {"Lam", "Lamentations", false},
    {"Eze", "Ezekiel", false},
    {"Dan", "Daniel", false},
    {"Hos", "Hosea", true},
    {"Joel", "Joel", false},
    {"Amos", "Amos", false},
    {"Obad", "Obadiah", false},
    {"Jonah", "Jonah", false},
    {"Mic", "Micah", false},
    {"Nahum", "Nahum", false},
    {"Hab", "Habakkuk", false},
    {"Zep", "Zephaniah", false},
    {"Hag", "Haggai", false},
    {"Zec", "Zechariah", false},
    {"Mal", "Malachi", false},
    {"Mat", "Matthew", false},
    {"Mark", "Mark", false},
    {"Luke", "Luke", false},
    {"John", "John", true},
    {"Acts", "Acts", false},
    {"Rom", "Romans", true},
    {"1Cor", "1 Corinthians", false},
    {"2Cor", "2 Corinthians", false},
    {"Gal", "Galatians", false},
    {"Eph", "Ephesians", false},
    {"Phi", "Philippians", false},
    {"Col", "Colossians", false},
    {"1Th", "1 Thessalonians", false},
    {"2Th", "2 Thessalonians", false},
    {"1Tim", "1 Timothy", false},
    {"2Tim", "2 Timothy", false},
    {"Titus", "Titus", false},
    {"Phmn", "Philemon", false},
    {"Heb", "Hebrews", false},
    {"Jas", "James", true},
    {"1Pet", "1 Peter", false},
    {"2Pet", "2 Peter", false},
    {"1Jn", "1 John", false},
    {"2Jn", "2 John", false},
    {"3Jn", "3 John", false},
    {"Jude", "Jude", false},
    {"Rev", "Revelation", false},
};

/* ---- the verse lines ---- */

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}
static bool is_letter(char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

/* A decimal number of 1 to 6 digits at line[*i], advancing *i; -1 when there is none. */
static int32_t read_number(const char *line, size_t length, size_t *i) {
    int32_t value = 0;
    size_t digits = 0;
    while (*i < length && is_digit(line[*i]) && digits < 7) {
        value = value * 10 + (line[*i] - '0');
        (*i)++;
        digits++;
    }
    return digits == 0 || digits > 6 ? -1 : value;
}

typedef struct verse_ref {
    const char *book; /* points into the line */
    size_t book_length;
    int32_t chapter, verse;
    size_t text_at; /* the verse's text: line[text_at .. length) */
} verse_ref;

/* Splits "<book><chapter>:<verse> <text>"; false when the line is not one. The book is an
 * optional leading digit and letters ("1Sm", "Ge"). */
static bool parse_reference(const char *line, size_t length, verse_ref *ref) {
    size_t i = 0;
    if (i < length && is_digit(line[i])) i++;
    size_t letters = i;
    while (i < length && is_letter(line[i])) i++;
    if (i == letters || i - 0 > 8) return false;
    ref->book = line;
    ref->book_length = i;
    ref->chapter = read_number(line, length, &i);
    if (ref->chapter < 1 || i >= length || line[i] != ':') return false;
    i++;
    ref->verse = read_number(line, length, &i);
    if (ref->verse < 1 || i >= length || line[i] != ' ') return false;
    ref->text_at = i + 1;
    return true;
}

static int book_index(const char *name, size_t length) {
    for (int b = 0; b < EG_KJV_BOOKS; b++)
        if (strlen(book_table[b].abbreviation) == length &&
            memcmp(book_table[b].abbreviation, name, length) == 0)
            return b;
    return -1;
}

/* Fails the parse with a message naming the line. */
static eg_status line_error(const char *name, int64_t line, const char *fmt, const char *detail) {
    char message[256];
    snprintf(message, sizeof message, fmt, detail);
    return eg__error(EG_ERR_FORMAT, "%s: line %lld: %s", name, (long long)line, message);
}

/* Copies the texts of the books with test == `test` (every book when `all`) into dst. */
static size_t gather(const eg_kjv *kjv, char *dst, bool all, bool test) {
    size_t used = 0;
    for (int b = 0; b < EG_KJV_BOOKS; b++)
        if (all || kjv->books[b].test == test) {
            memcpy(dst + used, kjv->text + kjv->books[b].offset, (size_t)kjv->books[b].length);
            used += (size_t)kjv->books[b].length;
        }
    dst[used] = '\0';
    return used;
}

static eg_status parse_verses(const char *bytes, size_t n, const char *name, eg_kjv *out) {
    /* The verses' text is shorter than the file, three times over (text, train, test). */
    char *buffer = malloc(2 * n + 3);
    if (!buffer) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", name);
    out->text = buffer;
    size_t used = 0;
    int current = -1;
    int32_t chapter = 0, verse = 0;
    int64_t line_number = 0;
    for (size_t pos = 0; pos < n;) {
        const char *line = bytes + pos;
        const char *newline = memchr(line, '\n', n - pos);
        size_t length = newline ? (size_t)(newline - line) : n - pos;
        pos += length + (newline ? 1 : 0);
        line_number++;
        if (length > 0 && line[length - 1] == '\r') length--;
        for (size_t i = 0; i < length; i++)
            if ((unsigned char)line[i] < 0x20 && line[i] != '\t')
                return line_error(name, line_number, "control byte 0x%s in the text",
                                  (char[3]){"0123456789ABCDEF"[(unsigned char)line[i] >> 4],
                                            "0123456789ABCDEF"[line[i] & 15], 0});
        if (length == 0) continue;
        verse_ref ref;
        if (!parse_reference(line, length, &ref)) {
            if (current < 0) continue; /* the title before the first verse */
            return line_error(name, line_number,
                              "not a verse (\"<book><chapter>:<verse> <text>\")%s", "");
        }
        char book[16];
        snprintf(book, sizeof book, "%.*s", (int)ref.book_length, ref.book);
        int b = book_index(ref.book, ref.book_length);
        if (b < 0) return line_error(name, line_number, "unknown book \"%s\"", book);
        if (b != current) {
            if (b != current + 1)
                return line_error(name, line_number,
                                  "book \"%s\" out of order (the books must come as in the Bible, "
                                  "each once)",
                                  book);
            if (current >= 0)
                out->books[current].length = (int64_t)used - out->books[current].offset;
            current = b;
            out->books[b].offset = (int64_t)used;
            chapter = verse = 0;
        }
        bool next_verse = ref.chapter == chapter && ref.verse == verse + 1;
        bool next_chapter = ref.chapter == chapter + 1 && ref.verse == 1;
        if (!next_verse && !next_chapter) {
            char where[80];
            snprintf(where, sizeof where, "%s %d:%d after %d:%d", book, ref.chapter, ref.verse,
                     chapter, verse);
            return line_error(name, line_number, "verse %s: out of sequence", where);
        }
        chapter = ref.chapter;
        verse = ref.verse;
        out->books[b].chapters = chapter;
        out->books[b].verses++;
        out->verses++;
        memcpy(buffer + used, line + ref.text_at, length - ref.text_at);
        used += length - ref.text_at;
        buffer[used++] = '\n';
    }
    if (current + 1 < EG_KJV_BOOKS)
        return line_error(name, line_number, "the text ends before the book \"%s\"",
                          book_table[current + 1].abbreviation);
    out->books[current].length = (int64_t)used - out->books[current].offset;
    out->length = (int64_t)used;
    buffer[used] = '\0';
    out->train = buffer + used + 1;
    out->train_length = (int64_t)gather(out, out->train, false, false);
    out->test = out->train + out->train_length + 1;
    out->test_length = (int64_t)gather(out, out->test, false, true);
    return EG_OK;
}

eg_status eg__kjv_parse(const char *bytes, size_t n, const char *name, eg_kjv *out) {
    if (!name) name = "data";
    memset(out, 0, sizeof *out);
    for (int b = 0; b < EG_KJV_BOOKS; b++) {
        out->books[b].abbreviation = book_table[b].abbreviation;
        out->books[b].name = book_table[b].name;
        out->books[b].test = book_table[b].test;
    }
    char *decoded = NULL;
    if (n >= 4 && memcmp(bytes, EG__EC02_MAGIC, 4) == 0) {
        size_t decoded_n = 0;
        eg_status status = eg__ec02_decode((const uint8_t *)bytes, n, EG__TEXT_MAX_BYTES, &decoded,
                                           &decoded_n, name);
        if (status != EG_OK) {
            memset(out, 0, sizeof *out);
            return status;
        }
        bytes = decoded;
        n = decoded_n;
    }
    eg_status status = parse_verses(bytes, n, name, out);
    free(decoded);
    if (status != EG_OK) {
        free(out->text);
        memset(out, 0, sizeof *out);
    }
    return status;
}

eg_status eg_kjv_load(const char *path, eg_kjv *out) {
    if (!out) return eg__error(EG_ERR_NULL_ARGUMENT, "kjv_load: out is NULL");
    memset(out, 0, sizeof *out);
    bool default_path = !path;
    if (default_path) path = EG_KJV_PATH;
    char *bytes = NULL;
    size_t n = 0;
    eg_status status = eg__read_whole_file(
        path, EG__TEXT_MAX_BYTES, "a Bible text",
        default_path ? "install the Debian package bible-kjv-text (apt-get install "
                       "bible-kjv-text, or scripts/install-deps.sh) or pass the file's path"
                     : NULL,
        &bytes, &n);
    if (status != EG_OK) return status;
    status = eg__kjv_parse(bytes, n, path, out);
    free(bytes);
    return status;
}

void eg_kjv_free(eg_kjv *kjv) {
    if (!kjv) return;
    free(kjv->text);
    memset(kjv, 0, sizeof *kjv);
}
