/* eagle info: what this build is and what it runs on. */
#include <getopt.h>
#include <string.h>

#include <eagle.h>

#include "cli.h"

int cli_info(int argc, char **argv) {
    static const struct option options[] = {
        {"help", no_argument, NULL, 'h'}, {"version", no_argument, NULL, 'v'}, {NULL, 0, NULL, 0}};
    optind = 1;
    opterr = 0;
    int option;
    while ((option = getopt_long(argc, argv, "hv", options, NULL)) != -1) {
        switch (option) {
        case 'h':
            printf("usage: eagle info [--version]\n\n"
                   "Prints Eagle's version, build options, thread count, BLAS and devices.\n");
            return CLI_OK;
        case 'v':
            printf("eagle %s\n", eg_version());
            return CLI_OK;
        default:
            return cli_usage_error("info", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error("info", "unexpected argument '%s'", argv[optind]);
    printf("eagle %s\n", eg_version());
    printf("build:      %s\n", eg_build_info());
    printf("threads:    %d (EG_NUM_THREADS overrides)\n", eg_get_num_threads());
    printf("BLAS:       %s\n", eg_blas_info());
    printf("allocator:  %s (EG_ALLOCATOR=system for plain malloc)\n",
           eg_memory_allocator_name(NULL));
    printf("devices:    %s\n", eg_device_name(eg_device_cpu()));
    return CLI_OK;
}
