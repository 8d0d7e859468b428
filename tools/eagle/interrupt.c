/* Ctrl-C for `eagle train` (see cli.h): the first one asks the run to stop at the next step
 * boundary, so that its checkpoint can be written; a second one stops the process at once, except
 * while a file is being written, which it lets finish (a killed atomic write would leave its
 * temporary file behind). The handler may run on any thread (the input pipeline's and the thread
 * pool's threads do not block SIGINT), so all it shares with the program is lock-free atomics, and
 * it calls only write() and _exit(), both async-signal-safe. */
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the SIGINT handler needs lock-free atomic ints");

static atomic_int interrupts;
static atomic_int writing;

static void say(const char *text) {
    ssize_t ignored = write(STDERR_FILENO, text, strlen(text));
    (void)ignored; /* nothing better to do in a signal handler */
}

static void on_interrupt(int signal_number) {
    (void)signal_number;
    int before = atomic_fetch_add(&interrupts, 1);
    if (before == 0) {
        say("\neagle train: interrupted: finishing the current step (Ctrl-C again to stop at "
            "once)\n");
        return;
    }
    if (atomic_load(&writing)) {
        if (before == 1)
            say("eagle train: stopping as soon as the file being written is complete\n");
        return;
    }
    say("eagle train: interrupted again: stopped at once\n");
    _exit(CLI_INTERRUPTED);
}

void cli_interrupt_install(void) {
    struct sigaction action;
    /* An ignored SIGINT stays ignored: whoever started us asked for that (nohup, a background job
     * of a shell without job control), as with any program that catches it. */
    if (sigaction(SIGINT, NULL, &action) == 0 && action.sa_handler == SIG_IGN) return;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_interrupt;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART; /* reads and writes carry on after the first Ctrl-C */
    sigaction(SIGINT, &action, NULL);
}

bool cli_interrupted(void) {
    return atomic_load(&interrupts) > 0;
}

void cli_write_begin(void) {
    atomic_store(&writing, 1);
}

bool cli_write_end(void) {
    atomic_store(&writing, 0);
    return atomic_load(&interrupts) > 1;
}
