/* eagle eval: test accuracy of weights saved by `eagle train --save`. */
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cnn.h"
#include "mlp.h"
#include "saved_model.h"

static void print_help(void) {
    printf("usage: eagle eval [--data DIR] [--threads N] [--limit N]\n"
           "                  [--approx int8|lowrank:R|lowrank:F|budget:E]\n"
           "                  WEIGHTS.safetensors\n"
           "\n"
           "Rebuilds the model saved by 'eagle train --save' and reports its accuracy and loss\n"
           "on the Fashion-MNIST test split (its first N examples with --limit N).\n"
           "--approx int8 evaluates again with the Dense and Conv2D layers of 32 or more inputs\n"
           "per output in int8 (7-bit weights, dynamic activations) and prints what it cost:\n"
           "accuracy, loss and time against the exact run, and per layer, on one batch, the\n"
           "relative and largest absolute error of its output and its time either way.\n"
           "--approx lowrank:R (or lowrank:F) evaluates again with each Dense layer that it\n"
           "makes smaller factorized by a truncated SVD at rank R (or the smallest rank keeping\n"
           "the fraction F of its squared singular values), without fine-tuning.\n"
           "--approx budget:E calibrates on 512 training images and keeps, per Dense and\n"
           "Conv2D layer, the fastest of int8 and low-rank whose output error is at most E\n"
           "(relative) and that beats the exact call, else the exact layer; it prints the\n"
           "choices and the accuracy with them (budget:0 keeps every layer exact).\n"
           "An int8 checkpoint of 'eagle quantize' is evaluated with its int8 layers.\n");
}

/* Weights of 7 bits keep the AVX2 kernel exact (eagle/approx.h); layers with fewer inputs per
 * output than this gain nothing from int8 (the first convolution's 9). */
enum { APPROX_BITS = 7, APPROX_MIN_INNER = 32, REPORT_BATCH = 500 };

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
        cli_compare(approx, exact, &relative, &largest);
        printf("%-22s %-7s %10.4f %10.4f %9.2f %9.2f %7.2fx\n", eg_layer_name(layer),
               eg_layer_type(layer), relative, largest, 1e3 * exact_seconds, 1e3 * approx_seconds,
               exact_seconds / approx_seconds);
        x = exact;
    }
    eg_scope_end();
    eg_no_grad_end();
    return status;
}

/* The model's test accuracy and loss, and how long the evaluation took. */
static eg_status timed_evaluate(eg_model *model, const mlp_data *test, bool cnn, double *accuracy,
                                double *loss, double *seconds) {
    double start = cli_seconds();
    eg_status status = (cnn ? cnn_evaluate : mlp_evaluate)(model, test, accuracy, loss);
    *seconds = cli_seconds() - start;
    return status;
}

/* Evaluates in int8 after the exact run and prints the comparison. */
static eg_status approx_report(eg_model *model, const mlp_data *test, bool cnn, double accuracy,
                               double loss, double exact_seconds) {
    int quantized = 0;
    eg_status status = eg_model_quantize_int8(model, APPROX_BITS, APPROX_MIN_INNER, &quantized);
    double approx_accuracy = 0, approx_loss = 0, seconds = 0;
    if (status == EG_OK)
        status = timed_evaluate(model, test, cnn, &approx_accuracy, &approx_loss, &seconds);
    if (status != EG_OK) return status;
    printf("int8 (%d layers, %d-bit weights, dynamic activations): test accuracy %.4f (%+.4f)  "
           "test loss %.4f (%+.4f)  %.2f s against %.2f s exact (%.2fx)\n",
           quantized, APPROX_BITS, approx_accuracy, approx_accuracy - accuracy, approx_loss,
           approx_loss - loss, seconds, exact_seconds, exact_seconds / seconds);
    return approx_layer_table(model, test, cnn);
}

/* Factorizes the Dense layers (eg_model_lowrank, no fine-tuning) and evaluates again. */
static eg_status lowrank_report(eg_model *model, const mlp_data *test, bool cnn, int64_t rank,
                                double energy, double accuracy, double loss, double exact_seconds) {
    int64_t params = eg_model_count_params(model);
    int replaced = 0;
    eg_status status = eg_model_lowrank(model, rank, energy, &replaced);
    double low_accuracy = 0, low_loss = 0, seconds = 0;
    if (status == EG_OK)
        status = timed_evaluate(model, test, cnn, &low_accuracy, &low_loss, &seconds);
    if (status != EG_OK) return status;
    int64_t low_params = eg_model_count_params(model);
    char policy[48];
    if (rank > 0)
        snprintf(policy, sizeof policy, "rank %lld", (long long)rank);
    else
        snprintf(policy, sizeof policy, "%.3g of the energy", energy);
    printf("lowrank (%s, %d Dense layer%s, no fine-tuning): %lld parameters against %lld "
           "(%.2fx fewer), test accuracy %.4f (%+.4f)  test loss %.4f (%+.4f)  %.2f s against "
           "%.2f s exact (%.2fx)\n",
           policy, replaced, replaced == 1 ? "" : "s", (long long)low_params, (long long)params,
           (double)params / (double)low_params, low_accuracy, low_accuracy - accuracy, low_loss,
           low_loss - loss, seconds, exact_seconds, exact_seconds / seconds);
    return EG_OK;
}

/* Calibrates on the first 512 training images, chooses per layer within the budget
 * (eg_model_choose_approx), prints the choices and evaluates again. */
static eg_status budget_report(eg_model *model, const char *data_dir, const mlp_data *test,
                               bool cnn, double budget, double accuracy, double loss,
                               double exact_seconds) {
    enum { CALIBRATION = 512, MAX_LAYERS = 64 };
    mlp_data train = {0};
    if (!mlp_data_try_load(data_dir, true, CALIBRATION, &train)) return eg_last_status();
    int64_t indices[CALIBRATION];
    for (int64_t i = 0; i < train.n; i++) indices[i] = i;
    eg_approx_choice choices[MAX_LAYERS];
    int n = 0;
    eg_scope_begin();
    eg_tensor *x = NULL, *labels = NULL;
    eg_status status = (cnn ? cnn_batch : mlp_batch)(&train, indices, train.n, &x, &labels);
    if (status == EG_OK) status = eg_model_choose_approx(model, x, budget, choices, MAX_LAYERS, &n);
    eg_scope_end();
    mlp_data_free(&train);
    if (status != EG_OK) return status;
    printf("budget %g (relative error per layer, calibrated on %d training images):\n", budget,
           CALIBRATION);
    printf("%-22s %-12s %10s %9s %10s %10s\n", "layer", "chosen", "rel error", "exact ms",
           "chosen ms", "candidates");
    for (int i = 0; i < n && i < MAX_LAYERS; i++)
        printf("%-22s %-12s %10.4f %9.2f %10.2f %10d\n", choices[i].layer, choices[i].policy,
               choices[i].error, choices[i].exact_ms, choices[i].chosen_ms, choices[i].candidates);
    double chosen_accuracy = 0, chosen_loss = 0, seconds = 0;
    status = timed_evaluate(model, test, cnn, &chosen_accuracy, &chosen_loss, &seconds);
    if (status != EG_OK) return status;
    printf("chosen: %lld parameters, test accuracy %.4f (%+.4f)  test loss %.4f (%+.4f)  %.2f s "
           "against %.2f s exact (%.2fx)\n",
           (long long)eg_model_count_params(model), chosen_accuracy, chosen_accuracy - accuracy,
           chosen_loss, chosen_loss - loss, seconds, exact_seconds, exact_seconds / seconds);
    return EG_OK;
}

/* "int8", "lowrank:R" (a rank), "lowrank:F" (an energy fraction in (0, 1], with a point) or
 * "budget:E" (*budget = E >= 0; else *budget stays negative). */
static bool parse_policy(const char *text, bool *int8, int64_t *rank, double *energy,
                         double *budget) {
    *int8 = !strcmp(text, "int8");
    if (*int8) return true;
    if (!strncmp(text, "budget:", 7) && text[7]) {
        char *end = NULL;
        *budget = strtod(text + 7, &end);
        return *end == '\0' && *budget >= 0 && *budget < 1e9;
    }
    if (strncmp(text, "lowrank:", 8) != 0 || !text[8]) return false;
    char *end = NULL;
    if (strchr(text + 8, '.')) {
        *energy = strtod(text + 8, &end);
        return *end == '\0' && *energy > 0 && *energy <= 1;
    }
    long long value = strtoll(text + 8, &end, 10);
    *rank = value;
    return *end == '\0' && value >= 1 && value <= (1LL << 30);
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
    bool approx = false, lowrank = false;
    int64_t lowrank_rank = 0;
    double lowrank_energy = 0, budget = -1;
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
            if (!parse_policy(optarg, &approx, &lowrank_rank, &lowrank_energy, &budget))
                return cli_usage_error("eval",
                                       "--approx takes int8, lowrank:R (a rank), lowrank:F (a "
                                       "fraction of the energy, 0 < F <= 1, with a point) or "
                                       "budget:E (a relative error per layer, E >= 0)");
            lowrank = !approx && budget < 0;
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

    saved_model saved;
    if (!saved_model_open("eval", path, &saved)) return CLI_FAILURE;
    eg_model *model = saved.model;
    bool cnn = saved.cnn;
    int rc = CLI_FAILURE;
    mlp_data test = {0};
    if (!mlp_data_try_load(data_dir, false, limit, &test)) goto done;
    double accuracy, loss, exact_seconds;
    if (timed_evaluate(model, &test, cnn, &accuracy, &loss, &exact_seconds) != EG_OK) goto done;
    if (saved.n_int8) /* an int8 checkpoint: its stored snapshots ran (the f32 kernels q * scale) */
        printf("%s: int8 (%d layers from the checkpoint): test accuracy %.4f  test loss %.4f  "
               "(%lld examples, %.2f s)\n",
               path, saved.n_int8, accuracy, loss, (long long)test.n, exact_seconds);
    else
        printf("%s: test accuracy %.4f  test loss %.4f  (%lld examples)\n", path, accuracy, loss,
               (long long)test.n);
    /* what an approximation is timed against: a second exact run, the first one warmed up
     * the caches and the allocator */
    if ((approx || lowrank || budget >= 0) &&
        timed_evaluate(model, &test, cnn, &accuracy, &loss, &exact_seconds) != EG_OK)
        goto done;
    if (approx && approx_report(model, &test, cnn, accuracy, loss, exact_seconds) != EG_OK)
        goto done;
    if (budget >= 0 &&
        budget_report(model, data_dir, &test, cnn, budget, accuracy, loss, exact_seconds) != EG_OK)
        goto done;
    if (lowrank && lowrank_report(model, &test, cnn, lowrank_rank, lowrank_energy, accuracy, loss,
                                  exact_seconds) != EG_OK)
        goto done;
    rc = CLI_OK;
done:
    if (rc != CLI_OK && eg_last_status() != EG_OK)
        fprintf(stderr, "eagle eval: %s\n", eg_last_error());
    mlp_data_free(&test);
    saved_model_close(&saved);
    return rc;
}
