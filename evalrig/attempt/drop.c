/* evalrig-drop: the last step before an agent runs under `process` as root (docs/security.md,
 * "The two sandboxes"; evalrig/attempt/privdrop.py builds it and says when it is used).
 *
 *     evalrig-drop AS FSIZE NPROC UID [--private SIZE INODES rw:PATH|ro:PATH...] -- ARGV...
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
 * With --private (an agent's launch, in the PID and network namespaces the rig made for it),
 * first, still as root: its own mount and IPC namespaces; every host mount read-only and
 * nosuid; fresh tmpfs on /tmp, /var/tmp and /dev/shm (mode 1777, nosuid, nodev; SIZE bytes
 * and INODES inodes each, "-" for the kernel's default); each PATH bound back at its own
 * path (rw: writable, ro: read-only; nosuid and nodev both), so that the agent's own
 * directories stay reachable under the fresh /tmp; a fresh /proc of its PID namespace; the
 * working directory entered again (the bind, not the covered host path); umask 077. The
 * namespaces die with the last process in them, and with them every file and IPC object the
 * agent made there (docs/security.md, "What `process` leaves on the host").
 *
 * Last, right before the exec: the seccomp filter of evalrig/attempt/seccomp.py (no kernel
 * keyrings, no user namespaces, no clone3, no other ABI), which privdrop.py hands to the compiler
 * as EVALRIG_FILTER, the initializer of a struct sock_filter array (EVALRIG_NO_FILTER: none for
 * this architecture; the run then says so). The filter outlives every exec of the agent.
 *
 * It is started by the rig, as root, with the agent's environment (the loader's variables
 * held back, as for the helpers it replaces); it reads no file and no variable. Static where
 * the C library allows it: a dynamic loader costs an exec about what the agent's own start does.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#define EVALRIG_ATTR_RDONLY 0x00000001ULL
#define EVALRIG_ATTR_NOSUID 0x00000002ULL

#if !defined(EVALRIG_FILTER) && !defined(EVALRIG_NO_FILTER)
#error "build with -DEVALRIG_FILTER=... (evalrig/attempt/privdrop.py does)"
#endif

struct evalrig_mount_attr {
    unsigned long long attr_set, attr_clr, propagation, userns_fd;
};

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

/* mkdir -p of PATH's parents and PATH itself (0755, root's), where they are missing. */
static void make_way(const char *path) {
    char buf[PATH_MAX];
    if (strlen(path) >= sizeof buf) {
        errno = ENAMETOOLONG;
        fail(path);
    }
    strcpy(buf, path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char was = *p;
            *p = '\0';
            struct stat st;
            if (lstat(buf, &st) != 0 && (errno != ENOENT || mkdir(buf, 0755) != 0))
                fail(buf);
            *p = was;
            if (was == '\0')
                return;
        }
    }
}

static void scratch(const char *where, const char *options) {
    struct stat st;
    if (lstat(where, &st) != 0 || !S_ISDIR(st.st_mode))
        return; /* no /var/tmp here (or a link): nothing of the host's to cover */
    if (mount("tmpfs", where, "tmpfs", MS_NOSUID | MS_NODEV, options) != 0)
        fail(where);
}

/* argv[from..to): "--private" SIZE INODES PATH... */
static void private_view(char **argv, int from, int to) {
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd) == NULL)
        fail("getcwd");
    int count = to - from - 3;
    if (count < 0 || count > 64) {
        errno = EINVAL;
        fail("--private SIZE INODES PATH...");
    }
    if (unshare(CLONE_NEWNS | CLONE_NEWIPC) != 0)
        fail("unshare(mount, IPC)");
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        fail("making every mount private");
    /* Opened in the new namespace (a bind's source must be one of its mounts), before the
     * fresh tmpfs covers them. */
    int fds[64];
    for (int i = 0; i < count; i++) {
        const char *spec = argv[from + 3 + i];
        if (strncmp(spec, "rw:/", 4) != 0 && strncmp(spec, "ro:/", 4) != 0) {
            errno = EINVAL;
            fail("--private PATH (rw:/... or ro:/...)");
        }
        fds[i] = open(spec + 3, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fds[i] < 0)
            fail(spec + 3);
    }
    struct evalrig_mount_attr attr = {EVALRIG_ATTR_RDONLY | EVALRIG_ATTR_NOSUID, 0, 0, 0};
    if (syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &attr, sizeof attr) != 0)
        fail("host mounts read-only and nosuid (mount_setattr)");
    char options[128] = "mode=1777";
    const char *size = argv[from + 1], *inodes = argv[from + 2];
    int given;
    unsigned long long n = number(size, "--private SIZE", &given);
    if (given)
        snprintf(options + strlen(options), sizeof options - strlen(options), ",size=%llu", n);
    n = number(inodes, "--private INODES", &given);
    if (given)
        snprintf(options + strlen(options), sizeof options - strlen(options), ",nr_inodes=%llu", n);
    mode_t old = umask(0);
    scratch("/tmp", options);
    scratch("/var/tmp", options);
    scratch("/dev/shm", options);
    for (int i = 0; i < count; i++) {
        const char *spec = argv[from + 3 + i], *path = spec + 3;
        char source[64];
        snprintf(source, sizeof source, "/proc/self/fd/%d", fds[i]);
        make_way(path);
        if (mount(source, path, NULL, MS_BIND | MS_REC, NULL) != 0)
            fail(path);
        unsigned long flags = MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV;
        if (spec[1] == 'o')
            flags |= MS_RDONLY;
        if (mount(NULL, path, NULL, flags, NULL) != 0)
            fail(path);
        close(fds[i]);
    }
    umask(old);
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
        fail("a fresh /proc");
    if (chdir(cwd) != 0)
        fail(cwd);
}

int main(int argc, char **argv) {
    int dashes = 5;
    if (argc > 5 && strcmp(argv[5], "--private") == 0)
        while (dashes < argc && strcmp(argv[dashes], "--") != 0)
            dashes++;
    if (dashes + 1 >= argc || strcmp(argv[dashes], "--") != 0) {
        errno = EINVAL;
        fail("usage: evalrig-drop AS FSIZE NPROC UID [--private SIZE INODES PATH...] -- ARGV...");
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

    if (dashes > 5)
        private_view(argv, 5, dashes);

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
    umask(077);
#ifdef EVALRIG_FILTER
    /* After no_new_privs, which lets an unprivileged process install it. */
    static struct sock_filter filter[] = {EVALRIG_FILTER};
    struct sock_fprog program = {(unsigned short)(sizeof filter / sizeof filter[0]), filter};
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program, 0, 0) != 0)
        fail("the seccomp filter");
#endif
    execvp(argv[dashes + 1], argv + dashes + 1);
    fail(argv[dashes + 1]);
    return 127;
}
