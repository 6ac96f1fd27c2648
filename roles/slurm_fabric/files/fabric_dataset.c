/*
 * fabric_dataset: a SPANK plugin that gives a Slurm job the dataset versions it asks for.
 *
 *   sbatch --fabric-dataset=imagenet@v3 train.sh
 *   srun   --fabric-dataset=imagenet@v3,labels@v1 python train.py
 *
 * On the submit side (sbatch, salloc, srun) the value is checked for shape only: a list of at most
 * MAX_REFS NAME@VERSION items of lower-case letters, digits, '.' and '-', each side starting with a
 * letter or digit. That is what may travel safely through the job's environment and into an argv; the
 * naming rule itself (lengths, reserved words, what exists, what is granted to the node) is the node
 * agent's, `fabric-node`, the one place it lives.
 *
 * On each node, in every step's slurmstepd (remote context, as root, before the step's tasks exist;
 * the extern step is left alone), slurm_spank_init_post_opt runs
 *     fabric-node attach REF --holder job:JOBID --json
 * for each item, so the version is mounted read-only at the path the agent reports before the first
 * task of that step starts on that node. A step that names no dataset inherits its job's request
 * through FABRIC_DATASET (set in the batch script's environment), so `srun` inside an sbatch job gets
 * the job's datasets on every node it runs on.
 *
 * Errors never fail a callback that drains the node (init, init_post_opt and user_init do, for batch
 * jobs: spank(8), "Errors"). The outcome is kept and reported in slurm_spank_task_init_privileged,
 * which runs in each task's process before exec and only fails the job (spank(8): "Drains Node: no"
 * for srun, salloc and sbatch), with the agent's message on the job's stderr, as pyxis does with its
 * user_init errors (reported from task_init, SchedMD bug 7573). On success the task's environment
 * gets FABRIC_DATASET (the request) and FABRIC_DATASET_PATH (the mount paths, ':'-separated, in the
 * order asked).
 *
 * Release: slurm_spank_job_epilog (job_script context, as root, on every node of the job when it
 * ends) runs `fabric-node detach --holder job:JOBID --all --json` on the nodes where this plugin
 * attached something (a root-only marker in STATE_DIR says so; other nodes cost a stat), and always
 * returns 0: a release that fails is logged in slurmd's log and never drains the node.
 *
 * plugstack.conf arguments (all optional):
 *   agent=PATH            the node agent (default /usr/local/sbin/fabric-node)
 *   attach_timeout=SEC    the longest one attach may take (default 300)
 *   detach_timeout=SEC    the longest the release may take (default 120)
 *   state_dir=PATH        root-only directory of the per-job markers (default /run/fabric-slurm)
 *
 * Build (the slurm_fabric role does it on each node, against that node's own Slurm headers):
 *   gcc -std=gnu11 -O2 -Wall -Wextra -fPIC -shared -o fabric_dataset.so fabric_dataset.c
 * Part of the gpufabric.storage collection (roles/slurm_fabric); Apache-2.0.
 */

#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(fabric_dataset, 1);

/* Step ids of slurm.h, repeated here so that only spank.h is needed. */
#define FD_EXTERN_CONT 0xfffffffcU

#define OPTION_NAME "fabric-dataset"
#define MAX_REQUEST 1024      /* characters of the whole option value */
#define MAX_REFS 16           /* items of the list */
#define MAX_OUTPUT 16384      /* bytes of the agent's stdout or stderr kept */
#define MAX_MESSAGE 4096      /* bytes of the message shown in the job's output */

struct config {
    char agent[PATH_MAX];
    int attach_timeout;
    int detach_timeout;
    char state_dir[PATH_MAX];
};

/* What the submit side or the step asked for, and what the attach found (kept from init_post_opt,
 * inherited by each task's process through fork, reported there). */
static char *requested;                 /* the option's value, or NULL */
static int active;                      /* this step asked for datasets */
static int failed;                      /* ... and could not have them */
static char message[MAX_MESSAGE];       /* why (the agent's own words when it answered) */
static char request[MAX_REQUEST + 1];   /* the request that was attached (FABRIC_DATASET) */
static char paths[MAX_REFS * (PATH_MAX + 1)]; /* the mount paths (FABRIC_DATASET_PATH) */

static int option_cb(int val, const char *optarg, int remote);

struct spank_option fabric_option = {
    OPTION_NAME,
    "NAME@VERSION[,NAME@VERSION...]",
    "mount these dataset versions read-only on every node of the job before its tasks start "
    "(path in FABRIC_DATASET_PATH)",
    1, 0, option_cb,
};

/* ---- configuration ------------------------------------------------------------------------------ */

static int parse_config(int ac, char **av, struct config *c, char *err, size_t errlen)
{
    snprintf(c->agent, sizeof(c->agent), "%s", "/usr/local/sbin/fabric-node");
    snprintf(c->state_dir, sizeof(c->state_dir), "%s", "/run/fabric-slurm");
    c->attach_timeout = 300;
    c->detach_timeout = 120;
    for (int i = 0; i < ac; i++) {
        const char *a = av[i];
        char *end = NULL;
        long n;
        if (strncmp(a, "agent=", 6) == 0 && a[6] == '/' && strlen(a + 6) < sizeof(c->agent)) {
            snprintf(c->agent, sizeof(c->agent), "%s", a + 6);
        } else if (strncmp(a, "state_dir=", 10) == 0 && a[10] == '/' && strlen(a + 10) < sizeof(c->state_dir)) {
            snprintf(c->state_dir, sizeof(c->state_dir), "%s", a + 10);
        } else if (strncmp(a, "attach_timeout=", 15) == 0 && (n = strtol(a + 15, &end, 10)) > 0 && n <= 86400
                   && *end == '\0') {
            c->attach_timeout = (int)n;
        } else if (strncmp(a, "detach_timeout=", 15) == 0 && (n = strtol(a + 15, &end, 10)) > 0 && n <= 86400
                   && *end == '\0') {
            c->detach_timeout = (int)n;
        } else {
            snprintf(err, errlen, "fabric_dataset: plugstack.conf argument '%s' is not understood (agent=/PATH, "
                     "attach_timeout=SECONDS, detach_timeout=SECONDS, state_dir=/PATH); fix the plugin's line in "
                     "plugstack.conf (the slurm_fabric role writes it)", a);
            return -1;
        }
    }
    return 0;
}

/* ---- the request's shape (what may travel; the agent owns the naming rule) ----------------------- */

static int ref_start(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
}

static int ref_char(char ch)
{
    return ref_start(ch) || ch == '.' || ch == '-';
}

/* 0 when value is a list of NAME@VERSION items that may be carried; else -1 and why in err. */
static int check_request(const char *value, char *err, size_t errlen)
{
    static const char *fix = "write --fabric-dataset=NAME@VERSION[,NAME@VERSION...] with lower-case letters, "
                             "digits, '.' and '-', for example --fabric-dataset=imagenet@v3";
    size_t len = value ? strlen(value) : 0;
    if (len == 0) {
        snprintf(err, errlen, "--fabric-dataset is empty; %s", fix);
        return -1;
    }
    if (len > MAX_REQUEST) {
        snprintf(err, errlen, "--fabric-dataset is %zu characters long, more than %d; %s", len, MAX_REQUEST, fix);
        return -1;
    }
    int items = 0;
    const char *p = value;
    while (1) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *at = memchr(p, '@', n);
        size_t i;
        items++;
        if (items > MAX_REFS) {
            snprintf(err, errlen, "--fabric-dataset names more than %d versions; ask for at most %d", MAX_REFS,
                     MAX_REFS);
            return -1;
        }
        for (i = 0; i < n; i++) {
            if (p[i] != '@' && !ref_char(p[i]))
                break;
        }
        if (n == 0 || i < n || !at || memchr(at + 1, '@', n - (size_t)(at - p) - 1) || at == p
            || (size_t)(at - p) == n - 1 || !ref_start(p[0]) || !ref_start(at[1])) {
            /* show the item, with anything unprintable replaced */
            char shown[80];
            size_t k;
            for (k = 0; k < n && k < sizeof(shown) - 4; k++)
                shown[k] = isprint((unsigned char)p[k]) ? p[k] : '?';
            if (k < n)
                shown[k++] = '.', shown[k++] = '.', shown[k++] = '.';
            shown[k] = '\0';
            snprintf(err, errlen, "--fabric-dataset: '%s' is not NAME@VERSION; %s", shown, fix);
            return -1;
        }
        /* the same version twice: one mount, but two paths in FABRIC_DATASET_PATH would mislead */
        for (const char *q = value; q < p;) {
            const char *qend = strchr(q, ',');
            size_t qn = (size_t)(qend - q);
            if (qn == n && memcmp(q, p, n) == 0) {
                snprintf(err, errlen, "--fabric-dataset names '%.*s' twice; name each version once", (int)n, p);
                return -1;
            }
            q = qend + 1;
        }
        if (!end)
            break;
        p = end + 1;
    }
    return 0;
}

static int option_cb(int val, const char *optarg, int remote)
{
    char err[512];
    (void)val;
    if (!remote && check_request(optarg, err, sizeof(err)) != 0) {
        slurm_error("%s", err);
        return -1;   /* sbatch/salloc/srun refuses the submission: nothing is queued */
    }
    /* remote: never fail here (an option error in slurmstepd fails the plugin stack, which drains a batch
     * job's node); the value is checked again and reported from the task */
    free(requested);
    requested = optarg ? strdup(optarg) : NULL;
    return 0;
}

/* ---- running the agent -------------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct outcome {
    int status;              /* wait status, or -1 when it could not run */
    int timed_out;
    char out[MAX_OUTPUT];
    char err[MAX_OUTPUT];
};

/* Run argv (argv[0] an absolute path) with a clean environment, stdin from /dev/null, in its own process
 * group; collect stdout and stderr; kill the group after timeout seconds. */
static void run_agent(char *const argv[], int timeout, struct outcome *o)
{
    static char *const env[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                "LANG=C.UTF-8", "FABRIC_CALLER=slurm", NULL};
    int outp[2] = {-1, -1}, errp[2] = {-1, -1};
    size_t outn = 0, errn = 0;
    pid_t pid;

    memset(o, 0, sizeof(*o));
    o->status = -1;
    if (pipe2(outp, O_CLOEXEC) != 0 || pipe2(errp, O_CLOEXEC) != 0) {
        snprintf(o->err, sizeof(o->err), "cannot make a pipe: %s", strerror(errno));
        goto out;
    }
    pid = fork();
    if (pid < 0) {
        snprintf(o->err, sizeof(o->err), "cannot fork: %s", strerror(errno));
        goto out;
    }
    if (pid == 0) {
        sigset_t none;
        int null = open("/dev/null", O_RDONLY);
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        signal(SIGCHLD, SIG_DFL);
        setsid();
        if (null < 0 || dup2(null, 0) < 0 || dup2(outp[1], 1) < 0 || dup2(errp[1], 2) < 0)
            _exit(126);
        closefrom(3);
        execve(argv[0], argv, env);
        _exit(127);
    }
    close(outp[1]);
    close(errp[1]);
    outp[1] = errp[1] = -1;
    double deadline = now_s() + timeout;
    struct pollfd fds[2] = {{outp[0], POLLIN, 0}, {errp[0], POLLIN, 0}};
    int open_fds = 2;
    while (open_fds > 0) {
        int left = (int)((deadline - now_s()) * 1000);
        if (left <= 0) {
            o->timed_out = 1;
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            break;
        }
        int r = poll(fds, 2, left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            break;
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char buf[4096];
            ssize_t n = read(fds[i].fd, buf, sizeof(buf));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                fds[i].fd = -1;
                open_fds--;
                continue;
            }
            char *dst = i == 0 ? o->out : o->err;
            size_t *dn = i == 0 ? &outn : &errn;
            size_t room = MAX_OUTPUT - 1 - *dn;
            size_t take = (size_t)n < room ? (size_t)n : room;
            memcpy(dst + *dn, buf, take);
            *dn += take;
            dst[*dn] = '\0';
        }
    }
    while (waitpid(pid, &o->status, 0) < 0 && errno == EINTR)
        ;
out:
    for (int i = 0; i < 2; i++) {
        if (outp[i] >= 0)
            close(outp[i]);
        if (errp[i] >= 0)
            close(errp[i]);
    }
}

static int json_string(const char *json, const char *key, char *dst, size_t len);

/* The agent's words for a failure: its stderr (problem and fix), else its stdout, else how it ended. */
static void describe(const char *what, const struct outcome *o, const struct config *c, int timeout, char *dst,
                     size_t len)
{
    const char *text = o->err[0] ? o->err : o->out;
    char trimmed[MAX_MESSAGE], problem[MAX_MESSAGE], fix[MAX_MESSAGE];
    if (json_string(o->out, "problem", problem, sizeof(problem)) == 0) {
        /* the agent's answer under --json: {"problem", "fix", "exit"} */
        if (json_string(o->out, "fix", fix, sizeof(fix)) == 0 && fix[0])
            snprintf(trimmed, sizeof(trimmed), "%s\n  fix: %s", problem, fix);
        else
            snprintf(trimmed, sizeof(trimmed), "%s", problem);
    } else {
        snprintf(trimmed, sizeof(trimmed), "%s", text);
    }
    size_t n = strlen(trimmed);
    while (n > 0 && (trimmed[n - 1] == '\n' || trimmed[n - 1] == ' '))
        trimmed[--n] = '\0';
    if (o->timed_out)
        snprintf(dst, len, "%s: %s did not answer within %d s and was stopped%s%s", what, c->agent, timeout,
                 n ? ": " : "", trimmed);
    else if (o->status == -1)
        snprintf(dst, len, "%s: %s could not be run: %s", what, c->agent, trimmed);
    else if (WIFEXITED(o->status) && WEXITSTATUS(o->status) == 127 && !n)
        snprintf(dst, len, "%s: the node agent %s is not installed on this node (or cannot be run); install it "
                 "(the fabric's GPU-node role) or fix agent= in plugstack.conf", what, c->agent);
    else if (n)
        snprintf(dst, len, "%s: %s", what, trimmed);
    else
        snprintf(dst, len, "%s: %s ended with status %d and said nothing", what, c->agent,
                 WIFEXITED(o->status) ? WEXITSTATUS(o->status) : 128 + WTERMSIG(o->status));
}

/* The string value of "key" in the agent's one-object JSON answer, unescaped (\uXXXX as UTF-8; a surrogate pair,
 * which only characters outside the BMP need, as '?'). 0, or -1 when absent or not a string. */
static int json_string(const char *json, const char *key, char *dst, size_t len)
{
    char pattern[64];
    snprintf(pattern, sizeof(pattern), "\"%s\"", key);
    const char *p = strstr(json, pattern);
    if (!p || len == 0)
        return -1;
    p += strlen(pattern);
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    if (*p++ != ':')
        return -1;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    if (*p++ != '"')
        return -1;
    size_t n = 0;
    for (; *p && *p != '"'; p++) {
        char buf[4];
        size_t k = 1;
        buf[0] = *p;
        if (*p == '\\') {
            p++;
            switch (*p) {
            case '"': case '\\': case '/': buf[0] = *p; break;
            case 'n': buf[0] = '\n'; break;
            case 't': buf[0] = '\t'; break;
            case 'r': buf[0] = '\r'; break;
            case 'b': buf[0] = '\b'; break;
            case 'f': buf[0] = '\f'; break;
            case 'u': {
                unsigned cp = 0;
                for (int i = 1; i <= 4; i++) {
                    char h = p[i];
                    if (!isxdigit((unsigned char)h))
                        return -1;
                    cp = cp * 16
                         + (unsigned)(isdigit((unsigned char)h) ? h - '0' : (tolower((unsigned char)h) - 'a' + 10));
                }
                p += 4;
                if (cp >= 0xd800 && cp <= 0xdfff) {
                    buf[0] = '?';
                    if (cp <= 0xdbff && p[1] == '\\' && p[2] == 'u')
                        p += 6;   /* the low half of the pair */
                } else if (cp < 0x80) {
                    buf[0] = (char)cp;
                } else if (cp < 0x800) {
                    buf[0] = (char)(0xc0 | (cp >> 6)), buf[1] = (char)(0x80 | (cp & 0x3f)), k = 2;
                } else {
                    buf[0] = (char)(0xe0 | (cp >> 12)), buf[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
                    buf[2] = (char)(0x80 | (cp & 0x3f)), k = 3;
                }
                break;
            }
            default:
                return -1;
            }
        }
        if (n + k >= len)
            return -1;
        memcpy(dst + n, buf, k);
        n += k;
    }
    if (*p != '"')
        return -1;
    dst[n] = '\0';
    return 0;
}

/* A mount path the job may be given: absolute, no '..' component, nothing that would break a ':' list. */
static int sane_path(const char *path)
{
    if (path[0] != '/' || strstr(path, "/../") || strchr(path, ':'))
        return 0;
    size_t n = strlen(path);
    if (n >= 3 && strcmp(path + n - 3, "/..") == 0)
        return 0;
    for (const char *q = path; *q; q++)
        if ((unsigned char)*q < 0x20)
            return 0;
    return 1;
}

/* ---- the per-job marker: this node holds something for the job ---------------------------------- */

static int marker_path(const struct config *c, uint32_t job, char *dst, size_t len)
{
    return snprintf(dst, len, "%s/job-%u", c->state_dir, job) >= (int)len ? -1 : 0;
}

static int write_marker(const struct config *c, uint32_t job, const char *refs, char *err, size_t errlen)
{
    char path[PATH_MAX];
    struct stat st;
    if (mkdir(c->state_dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create %s: %s", c->state_dir, strerror(errno));
        return -1;
    }
    if (lstat(c->state_dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022)) {
        snprintf(err, errlen, "%s must be a directory of root's that only root can write; remove it and run the job "
                 "again", c->state_dir);
        return -1;
    }
    if (marker_path(c, job, path, sizeof(path)) != 0) {
        snprintf(err, errlen, "state_dir %s is too long", c->state_dir);
        return -1;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    ssize_t w = write(fd, refs, strlen(refs));
    (void)w;
    close(fd);
    return 0;
}

/* ---- callbacks ----------------------------------------------------------------------------------- */

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    spank_context_t ctx = spank_context();
    struct config c;
    char err[512];

    if (ctx != S_CTX_LOCAL && ctx != S_CTX_ALLOCATOR && ctx != S_CTX_REMOTE)
        return 0;
    if (parse_config(ac, av, &c, err, sizeof(err)) != 0) {
        if (ctx == S_CTX_REMOTE) {   /* never fail in slurmstepd's init: report from the task instead */
            failed = 1;
            snprintf(message, sizeof(message), "%s", err);
        } else {
            slurm_error("%s", err);
            return -1;
        }
    }
    if (spank_option_register(sp, &fabric_option) != ESPANK_SUCCESS) {
        if (ctx == S_CTX_REMOTE)
            return 0;
        slurm_error("fabric_dataset: cannot register --%s", OPTION_NAME);
        return -1;
    }
    return 0;
}

/* Remote: attach every version asked for, as root, once per step on this node. Never fails. */
int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    struct config c;
    uint32_t job = 0, step = 0;
    char inherited[MAX_REQUEST + 2];
    const char *refs = requested;
    char err[512];

    if (!spank_remote(sp))
        return 0;
    if (spank_get_item(sp, S_JOB_STEPID, &step) == ESPANK_SUCCESS && step == FD_EXTERN_CONT)
        return 0;
    if (!refs) {
        /* a step without the option inherits its job's request (the batch script's environment) */
        if (spank_getenv(sp, "FABRIC_DATASET", inherited, sizeof(inherited)) != ESPANK_SUCCESS || !inherited[0])
            return 0;
        refs = inherited;
    }
    active = 1;
    snprintf(request, sizeof(request), "%s", refs);
    if (failed)   /* the configuration was refused in init */
        return 0;
    if (parse_config(ac, av, &c, err, sizeof(err)) != 0 || check_request(refs, err, sizeof(err)) != 0) {
        failed = 1;
        snprintf(message, sizeof(message), "fabric_dataset: %s", err);
        return 0;
    }
    if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS) {
        failed = 1;
        snprintf(message, sizeof(message), "fabric_dataset: the job id is not available to the plugin");
        return 0;
    }
    /* the marker first: a release at the job's end must find it even if the agent is killed mid-attach */
    if (write_marker(&c, job, refs, err, sizeof(err)) != 0) {
        failed = 1;
        snprintf(message, sizeof(message), "fabric_dataset: %s", err);
        return 0;
    }

    char holder[32], node[256];
    snprintf(holder, sizeof(holder), "job:%u", job);
    if (gethostname(node, sizeof(node)) != 0)
        snprintf(node, sizeof(node), "%s", "this node");
    node[sizeof(node) - 1] = '\0';
    char list[MAX_REQUEST + 1];
    snprintf(list, sizeof(list), "%s", refs);
    paths[0] = '\0';
    double started = now_s();
    char *save = NULL;
    for (char *ref = strtok_r(list, ",", &save); ref; ref = strtok_r(NULL, ",", &save)) {
        char *argv[] = {c.agent, "attach", ref, "--holder", holder, "--json", NULL};
        struct outcome *o = calloc(1, sizeof(*o));
        char path[PATH_MAX];
        char what[MAX_REQUEST + 320];
        if (!o) {
            failed = 1;
            snprintf(message, sizeof(message), "fabric_dataset: out of memory");
            return 0;
        }
        snprintf(what, sizeof(what), "fabric_dataset: %s could not be attached on %s", ref, node);
        run_agent(argv, c.attach_timeout, o);
        if (o->status == -1 || o->timed_out || !WIFEXITED(o->status) || WEXITSTATUS(o->status) != 0) {
            failed = 1;
            describe(what, o, &c, c.attach_timeout, message, sizeof(message));
            free(o);
            slurm_error("%s", message);   /* slurmd's log; the job's output gets it from the task */
            return 0;
        }
        if (json_string(o->out, "path", path, sizeof(path)) != 0 || !sane_path(path)) {
            failed = 1;
            snprintf(message, sizeof(message), "%s: %s answered without a usable \"path\" (%.200s)", what, c.agent,
                     o->out);
            free(o);
            slurm_error("%s", message);
            return 0;
        }
        free(o);
        if (paths[0])
            strncat(paths, ":", sizeof(paths) - strlen(paths) - 1);
        strncat(paths, path, sizeof(paths) - strlen(paths) - 1);
    }
    slurm_info("fabric_dataset: job %u step %u: %s attached at %s in %.2f s", job, step, refs, paths,
               now_s() - started);
    return 0;
}

/* Remote, in each task's process before exec: fail the task (never the node) or give it the paths. */
int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
    int task = 0;
    (void)ac;
    (void)av;
    if (!active)
        return 0;
    if (failed) {
        if (spank_get_item(sp, S_TASK_ID, &task) != ESPANK_SUCCESS || task == 0)
            slurm_error("%s", message);   /* the job's stderr (slurmstepd's stderr is task 0's by now) */
        return -1;
    }
    if (spank_setenv(sp, "FABRIC_DATASET", request, 1) != ESPANK_SUCCESS
        || spank_setenv(sp, "FABRIC_DATASET_PATH", paths, 1) != ESPANK_SUCCESS) {
        slurm_error("fabric_dataset: cannot set FABRIC_DATASET_PATH in the task's environment");
        return -1;
    }
    return 0;
}

/* Job epilog (every node of the job, as root): release what this job holds here. Always returns 0. */
int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
    struct config c;
    uint32_t job = 0;
    char path[PATH_MAX], err[512], holder[32];
    struct stat st;

    if (parse_config(ac, av, &c, err, sizeof(err)) != 0) {
        slurm_error("%s", err);
        return 0;
    }
    if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS || marker_path(&c, job, path, sizeof(path)) != 0)
        return 0;
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return 0;   /* nothing attached for this job on this node */
    snprintf(holder, sizeof(holder), "job:%u", job);
    char *argv[] = {c.agent, "detach", "--holder", holder, "--all", "--json", NULL};
    struct outcome *o = calloc(1, sizeof(*o));
    if (!o)
        return 0;
    double started = now_s();
    run_agent(argv, c.detach_timeout, o);
    if (o->status != -1 && !o->timed_out && WIFEXITED(o->status) && WEXITSTATUS(o->status) == 0) {
        unlink(path);
        slurm_info("fabric_dataset: job %u: released in %.2f s", job, now_s() - started);
    } else {
        char what[64], msg[MAX_MESSAGE];
        snprintf(what, sizeof(what), "fabric_dataset: job %u: release failed", job);
        describe(what, o, &c, c.detach_timeout, msg, sizeof(msg));
        slurm_error("%s (the marker %s stays; `fabric-node detach --holder %s --all` releases it by hand)", msg,
                    path, holder);
    }
    free(o);
    return 0;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
    (void)sp;
    (void)ac;
    (void)av;
    free(requested);
    requested = NULL;
    return 0;
}
