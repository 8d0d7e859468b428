/* Fused elementwise groups on the GPU: their kernels compiled with NVRTC, cached in memory and on
 * disk, loaded with the runtime's library API and launched (fusion.h describes the caches; the
 * source is written by fusion_source.c).
 *
 * Why a cubin per architecture and not PTX: loading PTX makes the driver compile it at every
 * process start, which is the cost the disk cache exists to avoid.
 *
 * Locking: one mutex guards the memory cache; it is never held while NVRTC compiles (hundreds of
 * milliseconds), so a thread launching a kernel found in memory never waits for another one's
 * compile. Two threads missing the same kernel at once both compile it, and the second result is
 * dropped: rare, and simpler than waiting on a compile in flight. Loading a cubin (fast) happens
 * under the mutex, so a kernel is loaded once.
 *
 * The disk cache is best effort: a directory that cannot be made or written only means the next
 * process compiles again, and no error is raised for it. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/cuda/fusion.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/libraries.h"
#include "base/error.h"

/* The architecture compile_fused targets when the group's device is not a GPU: the oldest this
 * build runs on (cuda_internal.h). */
#define DEFAULT_MAJOR EG__CUDA_MIN_MAJOR
#define DEFAULT_MINOR 0

/* No fast math: results must be the precompiled kernels' bits. */
static const char *const compile_options[] = {"-default-device", "--std=c++17"};
#define N_COMPILE_OPTIONS ((int)(sizeof compile_options / sizeof compile_options[0]))

static _Atomic int64_t n_compiled, n_disk_hits, n_memory_hits;

void eg__cuda_fusion_stats(int64_t *compiled, int64_t *disk_hits, int64_t *memory_hits) {
    if (compiled) *compiled = atomic_load(&n_compiled);
    if (disk_hits) *disk_hits = atomic_load(&n_disk_hits);
    if (memory_hits) *memory_hits = atomic_load(&n_memory_hits);
}

/* ---- NVRTC ---- */

static pthread_once_t compiler_once = PTHREAD_ONCE_INIT;
static char compiler_line[160]; /* "NVRTC 13.0 -default-device --std=c++17" */
static const char *compiler_problem;

static void describe_compiler(void) {
    compiler_problem = eg__cuda_open_nvrtc();
    if (compiler_problem) return;
    int major = 0, minor = 0;
    if (eg__cuda_fn(nvrtcVersion)(&major, &minor) != NVRTC_SUCCESS) {
        compiler_problem = "nvrtcVersion failed";
        return;
    }
    int n = snprintf(compiler_line, sizeof compiler_line, "NVRTC %d.%d", major, minor);
    for (int i = 0; i < N_COMPILE_OPTIONS && n > 0 && (size_t)n < sizeof compiler_line; i++)
        n += snprintf(compiler_line + n, sizeof compiler_line - (size_t)n, " %s",
                      compile_options[i]);
}

/* The group's source for the NVRTC found; EG_ERR_UNSUPPORTED when there is none. */
static eg_status make_source(const eg__fused_group *group, eg__fused_source *source) {
    pthread_once(&compiler_once, describe_compiler);
    if (compiler_problem) {
        memset(source, 0, sizeof *source);
        return eg__error(EG_ERR_UNSUPPORTED, "fused kernels are compiled with NVRTC: %s",
                         compiler_problem);
    }
    return eg__cuda_fused_source(group, compiler_line, source);
}

/* The first lines of NVRTC's log (what names the error), joined by " | ", into out. */
static void first_lines(const char *log, char *out, size_t size) {
    enum { MAX_LINES = 4 };
    size_t n = 0;
    int lines = 0;
    bool in_line = false;
    for (const char *c = log; *c && n + 4 < size; c++) {
        if (*c == '\n') {
            if (in_line && ++lines == MAX_LINES) break;
            in_line = false;
            continue;
        }
        if (!in_line && n > 0) {
            memcpy(out + n, " | ", 3);
            n += 3;
        }
        in_line = true;
        out[n++] = *c;
    }
    out[n] = '\0';
}

/* Compiles source for sm_<arch> into a new cubin (malloc'd); an error names the file holding
 * the source (where_kept, "" when none). */
static eg_status compile(const eg__fused_source *source, int arch, const char *where_kept,
                         void **cubin, size_t *bytes) {
    *cubin = NULL;
    size_t prefix_length;
    const char *prefix = eg__cuda_fused_prefix(&prefix_length);
    char *text = malloc(prefix_length + source->kernel_length + 1);
    if (!text) return eg__error(EG_ERR_OUT_OF_MEMORY, "fused kernel: out of host memory");
    memcpy(text, prefix, prefix_length);
    memcpy(text + prefix_length, source->kernel, source->kernel_length + 1);
    char file_name[48], architecture[48];
    snprintf(file_name, sizeof file_name, "%s.cu", source->name);
    snprintf(architecture, sizeof architecture, "--gpu-architecture=sm_%d", arch);
    const char *options[N_COMPILE_OPTIONS + 1] = {architecture};
    for (int i = 0; i < N_COMPILE_OPTIONS; i++) options[i + 1] = compile_options[i];

    nvrtcProgram program;
    nvrtcResult r = eg__cuda_fn(nvrtcCreateProgram)(&program, text, file_name, 0, NULL, NULL);
    free(text);
    if (r != NVRTC_SUCCESS)
        return eg__error(EG_ERR_UNSUPPORTED, "fused kernel %s: nvrtcCreateProgram: %s",
                         source->name, eg__cuda_fn(nvrtcGetErrorString)(r));
    eg_status status = EG_OK;
    r = eg__cuda_fn(nvrtcCompileProgram)(program, N_COMPILE_OPTIONS + 1, options);
    if (r != NVRTC_SUCCESS) {
        size_t log_size = 0;
        char *log = NULL;
        if (eg__cuda_fn(nvrtcGetProgramLogSize)(program, &log_size) == NVRTC_SUCCESS &&
            (log = malloc(log_size + 1)) &&
            eg__cuda_fn(nvrtcGetProgramLog)(program, log) == NVRTC_SUCCESS)
            log[log_size] = '\0';
        else if (log)
            log[0] = '\0';
        char lines[640];
        first_lines(log ? log : "", lines, sizeof lines);
        free(log);
        status = eg__error(EG_ERR_UNSUPPORTED, "fused kernel %s for sm_%d%s%s%s: NVRTC: %s: %s",
                           source->name, arch, *where_kept ? " (source: " : "", where_kept,
                           *where_kept ? ")" : "", eg__cuda_fn(nvrtcGetErrorString)(r), lines);
    } else if ((r = eg__cuda_fn(nvrtcGetCUBINSize)(program, bytes)) != NVRTC_SUCCESS ||
               !(*cubin = malloc(*bytes ? *bytes : 1)) ||
               (r = eg__cuda_fn(nvrtcGetCUBIN)(program, *cubin)) != NVRTC_SUCCESS) {
        free(*cubin);
        *cubin = NULL;
        status = r != NVRTC_SUCCESS
                     ? eg__error(EG_ERR_UNSUPPORTED, "fused kernel %s: reading its cubin: %s",
                                 source->name, eg__cuda_fn(nvrtcGetErrorString)(r))
                     : eg__error(EG_ERR_OUT_OF_MEMORY, "fused kernel: out of host memory");
    }
    eg__cuda_fn(nvrtcDestroyProgram)(&program);
    if (status == EG_OK) atomic_fetch_add(&n_compiled, 1);
    return status;
}

/* ---- the disk cache ---- */

/* A cache file: this header, then the cubin. */
typedef struct file_header {
    char magic[8];        /* FILE_MAGIC */
    uint64_t hash;        /* the source's */
    uint64_t arch;        /* major * 10 + minor */
    uint64_t cubin_bytes; /* what follows the header */
    uint64_t cubin_hash;  /* eg__cuda_fusion_hash of the cubin */
} file_header;

static const char FILE_MAGIC[8] = {'E', 'G', 'C', 'U', 'B', 'I', 'N', '1'};
enum { MAX_CUBIN_BYTES = 64 << 20 };

/* The cache directory, made if missing; false when none can be named or made. */
static bool cache_dir(char *dir, size_t size, bool make) {
    const char *setting = getenv("EG_CUDA_CACHE_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (setting && *setting)
        n = snprintf(dir, size, "%s", setting);
    else if (xdg && *xdg == '/') /* the XDG spec ignores a relative path */
        n = snprintf(dir, size, "%s/eagle/cuda-kernels", xdg);
    else if (home && *home)
        n = snprintf(dir, size, "%s/.cache/eagle/cuda-kernels", home);
    else
        return false;
    if (n <= 0 || (size_t)n >= size) return false;
    if (!make) return true;
    for (char *slash = dir + 1; (slash = strchr(slash, '/')); slash++) {
        *slash = '\0';
        (void)mkdir(dir, 0755);
        *slash = '/';
    }
    struct stat st;
    return (mkdir(dir, 0755) == 0 || errno == EEXIST) && stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool cache_path(const char *dir, uint64_t hash, int arch, const char *extension, char *path,
                       size_t size) {
    int n = arch ? snprintf(path, size, "%s/%016llx-sm_%d.%s", dir, (unsigned long long)hash, arch,
                            extension)
                 : snprintf(path, size, "%s/%016llx.%s", dir, (unsigned long long)hash, extension);
    return n > 0 && (size_t)n < size;
}

eg_status eg__cuda_fusion_cache_file(const eg__fused_group *group, int major, int minor, char *path,
                                     size_t size) {
    eg__fused_source source;
    eg_status status = make_source(group, &source);
    if (status != EG_OK) return status;
    char dir[4096];
    bool named = cache_dir(dir, sizeof dir, false) &&
                 cache_path(dir, source.hash, major * 10 + minor, "cubin", path, size);
    eg__cuda_fused_source_free(&source);
    return named ? EG_OK
                 : eg__error(EG_ERR_UNSUPPORTED,
                             "fused kernels: no cache directory (set EG_CUDA_CACHE_DIR or HOME)");
}

static bool read_all(int fd, void *data, size_t n) {
    for (size_t done = 0; done < n;) {
        ssize_t r = read(fd, (char *)data + done, n - done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        done += (size_t)r;
    }
    return true;
}

static bool write_all(int fd, const void *data, size_t n) {
    for (size_t done = 0; done < n;) {
        ssize_t w = write(fd, (const char *)data + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        done += (size_t)w;
    }
    return true;
}

/* The cubin of path when the file is a whole, intact entry for (hash, arch); else NULL. */
static void *read_cubin(const char *path, uint64_t hash, int arch, size_t *bytes) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    file_header h;
    void *cubin = NULL;
    bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > (off_t)sizeof h &&
              st.st_size <= (off_t)(sizeof h + MAX_CUBIN_BYTES) && read_all(fd, &h, sizeof h) &&
              !memcmp(h.magic, FILE_MAGIC, sizeof FILE_MAGIC) && h.hash == hash &&
              h.arch == (uint64_t)arch && h.cubin_bytes == (uint64_t)st.st_size - sizeof h &&
              (cubin = malloc((size_t)h.cubin_bytes)) && read_all(fd, cubin, (size_t)h.cubin_bytes);
    close(fd);
    /* an ELF image whose bytes are the ones written */
    ok = ok && h.cubin_bytes >= 4 && !memcmp(cubin, "\177ELF", 4) &&
         eg__cuda_fusion_hash(EG__FUSION_HASH_START, cubin, (size_t)h.cubin_bytes) == h.cubin_hash;
    if (!ok) {
        free(cubin);
        return NULL;
    }
    *bytes = (size_t)h.cubin_bytes;
    return cubin;
}

/* Writes head then body to path through a temporary file renamed over it, so that a reader sees
 * a whole file or none; no fsync (a torn file after a crash fails its check and is rewritten). */
static void write_file(const char *path, const void *head, size_t head_bytes, const void *body,
                       size_t body_bytes) {
    static atomic_uint counter;
    char temporary[4200];
    int n = snprintf(temporary, sizeof temporary, "%s.tmp.%ld.%u", path, (long)getpid(),
                     atomic_fetch_add(&counter, 1));
    if (n <= 0 || (size_t)n >= sizeof temporary) return;
    int fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return;
    bool ok =
        fchmod(fd, 0644) == 0 && write_all(fd, head, head_bytes) && write_all(fd, body, body_bytes);
    ok = close(fd) == 0 && ok;
    if (!ok || rename(temporary, path) != 0) unlink(temporary);
}

static void write_cubin(const char *path, uint64_t hash, int arch, const void *cubin,
                        size_t bytes) {
    file_header h = {.hash = hash,
                     .arch = (uint64_t)arch,
                     .cubin_bytes = bytes,
                     .cubin_hash = eg__cuda_fusion_hash(EG__FUSION_HASH_START, cubin, bytes)};
    memcpy(h.magic, FILE_MAGIC, sizeof FILE_MAGIC);
    write_file(path, &h, sizeof h, cubin, bytes);
}

/* The cubin of source for sm_<arch>: from the disk cache, else compiled and stored there, the
 * source beside it (for whoever reads the cache, or a compile error). */
static eg_status find_or_compile(const eg__fused_source *source, int arch, void **cubin,
                                 size_t *bytes) {
    char dir[4096], path[4200], kept[4200];
    bool on_disk = cache_dir(dir, sizeof dir, true) &&
                   cache_path(dir, source->hash, arch, "cubin", path, sizeof path);
    if (on_disk && (*cubin = read_cubin(path, source->hash, arch, bytes))) {
        atomic_fetch_add(&n_disk_hits, 1);
        return EG_OK;
    }
    /* written once: the source is the same for every architecture */
    bool kept_source = on_disk && cache_path(dir, source->hash, 0, "cu", kept, sizeof kept);
    if (kept_source && access(kept, F_OK) != 0) {
        size_t prefix_length;
        const char *prefix = eg__cuda_fused_prefix(&prefix_length);
        write_file(kept, prefix, prefix_length, source->kernel, source->kernel_length);
        kept_source = access(kept, F_OK) == 0;
    }
    eg_status status = compile(source, arch, kept_source ? kept : "", cubin, bytes);
    if (status == EG_OK && on_disk) write_cubin(path, source->hash, arch, *cubin, *bytes);
    return status;
}

/* ---- the memory cache: (hash, arch) -> cubin and, once loaded, its kernel ---- */

typedef struct entry {
    uint64_t hash;
    int arch; /* 0: an empty slot */
    void *cubin;
    size_t cubin_bytes;
    cudaLibrary_t library; /* NULL until loaded; the library keeps using the cubin's bytes */
    cudaKernel_t kernel;
} entry;

static pthread_mutex_t cache_mutex = PTHREAD_MUTEX_INITIALIZER;
static entry *slots; /* open addressing, linear probing; capacity a power of two */
static size_t capacity, used;

static size_t slot_of(uint64_t hash, int arch) {
    uint64_t h = (hash ^ (uint64_t)arch * 0x9e3779b97f4a7c15ull) * 0xff51afd7ed558ccdull;
    return (size_t)(h >> 17) & (capacity - 1);
}

/* Called with the mutex held. */
static entry *find(uint64_t hash, int arch) {
    if (!capacity) return NULL;
    for (size_t i = slot_of(hash, arch);; i = (i + 1) & (capacity - 1)) {
        if (!slots[i].arch) return NULL;
        if (slots[i].hash == hash && slots[i].arch == arch) return &slots[i];
    }
}

/* Adds an entry owning cubin (the mutex held); NULL when out of memory. */
static entry *insert(uint64_t hash, int arch, void *cubin, size_t bytes) {
    if ((used + 1) * 2 > capacity) {
        size_t grown = capacity ? capacity * 2 : 64;
        entry *fresh = calloc(grown, sizeof *fresh);
        if (!fresh) return NULL;
        entry *old = slots;
        size_t old_capacity = capacity;
        slots = fresh;
        capacity = grown;
        for (size_t i = 0; i < old_capacity; i++) {
            if (!old[i].arch) continue;
            size_t j = slot_of(old[i].hash, old[i].arch);
            while (slots[j].arch) j = (j + 1) & (capacity - 1);
            slots[j] = old[i];
        }
        free(old);
    }
    size_t i = slot_of(hash, arch);
    while (slots[i].arch) i = (i + 1) & (capacity - 1);
    slots[i] = (entry){.hash = hash, .arch = arch, .cubin = cubin, .cubin_bytes = bytes};
    used++;
    return &slots[i];
}

/* Loads e's cubin (the mutex held, d entered). */
static eg_status load(entry *e, const char *name, eg__cuda_device *d) {
    cudaLibrary_t library;
    cudaError_t error = cudaLibraryLoadData(&library, e->cubin, NULL, NULL, 0, NULL, NULL, 0);
    if (error != cudaSuccess) return eg__cuda_error(error, d->device, "loading a fused kernel");
    cudaKernel_t kernel;
    error = cudaLibraryGetKernel(&kernel, library, name);
    if (error != cudaSuccess) {
        (void)cudaLibraryUnload(library);
        return eg__cuda_error(error, d->device, "finding a fused kernel");
    }
    e->library = library;
    e->kernel = kernel;
    return EG_OK;
}

/* source's kernel for sm_<arch>, from the caches or compiled; loaded onto d when d is not NULL
 * (else only compiled: *kernel untouched). */
static eg_status get_kernel(const eg__fused_source *source, int arch, eg__cuda_device *d,
                            cudaKernel_t *kernel) {
    eg_status status = EG_OK;
    pthread_mutex_lock(&cache_mutex);
    entry *e = find(source->hash, arch);
    if (e) {
        atomic_fetch_add(&n_memory_hits, 1);
        if (d && !e->kernel) status = load(e, source->name, d);
        if (d && status == EG_OK) *kernel = e->kernel;
        pthread_mutex_unlock(&cache_mutex);
        return status;
    }
    pthread_mutex_unlock(&cache_mutex);

    void *cubin = NULL;
    size_t bytes = 0;
    status = find_or_compile(source, arch, &cubin, &bytes);
    if (status != EG_OK) return status;
    pthread_mutex_lock(&cache_mutex);
    e = find(source->hash, arch);
    if (e) { /* another thread made it meanwhile */
        free(cubin);
    } else if (!(e = insert(source->hash, arch, cubin, bytes))) {
        free(cubin);
        status = eg__error(EG_ERR_OUT_OF_MEMORY, "fused kernel: out of host memory");
    }
    if (status == EG_OK && d && !e->kernel) status = load(e, source->name, d);
    if (status == EG_OK && d) *kernel = e->kernel;
    pthread_mutex_unlock(&cache_mutex);
    return status;
}

void eg__cuda_fusion_reset(void) {
    pthread_mutex_lock(&cache_mutex);
    for (size_t i = 0; i < capacity; i++) {
        if (!slots[i].arch) continue;
        if (slots[i].library) (void)cudaLibraryUnload(slots[i].library);
        free(slots[i].cubin);
    }
    free(slots);
    slots = NULL;
    capacity = used = 0;
    pthread_mutex_unlock(&cache_mutex);
    atomic_store(&n_compiled, 0);
    atomic_store(&n_disk_hits, 0);
    atomic_store(&n_memory_hits, 0);
}

/* ---- the backend's hooks ---- */

static int arch_of(const eg__cuda_device *d) {
    return d->major * 10 + d->minor;
}

static bool on_gpu(const eg__fused_group *group) {
    return group && group->device && group->device->type == EG_DEVICE_CUDA &&
           group->device->context;
}

eg_status eg__cuda_compile_fused(const eg__fused_group *group) {
    eg__fused_source source;
    eg_status status = make_source(group, &source);
    if (status != EG_OK) return status;
    int arch =
        on_gpu(group) ? arch_of(eg__cuda_of(group->device)) : DEFAULT_MAJOR * 10 + DEFAULT_MINOR;
    status = get_kernel(&source, arch, NULL, NULL);
    eg__cuda_fused_source_free(&source);
    return status;
}

eg_status eg__cuda_run_fused(const eg__fused_group *group) {
    if (!on_gpu(group))
        return eg__error(EG_ERR_INTERNAL, "fused group: run on %s, not a GPU",
                         group && group->device ? group->device->name : "no device");
    eg__fused_source source;
    eg_status status = make_source(group, &source);
    if (status != EG_OK) return status;
    if (group->n_elems == 0) {
        eg__cuda_fused_source_free(&source);
        return EG_OK;
    }
    for (int i = 0; i < group->n_leaves && status == EG_OK; i++)
        if (!group->leaves[i].data)
            status = eg__error(EG_ERR_INTERNAL, "fused group: leaf %d has no data", i);
    if (status == EG_OK && !group->out)
        status = eg__error(EG_ERR_INTERNAL, "fused group: no output");
    eg__cuda_device *d = eg__cuda_of(group->device);
    if (status == EG_OK) status = eg__cuda_enter(d);
    cudaKernel_t kernel = NULL;
    if (status == EG_OK) status = get_kernel(&source, arch_of(d), d, &kernel);
    if (status == EG_OK) {
        int64_t params[EG__FUSED_MAX_PARAMS];
        (void)eg__cuda_fused_params(group, &source, params);
        void *args[] = {params};
        int64_t blocks = (group->n_elems + 255) / 256;
        dim3 grid = {.x = (unsigned)(blocks < 65535 ? blocks : 65535), .y = 1, .z = 1};
        dim3 block = {.x = 256, .y = 1, .z = 1};
        cudaError_t error =
            cudaLaunchKernel((const void *)kernel, grid, block, args, 0, eg__cuda_stream(d));
        if (error != cudaSuccess) {
            status = eg__cuda_error(error, group->device, "launching a fused kernel");
        } else {
            /* The group reports as its root op: what a fault names, what EG_CUDA_SYNC waits
             * for (eg__cuda_launched reads only the op and the output's device). */
            eg_tensor output = {.device = group->device};
            eg__kernel_call call = {.op = group->members[group->n_members - 1].op,
                                    .output = &output};
            status = eg__cuda_launched(&call);
        }
    }
    eg__cuda_fused_source_free(&source);
    return status;
}
