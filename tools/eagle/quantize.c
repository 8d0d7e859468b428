/* eagle quantize: post-training int8 quantization of a checkpoint of `eagle train --save`. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "saved_model.h"

static void print_help(void) {
    printf("usage: eagle quantize --checkpoint WEIGHTS.safetensors --out INT8.safetensors\n"
           "                      [--bits B] [--min-inner N]\n"
           "\n"
           "Writes an int8 checkpoint of a model saved by 'eagle train --save': every Dense and\n"
           "Conv2D kernel with at least N inputs per output (default 32) is quantized\n"
           "symmetrically to B bits (default 7, which the AVX2 kernel computes exactly; 2..8)\n"
           "with one scale per output channel, and stored as I8 under its own name with its\n"
           "scales, F32 (outputs), under NAME.scale: the kernel is q * scale, q[..., o] *\n"
           "scale[o]. Every other variable stays F32. numpy reads it with a safetensors\n"
           "reader (int8 and float32 arrays); 'eagle eval INT8.safetensors' evaluates it with\n"
           "the int8 products.\n");
}

int cli_quantize(int argc, char **argv) {
    enum { CHECKPOINT = 1000, OUT, BITS, MIN_INNER, HELP };
    static const struct option options[] = {{"checkpoint", required_argument, NULL, CHECKPOINT},
                                            {"out", required_argument, NULL, OUT},
                                            {"bits", required_argument, NULL, BITS},
                                            {"min-inner", required_argument, NULL, MIN_INNER},
                                            {"help", no_argument, NULL, HELP},
                                            {NULL, 0, NULL, 0}};
    const char *checkpoint = NULL, *out = NULL;
    long bits = 7, min_inner = 32;
    optind = 1;
    opterr = 0;
    int option;
    while ((option = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        switch (option) {
        case CHECKPOINT:
            checkpoint = optarg;
            break;
        case OUT:
            out = optarg;
            break;
        case BITS:
            if (!cli_parse_int("quantize", "--bits", optarg, 2, 8, &bits)) return CLI_USAGE;
            break;
        case MIN_INNER:
            if (!cli_parse_int("quantize", "--min-inner", optarg, 1, 1L << 40, &min_inner))
                return CLI_USAGE;
            break;
        case 'h':
        case HELP:
            print_help();
            return CLI_OK;
        default:
            return cli_bad_option("quantize", option, argv[optind - 1]);
        }
    }
    if (optind != argc) return cli_usage_error("quantize", "takes no operands (--checkpoint F)");
    if (!checkpoint || !out) return cli_usage_error("quantize", "needs --checkpoint F and --out G");
    if (!cli_check_output_path("quantize", "--out", out)) return CLI_FAILURE;

    saved_model saved;
    if (!saved_model_open("quantize", checkpoint, &saved)) return CLI_FAILURE;
    int rc = CLI_FAILURE, n_quantized = 0, n_vars = 0, n = 0;
    eg_tensor *const *vars = eg_model_variables(saved.model, &n_vars);
    /* each variable once, a quantized kernel as two tensors */
    char **names = calloc((size_t)(2 * n_vars + 1), sizeof *names);
    eg_tensor **tensors = calloc((size_t)(2 * n_vars + 1), sizeof *tensors);
    bool *owned = calloc((size_t)(2 * n_vars + 1), sizeof *owned); /* the snapshots' references */
    eg_status status = vars ? EG_OK : eg_last_status();
    if (status == EG_OK && (!names || !tensors || !owned)) status = EG_ERR_OUT_OF_MEMORY;
    if (status == EG_OK)
        status = eg_model_quantize_int8(saved.model, (int)bits, min_inner, &n_quantized);
    for (int i = 0; status == EG_OK && i < n_vars; i++) {
        const char *name = eg_variable_name(vars[i]);
        eg_layer *layer = saved_model_layer_of_kernel(saved.model, vars[i]);
        if (!eg_layer_is_quantized(layer)) {
            names[n] = strdup(name);
            tensors[n++] = vars[i];
            continue;
        }
        eg_tensor *q = NULL, *scale = NULL;
        status = eg_layer_int8_snapshot(layer, &q, &scale);
        if (status != EG_OK) break;
        size_t length = strlen(name) + sizeof SAVED_SCALE_SUFFIX;
        names[n] = strdup(name);
        owned[n] = true;
        tensors[n++] = q;
        names[n] = malloc(length);
        if (names[n]) snprintf(names[n], length, "%s%s", name, SAVED_SCALE_SUFFIX);
        owned[n] = true;
        tensors[n++] = scale;
    }
    for (int i = 0; status == EG_OK && i < n; i++)
        if (!names[i]) status = EG_ERR_OUT_OF_MEMORY;
    /* the source's metadata (model, hidden sizes, training settings), then the quantization's */
    enum { MAX_KEYS = 64 };
    const char *keys[MAX_KEYS], *values[MAX_KEYS];
    char bits_text[8], layers_text[16];
    snprintf(bits_text, sizeof bits_text, "%ld", bits);
    snprintf(layers_text, sizeof layers_text, "%d", n_quantized);
    int n_keys = 0;
    for (int i = 0; i < eg_safetensors_metadata_count(saved.file) && n_keys < MAX_KEYS - 4; i++) {
        const char *key = eg_safetensors_metadata_key(saved.file, i);
        /* the optimizer's step and the run's progress belong to training, which this file
         * cannot resume */
        if (!strncmp(key, "eagle.step", 10) || !strncmp(key, "eagle.int8", 10) ||
            !strcmp(key, "format") || !strcmp(key, "eagle_version"))
            continue;
        keys[n_keys] = key;
        values[n_keys++] = eg_safetensors_metadata(saved.file, key);
    }
    keys[n_keys] = "eagle.int8";
    values[n_keys++] = "symmetric per output channel: NAME = NAME (i8) * NAME.scale (f32)";
    keys[n_keys] = "eagle.int8.bits";
    values[n_keys++] = bits_text;
    keys[n_keys] = "eagle.int8.layers";
    values[n_keys++] = layers_text;
    if (status == EG_OK) {
        cli_write_begin();
        status =
            eg_safetensors_save(out, n, (const char *const *)names, tensors, n_keys, keys, values);
        cli_write_end();
    }
    if (status == EG_OK) {
        printf("%s: %d of the model's Dense and Conv2D layers in int8 (%ld-bit weights, %ld or "
               "more inputs per output), written to %s\n",
               checkpoint, n_quantized, bits, min_inner, out);
        rc = CLI_OK;
    } else {
        fprintf(stderr, "eagle quantize: %s\n",
                eg_last_status() != EG_OK ? eg_last_error() : "out of memory");
    }
    for (int i = 0; i < n; i++) {
        free(names[i]);
        if (owned[i]) eg_release(tensors[i]);
    }
    free(names);
    free(tensors);
    free(owned);
    saved_model_close(&saved);
    return rc;
}
