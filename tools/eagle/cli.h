/* The eagle command-line tool: shared declarations of its subcommands and helpers. Only tools/
 * may print to the terminal unasked and call exit(). */
#ifndef EAGLE_TOOLS_CLI_H
#define EAGLE_TOOLS_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "eagle/tensor.h"

/* Exit codes: 0 ok, 1 runtime failure, 2 usage error (bad flags), 130 stopped by Ctrl-C (128 +
 * SIGINT, what a shell reports for a process SIGINT killed, so scripts see the run did not end). */
enum { CLI_OK = 0, CLI_FAILURE = 1, CLI_USAGE = 2, CLI_INTERRUPTED = 130 };

int cli_info(int argc, char **argv);
int cli_train(int argc, char **argv);
int cli_eval(int argc, char **argv);
int cli_quantize(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_profile(int argc, char **argv);
/* eagle train --model charlm and eagle generate (charlm.c) */
int cli_train_charlm(int argc, char **argv);
int cli_eval_charlm(int argc, char **argv);
int cli_generate(int argc, char **argv);
/* eagle train, eval and generate --model g2p (g2p.c) */
int cli_train_g2p(int argc, char **argv);
int cli_eval_g2p(int argc, char **argv);
int cli_generate_g2p(int argc, char **argv);
/* Whether the command line asks for --model NAME (a model with options of its own). */
bool cli_wants_model(int argc, char **argv, const char *name);

/* Parses a whole decimal/float argument; false (after printing a usage error) when malformed. */
bool cli_parse_int(const char *command, const char *flag, const char *text, long min, long max,
                   long *out);
bool cli_parse_double(const char *command, const char *flag, const char *text, double min,
                      double max, double *out);
/* Prints "eagle COMMAND: MESSAGE" and the hint to use --help, returns CLI_USAGE. */
int cli_usage_error(const char *command, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

/* A getopt_long failure (option strings begin with ':'): "eagle COMMAND: FLAG needs a value"
 * for ':' (a flag at the end of the line without its value), else "unknown option 'FLAG'", with
 * the --help hint; returns CLI_USAGE. */
int cli_bad_option(const char *command, int option, const char *flag);

/* Checks, before any work, that a file can be written at path (as the library writes files:
 * a temporary file in its directory renamed over it): the directory exists and takes a new file
 * (tried for real, since root ignores permission bits but not read-only mounts), and path is not
 * a directory. Otherwise prints "eagle COMMAND: FLAG PATH: why" and returns false. */
bool cli_check_output_path(const char *command, const char *flag, const char *path);

/* Ctrl-C (interrupt.c). After cli_interrupt_install, the first SIGINT only makes
 * cli_interrupted() true (the caller stops at its next safe point); a second one ends the process
 * at once with CLI_INTERRUPTED, unless it comes between cli_write_begin() and cli_write_end(),
 * which then returns true: stop now, the file is complete. */
void cli_interrupt_install(void);
bool cli_interrupted(void);
void cli_write_begin(void);
bool cli_write_end(void);

/* A per-epoch progress display: a redrawn bar on a terminal, plain lines otherwise. */
typedef struct cli_progress {
    bool tty;
    int64_t total_steps;
    int64_t first_step, first_samples; /* done before this process (a resumed epoch) */
    double start_seconds;
    double last_draw_seconds;
    int64_t last_line_step;
} cli_progress;

void cli_progress_begin(cli_progress *progress, int epoch, int n_epochs, int64_t total_steps);
/* After begin: the epoch continues after `steps` steps and `samples` examples trained by an
 * earlier process; the lines come at the steps the uninterrupted run's came at, and rates and
 * ETA count this process's work only. */
void cli_progress_continue(cli_progress *progress, int64_t steps, int64_t samples);
void cli_progress_update(cli_progress *progress, int64_t step, int64_t samples, double loss,
                         double accuracy);
void cli_progress_end(cli_progress *progress, int64_t samples, double loss, double accuracy);
double cli_seconds(void);
/* ||a - b||_F / ||b||_F into *relative and max |a - b| into *largest, of two f32 tensors of one
 * shape (read on the host; 0 and 0 when one cannot be read). */
void cli_compare(const eg_tensor *a, const eg_tensor *b, double *relative, double *largest);
/* How far a run is, in [0, 1]: step of steps when steps > 0, else the share of the time budget
 * (seconds) spent since start (cli_seconds). */
double cli_run_progress(long step, long steps, double start, double budget);
/* A cosine decay's factor at progress (clamped to [0, 1]): 1 at the start, floor at the end. */
double cli_cosine_decay(double progress, double floor);

#endif
