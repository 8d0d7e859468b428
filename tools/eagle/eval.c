/* eagle eval: test accuracy of weights saved by `eagle train --save`. */
#include <getopt.h>
#include <string.h>

#include "cli.h"
#include "cnn.h"
#include "mlp.h"

static void print_help(void) {
    printf("usage: eagle eval [--data DIR] [--threads N] [--limit N] WEIGHTS.safetensors\n"
           "\n"
           "Rebuilds the model saved by 'eagle train --save' and reports its accuracy and loss\n"
           "on the Fashion-MNIST test split (its first N examples with --limit N).\n");
}

int cli_eval(int argc, char **argv) {
    if (cli_wants_model(argc, argv, "charlm")) return cli_eval_charlm(argc, argv);
    enum { DATA = 1000, THREADS, LIMIT, HELP };
    static const struct option options[] = {{"data", required_argument, NULL, DATA},
                                            {"threads", required_argument, NULL, THREADS},
                                            {"limit", required_argument, NULL, LIMIT},
                                            {"help", no_argument, NULL, HELP},
                                            {NULL, 0, NULL, 0}};
    const char *data_dir = NULL;
    long threads = 0, limit = 0;
    optind = 1;
    opterr = 0;
    int option;
    while ((option = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        switch (option) {
        case DATA:
            data_dir = optarg;
            break;
        case THREADS:
            if (!cli_parse_int("eval", "--threads", optarg, 1, 256, &threads)) return CLI_USAGE;
            break;
        case LIMIT:
            if (!cli_parse_int("eval", "--limit", optarg, 1, 1L << 40, &limit)) return CLI_USAGE;
            break;
        case 'h':
        case HELP:
            print_help();
            return CLI_OK;
        default:
            return cli_bad_option("eval", option, argv[optind - 1]);
        }
    }
    if (optind != argc - 1) return cli_usage_error("eval", "expects one weights file");
    if (threads) eg_set_num_threads((int)threads);
    const char *path = argv[optind];

    eg_safetensors *file = eg_safetensors_open(path);
    if (!file) {
        fprintf(stderr, "eagle eval: %s\n", eg_last_error());
        return CLI_FAILURE;
    }
    const char *kind = eg_safetensors_metadata(file, "eagle.model");
    const char *hidden = eg_safetensors_metadata(file, "eagle.hidden");
    mlp_config config;
    bool cnn = kind && !strcmp(kind, "cnn");
    if (!cnn && (!kind || strcmp(kind, "mlp") || !hidden || !mlp_parse_hidden(hidden, &config))) {
        fprintf(stderr,
                "eagle eval: %s was not written by 'eagle train --save' (no eagle.model "
                "/ eagle.hidden metadata)\n",
                path);
        eg_safetensors_close(file);
        return CLI_FAILURE;
    }
    char why[256];
    if (!cnn && !mlp_check_stored(file, &config, why, sizeof why)) {
        fprintf(stderr, "eagle eval: %s: its tensors do not match eagle.hidden = %s: %s\n", path,
                hidden, why);
        eg_safetensors_close(file);
        return CLI_FAILURE;
    }
    int rc = CLI_FAILURE;
    mlp_data test = {0};
    eg_model *model = cnn ? cnn_build(false) : mlp_build(&config);
    if (!model) goto done;
    int n_vars; /* all of them: batch normalization's moving statistics too */
    eg_tensor *const *vars = eg_model_variables(model, &n_vars);
    if (!vars) goto done;
    for (int i = 0; i < n_vars; i++) {
        eg_tensor *value = eg_safetensors_get(file, eg_variable_name(vars[i]));
        eg_status status = value ? eg_assign(vars[i], value) : eg_last_status();
        eg_release(value);
        if (status != EG_OK) goto done;
    }
    if (!mlp_data_try_load(data_dir, false, limit, &test)) goto done;
    double accuracy, loss;
    if ((cnn ? cnn_evaluate : mlp_evaluate)(model, &test, &accuracy, &loss) != EG_OK) goto done;
    printf("%s: test accuracy %.4f  test loss %.4f  (%lld examples)\n", path, accuracy, loss,
           (long long)test.n);
    rc = CLI_OK;
done:
    if (rc != CLI_OK && eg_last_status() != EG_OK)
        fprintf(stderr, "eagle eval: %s\n", eg_last_error());
    mlp_data_free(&test);
    eg_model_free(model);
    eg_safetensors_close(file);
    return rc;
}
