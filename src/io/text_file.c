/* Whole files into memory (for the text loaders) and a file's bytes as a tensor of ids. */

#ifndef EG_NO_CALLSITE
#define EG_NO_CALLSITE
#endif

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "core/tensor_internal.h"
#include "eagle/io.h"
#include "io/text_formats.h"

eg_status eg__read_whole_file(const char *path, size_t max_bytes, const char *what,
                              const char *hint, char **bytes, size_t *n) {
    *bytes = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return eg__error(EG_ERR_IO, "%s: cannot open: %s%s%s", path, strerror(errno),
                         hint ? "; " : "", hint ? hint : "");
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        return eg__error(EG_ERR_IO, "%s: is a directory, not %s", path, what);
    }
    /* Grown as the data arrives rather than sized by stat: pipes and /proc files have no size. */
    size_t capacity = 1 << 16, used = 0;
    char *buffer = malloc(capacity + 1);
    for (;;) {
        if (!buffer) {
            fclose(f);
            return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory reading the file", path);
        }
        used += fread(buffer + used, 1, capacity - used, f);
        if (used > max_bytes) {
            free(buffer);
            fclose(f);
            return eg__error(EG_ERR_FORMAT, "%s: larger than %zu bytes, the most %s may hold", path,
                             max_bytes, what);
        }
        if (used < capacity) break;
        capacity *= 2;
        char *bigger = realloc(buffer, capacity + 1);
        if (!bigger) free(buffer);
        buffer = bigger;
    }
    bool failed = ferror(f);
    int saved = errno;
    fclose(f);
    if (failed) {
        free(buffer);
        return eg__error(EG_ERR_IO, "%s: cannot read: %s", path, strerror(saved));
    }
    buffer[used] = '\0';
    *bytes = buffer;
    *n = used;
    return EG_OK;
}

eg_tensor *eg_text_file_read_bytes(const char *path, eg_dtype dtype) {
    if (!path) {
        eg__error(EG_ERR_NULL_ARGUMENT, "text_file_read_bytes: path is NULL");
        return NULL;
    }
    if (dtype != EG_DTYPE_U8 && dtype != EG_DTYPE_I32 && dtype != EG_DTYPE_I64) {
        eg__error(EG_ERR_DTYPE, "text_file_read_bytes: dtype %s; byte ids are u8, i32 or i64",
                  eg_dtype_name(dtype));
        return NULL;
    }
    char *bytes;
    size_t n;
    if (eg__read_whole_file(path, EG__TEXT_MAX_BYTES, "a text file", NULL, &bytes, &n) != EG_OK)
        return NULL;
    int64_t shape[1] = {(int64_t)n};
    eg_tensor *t = eg__tensor_alloc(dtype, 1, shape, eg_device_cpu());
    if (t && n > 0) {
        const unsigned char *from = (const unsigned char *)bytes;
        void *to = eg__data(t);
        if (dtype == EG_DTYPE_U8)
            memcpy(to, from, n);
        else if (dtype == EG_DTYPE_I32)
            for (size_t i = 0; i < n; i++) ((int32_t *)to)[i] = from[i];
        else
            for (size_t i = 0; i < n; i++) ((int64_t *)to)[i] = from[i];
    }
    free(bytes);
    return t;
}
