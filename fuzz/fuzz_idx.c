/* libFuzzer target for the IDX reader: every input goes through the parser (and, when accepted,
 * the byte-order conversion); inputs that start with the gzip magic also go through the file
 * reader's decompression, from an in-memory file, with a small size limit so that bombs are
 * cheap; what the reader accepts must be a well-formed IDX file (it validates as it reads, and
 * stops at the size the header announces). Seeds: tests/fuzz_corpus/idx/.
 *
 *   fuzz_idx -max_total_time=60 tests/fuzz_corpus/idx */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/error.h"
#include "io/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Small enough to keep each run fast, large enough for real decompression work. */
#define FUZZ_MAX_DECOMPRESSED ((size_t)4 << 20)

/* A violated invariant is a bug in the library, so it must crash loudly here. */
#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_idx: invariant failed: %s\n", #cond);                            \
            __builtin_trap();                                                                      \
        }                                                                                          \
    } while (0)

static void parse_and_convert(const uint8_t *data, size_t size) {
    eg_clear_error();
    eg__idx_view view;
    eg_status status = eg__idx_parse(data, size, "fuzz.idx", &view);
    if (status != EG_OK) {
        FUZZ_CHECK(status == EG_ERR_FORMAT);
        FUZZ_CHECK(eg_last_status() == status);
        FUZZ_CHECK(strncmp(eg_last_error(), "fuzz.idx: ", 10) == 0);
        return;
    }
    FUZZ_CHECK(view.n_dims >= 1 && view.n_dims <= EG_MAX_DIMS);
    FUZZ_CHECK(view.header_bytes == 4 + 4 * (size_t)view.n_dims);
    FUZZ_CHECK(view.data == data + view.header_bytes);
    FUZZ_CHECK(view.header_bytes + view.data_bytes == size);
    FUZZ_CHECK(view.n_elems * view.elem_size == view.data_bytes);
    size_t product = 1;
    for (int i = 0; i < view.n_dims; i++) product *= (size_t)view.shape[i];
    FUZZ_CHECK(product == view.n_elems);

    /* Widening at most quadruples the size (i8 -> i32), and the input bounds the element count. */
    size_t host_bytes = eg__idx_host_bytes(&view);
    FUZZ_CHECK(host_bytes <= 4 * view.data_bytes);
    uint8_t *host = malloc(host_bytes + 1);
    FUZZ_CHECK(host != NULL);
    eg__idx_convert(&view, host);
    free(host);
}

static void decompress(const uint8_t *data, size_t size) {
    int fd = memfd_create("fuzz_idx", MFD_CLOEXEC);
    if (fd < 0) return;
    size_t written = 0;
    while (written < size) {
        ssize_t n = write(fd, data + written, size - written);
        if (n <= 0) break;
        written += (size_t)n;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    eg_clear_error();
    uint8_t *bytes = NULL;
    size_t n_bytes = 0;
    eg_status status = eg__idx_load_file(path, FUZZ_MAX_DECOMPRESSED, &bytes, &n_bytes);
    if (status == EG_OK) {
        FUZZ_CHECK(n_bytes <= FUZZ_MAX_DECOMPRESSED);
        FUZZ_CHECK(eg__idx_well_formed(bytes, n_bytes));
        parse_and_convert(bytes, n_bytes);
        free(bytes);
    } else {
        FUZZ_CHECK(bytes == NULL && n_bytes == 0);
        FUZZ_CHECK(eg_last_status() == status);
        FUZZ_CHECK(strncmp(eg_last_error(), path, strlen(path)) == 0);
    }
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    parse_and_convert(data, size);
    if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) decompress(data, size);
    return 0;
}
