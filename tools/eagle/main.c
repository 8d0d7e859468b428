/* eagle: train, evaluate and inspect models with the Eagle runtime. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void print_usage(FILE *out) {
    fprintf(
        out,
        "usage: eagle <command> [options]\n"
        "\n"
        "commands:\n"
        "  train   train a model on Fashion-MNIST (the seed model by default), or with\n"
        "          --model charlm a character language model on the King James Bible,\n"
        "          --model g2p spelling to phonemes on CMUdict\n"
        "  generate sample text from a saved charlm (--model g2p: a word's phonemes)\n"
        "  eval    evaluate saved weights on the test split (--model charlm: the held-out\n"
        "          books; --model g2p: the held-out words)\n"
        "  quantize write an int8 checkpoint of saved weights (eagle eval runs it)\n"
        "  bench   benchmarks: 'eagle bench modes' compares eager, lazy and graph mode\n"
        "  info    version, build, threads, BLAS, devices (--ops: the op x device x dtype table)\n"
        "  profile time each op of training steps on synthetic data\n"
        "\n"
        "Run 'eagle <command> --help' for the options of a command.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        print_usage(stderr);
        return CLI_USAGE;
    }
    const char *command = argv[1];
    if (!strcmp(command, "--help") || !strcmp(command, "-h") || !strcmp(command, "help")) {
        print_usage(stdout);
        return CLI_OK;
    }
    if (!strcmp(command, "--version")) {
        char *info_argv[] = {"info", "--version", NULL};
        return cli_info(2, info_argv);
    }
    if (!strcmp(command, "train")) return cli_train(argc - 1, argv + 1);
    if (!strcmp(command, "eval"))
        return cli_wants_model(argc - 1, argv + 1, "g2p") ? cli_eval_g2p(argc - 1, argv + 1)
                                                          : cli_eval(argc - 1, argv + 1);
    if (!strcmp(command, "generate"))
        return cli_wants_model(argc - 1, argv + 1, "g2p") ? cli_generate_g2p(argc - 1, argv + 1)
                                                          : cli_generate(argc - 1, argv + 1);
    if (!strcmp(command, "quantize")) return cli_quantize(argc - 1, argv + 1);
    if (!strcmp(command, "bench")) return cli_bench(argc - 1, argv + 1);
    if (!strcmp(command, "info")) return cli_info(argc - 1, argv + 1);
    if (!strcmp(command, "profile")) return cli_profile(argc - 1, argv + 1);
    fprintf(stderr, "eagle: unknown command '%s'\n", command);
    print_usage(stderr);
    return CLI_USAGE;
}
