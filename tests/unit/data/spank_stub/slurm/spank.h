/* A stand-in for Slurm's <slurm/spank.h> with only what roles/slurm_fabric/files/fabric_dataset.c uses, for its
 * unit test (tests/unit/test_slurm_plugin.py) on hosts without libslurm-dev. The names, types and values follow
 * Slurm 22.05 and 24.11's header; the lab compiles the plugin against the real one. */
#ifndef FABRIC_SPANK_STUB_H
#define FABRIC_SPANK_STUB_H
#include <stdint.h>
#include <sys/types.h>

typedef struct spank_handle *spank_t;
typedef int (*spank_opt_cb_f)(int val, const char *optarg, int remote);

struct spank_option {
    char *name;
    char *arginfo;
    char *usage;
    int has_arg;
    int val;
    spank_opt_cb_f cb;
};

typedef enum spank_item {
    S_JOB_UID, S_JOB_GID, S_JOB_ID, S_JOB_STEPID, S_JOB_NNODES, S_JOB_NODEID, S_JOB_LOCAL_TASK_COUNT,
    S_JOB_TOTAL_TASK_COUNT, S_JOB_NCPUS, S_JOB_ARGV, S_JOB_ENV, S_TASK_ID
} spank_item_t;

typedef enum spank_err {
    ESPANK_SUCCESS = 0, ESPANK_ERROR = 1, ESPANK_BAD_ARG = 2, ESPANK_NOT_TASK = 3, ESPANK_ENV_EXISTS = 4,
    ESPANK_ENV_NOEXIST = 5, ESPANK_NOSPACE = 6, ESPANK_NOT_REMOTE = 7, ESPANK_NOEXIST = 8, ESPANK_NOT_EXECD = 9,
    ESPANK_NOT_AVAIL = 10, ESPANK_NOT_LOCAL = 11
} spank_err_t;

typedef enum spank_context {
    S_CTX_ERROR, S_CTX_LOCAL, S_CTX_REMOTE, S_CTX_ALLOCATOR, S_CTX_SLURMD, S_CTX_JOB_SCRIPT
} spank_context_t;

#define SPANK_PLUGIN(__name, __ver) \
    const char plugin_name[] = #__name; \
    const char plugin_type[] = "spank"; \
    const unsigned int plugin_version = __ver;

spank_context_t spank_context(void);
int spank_remote(spank_t spank);
spank_err_t spank_get_item(spank_t spank, spank_item_t item, ...);
spank_err_t spank_option_register(spank_t spank, struct spank_option *opt);
spank_err_t spank_getenv(spank_t spank, const char *var, char *buf, int len);
spank_err_t spank_setenv(spank_t spank, const char *var, const char *val, int overwrite);
void slurm_error(const char *format, ...) __attribute__((format(printf, 1, 2)));
void slurm_info(const char *format, ...) __attribute__((format(printf, 1, 2)));
#endif
