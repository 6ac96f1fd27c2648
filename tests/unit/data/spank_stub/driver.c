/* The unit test's Slurm: plays one SPANK context's callbacks on the plugin and prints what the plugin did.
 *
 *   driver CONTEXT [options]        CONTEXT: allocator | remote | epilog
 *     -o VALUE       the user's --fabric-dataset (the option callback runs as Slurm would run it)
 *     -e VALUE       FABRIC_DATASET in the step's environment
 *     -s STEPID      the step id (default 0; 4294967292 is the extern step)
 *     -t N           tasks on this node (remote: task_init_privileged runs once per task, in a child)
 *     -a ARG         a plugstack.conf argument (repeatable)
 *     -j JOBID       (default 42)
 * Output lines: "cb RC", "post_opt RC", "task I RC", "setenv NAME=VALUE", "error: ...", "info: ...", "epilog RC".
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/spank.h>

int slurm_spank_init(spank_t sp, int ac, char **av);
int slurm_spank_init_post_opt(spank_t sp, int ac, char **av);
int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av);
int slurm_spank_job_epilog(spank_t sp, int ac, char **av);
int slurm_spank_exit(spank_t sp, int ac, char **av);

static spank_context_t ctx;
static struct spank_option *registered;
static unsigned job = 42, step = 0;
static int task_id;
static const char *step_env;

spank_context_t spank_context(void) { return ctx; }
int spank_remote(spank_t sp) { (void)sp; return ctx == S_CTX_REMOTE; }

spank_err_t spank_get_item(spank_t sp, spank_item_t item, ...)
{
    va_list ap;
    (void)sp;
    va_start(ap, item);
    if (item == S_JOB_ID)
        *va_arg(ap, uint32_t *) = job;
    else if (item == S_JOB_STEPID && ctx == S_CTX_REMOTE)
        *va_arg(ap, uint32_t *) = step;
    else if (item == S_TASK_ID && ctx == S_CTX_REMOTE)
        *va_arg(ap, int *) = task_id;
    else {
        va_end(ap);
        return ESPANK_NOT_AVAIL;
    }
    va_end(ap);
    return ESPANK_SUCCESS;
}

spank_err_t spank_option_register(spank_t sp, struct spank_option *opt)
{
    (void)sp;
    registered = opt;
    printf("registered --%s\n", opt->name);
    return ESPANK_SUCCESS;
}

spank_err_t spank_getenv(spank_t sp, const char *var, char *buf, int len)
{
    (void)sp;
    if (ctx != S_CTX_REMOTE)
        return ESPANK_NOT_REMOTE;
    if (strcmp(var, "FABRIC_DATASET") != 0 || !step_env)
        return ESPANK_ENV_NOEXIST;
    if ((int)strlen(step_env) >= len)
        return ESPANK_NOSPACE;
    strcpy(buf, step_env);
    return ESPANK_SUCCESS;
}

spank_err_t spank_setenv(spank_t sp, const char *var, const char *val, int overwrite)
{
    (void)sp;
    (void)overwrite;
    printf("setenv %s=%s\n", var, val);
    return ESPANK_SUCCESS;
}

static void say(const char *kind, const char *fmt, va_list ap)
{
    printf("%s: ", kind);
    vprintf(fmt, ap);
    printf("\n");
}

void slurm_error(const char *fmt, ...) { va_list ap; va_start(ap, fmt); say("error", fmt, ap); va_end(ap); }
void slurm_info(const char *fmt, ...) { va_list ap; va_start(ap, fmt); say("info", fmt, ap); va_end(ap); }

int main(int argc, char **argv)
{
    char *args[16];
    int nargs = 0, tasks = 1, opt;
    const char *value = NULL;
    if (argc < 2)
        return 2;
    const char *mode = argv[1];
    ctx = strcmp(mode, "allocator") == 0 ? S_CTX_ALLOCATOR : strcmp(mode, "remote") == 0 ? S_CTX_REMOTE
        : S_CTX_JOB_SCRIPT;
    optind = 2;
    while ((opt = getopt(argc, argv, "o:e:s:t:a:j:")) != -1) {
        switch (opt) {
        case 'o': value = optarg; break;
        case 'e': step_env = optarg; break;
        case 's': step = (unsigned)strtoul(optarg, NULL, 10); break;
        case 't': tasks = atoi(optarg); break;
        case 'a': if (nargs < 15) args[nargs++] = optarg; break;
        case 'j': job = (unsigned)strtoul(optarg, NULL, 10); break;
        default: return 2;
        }
    }
    args[nargs] = NULL;
    setvbuf(stdout, NULL, _IONBF, 0);
    if (ctx == S_CTX_JOB_SCRIPT) {
        printf("epilog %d\n", slurm_spank_job_epilog(NULL, nargs, args));
        return 0;
    }
    printf("init %d\n", slurm_spank_init(NULL, nargs, args));
    if (value && registered)
        printf("cb %d\n", registered->cb(registered->val, value, ctx == S_CTX_REMOTE));
    printf("post_opt %d\n", slurm_spank_init_post_opt(NULL, nargs, args));
    if (ctx == S_CTX_REMOTE) {
        for (int i = 0; i < tasks; i++) {   /* each task's process is a child of slurmstepd, as in Slurm */
            pid_t pid = fork();
            if (pid == 0) {
                task_id = i;
                printf("task %d %d\n", i, slurm_spank_task_init_privileged(NULL, nargs, args));
                _exit(0);
            }
            waitpid(pid, NULL, 0);
        }
    }
    printf("exit %d\n", slurm_spank_exit(NULL, nargs, args));
    return 0;
}
