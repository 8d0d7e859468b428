/* The decompressed-IDX cache: gunzipping Fashion-MNIST's 26 MB of training images takes ~0.2 s of
 * CPU, most of `eagle train`'s start-up, so the first read of a gzip IDX file leaves its
 * decompressed bytes in $XDG_CACHE_HOME/eagle (~/.cache/eagle), and later reads map that file
 * instead. The cache is only ever a shortcut: an entry is used when the source's size and mtime
 * match the entry's record, the source's gzip trailer (CRC-32 and length of the uncompressed data)
 * matches too, and the entry's bytes have that CRC-32; anything else (missing, stale, truncated,
 * corrupt, unreadable, no cache directory) means reading the source as before, and the entry is
 * then rewritten. Nothing here raises an error: a cache problem is never the caller's problem.
 *
 * Entry layout: a 64-byte header (below), zero padding up to header_bytes, then the IDX file's
 * bytes. header_bytes is chosen so that the IDX elements start 64-byte aligned: u8 data can then
 * be used in place, as the storage of a tensor (eg__idx_mapping_release unmaps it).
 *
 * EG_IDX_CACHE=0 turns the cache off; EG_IDX_CACHE=DIR puts it in DIR.
 *
 * Size: every store first removes the temporary files that writers killed mid-write left behind
 * ("<entry>.<pid>.<n>.tmp" of a pid no longer alive), then, oldest first, the entries that would
 * make the cache's entries (and live temporary files) exceed its limit together with the new
 * one: EG__IDX_CACHE_DEFAULT_LIMIT (1 GiB), or EG_IDX_CACHE_LIMIT=<bytes>[K|M|G] (0: store
 * nothing). "Oldest" is the entry's mtime, which every use of an entry sets to now, so this is
 * least recently used. An entry evicted while mapped stays readable until unmapped. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "base/settings.h"
#include "io/atomic_file.h"
#include "io/internal.h"

#define CACHE_MAGIC    "EGIDXC1\n"
#define HEADER_BYTES   64u
#define DATA_ALIGNMENT 64u

typedef struct cache_header {
    char magic[8];
    uint64_t header_bytes;                       /* offset of the IDX bytes in the entry */
    uint64_t data_bytes;                         /* length of the IDX bytes */
    uint64_t source_bytes;                       /* the .gz file's size ... */
    int64_t source_mtime_sec, source_mtime_nsec; /* ... and modification time */
    uint32_t crc32; /* of the IDX bytes, as the .gz trailer states it */
    uint32_t unused;
    uint64_t unused2;
} cache_header;

_Static_assert(sizeof(cache_header) == HEADER_BYTES, "the cache header is 64 bytes");

struct eg__idx_mapping {
    void *base;
    size_t length;
};

void eg__idx_mapping_release(void *mapping) {
    eg__idx_mapping *m = mapping;
    if (!m) return;
    munmap(m->base, m->length);
    free(m);
}

/* The entry's path for source (absolute or not, as given: one entry per spelling), or false
 * when caching is off or no directory can be named. */
static bool entry_path(const char *source, char *path, size_t path_size, char *dir,
                       size_t dir_size) {
    const char *setting = getenv("EG_IDX_CACHE");
    if (setting && !strcmp(setting, "0")) return false;
    int n;
    if (setting && *setting) {
        n = snprintf(dir, dir_size, "%s", setting);
    } else {
        const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        if (xdg && *xdg == '/')
            n = snprintf(dir, dir_size, "%s/eagle", xdg);
        else if (home && *home)
            n = snprintf(dir, dir_size, "%s/.cache/eagle", home);
        else
            return false;
    }
    if (n < 0 || (size_t)n >= dir_size) return false;
    char absolute[PATH_MAX];
    const char *key = realpath(source, absolute) ? absolute : source;
    uint64_t hash = 14695981039346656037ull; /* FNV-1a of the source's path */
    for (const char *c = key; *c; c++) hash = (hash ^ (uint8_t)*c) * 1099511628211ull;
    const char *base = strrchr(key, '/');
    base = base ? base + 1 : key;
    size_t stem = strlen(base);
    if (stem > 3 && !strcmp(base + stem - 3, ".gz")) stem -= 3;
    if (stem > 100) stem = 100;
    n = snprintf(path, path_size, "%s/%.*s-%016llx.idx", dir, (int)stem, base,
                 (unsigned long long)hash);
    return n > 0 && (size_t)n < path_size;
}

/* The source's size and mtime, and the CRC-32 and length (mod 2^32) its gzip trailer states. */
typedef struct source_facts {
    struct stat st;
    uint32_t crc32, isize;
} source_facts;

static bool read_source_facts(const char *source, source_facts *facts) {
    int fd = open(source, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    uint8_t head[2], trailer[8];
    bool ok = fstat(fd, &facts->st) == 0 && S_ISREG(facts->st.st_mode) && facts->st.st_size >= 18 &&
              pread(fd, head, 2, 0) == 2 && head[0] == 0x1f && head[1] == 0x8b &&
              pread(fd, trailer, 8, facts->st.st_size - 8) == 8;
    close(fd);
    if (!ok) return false;
    facts->crc32 = (uint32_t)trailer[0] | (uint32_t)trailer[1] << 8 | (uint32_t)trailer[2] << 16 |
                   (uint32_t)trailer[3] << 24;
    facts->isize = (uint32_t)trailer[4] | (uint32_t)trailer[5] << 8 | (uint32_t)trailer[6] << 16 |
                   (uint32_t)trailer[7] << 24;
    return true;
}

static bool header_matches(const cache_header *h, const source_facts *facts, off_t entry_size) {
    return !memcmp(h->magic, CACHE_MAGIC, 8) && h->header_bytes >= HEADER_BYTES &&
           h->header_bytes <= (uint64_t)entry_size &&
           h->data_bytes == (uint64_t)entry_size - h->header_bytes &&
           h->data_bytes <= EG__IDX_MAX_BYTES && h->source_bytes == (uint64_t)facts->st.st_size &&
           h->source_mtime_sec == (int64_t)facts->st.st_mtim.tv_sec &&
           h->source_mtime_nsec == (int64_t)facts->st.st_mtim.tv_nsec && h->crc32 == facts->crc32 &&
           (uint32_t)h->data_bytes == facts->isize;
}

bool eg__idx_cache_open(const char *source, const uint8_t **bytes, size_t *n_bytes,
                        eg__idx_mapping **mapping) {
    char path[PATH_MAX], dir[PATH_MAX];
    source_facts facts;
    if (!entry_path(source, path, sizeof path, dir, sizeof dir) ||
        !read_source_facts(source, &facts))
        return false;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    struct stat st;
    cache_header h;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < (off_t)HEADER_BYTES ||
        pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h ||
        !header_matches(&h, &facts, st.st_size)) {
        close(fd);
        return false;
    }
    /* Private and writable: a tensor over it may be written to (copy on write), never the file.
     * No MAP_POPULATE: on a writable private mapping it copies every page up front (~70 ms of
     * system time for the training images), while the CRC pass below faults them in read-only,
     * sharing the page cache, in ~7 ms. */
    void *base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (base == MAP_FAILED) {
        close(fd);
        return false;
    }
    const uint8_t *data = (const uint8_t *)base + h.header_bytes;
    /* Older versions stored content their reader refused afterwards (a gzip bomb's gigabyte of
     * trailing zeros): such an entry could never be used, only take space. Checking the header
     * against the length is cheap; the CRC pass would read it all. */
    if (!eg__idx_well_formed(data, (size_t)h.data_bytes)) {
        close(fd);
        munmap(base, (size_t)st.st_size);
        unlink(path);
        return false;
    }
    eg__idx_mapping *m = malloc(sizeof *m);
    if (!m || (uint32_t)crc32_z(0, data, (size_t)h.data_bytes) != h.crc32) {
        close(fd);
        free(m);
        munmap(base, (size_t)st.st_size);
        return false;
    }
    futimens(fd, NULL); /* used now: the size limit evicts the least recently used first */
    close(fd);
    m->base = base;
    m->length = (size_t)st.st_size;
    *bytes = data;
    *n_bytes = (size_t)h.data_bytes;
    *mapping = m;
    return true;
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* The size limit: EG_IDX_CACHE_LIMIT=<bytes>[K|M|G], else (unset or not a size)
 * EG__IDX_CACHE_DEFAULT_LIMIT. */
static uint64_t cache_limit(void) {
    uint64_t limit;
    return eg__parse_bytes(getenv("EG_IDX_CACHE_LIMIT"), &limit) ? limit
                                                                 : EG__IDX_CACHE_DEFAULT_LIMIT;
}

/* "<stem>-<16 hex digits>.idx", the name entry_path gives an entry. */
static bool is_entry_name(const char *name, size_t n) {
    if (n < 22 || memcmp(name + n - 4, ".idx", 4) != 0 || name[n - 21] != '-') return false;
    for (size_t i = n - 20; i < n - 4; i++)
        if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
            return false;
    return true;
}

/* Whether name is an entry's temporary file, "<entry>.<pid>.<n>.tmp"; *stale: its writer is gone.
 */
static bool is_temp_name(const char *name, bool *stale) {
    size_t n = strlen(name);
    if (n < 8 || strcmp(name + n - 4, ".tmp") != 0) return false;
    const char *idx = NULL; /* the last ".idx." (pid and n have no dots to confuse it) */
    for (const char *p = strstr(name, ".idx."); p; p = strstr(p + 1, ".idx.")) idx = p;
    if (!idx) return false;
    size_t prefix = (size_t)(idx - name) + 5;
    char head[NAME_MAX + 1];
    if (prefix > NAME_MAX || !is_entry_name(name, prefix - 1)) return false;
    memcpy(head, name, prefix);
    head[prefix] = '\0';
    /* the same name rule as the atomic writer's: "<head><digits>.<digits><suffix>" */
    const char *p = name + prefix;
    size_t digits = strspn(p, "0123456789");
    if (!digits || p[digits] != '.') return false;
    p += digits + 1;
    digits = strspn(p, "0123456789");
    if (!digits || strcmp(p + digits, ".tmp") != 0) return false;
    *stale = eg__temp_name_is_stale(name, head, ".tmp");
    return true;
}

typedef struct cache_file {
    char name[NAME_MAX + 1];
    uint64_t bytes;
    struct timespec used;
} cache_file;

static int by_use(const void *a, const void *b) {
    const struct timespec *x = &((const cache_file *)a)->used, *y = &((const cache_file *)b)->used;
    if (x->tv_sec != y->tv_sec) return x->tv_sec < y->tv_sec ? -1 : 1;
    return x->tv_nsec < y->tv_nsec ? -1 : x->tv_nsec > y->tv_nsec;
}

/* Before an entry named `name` of `needed` bytes is written into dir: removes the temporary files
 * of dead writers, then the least recently used other entries until everything fits under the
 * limit. False when the entry alone exceeds the limit (it is then not written) or the directory
 * cannot be read. */
static bool make_room(const char *dir, const char *name, uint64_t needed) {
    uint64_t limit = cache_limit();
    if (needed > limit) return false;
    DIR *d = opendir(dir);
    if (!d) return false;
    int fd = dirfd(d);
    cache_file *files = NULL;
    size_t n = 0, capacity = 0;
    uint64_t total = needed;
    for (struct dirent *e; (e = readdir(d));) {
        struct stat st;
        if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
        size_t length = strlen(e->d_name);
        bool stale;
        if (is_temp_name(e->d_name, &stale)) {
            /* a live writer's temporary file counts, but is not ours to remove */
            if (!stale || st.st_uid != geteuid() || unlinkat(fd, e->d_name, 0) != 0)
                total += (uint64_t)st.st_size;
            continue;
        }
        if (length > NAME_MAX || !is_entry_name(e->d_name, length)) continue;
        if (!strcmp(e->d_name, name)) continue; /* about to be replaced */
        if (n == capacity) {
            size_t next = capacity ? 2 * capacity : 16;
            cache_file *grown = realloc(files, next * sizeof *files);
            if (!grown) break; /* out of memory: evict among those seen so far */
            files = grown;
            capacity = next;
        }
        memcpy(files[n].name, e->d_name, length + 1);
        files[n].bytes = (uint64_t)st.st_size;
        files[n].used = st.st_mtim;
        total += files[n].bytes;
        n++;
    }
    if (total > limit && n) {
        qsort(files, n, sizeof *files, by_use);
        for (size_t i = 0; i < n && total > limit; i++)
            if (unlinkat(fd, files[i].name, 0) == 0 || errno == ENOENT) total -= files[i].bytes;
    }
    free(files);
    closedir(d);
    return true;
}

static bool write_all(int fd, const void *data, size_t n) {
    const char *p = data;
    while (n > 0) {
        ssize_t written = write(fd, p, n > ((size_t)1 << 30) ? (size_t)1 << 30 : n);
        if (written < 0 && errno == EINTR) continue;
        if (written <= 0) return false;
        p += written;
        n -= (size_t)written;
    }
    return true;
}

void eg__idx_cache_store(const char *source, const uint8_t *bytes, size_t n_bytes) {
    char path[PATH_MAX], dir[PATH_MAX], temporary[PATH_MAX + 64];
    source_facts facts;
    if (n_bytes < 4 || !entry_path(source, path, sizeof path, dir, sizeof dir) ||
        !read_source_facts(source, &facts) || (uint32_t)n_bytes != facts.isize)
        return;
    /* The bytes came from this source only if they carry its CRC (the source may have changed
     * while it was read). */
    uint32_t crc = (uint32_t)crc32_z(0, bytes, n_bytes);
    if (crc != facts.crc32) return;
    /* The directory and its parents (~/.cache may not exist yet). */
    for (char *slash = dir + 1; (slash = strchr(slash, '/')); slash++) {
        *slash = '\0';
        mkdir(dir, 0755);
        *slash = '/';
    }
    mkdir(dir, 0755);
    size_t idx_header = 4 + 4 * (size_t)bytes[3];
    if (!make_room(dir, base_name(path), HEADER_BYTES + DATA_ALIGNMENT + n_bytes)) return;
    size_t header_bytes =
        (HEADER_BYTES + idx_header + DATA_ALIGNMENT - 1) / DATA_ALIGNMENT * DATA_ALIGNMENT -
        idx_header;
    uint8_t header[HEADER_BYTES + DATA_ALIGNMENT] = {0};
    cache_header h = {.header_bytes = header_bytes,
                      .data_bytes = n_bytes,
                      .source_bytes = (uint64_t)facts.st.st_size,
                      .source_mtime_sec = (int64_t)facts.st.st_mtim.tv_sec,
                      .source_mtime_nsec = (int64_t)facts.st.st_mtim.tv_nsec,
                      .crc32 = crc};
    memcpy(h.magic, CACHE_MAGIC, 8);
    memcpy(header, &h, sizeof h);
    /* Written beside the entry and renamed over it, so a reader sees a whole entry or none. No
     * fsync: after a crash a torn entry fails its CRC and is rewritten. */
    static atomic_uint counter;
    snprintf(temporary, sizeof temporary, "%s.%ld.%u.tmp", path, (long)getpid(),
             atomic_fetch_add(&counter, 1));
    int fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return;
    bool ok = write_all(fd, header, header_bytes) && write_all(fd, bytes, n_bytes);
    ok = close(fd) == 0 && ok;
    if (!ok || rename(temporary, path) != 0) unlink(temporary);
}
