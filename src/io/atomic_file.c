/* Atomic file replacement: temporary file, fsync, rename, fsync of the directory. See
 * atomic_file.h. */
#include "io/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "eagle/device.h"

static atomic_uint_fast64_t sequence;

static void release(eg__atomic_file *file) {
    free(file->path);
    free(file->temp_path);
    file->path = file->temp_path = NULL;
    file->stream = NULL;
}

eg_status eg__atomic_open(eg__atomic_file *file, const char *path) {
    if (!file) return eg__error(EG_ERR_NULL_ARGUMENT, "atomic write: file is NULL");
    memset(file, 0, sizeof *file);
    if (!path) return eg__error(EG_ERR_NULL_ARGUMENT, "path is NULL");
    if (!*path) return eg__error(EG_ERR_INVALID_ARGUMENT, "path is empty");
    size_t n = strlen(path);
    size_t temp_size = n + 64;
    file->path = malloc(n + 1);
    file->temp_path = malloc(temp_size);
    if (!file->path || !file->temp_path) {
        release(file);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
    }
    memcpy(file->path, path, n + 1);
    unsigned long long seq = (unsigned long long)atomic_fetch_add(&sequence, 1);
    snprintf(file->temp_path, temp_size, "%s.tmp.%ld.%llu", path, (long)getpid(), seq);

    /* O_EXCL: never write through a file (or link) that someone else put there. */
    int fd = open(file->temp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        int saved = errno;
        eg_status status = eg__error(EG_ERR_IO, "%s: cannot create the temporary file %s: %s", path,
                                     file->temp_path, strerror(saved));
        release(file);
        return status;
    }
    file->stream = fdopen(fd, "wb");
    if (!file->stream) {
        int saved = errno;
        close(fd);
        unlink(file->temp_path);
        eg_status status = eg__error(saved == ENOMEM ? EG_ERR_OUT_OF_MEMORY : EG_ERR_IO,
                                     "%s: cannot open a stream: %s", path, strerror(saved));
        release(file);
        return status;
    }
    file->status = EG_OK;
    return EG_OK;
}

eg_status eg__atomic_write(eg__atomic_file *file, const void *data, size_t n) {
    if (!file || !file->stream) return EG_ERR_STATE;
    if (file->status != EG_OK || n == 0) return file->status;
    errno = 0;
    if (fwrite(data, 1, n, file->stream) != n) {
        int saved = errno;
        file->status = eg__error(EG_ERR_IO, "%s: write failed: %s", file->path,
                                 saved ? strerror(saved) : "short write");
    }
    return file->status;
}

eg_status eg__atomic_fail(eg__atomic_file *file, eg_status status) {
    if (file && file->status == EG_OK) file->status = status;
    return status;
}

void eg__atomic_abort(eg__atomic_file *file) {
    if (!file || !file->temp_path) return;
    if (file->stream) fclose(file->stream);
    unlink(file->temp_path);
    release(file);
}

/* The directory holding path ("." when it has no slash), malloc'd; NULL when out of memory. */
static char *directory_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *dir = malloc(n + 1);
    if (dir) {
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    return dir;
}

eg_status eg__atomic_commit(eg__atomic_file *file) {
    if (!file || !file->stream) return eg__error(EG_ERR_STATE, "atomic write: not open");
    eg_status status = file->status;
    const char *step = NULL;
    int saved = 0;
    if (status == EG_OK) {
        if (fflush(file->stream) != 0)
            step = "write";
        else if (fsync(fileno(file->stream)) != 0)
            step = "fsync";
        saved = errno;
    }
    FILE *stream = file->stream;
    file->stream = NULL;
    if (fclose(stream) != 0 && status == EG_OK && !step) {
        step = "close";
        saved = errno;
    }
    if (status == EG_OK && !step && rename(file->temp_path, file->path) != 0) {
        step = "rename";
        saved = errno;
    }
    if (status != EG_OK || step) {
        unlink(file->temp_path);
        if (status == EG_OK)
            status =
                eg__error(EG_ERR_IO, "%s: %s failed: %s (the previous file, if any, is intact)",
                          file->path, step, strerror(saved));
        release(file);
        return status;
    }

    /* The rename is only durable once the directory entry is: fsync the directory. Filesystems
     * that cannot fsync a directory say EINVAL (or ENOTSUP); that is not a failure. */
    char *dir = directory_of(file->path);
    if (!dir) {
        status = eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", file->path);
    } else {
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 || (fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP)) {
            status = eg__error(EG_ERR_IO,
                               "%s: written and renamed into place, but syncing the directory %s "
                               "failed: %s",
                               file->path, dir, strerror(errno));
        }
        if (fd >= 0) close(fd);
        free(dir);
    }
    release(file);
    return status;
}

#define HOST_IS_LITTLE_ENDIAN (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)

eg_status eg__atomic_write_tensor(eg__atomic_file *file, const eg_tensor *t) {
    if (!file || !file->stream) return EG_ERR_STATE;
    if (file->status != EG_OK) return file->status;
    eg_dtype dtype = eg_tensor_dtype(t);
    size_t size = eg_dtype_size(dtype);
    size_t n_bytes = (size_t)eg_tensor_n_elems(t) * size;
    if (n_bytes == 0) return EG_OK;
    if ((HOST_IS_LITTLE_ENDIAN || size == 1) &&
        eg_device_kind(eg_tensor_device(t)) == EG_DEVICE_CPU && eg_tensor_is_contiguous(t)) {
        const void *data = eg_tensor_data(t);
        if (!data) return eg__atomic_fail(file, eg_last_status());
        return eg__atomic_write(file, data, n_bytes);
    }
    uint8_t *copy = malloc(n_bytes);
    if (!copy)
        return eg__atomic_fail(file, eg__error(EG_ERR_OUT_OF_MEMORY,
                                               "%s: out of host memory: %zu bytes requested",
                                               file->path, n_bytes));
    eg_status status = eg_tensor_copy_to_host(t, copy, n_bytes);
    if (status == EG_OK) {
        if (!HOST_IS_LITTLE_ENDIAN)
            for (size_t i = 0; i + size <= n_bytes; i += size)
                for (size_t a = 0, b = size - 1; a < b; a++, b--) {
                    uint8_t byte = copy[i + a];
                    copy[i + a] = copy[i + b];
                    copy[i + b] = byte;
                }
        status = eg__atomic_write(file, copy, n_bytes);
    } else {
        eg__atomic_fail(file, status);
    }
    free(copy);
    return status;
}
