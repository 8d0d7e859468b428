/* The eagle command-line tool: shared declarations of its subcommands and helpers. Only tools/
 * may print to the terminal unasked and call exit(). */
#ifndef EAGLE_TOOLS_CLI_H
#define EAGLE_TOOLS_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes: 0 ok, 1 runtime failure, 2 usage error (bad flags). */
enum { CLI_OK = 0, CLI_FAILURE = 1, CLI_USAGE = 2 };

int cli_info(int argc, char **argv);
int cli_train(int argc, char **argv);
int cli_eval(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_profile(int argc, char **argv);

/* Parses a whole decimal/float argument; false (after printing a usage error) when malformed. */
bool cli_parse_int(const char *command, const char *flag, const char *text, long min, long max,
                   long *out);
bool cli_parse_double(const char *command, const char *flag, const char *text, double min,
                      double max, double *out);
/* Prints "eagle COMMAND: MESSAGE" and the hint to use --help, returns CLI_USAGE. */
int cli_usage_error(const char *command, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

/* A per-epoch progress display: a redrawn bar on a terminal, plain lines otherwise. */
typedef struct cli_progress {
    bool tty;
    int64_t total_steps;
    int64_t samples;
    double start_seconds;
    double last_draw_seconds;
    int64_t last_line_step;
} cli_progress;

void cli_progress_begin(cli_progress *progress, int epoch, int n_epochs, int64_t total_steps);
void cli_progress_update(cli_progress *progress, int64_t step, int64_t samples, double loss,
                         double accuracy);
void cli_progress_end(cli_progress *progress, int64_t samples, double loss, double accuracy);
double cli_seconds(void);

#endif
