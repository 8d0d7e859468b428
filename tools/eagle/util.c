/* Helpers shared by the subcommands: argument parsing, output-path checks and the progress
 * display. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

int cli_usage_error(const char *command, const char *format, ...) {
    va_list args;
    va_start(args, format);
    fprintf(stderr, "eagle %s: ", command);
    vfprintf(stderr, format, args);
    fprintf(stderr, "\nTry 'eagle %s --help'.\n", command);
    va_end(args);
    return CLI_USAGE;
}

bool cli_parse_int(const char *command, const char *flag, const char *text, long min, long max,
                   long *out) {
    char *end;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (errno || end == text || *end || value < min || value > max) {
        cli_usage_error(command, "%s expects an integer in [%ld, %ld], got '%s'", flag, min, max,
                        text);
        return false;
    }
    *out = value;
    return true;
}

bool cli_parse_double(const char *command, const char *flag, const char *text, double min,
                      double max, double *out) {
    char *end;
    errno = 0;
    double value = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(value) || value < min || value > max) {
        cli_usage_error(command, "%s expects a number in [%g, %g], got '%s'", flag, min, max, text);
        return false;
    }
    *out = value;
    return true;
}

bool cli_check_output_path(const char *command, const char *flag, const char *path) {
    struct stat st;
    if (!*path || (stat(path, &st) == 0 && S_ISDIR(st.st_mode))) {
        fprintf(stderr, "eagle %s: %s '%s': %s; the run was not started\n", command, flag, path,
                *path ? "is a directory" : "is empty");
        return false;
    }
    const char *slash = strrchr(path, '/');
    char directory[PATH_MAX];
    if (!slash)
        snprintf(directory, sizeof directory, ".");
    else if (slash == path)
        snprintf(directory, sizeof directory, "/");
    else if (snprintf(directory, sizeof directory, "%.*s", (int)(slash - path), path) >=
             (int)sizeof directory)
        directory[0] = '\0';
    char problem[PATH_MAX + 256] = "";
    if (!directory[0]) {
        snprintf(problem, sizeof problem, "the directory's name is too long");
    } else if (stat(directory, &st) != 0) {
        snprintf(problem, sizeof problem, "directory %s: %s", directory, strerror(errno));
    } else if (!S_ISDIR(st.st_mode)) {
        snprintf(problem, sizeof problem, "%s is not a directory", directory);
    } else {
        char probe[PATH_MAX + 64];
        snprintf(probe, sizeof probe, "%s/.eagle-write-test-%ld-XXXXXX", directory, (long)getpid());
        int fd = mkstemp(probe);
        if (fd < 0) {
            snprintf(problem, sizeof problem, "cannot create a file in %s: %s", directory,
                     strerror(errno));
        } else {
            close(fd);
            unlink(probe);
        }
    }
    if (!problem[0]) return true;
    fprintf(stderr, "eagle %s: %s '%s': %s; the run was not started\n", command, flag, path,
            problem);
    return false;
}

bool cli_wants_model(int argc, char **argv, const char *name) {
    for (int i = 1; i < argc; i++)
        if ((!strcmp(argv[i], "--model") && i + 1 < argc && !strcmp(argv[i + 1], name)) ||
            (!strncmp(argv[i], "--model=", 8) && !strcmp(argv[i] + 8, name)))
            return true;
    return false;
}

double cli_run_progress(long step, long steps, double start, double budget) {
    double progress = steps > 0 ? (double)step / (double)steps : (cli_seconds() - start) / budget;
    return progress < 0 ? 0 : progress > 1 ? 1 : progress;
}

double cli_cosine_decay(double progress, double floor) {
    double p = progress < 0 ? 0 : progress > 1 ? 1 : progress;
    return floor + (1 - floor) * 0.5 * (1 + cos(M_PI * p));
}

double cli_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void cli_progress_begin(cli_progress *progress, int epoch, int n_epochs, int64_t total_steps) {
    progress->tty = isatty(STDOUT_FILENO);
    progress->total_steps = total_steps;
    progress->first_step = 0;
    progress->first_samples = 0;
    progress->start_seconds = cli_seconds();
    progress->last_draw_seconds = 0;
    progress->last_line_step = 0;
    printf("Epoch %d/%d\n", epoch, n_epochs);
    fflush(stdout);
}

void cli_progress_continue(cli_progress *progress, int64_t steps, int64_t samples) {
    int64_t every = progress->total_steps / 10 > 0 ? progress->total_steps / 10 : 1;
    progress->first_step = steps;
    progress->first_samples = samples;
    progress->last_line_step = steps / every * every;
}

static void format_eta(char *buf, size_t size, double seconds) {
    if (seconds < 0 || !isfinite(seconds)) seconds = 0;
    int s = (int)(seconds + 0.5);
    if (s >= 3600)
        snprintf(buf, size, "%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(buf, size, "%d:%02d", s / 60, s % 60);
}

/* Redraws at most ~10 times a second on a terminal; writes a line every 10% otherwise, so logs
 * stay short. */
void cli_progress_update(cli_progress *progress, int64_t step, int64_t samples, double loss,
                         double accuracy) {
    double now = cli_seconds();
    double elapsed = now - progress->start_seconds;
    int64_t done_here = step - progress->first_step;
    double rate = elapsed > 0 ? (double)(samples - progress->first_samples) / elapsed : 0;
    double eta =
        done_here > 0 ? elapsed * (double)(progress->total_steps - step) / (double)done_here : 0;
    char eta_text[32];
    format_eta(eta_text, sizeof eta_text, eta);
    if (progress->tty) {
        if (now - progress->last_draw_seconds < 0.1 && step < progress->total_steps) return;
        progress->last_draw_seconds = now;
        enum { WIDTH = 30 };
        int filled = (int)(WIDTH * step / (progress->total_steps ? progress->total_steps : 1));
        char bar[WIDTH + 1];
        for (int i = 0; i < WIDTH; i++) bar[i] = i < filled ? '=' : (i == filled ? '>' : '.');
        bar[WIDTH] = '\0';
        printf("\r%6lld/%lld [%s] loss %.4f  accuracy %.4f  %.0f samples/s  ETA %s   ",
               (long long)step, (long long)progress->total_steps, bar, loss, accuracy, rate,
               eta_text);
        fflush(stdout);
        return;
    }
    int64_t every = progress->total_steps / 10 > 0 ? progress->total_steps / 10 : 1;
    if (step - progress->last_line_step < every && step < progress->total_steps) return;
    progress->last_line_step = step;
    printf("  step %lld/%lld  loss %.4f  accuracy %.4f  %.0f samples/s  ETA %s\n", (long long)step,
           (long long)progress->total_steps, loss, accuracy, rate, eta_text);
    fflush(stdout);
}

void cli_progress_end(cli_progress *progress, int64_t samples, double loss, double accuracy) {
    double elapsed = cli_seconds() - progress->start_seconds;
    double here = (double)(samples - progress->first_samples);
    if (progress->tty) printf("\n");
    printf("  %lld samples in %.2f s (%.0f samples/s)  loss %.4f  accuracy %.4f\n",
           (long long)samples, elapsed, elapsed > 0 ? here / elapsed : 0.0, loss, accuracy);
    fflush(stdout);
}

int cli_bad_option(const char *command, int option, const char *flag) {
    if (option == ':') return cli_usage_error(command, "%s needs a value", flag);
    return cli_usage_error(command, "unknown option '%s'", flag);
}

/* ||a - b||_F / ||b||_F and max |a - b| of two f32 tensors of one shape. */
void cli_compare(const eg_tensor *a, const eg_tensor *b, double *relative, double *largest) {
    int64_t n = eg_tensor_n_elems(b);
    const float *x = eg_tensor_data(a), *y = eg_tensor_data(b);
    double diff = 0, norm = 0, peak = 0;
    for (int64_t i = 0; x && y && i < n; i++) {
        double d = (double)x[i] - y[i];
        diff += d * d;
        norm += (double)y[i] * y[i];
        peak = fabs(d) > peak ? fabs(d) : peak;
    }
    *relative = sqrt(diff / (norm > 0 ? norm : 1));
    *largest = peak;
}
