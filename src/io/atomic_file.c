/* Atomic file replacement: temporary file, fsync, rename, fsync of the directory. See
 * atomic_file.h. */
#include "device/device.h"
#include "io/atomic_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "eagle/device.h"

static atomic_uint_fast64_t sequence;

/* As many as the kernel follows before it says ELOOP. */
#define MAX_SYMLINKS 40

static void release(eg__atomic_file *file) {
    free(file->path);
    free(file->target);
    free(file->temp_path);
    file->path = file->target = file->temp_path = NULL;
    file->stream = NULL;
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

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* What a link found at `link_path` and reading `contents` points to, as a path usable from here:
 * a relative link is relative to the link's own directory. malloc'd; NULL when out of memory. */
static char *link_destination(const char *link_path, const char *contents) {
    const char *slash = strrchr(link_path, '/');
    if (contents[0] == '/' || !slash) return strdup(contents);
    size_t dir = (size_t)(slash - link_path) + 1, n = strlen(contents);
    char *out = malloc(dir + n + 1);
    if (out) {
        memcpy(out, link_path, dir);
        memcpy(out + dir, contents, n + 1);
    }
    return out;
}

/* Follows path's chain of symlinks to the file it ends at (which need not exist): replacing the
 * link itself would leave the file it points to with the old content. Only the last component
 * matters; symlinked directories on the way work as they are. */
static eg_status resolve_target(const char *path, char **out) {
    *out = NULL;
    char *current = strdup(path);
    if (!current) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
    for (int hops = 0;; hops++) {
        struct stat st;
        if (lstat(current, &st) != 0 || !S_ISLNK(st.st_mode)) break;
        if (hops == MAX_SYMLINKS) {
            free(current);
            return eg__error(EG_ERR_IO,
                             "%s: symlink loop (more than %d symbolic links to follow); nothing "
                             "written",
                             path, MAX_SYMLINKS);
        }
        /* st_size is the link's length, except on file systems that say 0 (procfs). */
        size_t capacity = st.st_size > 0 ? (size_t)st.st_size + 1 : PATH_MAX;
        char *contents = malloc(capacity);
        ssize_t n = contents ? readlink(current, contents, capacity) : -1;
        if (!contents || n < 0 || (size_t)n >= capacity) {
            int saved = errno;
            free(contents);
            eg_status status =
                !contents ? eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", path)
                : n < 0 ? eg__error(EG_ERR_IO, "%s: cannot read the symlink %s: %s", path, current,
                                    strerror(saved))
                        : eg__error(EG_ERR_IO, "%s: the symlink %s changed while being read", path,
                                    current);
            free(current);
            return status;
        }
        contents[n] = '\0';
        char *next = link_destination(current, contents);
        free(contents);
        free(current);
        if (!next) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
        current = next;
    }
    *out = current;
    return EG_OK;
}

eg_status eg__atomic_open(eg__atomic_file *file, const char *path) {
    if (!file) return eg__error(EG_ERR_NULL_ARGUMENT, "atomic write: file is NULL");
    memset(file, 0, sizeof *file);
    if (!path) return eg__error(EG_ERR_NULL_ARGUMENT, "path is NULL");
    if (!*path) return eg__error(EG_ERR_INVALID_ARGUMENT, "path is empty");
    file->path = strdup(path);
    if (!file->path) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
    eg_status status = resolve_target(path, &file->target);
    if (status != EG_OK) {
        release(file);
        return status;
    }
    const char *target = file->target;

    /* An existing target keeps its permissions: a private (0600) checkpoint must not become
     * world-readable by being saved again. Set-id and sticky bits are not carried over: the new
     * file may have another owner. A device, FIFO or socket is never replaced by a file (a
     * directory cannot be: the rename fails, and says so). */
    struct stat st;
    bool exists = stat(target, &st) == 0 && !S_ISDIR(st.st_mode);
    if (exists && !S_ISREG(st.st_mode)) {
        status = eg__error(EG_ERR_IO,
                           "%s: is not a regular file (a device, FIFO or socket), which a save "
                           "never replaces; nothing written",
                           path);
        release(file);
        return status;
    }
    mode_t mode = exists ? st.st_mode & 0777 : 0666;

    size_t temp_size = strlen(target) + 64;
    file->temp_path = malloc(temp_size);
    char *dir = directory_of(target);
    if (!file->temp_path || !dir) {
        free(dir);
        release(file);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", path);
    }
    unsigned long long seq = (unsigned long long)atomic_fetch_add(&sequence, 1);
    snprintf(file->temp_path, temp_size, "%s.tmp.%ld.%llu", target, (long)getpid(), seq);

    /* A kill mid-write leaves a temporary file nothing else would ever remove. */
    char prefix[NAME_MAX + 8];
    if ((size_t)snprintf(prefix, sizeof prefix, "%s.tmp.", base_name(target)) < sizeof prefix)
        eg__remove_stale_temp_files(dir, prefix, "");
    free(dir);

    /* O_EXCL: never write through a file (or link) that someone else put there. The mode passes
     * through the umask like any new file's; an existing target's exact mode is set below. */
    int fd = open(file->temp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0) {
        int saved = errno;
        status = eg__error(EG_ERR_IO, "%s: cannot create the temporary file %s: %s", path,
                           file->temp_path, strerror(saved));
        release(file);
        return status;
    }
    if (exists && fchmod(fd, mode) != 0) {
        int saved = errno;
        close(fd);
        unlink(file->temp_path);
        status = eg__error(EG_ERR_IO, "%s: cannot give the temporary file %s mode %04o: %s", path,
                           file->temp_path, (unsigned)mode, strerror(saved));
        release(file);
        return status;
    }
    file->stream = fdopen(fd, "wb");
    if (!file->stream) {
        int saved = errno;
        close(fd);
        unlink(file->temp_path);
        status = eg__error(saved == ENOMEM ? EG_ERR_OUT_OF_MEMORY : EG_ERR_IO,
                           "%s: cannot open a stream: %s", path, strerror(saved));
        release(file);
        return status;
    }
    file->status = EG_OK;
    return EG_OK;
}

/* The decimal number at *p (1 to 19 digits), which *p is moved past; false when there is none. */
static bool parse_decimal(const char **p, unsigned long long *value) {
    const char *s = *p;
    unsigned long long v = 0;
    int digits = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (++digits > 19) return false;
        v = v * 10 + (unsigned long long)(*s - '0');
    }
    if (!digits) return false;
    *p = s;
    *value = v;
    return true;
}

bool eg__temp_name_is_stale(const char *name, const char *prefix, const char *suffix) {
    if (!name || !prefix || !suffix) return false;
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) != 0) return false;
    const char *p = name + n;
    unsigned long long pid, seq;
    if (!parse_decimal(&p, &pid) || *p++ != '.' || !parse_decimal(&p, &seq) || strcmp(p, suffix))
        return false;
    if (pid == 0 || pid > (unsigned long long)INT_MAX) return false;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

int eg__remove_stale_temp_files(const char *dir, const char *prefix, const char *suffix) {
    int saved = errno; /* best effort: leave no trace, not even in errno */
    DIR *d = dir ? opendir(dir) : NULL;
    int removed = 0;
    if (d) {
        int fd = dirfd(d);
        for (struct dirent *e; (e = readdir(d));) {
            struct stat st;
            if (!eg__temp_name_is_stale(e->d_name, prefix, suffix) ||
                fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
                st.st_uid != geteuid())
                continue;
            if (unlinkat(fd, e->d_name, 0) == 0) removed++;
        }
        closedir(d);
    }
    errno = saved;
    return removed;
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
    if (status == EG_OK && !step && rename(file->temp_path, file->target) != 0) {
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
    char *dir = directory_of(file->target);
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
        eg__device_is_host(eg_tensor_device(t)) && eg_tensor_is_contiguous(t)) {
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
