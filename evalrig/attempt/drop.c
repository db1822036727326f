/* evalrig-drop: the last step before an agent runs under `process` as root (docs/security.md,
 * "The two sandboxes"; evalrig/attempt/privdrop.py builds it and says when it is used).
 *
 *     evalrig-drop AS FSIZE NPROC UID -- ARGV...
 *
 * In one exec, what util-linux `prlimit --as --fsize --nproc -- setpriv --pdeathsig KILL
 * --reuid=UID --regid=UID --clear-groups --inh-caps=-all --bounding-set=-all --no-new-privs`
 * does in two: each limit set (soft and hard; "-" leaves it as it is), every capability
 * dropped from the bounding set, the groups cleared, uid and gid set to UID (real, effective,
 * saved), the inheritable and ambient sets emptied, no new privileges on exec (a set-user-ID
 * file runs as its caller), killed when the thread that started it ends; then ARGV runs,
 * found on PATH as execvp finds it. Any step that fails ends it with exit 127 and a line on
 * stderr naming the step: nothing runs with a step left out.
 *
 * It is started by the rig, as root, with the agent's environment (the loader's variables
 * held back, as for the helpers it replaces); it reads no file and no variable. Static where
 * the C library allows it: a dynamic loader costs an exec about what the agent's own start does.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

static void fail(const char *step) {
    fprintf(stderr, "evalrig-drop: %s: %s\n", step, strerror(errno));
    _exit(127);
}

/* A decimal number, or "-" (returns 0 and sets *given to 0). */
static unsigned long long number(const char *text, const char *what, int *given) {
    *given = strcmp(text, "-") != 0;
    if (!*given)
        return 0;
    char *end = NULL;
    errno = 0;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || text[0] == '-') {
        errno = EINVAL;
        fail(what);
    }
    return value;
}

static void limit(int resource, const char *text, const char *what) {
    int given;
    unsigned long long value = number(text, what, &given);
    if (!given)
        return;
    struct rlimit both = {(rlim_t)value, (rlim_t)value};
    if (setrlimit(resource, &both) != 0)
        fail(what);
}

int main(int argc, char **argv) {
    if (argc < 7 || strcmp(argv[5], "--") != 0) {
        errno = EINVAL;
        fail("usage: evalrig-drop AS FSIZE NPROC UID -- ARGV...");
    }
    limit(RLIMIT_AS, argv[1], "RLIMIT_AS");
    limit(RLIMIT_FSIZE, argv[2], "RLIMIT_FSIZE");
    limit(RLIMIT_NPROC, argv[3], "RLIMIT_NPROC");
    int given;
    unsigned long long uid = number(argv[4], "UID", &given);
    if (!given || uid == 0 || uid > 0xfffffffeULL) {
        errno = EINVAL;
        fail("UID (a uid other than root's)");
    }

    /* While still root (CAP_SETPCAP): no capability can be gained by any later exec. */
    for (int cap = 0; cap <= 63; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
            fail("dropping the bounding set");
    if (setgroups(0, NULL) != 0)
        fail("setgroups");
    if (setresgid((gid_t)uid, (gid_t)uid, (gid_t)uid) != 0)
        fail("setresgid");
    if (setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) != 0)
        fail("setresuid");
    /* Leaving uid 0 emptied the permitted and effective sets; empty the inheritable one too. */
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct none[2];
    memset(none, 0, sizeof none);
    if (syscall(SYS_capset, &header, none) != 0)
        fail("capset");
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
        fail("clearing the ambient set");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        fail("no_new_privs");
    /* After the uid change, which would clear it. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0)
        fail("pdeathsig");
    execvp(argv[6], argv + 6);
    fail(argv[6]);
    return 127;
}
