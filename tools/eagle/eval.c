/* eagle eval: test accuracy of weights saved by `eagle train --save`. */
#include <getopt.h>
#include <math.h>
#include <string.h>

#include "cli.h"
#include "cnn.h"
#include "mlp.h"

static void print_help(void) {
    printf("usage: eagle eval [--data DIR] [--threads N] [--limit N] [--approx int8]\n"
           "                  WEIGHTS.safetensors\n"
           "\n"
           "Rebuilds the model saved by 'eagle train --save' and reports its accuracy and loss\n"
           "on the Fashion-MNIST test split (its first N examples with --limit N).\n"
           "--approx int8 evaluates again with the Dense and Conv2D layers of 32 or more inputs\n"
           "per output in int8 (7-bit weights, dynamic activations) and prints what it cost:\n"
           "accuracy, loss and time against the exact run, and per layer, on one batch, the\n"
           "relative and largest absolute error of its output and its time either way.\n");
}

/* Weights of 7 bits keep the AVX2 kernel exact (eagle/approx.h); layers with fewer inputs per
 * output than this gain nothing from int8 (the first convolution's 9). */
enum { APPROX_BITS = 7, APPROX_MIN_INNER = 32, REPORT_BATCH = 500 };

/* ||a - b||_F / ||b||_F and max |a - b| of two f32 tensors of one shape. */
static void compare(const eg_tensor *a, const eg_tensor *b, double *relative, double *largest) {
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

/* The per-layer table: one batch goes through the layers in order, exactly; each quantized
 * layer also runs in int8 on the same input (its snapshot is set aside for the exact call). */
static eg_status approx_layer_table(eg_model *model, const mlp_data *data, bool cnn) {
    int64_t n = data->n < REPORT_BATCH ? data->n : REPORT_BATCH;
    int64_t indices[REPORT_BATCH];
    for (int64_t i = 0; i < n; i++) indices[i] = i;
    eg_status status = EG_OK;
    eg_no_grad_begin();
    eg_scope_begin();
    eg_tensor *x, *labels;
    status = (cnn ? cnn_batch : mlp_batch)(data, indices, n, &x, &labels);
    printf("%-22s %-7s %10s %10s %9s %9s %8s\n", "layer", "type", "rel error", "max error",
           "exact ms", "int8 ms", "speed-up");
    for (int i = 0; status == EG_OK && i < eg_model_n_layers(model); i++) {
        eg_layer *layer = eg_model_layer(model, i);
        if (!eg_layer_is_quantized(layer)) {
            x = eg_layer_call(layer, x, false);
            status = x ? EG_OK : eg_last_status();
            continue;
        }
        /* the fastest of three calls each way: one call on a busy machine says little */
        eg_tensor *approx = NULL, *exact = NULL;
        double approx_seconds = INFINITY, exact_seconds = INFINITY;
        for (int run = 0; run < 3 && status == EG_OK; run++) {
            double t0 = cli_seconds();
            approx = eg_layer_call(layer, x, false);
            double t1 = cli_seconds();
            status = approx ? eg_layer_quantize_int8(layer, 0) : eg_last_status();
            double t2 = cli_seconds();
            exact = status == EG_OK ? eg_layer_call(layer, x, false) : NULL;
            double t3 = cli_seconds();
            if (status == EG_OK)
                status = exact ? eg_layer_quantize_int8(layer, APPROX_BITS) : eg_last_status();
            approx_seconds = t1 - t0 < approx_seconds ? t1 - t0 : approx_seconds;
            exact_seconds = t3 - t2 < exact_seconds ? t3 - t2 : exact_seconds;
        }
        if (status != EG_OK) break;
        double relative, largest;
        compare(approx, exact, &relative, &largest);
        printf("%-22s %-7s %10.4f %10.4f %9.2f %9.2f %7.2fx\n", eg_layer_name(layer),
               eg_layer_type(layer), relative, largest, 1e3 * exact_seconds, 1e3 * approx_seconds,
               exact_seconds / approx_seconds);
        x = exact;
    }
    eg_scope_end();
    eg_no_grad_end();
    return status;
}

/* Evaluates in int8 after the exact run and prints the comparison. */
static eg_status approx_report(eg_model *model, const mlp_data *test, bool cnn, double accuracy,
                               double loss, double exact_seconds) {
    int quantized = 0;
    eg_status status = eg_model_quantize_int8(model, APPROX_BITS, APPROX_MIN_INNER, &quantized);
    double approx_accuracy = 0, approx_loss = 0, start = cli_seconds();
    if (status == EG_OK)
        status = (cnn ? cnn_evaluate : mlp_evaluate)(model, test, &approx_accuracy, &approx_loss);
    double seconds = cli_seconds() - start;
    if (status != EG_OK) return status;
    printf("int8 (%d layers, %d-bit weights, dynamic activations): test accuracy %.4f (%+.4f)  "
           "test loss %.4f (%+.4f)  %.2f s against %.2f s exact (%.2fx)\n",
           quantized, APPROX_BITS, approx_accuracy, approx_accuracy - accuracy, approx_loss,
           approx_loss - loss, seconds, exact_seconds, exact_seconds / seconds);
    return approx_layer_table(model, test, cnn);
}

int cli_eval(int argc, char **argv) {
    if (cli_wants_model(argc, argv, "charlm")) return cli_eval_charlm(argc, argv);
    enum { DATA = 1000, THREADS, LIMIT, APPROX, HELP };
    static const struct option options[] = {{"data", required_argument, NULL, DATA},
                                            {"approx", required_argument, NULL, APPROX},
                                            {"threads", required_argument, NULL, THREADS},
                                            {"limit", required_argument, NULL, LIMIT},
                                            {"help", no_argument, NULL, HELP},
                                            {NULL, 0, NULL, 0}};
    const char *data_dir = NULL;
    long threads = 0, limit = 0;
    bool approx = false;
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
        case APPROX:
            if (strcmp(optarg, "int8") != 0)
                return cli_usage_error("eval", "--approx takes int8 (the one policy so far)");
            approx = true;
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
    double accuracy, loss, start = cli_seconds();
    if ((cnn ? cnn_evaluate : mlp_evaluate)(model, &test, &accuracy, &loss) != EG_OK) goto done;
    printf("%s: test accuracy %.4f  test loss %.4f  (%lld examples)\n", path, accuracy, loss,
           (long long)test.n);
    if (approx && approx_report(model, &test, cnn, accuracy, loss, cli_seconds() - start) != EG_OK)
        goto done;
    rc = CLI_OK;
done:
    if (rc != CLI_OK && eg_last_status() != EG_OK)
        fprintf(stderr, "eagle eval: %s\n", eg_last_error());
    mlp_data_free(&test);
    eg_model_free(model);
    eg_safetensors_close(file);
    return rc;
}
