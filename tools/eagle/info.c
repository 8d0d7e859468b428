/* eagle info: what this build is and what it runs on; --ops: which ops each device runs, for
 * which dtypes (the schema's answer and the backend's, from eg_device_supports_op). */
#include <getopt.h>
#include <string.h>

#include <eagle.h>

#include "cli.h"

/* The dtype columns of the --ops table, in eg_dtype's order. */
static const eg_dtype table_dtypes[] = {EG_DTYPE_F32, EG_DTYPE_F64, EG_DTYPE_F16, EG_DTYPE_BF16,
                                        EG_DTYPE_I32, EG_DTYPE_I64, EG_DTYPE_U8,  EG_DTYPE_BOOL};
#define N_TABLE_DTYPES ((int)(sizeof table_dtypes / sizeof table_dtypes[0]))

/* A device's column group: one column per dtype, each as wide as its name plus a space. */
static int group_width(void) {
    int width = 0;
    for (int k = 0; k < N_TABLE_DTYPES; k++)
        width += (int)strlen(eg_dtype_name(table_dtypes[k])) + 1;
    return width - 1;
}

/* text left-aligned in width columns after a space; the row's last cell is not padded, so that
 * no line ends in blanks. */
static void print_cell(const char *text, int width, bool last) {
    printf(" %-*s", last ? 0 : width, text);
}

static void print_ops_table(void) {
    int n_devices = eg_device_count(), name_width = 2;
    for (int op = 0; op < eg_op_count(); op++) {
        int length = (int)strlen(eg_op_name(op));
        name_width = length > name_width ? length : name_width;
    }
    printf("ops x devices x dtypes: x = the device runs the op with its value inputs in that "
           "dtype, - = it does not\n");
    printf("%-*s", name_width, "op");
    for (int d = 0; d < n_devices; d++) {
        printf(" |");
        print_cell(eg_device_name(eg_device_at(d)), group_width(), d == n_devices - 1);
    }
    printf("\n%-*s", name_width, "");
    for (int d = 0; d < n_devices; d++) {
        printf(" |");
        for (int k = 0; k < N_TABLE_DTYPES; k++) printf(" %s", eg_dtype_name(table_dtypes[k]));
    }
    printf("\n");
    for (int op = 0; op < eg_op_count(); op++) {
        printf("%-*s", name_width, eg_op_name(op));
        for (int d = 0; d < n_devices; d++) {
            printf(" |");
            for (int k = 0; k < N_TABLE_DTYPES; k++) {
                bool yes = eg_device_supports_op(eg_device_at(d), op, table_dtypes[k]);
                print_cell(yes ? "x" : "-", (int)strlen(eg_dtype_name(table_dtypes[k])),
                           d == n_devices - 1 && k == N_TABLE_DTYPES - 1);
            }
        }
        printf("\n");
    }
    /* counted again rather than kept from the rows: no bound on the number of devices */
    int entries = eg_op_count() * N_TABLE_DTYPES;
    printf("%d ops x %d dtypes per device:", eg_op_count(), N_TABLE_DTYPES);
    for (int d = 0; d < n_devices; d++) {
        int supported = 0;
        for (int op = 0; op < eg_op_count(); op++)
            for (int k = 0; k < N_TABLE_DTYPES; k++)
                supported += eg_device_supports_op(eg_device_at(d), op, table_dtypes[k]);
        printf("%s %s %d supported, %d unsupported", d ? ";" : "", eg_device_name(eg_device_at(d)),
               supported, entries - supported);
    }
    printf("\n");
}

/* "cpu" with one device, "cpu:0, cpu:1" when the host is split. */
static void print_devices(void) {
    printf("devices:    ");
    for (int d = 0; d < eg_device_count(); d++)
        printf("%s%s", d ? ", " : "", eg_device_name(eg_device_at(d)));
    printf("\n");
    for (int d = 0; d < eg_device_count(); d++) {
        const eg_device *device = eg_device_at(d);
        if (eg_device_kind(device) == EG_DEVICE_CUDA)
            printf("  %-8s  %s\n", eg_device_name(device), eg_device_description(device));
    }
    printf("CUDA:       %s\n", eg_device_kind_info(EG_DEVICE_CUDA));
    const char *problem = eg_device_setting_problem();
    if (problem) printf("warning:    %s\n", problem);
}

int cli_info(int argc, char **argv) {
    static const struct option options[] = {{"help", no_argument, NULL, 'h'},
                                            {"version", no_argument, NULL, 'v'},
                                            {"ops", no_argument, NULL, 'o'},
                                            {NULL, 0, NULL, 0}};
    optind = 1;
    opterr = 0;
    int option;
    bool ops = false;
    while ((option = getopt_long(argc, argv, ":hv", options, NULL)) != -1) {
        switch (option) {
        case 'h':
            printf("usage: eagle info [--version] [--ops]\n\n"
                   "Prints Eagle's version, build options, thread count, BLAS and devices.\n\n"
                   "  --version  the version only\n"
                   "  --ops      the op table: one row per op, for each visible device one column\n"
                   "             per dtype (f32 f64 f16 bf16 i32 i64 u8 bool), x where the device\n"
                   "             runs the op with its value inputs in that dtype, - where not\n"
                   "             (EG_CPU_DEVICES=N shows cpu:0 ... cpu:N-1)\n");
            return CLI_OK;
        case 'v':
            printf("eagle %s\n", eg_version());
            return CLI_OK;
        case 'o':
            ops = true;
            break;
        default:
            return cli_bad_option("info", option, argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error("info", "unexpected argument '%s'", argv[optind]);
    if (ops) {
        print_ops_table();
        return CLI_OK;
    }
    printf("eagle %s\n", eg_version());
    printf("build:      %s\n", eg_build_info());
    printf("threads:    %d (EG_NUM_THREADS overrides)\n", eg_get_num_threads());
    printf("CPU path:   %s\n", eg_cpu_kernels_info());
    printf("CPU bf16:   %s\n", eg_cpu_low_precision_info());
    printf("BLAS:       %s\n", eg_blas_info());
    printf("allocator:  %s (EG_ALLOCATOR=system for plain malloc)\n",
           eg_memory_allocator_name(NULL));
    eg_memory_stats memory;
    if (eg_memory_stats_get(NULL, &memory) != EG_OK) { /* EG_MEMORY_LIMIT not a size, say */
        printf("warning:    %s\n", eg_last_error());
        eg_clear_error();
    }
    print_devices();
    return CLI_OK;
}
