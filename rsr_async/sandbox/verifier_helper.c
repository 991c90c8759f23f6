/*
 * rsr-verify: run a task's hidden tests inside a sandbox where the agent cannot touch them.
 *
 * Built static (no libc, loader or tool of the sandbox is ever used) and run by the engine
 * in its per-host verifier container (`--pid host`, CAP_SYS_ADMIN), which nothing of a task
 * can reach. `rsr-verify idle` keeps that container alive; `rsr-verify run PID ...` grades
 * the sandbox whose init process is host pid PID:
 *
 *   1. join PID's cgroups (so the tests count against the sandbox's memory and CPU, as
 *      a `docker exec` would; under cgroup v1 not its pids cgroup, which a fork bomb the
 *      agent left may have filled) and its ipc, uts, net, cgroup, pid and mount
 *      namespaces;
 *   2. leave that mount namespace for a private copy of it (unshare), and mount a fresh
 *      tmpfs on each --tmpfs path (`/tests`, `/logs/verifier`): only processes of this
 *      run see them. The sandbox's processes keep running, as in Harbor's shared mode,
 *      but what they write to `/logs/verifier` or `/tests` lands beside, not in, the
 *      directories the tests use;
 *      With --copy (RSRT's claims), the private namespace first becomes a copy-on-write
 *      copy of the sandbox (see "the copy" below): nothing the tests write outside
 *      those tmpfs reaches the sandbox either, and the copy goes with the run;
 *   3. unpack the tests (a framed bundle on stdin) into the first tmpfs;
 *   4. run `/bin/bash -c COMMAND` with the sandbox's environment, capabilities and user,
 *      plus one capability the sandbox's processes cannot hold (CAP_WAKE_ALARM unless
 *      the sandbox has it): Linux lets a process reach another's files through
 *      /proc/PID/root, fd or mem only if it holds every capability the other holds, so
 *      no process of the agent can reach into this mount namespace;
 *   5. after the command (or its time limit), kill every process left in the private
 *      namespace, check that both mounts are still where the tests saw them, and send
 *      the files of the last tmpfs (the verifier's logs and the reward) back, read
 *      through the directory descriptor taken when it was mounted.
 *
 * Nothing is resolved through the sandbox's PATH, shell functions, aliases or
 * LD_PRELOAD: this program is static, reads and writes files itself, and starts only
 * `/bin/bash` (the task's own shell, as Harbor's `bash -c`).
 *
 * Results go to stdout as records: one tag byte, a 4-byte big-endian length, the payload.
 *   S  started: the capability added, as text
 *   X  how the command ended: "exit N", "signal N" or "timeout"
 *   F  a file: u64 size, u32 name length, name, u32 head length, head, u32 tail length, tail
 *   M  a file not sent (past --max-files): its name
 *   T  the run is void through the agent's doing (its directories moved or replaced
 *      while the tests ran, its processes filling the sandbox's process limit): what
 *   N  a note (a best-effort step that failed): what
 *   Q  seconds spent: before the command, running it, and after it (as text)
 *   E  the run could not be set up: why (then exit 2)
 *   C  --copy: the copy could not be made on this host: why (then exit 2)
 *   D  done (the last record; a run without it was cut off)
 * The command's own output (stdout and stderr) goes to this program's stderr.
 *
 * Bundle on stdin: records of one type byte ('d' directory, 'f' file, 'l' symlink,
 * 'e' end), u32 mode, u32 path length, path (relative, no "..", no leading "/"), u64 data
 * length, data (file contents or link target).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <linux/audit.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif
#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_RAISE 2
#endif

#define MAX_TMPFS 4
#define MAX_ENV 512
#define MAX_PATH_LEN 4096

static int result_fd = 1;

/* ---- records ------------------------------------------------------------------- */

static void write_all(int fd, const void *data, size_t len) {
    const char *p = data;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            _exit(3);  /* the engine went away: nothing left to report to */
        }
        p += n;
        len -= (size_t)n;
    }
}

static void put_u32(unsigned char *b, uint32_t v) {
    b[0] = v >> 24; b[1] = v >> 16; b[2] = v >> 8; b[3] = v;
}

static void put_u64(unsigned char *b, uint64_t v) {
    put_u32(b, (uint32_t)(v >> 32));
    put_u32(b + 4, (uint32_t)v);
}

static void record(char tag, const void *payload, size_t len) {
    unsigned char head[5];
    head[0] = (unsigned char)tag;
    put_u32(head + 1, (uint32_t)len);
    write_all(result_fd, head, 5);
    if (len) write_all(result_fd, payload, len);
}

/* One record of text: ``prefix`` then ``fmt`` formatted, cut at 1 KiB. */
static void vrecordf(char tag, const char *prefix, const char *fmt, va_list ap) {
    char text[1024];
    int at = snprintf(text, sizeof text, "%s", prefix);
    int n = vsnprintf(text + at, sizeof text - (size_t)at, fmt, ap);
    if (n < 0) n = 0;
    n += at;
    if ((size_t)n >= sizeof text) n = sizeof text - 1;
    record(tag, text, (size_t)n);
}

static void recordf(char tag, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void recordf(char tag, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vrecordf(tag, "", fmt, ap);
    va_end(ap);
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vrecordf('E', "", fmt, ap);
    va_end(ap);
    _exit(2);
}

/* ---- stdin ----------------------------------------------------------------------- */

static void read_exact(void *buf, size_t len) {
    char *p = buf;
    while (len > 0) {
        ssize_t n = read(0, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) fail("the tests bundle ended early");
        p += n;
        len -= (size_t)n;
    }
}

static uint32_t read_u32(void) {
    unsigned char b[4];
    read_exact(b, 4);
    return ((uint32_t)b[0] << 24) | ((uint32_t)b[1] << 16) | ((uint32_t)b[2] << 8) | b[3];
}

static uint64_t read_u64(void) {
    uint64_t hi = read_u32();
    return (hi << 32) | read_u32();
}

/* ---- small file helpers ---------------------------------------------------------- */

static ssize_t read_file(const char *path, char *buf, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t got = 0;
    while (got < cap) {
        ssize_t n = read(fd, buf + got, cap - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fd);
    return (ssize_t)got;
}

static int write_text(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = write(fd, text, strlen(text));
    close(fd);
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* ---- capabilities ---------------------------------------------------------------- */

static uint64_t bounding_of(pid_t pid) {
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    ssize_t n = read_file(path, buf, sizeof buf - 1);
    if (n <= 0) fail("cannot read %s: %s", path, strerror(errno));
    buf[n] = 0;
    char *line = strstr(buf, "\nCapBnd:");
    if (!line) fail("%s has no CapBnd line", path);
    return strtoull(line + 8, NULL, 16);
}

static int last_cap(void) {
    char buf[32];
    ssize_t n = read_file("/proc/sys/kernel/cap_last_cap", buf, sizeof buf - 1);
    if (n <= 0) return 40;
    buf[n] = 0;
    return atoi(buf);
}

static void set_caps(uint64_t permitted, uint64_t inheritable) {
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    memset(data, 0, sizeof data);
    data[0].effective = data[0].permitted = (uint32_t)permitted;
    data[1].effective = data[1].permitted = (uint32_t)(permitted >> 32);
    data[0].inheritable = (uint32_t)inheritable;
    data[1].inheritable = (uint32_t)(inheritable >> 32);
    if (syscall(SYS_capset, &header, data) != 0) {
        dprintf(2, "rsr-verify: capset: %s\n", strerror(errno));
        _exit(126);
    }
}

/* ---- seccomp: the tests' filter. The station runs without Docker's seccomp profile
 * (it refuses pivot_root, which the copy needs), so this program installs for the tests
 * what that profile denies a container without extra capabilities and the kernel would
 * otherwise let the tests do: new user namespaces (which the station's CAP_SYS_ADMIN
 * would have unlocked too), the kernel keyring, userfaultfd, perf events, file handles,
 * module, clock, swap, accounting and reboot calls, and mounting (the last ones are
 * refused by the capability checks anyway, listed so the filter says so plainly). The
 * tests never need any of them. ---------------------------------------------------- */

static void deny_syscalls(void) {
#if defined(__x86_64__)
    static const int denied[] = {
        __NR_add_key, __NR_keyctl, __NR_request_key, __NR_userfaultfd, __NR_perf_event_open,
        __NR_name_to_handle_at, __NR_open_by_handle_at, __NR_lookup_dcookie, __NR_uselib,
        __NR_ustat, __NR_sysfs, __NR_acct, __NR_bpf, __NR_kexec_load, __NR_kexec_file_load,
        __NR_init_module, __NR_finit_module, __NR_delete_module, __NR_iopl, __NR_ioperm,
        __NR_quotactl, __NR_reboot, __NR_swapon, __NR_swapoff, __NR_settimeofday,
        __NR_clock_settime, __NR_clock_adjtime, __NR_mount, __NR_umount2, __NR_pivot_root,
        __NR_setns, __NR_fsopen, __NR_fsconfig, __NR_fsmount, __NR_fspick, __NR_move_mount,
        __NR_open_tree, __NR_mount_setattr,
    };
    struct sock_filter filter[16 + 2 * sizeof denied / sizeof denied[0]];
    unsigned short n = 0;
    filter[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
    filter[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
    filter[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    filter[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
    filter[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 0, 1);
    filter[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS);  /* libc falls back to clone */
    for (size_t i = 0; i < sizeof denied / sizeof denied[0]; i++) {
        filter[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)denied[i], 0, 1);
        filter[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM);
    }
    filter[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_unshare, 1, 0);
    filter[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 3);
    filter[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0]));
    filter[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_NEWUSER, 0, 1);
    filter[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM);
    filter[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    struct sock_fprog prog = {n, filter};
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        dprintf(2, "rsr-verify: seccomp: %s\n", strerror(errno));
        _exit(126);
    }
#endif
}

/* ---- cgroups ---------------------------------------------------------------------- */

/* Move this process into PID's cgroups, read from /proc/PID/cgroup, under the host's
 * cgroup tree mounted at `root` (cgroup v1: one directory per hierarchy; v2: one). */
static void join_cgroups(pid_t pid, const char *root) {
    char path[64], buf[8192];
    snprintf(path, sizeof path, "/proc/%d/cgroup", (int)pid);
    ssize_t n = read_file(path, buf, sizeof buf - 1);
    if (n <= 0) { recordf('N', "cannot read %s", path); return; }
    buf[n] = 0;
    char self[32];
    snprintf(self, sizeof self, "%d", (int)getpid());
    int joined = 0, failed = 0;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        char *c1 = strchr(line, ':');
        if (!c1) continue;
        char *c2 = strchr(c1 + 1, ':');
        if (!c2) continue;
        *c2 = 0;
        const char *controllers = c1 + 1, *cg = c2 + 1;
        char target[MAX_PATH_LEN];
        if (*controllers == 0) {  /* cgroup v2: <root>/unified on a hybrid host, else <root> */
            snprintf(target, sizeof target, "%s/unified%s/cgroup.procs", root, cg);
            if (access(target, W_OK) != 0) snprintf(target, sizeof target, "%s%s/cgroup.procs", root, cg);
        } else if (strcmp(controllers, "pids") == 0) {
            /* Not the pids controller (cgroup v1): what the agent left running keeps
             * running, and a fork bomb at the sandbox's process limit must not leave the
             * tests without a process to start (the station's own limit bounds them). */
            continue;
        } else {
            const char *name = strncmp(controllers, "name=", 5) == 0 ? controllers + 5 : controllers;
            snprintf(target, sizeof target, "%s/%s%s/cgroup.procs", root, name, cg);
        }
        if (write_text(target, self) == 0) joined++; else failed++;
    }
    if (failed) recordf('N', "joined %d of %d of the sandbox's cgroups", joined, joined + failed);
}

/* ---- namespaces -------------------------------------------------------------------- */

static void join_namespaces(pid_t pid) {
    static const struct { const char *name; int type; } kinds[] = {
        {"ipc", CLONE_NEWIPC}, {"uts", CLONE_NEWUTS}, {"net", CLONE_NEWNET},
        {"cgroup", CLONE_NEWCGROUP}, {"pid", CLONE_NEWPID}, {"mnt", CLONE_NEWNS},
    };
    int fds[6];
    char path[64];
    for (size_t i = 0; i < 6; i++) {  /* open all first: after mnt, /proc is the sandbox's */
        snprintf(path, sizeof path, "/proc/%d/ns/%s", (int)pid, kinds[i].name);
        fds[i] = open(path, O_RDONLY | O_CLOEXEC);
        if (fds[i] < 0) fail("cannot open %s: %s", path, strerror(errno));
    }
    for (size_t i = 0; i < 6; i++) {
        if (setns(fds[i], kinds[i].type) != 0) {
            if (kinds[i].type == CLONE_NEWCGROUP && errno == EINVAL) { close(fds[i]); continue; }
            fail("setns %s of pid %d: %s", kinds[i].name, (int)pid, strerror(errno));
        }
        close(fds[i]);
    }
    if (chdir("/") != 0) fail("chdir / in the sandbox: %s", strerror(errno));
}

/* ---- private mounts ------------------------------------------------------------------ */

/* An O_PATH descriptor of directory `path`, made when missing; anything else in the way
 * (a file, a symlink the agent planted) is removed first. No component is followed as a
 * symlink, so the mount lands on the path the tests will use. */
static char created[8][MAX_PATH_LEN];  /* directories ensure_dir made, outermost first */
static int n_created = 0;

static int ensure_dir(const char *path) {
    int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) fail("open /: %s", strerror(errno));
    char copy[MAX_PATH_LEN], sofar[MAX_PATH_LEN] = "";
    snprintf(copy, sizeof copy, "%s", path);
    for (char *part = strtok(copy, "/"); part; part = strtok(NULL, "/")) {
        int next = -1;
        size_t used = strlen(sofar);
        snprintf(sofar + used, sizeof sofar - used, "/%s", part);
        for (int attempt = 0; attempt < 4 && next < 0; attempt++) {
            next = openat(fd, part, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (next >= 0) break;
            if (errno == ENOENT) {
                if (mkdirat(fd, part, 0755) == 0) {
                    int known = 0;
                    for (int i = 0; i < n_created; i++) known |= strcmp(created[i], sofar) == 0;
                    if (!known && n_created < 8) snprintf(created[n_created++], MAX_PATH_LEN, "%s", sofar);
                } else if (errno != EEXIST) {
                    break;
                }
            } else if (errno == ENOTDIR || errno == ELOOP) {
                if (unlinkat(fd, part, 0) != 0 && errno != ENOENT) break;
            } else {
                break;
            }
        }
        if (next < 0) fail("cannot make directory %s (at %s): %s", path, part, strerror(errno));
        close(fd);
        fd = next;
    }
    return fd;
}

struct private_mount {
    const char *path;
    int root;        /* a descriptor of the tmpfs root, taken right after mounting */
    dev_t dev;
};

static void mount_tmpfs(struct private_mount *m, const char *tag, uid_t owner, gid_t group) {
    char target[64], source[96], options[96];
    snprintf(source, sizeof source, "rsr-verify-%s", tag);
    snprintf(options, sizeof options, "mode=0755,uid=%u,gid=%u", (unsigned)owner, (unsigned)group);
    /* A process of the agent may remove the directory between its making and the
     * mount (ENOENT): make it again, a bounded number of times. */
    int mounted = 0, error = 0;
    for (int attempt = 0; attempt < 50 && !mounted; attempt++) {
        int dir = ensure_dir(m->path);
        snprintf(target, sizeof target, "/proc/self/fd/%d", dir);
        mounted = mount(source, target, "tmpfs", MS_NOSUID | MS_NODEV, options) == 0;
        error = errno;
        close(dir);
        if (!mounted && error != ENOENT) break;
    }
    if (!mounted) fail("mount tmpfs on %s: %s", m->path, strerror(error));
    /* Find the mount just made by its unique source name: its device number tells the
     * tmpfs root from anything the agent could have put at the path meanwhile. */
    char buf[65536];
    ssize_t n = read_file("/proc/self/mountinfo", buf, sizeof buf - 1);
    if (n <= 0) fail("cannot read /proc/self/mountinfo");
    buf[n] = 0;
    unsigned major_no = 0, minor_no = 0;
    int found = 0;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        char *sep = strstr(line, " - ");
        if (!sep) continue;
        char fstype[32], src[128];
        if (sscanf(sep + 3, "%31s %127s", fstype, src) != 2) continue;
        if (strcmp(src, source) != 0) continue;
        if (sscanf(line, "%*d %*d %u:%u", &major_no, &minor_no) == 2) found = 1;
    }
    if (!found) fail("the tmpfs mounted on %s is not in mountinfo", m->path);
    m->dev = makedev(major_no, minor_no);
    int root = open(m->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat st;
    if (root < 0 || fstat(root, &st) != 0 || st.st_dev != m->dev)
        fail("%s changed while it was being mounted", m->path);
    m->root = root;
}

/* ---- the tests bundle ------------------------------------------------------------------ */

static int safe_relative(const char *path) {
    if (!*path || path[0] == '/') return 0;
    const char *p = path;
    while (*p) {
        const char *end = strchr(p, '/');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 0 || (len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.')) return 0;
        p += len;
        if (*p == '/') p++;
    }
    return 1;
}

static void unpack_bundle(int root) {
    char path[MAX_PATH_LEN];
    static char data[1 << 16];
    for (;;) {
        char type;
        read_exact(&type, 1);
        if (type == 'e') return;
        uint32_t mode = read_u32();
        uint32_t len = read_u32();
        if (len == 0 || len >= sizeof path) fail("a bundle path of %u bytes", len);
        read_exact(path, len);
        path[len] = 0;
        if (!safe_relative(path)) fail("bundle path %s is not a plain relative path", path);
        uint64_t size = read_u64();
        if (type == 'd') {
            if (size) fail("directory %s carries data", path);
            if (mkdirat(root, path, mode & 07777) != 0 && errno != EEXIST)
                fail("mkdir %s: %s", path, strerror(errno));
        } else if (type == 'l') {
            if (size >= sizeof data) fail("link %s is too long", path);
            read_exact(data, size);
            data[size] = 0;
            if (symlinkat(data, root, path) != 0) fail("symlink %s: %s", path, strerror(errno));
        } else if (type == 'f') {
            int fd = openat(root, path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 07777);
            if (fd < 0) fail("create %s: %s", path, strerror(errno));
            while (size > 0) {
                size_t chunk = size < sizeof data ? (size_t)size : sizeof data;
                read_exact(data, chunk);
                write_all(fd, data, chunk);
                size -= chunk;
            }
            if (fchmod(fd, mode & 07777) != 0) fail("chmod %s: %s", path, strerror(errno));
            close(fd);
        } else {
            fail("unknown bundle record %d", (int)type);
        }
    }
}

/* ---- sending files back ------------------------------------------------------------------ */

static long max_files = 32, keep_bytes = 64000, whole_bytes = 1 << 20;
static int files_sent = 0;

static int is_whole(const char *name) {
    return strcmp(name, "reward.txt") == 0 || strcmp(name, "reward.json") == 0;
}

static void send_file(int dir, const char *name, const char *rel) {
    int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) { close(fd); return; }
    if (files_sent >= max_files) { record('M', rel, strlen(rel)); close(fd); return; }
    files_sent++;
    uint64_t size = (uint64_t)st.st_size;
    uint64_t limit = is_whole(rel) ? (uint64_t)whole_bytes : (uint64_t)keep_bytes;
    uint64_t head_len = size <= limit ? size : limit / 2;
    uint64_t tail_len = size <= limit ? 0 : limit / 2;
    char *head = malloc(head_len + 1), *tail = malloc(tail_len + 1);
    if (!head || !tail) fail("out of memory sending %s", rel);
    ssize_t h = pread(fd, head, head_len, 0);
    ssize_t t = tail_len ? pread(fd, tail, tail_len, (off_t)(size - tail_len)) : 0;
    close(fd);
    if (h < 0) h = 0;
    if (t < 0) t = 0;
    size_t name_len = strlen(rel);
    size_t total = 8 + 4 + name_len + 4 + (size_t)h + 4 + (size_t)t;
    unsigned char *payload = malloc(total);
    if (!payload) fail("out of memory sending %s", rel);
    unsigned char *p = payload;
    put_u64(p, size); p += 8;
    put_u32(p, (uint32_t)name_len); p += 4;
    memcpy(p, rel, name_len); p += name_len;
    put_u32(p, (uint32_t)h); p += 4;
    memcpy(p, head, (size_t)h); p += h;
    put_u32(p, (uint32_t)t); p += 4;
    memcpy(p, tail, (size_t)t);
    record('F', payload, total);
    free(payload); free(head); free(tail);
}

static int by_name(const struct dirent **a, const struct dirent **b) {
    return strcmp((*a)->d_name, (*b)->d_name);
}

/* Files under `dir` in name order, to depth 3 (as `find -maxdepth 3 | sort`). */
static void send_tree(int dir, const char *prefix, int depth) {
    int copy = dup(dir);
    if (copy < 0) return;
    DIR *d = fdopendir(copy);
    if (!d) { close(copy); return; }
    struct dirent **names = NULL;
    int count = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (count == cap) {
            cap = cap ? cap * 2 : 16;
            names = realloc(names, (size_t)cap * sizeof *names);
            if (!names) fail("out of memory listing %s", prefix);
        }
        size_t size = offsetof(struct dirent, d_name) + strlen(e->d_name) + 1;
        names[count] = malloc(size < sizeof *e ? sizeof *e : size);
        if (!names[count]) fail("out of memory listing %s", prefix);
        memcpy(names[count], e, size);
        count++;
    }
    closedir(d);
    qsort(names, (size_t)count, sizeof *names, (int (*)(const void *, const void *))by_name);
    for (int i = 0; i < count; i++) {
        char rel[MAX_PATH_LEN];
        snprintf(rel, sizeof rel, "%s%s%s", prefix, *prefix ? "/" : "", names[i]->d_name);
        struct stat st;
        if (fstatat(dir, names[i]->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
            if (S_ISDIR(st.st_mode) && depth < 3) {
                int sub = openat(dir, names[i]->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (sub >= 0) { send_tree(sub, rel, depth + 1); close(sub); }
            } else if (S_ISREG(st.st_mode)) {
                send_file(dir, names[i]->d_name, rel);
            }
        }
        free(names[i]);
    }
    free(names);
}

/* ---- processes ---------------------------------------------------------------------------- */

/* SIGKILL every process in this (private) mount namespace but this one, until none is
 * left: only this run's descendants can be in it. */
static void kill_namespace(void) {
    struct stat self;
    if (stat("/proc/self/ns/mnt", &self) != 0) return;
    for (int round = 0; round < 200; round++) {
        int found = 0;
        DIR *d = opendir("/proc");
        if (!d) return;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            char *end;
            long pid = strtol(e->d_name, &end, 10);
            if (*end || pid <= 0 || pid == getpid()) continue;
            char path[64];
            struct stat st;
            snprintf(path, sizeof path, "/proc/%ld/ns/mnt", pid);
            if (stat(path, &st) != 0 || st.st_ino != self.st_ino || st.st_dev != self.st_dev) continue;
            kill((pid_t)pid, SIGKILL);
            found = 1;
        }
        closedir(d);
        while (waitpid(-1, NULL, WNOHANG) > 0) {}
        if (!found) return;
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    recordf('N', "processes of the tests survived SIGKILL");
}

static volatile sig_atomic_t alarmed = 0;
static void on_alarm(int sig) { (void)sig; alarmed = 1; }

/* A fork refused for lack of room in the sandbox's pids cgroup (cgroup v2, where the
 * tests share it): the agent's processes (a fork bomb) used up its process limit, so the
 * tests cannot start. That is the agent's doing, reported as such (T). */
static void no_process(int error) __attribute__((noreturn));
static void no_process(int error) {
    if (error != EAGAIN) fail("fork: %s", strerror(error));
    recordf('T', "the sandbox's process limit is used up by the agent's processes: the tests could not start");
    record('D', NULL, 0);
    _exit(0);
}

/* ---- the copy (--copy) ------------------------------------------------------------------------
 *
 * RSRT grades a claim on a copy of the sandbox, so nothing the tests write stays for the
 * agent, who goes on working after a rejected claim. The copy is copy-on-write, made in
 * this run's private mount namespace: each writable mount of the sandbox that holds
 * directories (its root, /dev, /dev/shm, a volume) becomes a kernel overlay whose lower
 * layer is that mount and whose upper layer is a directory on one fresh tmpfs (the
 * scratch); a writable file mount (/etc/hosts ...) becomes a copy on the scratch bound in
 * its place; everything else (proc, sysfs, devpts, read-only mounts, Docker's masks) is
 * bound as it is. Then the copy becomes this namespace's root (pivot_root) and the old
 * root is detached, so no path, `..` or chroot leads back to the sandbox's files. The
 * scratch lives as long as the namespace: the last process of the run takes it along.
 *
 * Why a process inside the sandbox's namespace does this and not the station from its
 * own: overlayfs takes a private clone of each layer's mount, which the kernel allows
 * only for mounts of the caller's namespace ("failed to clone lowerpath" through
 * /proc/PID/root, which mount(8) then retries read-only: "cannot mount read-only").
 * The scratch is made with fsopen/fsmount and attached on top of the old root, the one
 * place that exists in every sandbox and that nothing of the copy needs to see.
 *
 * Any step that fails is reported as a `C` record (the copy is unavailable here, why);
 * the engine then grades through a committed copy instead. */

#define MAX_MOUNTS 512
#define COPY_FILE_MAX (64L << 20)

static void copy_unavailable(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void copy_unavailable(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vrecordf('C', "", fmt, ap);
    va_end(ap);
    _exit(2);
}

/* A step the kernel refused (mount, overlay, pivot_root ...): when the error says this
 * host cannot do it at all (not "out of memory" or a path that moved), the record starts
 * with "host:", so the engine stops asking this host for copies. */
static void copy_refused(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void copy_refused(const char *fmt, ...) {
    int error = errno;
    int host_wide = error == EPERM || error == EINVAL || error == ENODEV || error == ENOSYS ||
                    error == EOPNOTSUPP || error == EACCES;
    va_list ap;
    va_start(ap, fmt);
    vrecordf('C', host_wide ? "host: " : "", fmt, ap);
    va_end(ap);
    _exit(2);
}

struct sub_mount {
    char path[MAX_PATH_LEN];
    char fstype[64];
    unsigned long flags;  /* MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC of the mount */
    int fd;               /* O_PATH, taken before anything is mounted */
    int skip;             /* overmounted at the same path: only the top one is seen */
};

static void unescape_mountinfo(char *s) {  /* "\040" and friends, in place */
    char *out = s;
    for (char *p = s; *p; p++) {
        if (p[0] == '\\' && p[1] >= '0' && p[1] <= '7' && p[2] >= '0' && p[2] <= '7' && p[3] >= '0' && p[3] <= '7') {
            *out++ = (char)(((p[1] - '0') << 6) | ((p[2] - '0') << 3) | (p[3] - '0'));
            p += 3;
        } else {
            *out++ = *p;
        }
    }
    *out = 0;
}

static unsigned long mount_flags_of(const char *options) {
    unsigned long flags = 0;
    char copy[512];
    snprintf(copy, sizeof copy, "%s", options);
    char *save = NULL;
    for (char *o = strtok_r(copy, ",", &save); o; o = strtok_r(NULL, ",", &save)) {
        if (strcmp(o, "ro") == 0) flags |= MS_RDONLY;
        else if (strcmp(o, "nosuid") == 0) flags |= MS_NOSUID;
        else if (strcmp(o, "nodev") == 0) flags |= MS_NODEV;
        else if (strcmp(o, "noexec") == 0) flags |= MS_NOEXEC;
    }
    return flags;
}

/* Filesystems that hold the sandbox's data, copied on write; the rest (proc, sysfs,
 * devpts, mqueue, cgroup ...) are views of the kernel, bound as they are. */
static int holds_data(const char *fstype) {
    static const char *const kinds[] = {"tmpfs", "ext2", "ext3", "ext4", "xfs", "btrfs", "zfs",
                                        "overlay", "fuseblk", "vfat", "exfat", "ramfs", "9p",
                                        "virtiofs", "nfs", "nfs4", "cifs", "f2fs", "squashfs"};
    if (strncmp(fstype, "fuse.", 5) == 0) return 1;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(fstype, kinds[i]) == 0) return 1;
    return 0;
}

static int sys_fsopen(const char *fs, unsigned flags) { return (int)syscall(__NR_fsopen, fs, flags); }
static int sys_fsconfig(int fd, unsigned cmd, const char *key, const void *value, int aux) {
    return (int)syscall(__NR_fsconfig, fd, cmd, key, value, aux);
}
static int sys_fsmount(int fd, unsigned flags, unsigned attrs) { return (int)syscall(__NR_fsmount, fd, flags, attrs); }
static int sys_move_mount(int from, const char *from_path, int to, const char *to_path, unsigned flags) {
    return (int)syscall(__NR_move_mount, from, from_path, to, to_path, flags);
}
#define RSR_FSCONFIG_SET_STRING 1
#define RSR_FSCONFIG_CMD_CREATE 6
#define RSR_FSOPEN_CLOEXEC 1
#define RSR_FSMOUNT_CLOEXEC 1
#define RSR_MOVE_MOUNT_F_EMPTY_PATH 4

static void overlay_onto(const char *target, int lower_fd, int scratch, int index, unsigned long flags) {
    char upper[32], work[32], options[256];
    snprintf(upper, sizeof upper, "u%d", index);
    snprintf(work, sizeof work, "w%d", index);
    if (mkdirat(scratch, upper, 0755) != 0 || mkdirat(scratch, work, 0700) != 0)
        copy_unavailable("mkdir on the scratch tmpfs: %s", strerror(errno));
    snprintf(options, sizeof options,
             "lowerdir=/proc/self/fd/%d,upperdir=/proc/self/fd/%d/%s,workdir=/proc/self/fd/%d/%s",
             lower_fd, scratch, upper, scratch, work);
    if (mount("rsr-verify-copy", target, "overlay", flags & (MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC), options) != 0)
        copy_refused("overlay on %s: %s", target, strerror(errno));
}

/* A writable file mount: a copy of the file on the scratch, bound in its place. */
static void file_copy_onto(const char *target, const struct sub_mount *m, int scratch, int index) {
    char name[32], source[64];
    snprintf(name, sizeof name, "f%d", index);
    char self[64];  /* an O_PATH descriptor reopens through /proc */
    snprintf(self, sizeof self, "/proc/self/fd/%d", m->fd);
    int in = open(self, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (in < 0 || fstat(in, &st) != 0) copy_unavailable("open file mount %s: %s", m->path, strerror(errno));
    if (st.st_size > COPY_FILE_MAX) copy_unavailable("file mount %s is over %ld bytes", m->path, COPY_FILE_MAX);
    int out = openat(scratch, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, st.st_mode & 07777);
    if (out < 0) copy_unavailable("copy of %s on the scratch: %s", m->path, strerror(errno));
    static char data[1 << 16];
    for (;;) {
        ssize_t n = read(in, data, sizeof data);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) copy_unavailable("read %s: %s", m->path, strerror(errno));
        if (n == 0) break;
        write_all(out, data, (size_t)n);
    }
    if (fchown(out, st.st_uid, st.st_gid) != 0 || fchmod(out, st.st_mode & 07777) != 0)
        copy_unavailable("owner and mode of the copy of %s: %s", m->path, strerror(errno));
    close(in);
    close(out);
    snprintf(source, sizeof source, "/proc/self/fd/%d/%s", scratch, name);
    if (mount(source, target, NULL, MS_BIND, NULL) != 0)
        copy_refused("bind the copy of %s: %s", m->path, strerror(errno));
    unsigned long keep = m->flags & (MS_NOSUID | MS_NODEV | MS_NOEXEC);
    if (keep && mount(NULL, target, NULL, MS_REMOUNT | MS_BIND | keep, NULL) != 0)
        copy_refused("flags of the copy of %s: %s", m->path, strerror(errno));
}

static void enter_copy(void) {
    static char info[1 << 20];
    ssize_t n = read_file("/proc/self/mountinfo", info, sizeof info - 1);
    if (n <= 0) copy_unavailable("cannot read /proc/self/mountinfo");
    info[n] = 0;
    static struct sub_mount subs[MAX_MOUNTS];
    int n_subs = 0, have_root = 0;
    unsigned long root_flags = 0;
    char *save = NULL;
    for (char *line = strtok_r(info, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char point[MAX_PATH_LEN], options[512], fstype[64];
        char *sep = strstr(line, " - ");
        if (!sep || sscanf(line, "%*d %*d %*u:%*u %*s %4095s %511s", point, options) != 2 ||
            sscanf(sep + 3, "%63s", fstype) != 1)
            copy_unavailable("unreadable mountinfo line: %.200s", line);
        unescape_mountinfo(point);
        if (strcmp(point, "/") == 0) {
            if (have_root) copy_unavailable("the sandbox's root is mounted over");
            have_root = 1;
            root_flags = mount_flags_of(options);
            continue;
        }
        if (n_subs == MAX_MOUNTS) copy_unavailable("the sandbox has over %d mounts", MAX_MOUNTS);
        struct sub_mount *m = &subs[n_subs++];
        snprintf(m->path, sizeof m->path, "%s", point);
        snprintf(m->fstype, sizeof m->fstype, "%s", fstype);
        m->flags = mount_flags_of(options);
        m->skip = 0;
        for (int j = 0; j < n_subs - 1; j++)
            if (strcmp(subs[j].path, m->path) == 0) subs[j].skip = 1;
    }
    if (!have_root) copy_unavailable("no root mount in mountinfo");
    int root_fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root_fd < 0) copy_unavailable("open /: %s", strerror(errno));
    for (int i = 0; i < n_subs; i++) {
        subs[i].fd = subs[i].skip ? -1 : open(subs[i].path, O_PATH | O_CLOEXEC);
        if (!subs[i].skip && subs[i].fd < 0) subs[i].skip = 1;  /* gone meanwhile: nothing to copy */
    }

    int config = sys_fsopen("tmpfs", RSR_FSOPEN_CLOEXEC);
    if (config < 0) copy_refused("fsopen tmpfs: %s", strerror(errno));
    if (sys_fsconfig(config, RSR_FSCONFIG_SET_STRING, "mode", "0700", 0) != 0 ||
        sys_fsconfig(config, RSR_FSCONFIG_CMD_CREATE, NULL, NULL, 0) != 0)
        copy_refused("create the scratch tmpfs: %s", strerror(errno));
    int scratch = sys_fsmount(config, RSR_FSMOUNT_CLOEXEC, 0);
    if (scratch < 0) copy_refused("fsmount the scratch tmpfs: %s", strerror(errno));
    close(config);
    if (sys_move_mount(scratch, "", root_fd, "", RSR_MOVE_MOUNT_F_EMPTY_PATH | 0x40 /* T_EMPTY_PATH */) != 0)
        copy_refused("attach the scratch tmpfs: %s", strerror(errno));
    if (mkdirat(scratch, "r", 0755) != 0) copy_unavailable("mkdir on the scratch tmpfs: %s", strerror(errno));

    char base[64], target[MAX_PATH_LEN + 64];
    snprintf(base, sizeof base, "/proc/self/fd/%d/r", scratch);
    overlay_onto(base, root_fd, scratch, 0, root_flags);
    for (int i = 0; i < n_subs; i++) {
        struct sub_mount *m = &subs[i];
        if (m->skip) continue;
        snprintf(target, sizeof target, "%s%s", base, m->path);
        struct stat st;
        if (fstat(m->fd, &st) != 0) copy_unavailable("stat %s: %s", m->path, strerror(errno));
        int writable_data = !(m->flags & MS_RDONLY) && holds_data(m->fstype);
        if (writable_data && S_ISDIR(st.st_mode)) {
            overlay_onto(target, m->fd, scratch, i + 1, m->flags);
        } else if (writable_data && S_ISREG(st.st_mode)) {
            file_copy_onto(target, m, scratch, i + 1);
        } else {
            char source[64];
            snprintf(source, sizeof source, "/proc/self/fd/%d", m->fd);
            if (mount(source, target, NULL, MS_BIND, NULL) != 0)
                copy_refused("bind %s (%s): %s", m->path, m->fstype, strerror(errno));
        }
    }
    for (int i = 0; i < n_subs; i++) if (subs[i].fd >= 0) close(subs[i].fd);
    int new_root = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (new_root < 0 || fchdir(new_root) != 0) copy_unavailable("enter the copy: %s", strerror(errno));
    if (syscall(__NR_pivot_root, ".", ".") != 0) copy_refused("pivot_root into the copy: %s", strerror(errno));
    /* pivot_root put the old root, and the scratch stacked on it, on top of the copy:
     * detach from the top until the copy is the only mount at "/", which mountinfo
     * (listing stacked mounts too) confirms. Left attached, a chroot would lead back. */
    for (int round = 0;; round++) {
        n = read_file("/proc/self/mountinfo", info, sizeof info - 1);
        if (n <= 0) copy_unavailable("cannot read /proc/self/mountinfo in the copy");
        info[n] = 0;
        int at_root = 0, copy_at_root = 0;
        for (char *line = strtok_r(info, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            char point[MAX_PATH_LEN], source[64] = "";
            char *sep = strstr(line, " - ");
            if (!sep || sscanf(line, "%*d %*d %*u:%*u %*s %4095s", point) != 1) continue;
            if (strcmp(point, "/") != 0) continue;
            at_root++;
            copy_at_root += sscanf(sep + 3, "%*s %63s", source) == 1 && strcmp(source, "rsr-verify-copy") == 0;
        }
        if (at_root == 1 && copy_at_root == 1) break;
        if (round == 4) copy_unavailable("the sandbox's root stays mounted over the copy (%d mounts at /)", at_root);
        if (umount2(".", MNT_DETACH) != 0) copy_refused("detach the sandbox's root: %s", strerror(errno));
    }
    if (chdir("/") != 0) copy_unavailable("chdir / in the copy: %s", strerror(errno));
    close(new_root);
    close(root_fd);
    close(scratch);
}

/* ---- the user ------------------------------------------------------------------------------ */

static int resolve_user(const char *spec, uid_t *uid, gid_t *gid) {
    /* "NAME" or "UID" or "UID:GID" or "NAME:GROUP", looked up in the sandbox's own
     * /etc/passwd and /etc/group by this program (no NSS module of the sandbox runs). */
    char user[256], group[256] = "";
    snprintf(user, sizeof user, "%s", spec);
    char *colon = strchr(user, ':');
    if (colon) { *colon = 0; snprintf(group, sizeof group, "%s", colon + 1); }
    char *end;
    int have_gid = 0;
    unsigned long n = strtoul(user, &end, 10);
    if (*user && !*end) {
        *uid = (uid_t)n;
        *gid = (gid_t)n;
    } else {
        FILE *f = fopen("/etc/passwd", "re");
        if (!f) return -1;
        struct passwd *pw;
        int found = 0;
        while ((pw = fgetpwent(f)) != NULL) {
            if (strcmp(pw->pw_name, user) == 0) { *uid = pw->pw_uid; *gid = pw->pw_gid; found = 1; break; }
        }
        fclose(f);
        if (!found) return -1;
        have_gid = 1;
    }
    (void)have_gid;
    if (*group) {
        unsigned long g = strtoul(group, &end, 10);
        if (!*end) { *gid = (gid_t)g; return 0; }
        FILE *f = fopen("/etc/group", "re");
        if (!f) return -1;
        struct group *gr;
        int found = 0;
        while ((gr = fgetgrent(f)) != NULL) {
            if (strcmp(gr->gr_name, group) == 0) { *gid = gr->gr_gid; found = 1; break; }
        }
        fclose(f);
        if (!found) return -1;
    }
    return 0;
}

/* ---- main ------------------------------------------------------------------------------------ */

static int usage(void) {
    dprintf(2, "usage: rsr-verify idle | rsr-verify run PID --cgroup-root DIR [--tmpfs PATH]... "
               "[--copy] [--timeout S] [--kill-after S] [--workdir DIR] [--user SPEC] [--env K=V]... "
               "[--max-files N] [--keep-bytes N] -- COMMAND\n");
    return 2;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    double started = now_s();
    if (argc >= 2 && strcmp(argv[1], "idle") == 0) {
        for (;;) pause();  /* the verifier container's main process */
    }
    if (argc < 3 || strcmp(argv[1], "run") != 0) return usage();
    signal(SIGPIPE, SIG_IGN);
    pid_t target = (pid_t)atoi(argv[2]);
    const char *cgroup_root = NULL, *workdir = "/", *user = NULL, *command = NULL;
    struct private_mount mounts[MAX_TMPFS];
    int n_mounts = 0, copy = 0;
    double timeout_s = 600, kill_after_s = 5;
    char *extra_env[MAX_ENV];
    int n_extra = 0;
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--") == 0) { command = v; break; }
        if (strcmp(a, "--copy") == 0) { copy = 1; continue; }
        if (!v) return usage();
        if (strcmp(a, "--cgroup-root") == 0) cgroup_root = v;
        else if (strcmp(a, "--tmpfs") == 0 && n_mounts < MAX_TMPFS) mounts[n_mounts++].path = v;
        else if (strcmp(a, "--timeout") == 0) timeout_s = atof(v);
        else if (strcmp(a, "--kill-after") == 0) kill_after_s = atof(v);
        else if (strcmp(a, "--workdir") == 0) workdir = v;
        else if (strcmp(a, "--user") == 0) user = v;
        else if (strcmp(a, "--env") == 0 && n_extra < MAX_ENV) extra_env[n_extra++] = (char *)v;
        else if (strcmp(a, "--max-files") == 0) max_files = atol(v);
        else if (strcmp(a, "--keep-bytes") == 0) keep_bytes = atol(v);
        else return usage();
        i++;
    }
    if (target <= 1 || !command || n_mounts == 0) return usage();

    /* The sandbox as its processes see it: capabilities, environment. */
    uint64_t sandbox_caps = bounding_of(target);
    int top = last_cap();
    int extra = -1;
    static const int harmless[] = {CAP_WAKE_ALARM, CAP_BLOCK_SUSPEND, CAP_AUDIT_READ, CAP_SYSLOG};
    for (size_t i = 0; i < sizeof harmless / sizeof harmless[0]; i++) {
        if (harmless[i] <= top && !(sandbox_caps & (1ULL << harmless[i]))) { extra = harmless[i]; break; }
    }
    if (extra < 0) fail("the sandbox holds every capability this program could add: its processes could reach the tests");
    uint64_t own_caps = bounding_of(getpid());
    if (!(own_caps & (1ULL << extra)))
        fail("this verifier container lacks capability %d to give the tests", extra);
    uint64_t test_caps = (sandbox_caps & own_caps) | (1ULL << extra);
    static char environ_buf[1 << 17];
    char env_path[64];
    snprintf(env_path, sizeof env_path, "/proc/%d/environ", (int)target);
    ssize_t env_len = read_file(env_path, environ_buf, sizeof environ_buf - 1);
    if (env_len < 0) fail("cannot read %s: %s", env_path, strerror(errno));
    environ_buf[env_len] = 0;
    char *envp[2 * MAX_ENV + 1];
    int n_env = 0;
    for (char *p = environ_buf; p < environ_buf + env_len && n_env < MAX_ENV; p += strlen(p) + 1) {
        if (!*p) continue;
        int replaced = 0;
        for (int j = 0; j < n_extra; j++) {
            size_t key = strcspn(extra_env[j], "=");
            if (strncmp(p, extra_env[j], key) == 0 && p[key] == '=') { replaced = 1; break; }
        }
        if (!replaced) envp[n_env++] = p;
    }
    for (int j = 0; j < n_extra; j++) envp[n_env++] = extra_env[j];
    envp[n_env] = NULL;

    if (cgroup_root) join_cgroups(target, cgroup_root);
    join_namespaces(target);
    /* setns(CLONE_NEWPID) moves only children: the rest runs in a child, inside the
     * sandbox's pid namespace, where its /proc/self and the pids it kills are its own. */
    pid_t worker = fork();
    if (worker < 0) no_process(errno);
    if (worker > 0) {
        int worker_status = 0;
        while (waitpid(worker, &worker_status, 0) < 0 && errno == EINTR) {}
        return WIFEXITED(worker_status) ? WEXITSTATUS(worker_status) : 3;
    }
    if (unshare(CLONE_NEWNS) != 0) fail("unshare a mount namespace: %s", strerror(errno));
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) fail("make / private: %s", strerror(errno));
    if (copy) enter_copy();

    uid_t uid = 0;
    gid_t gid = 0;
    if (user && resolve_user(user, &uid, &gid) != 0) fail("verifier user %s is not in the sandbox's /etc/passwd", user);
    char tag[32];
    snprintf(tag, sizeof tag, "%d-%ld", (int)getpid(), (long)time(NULL));
    for (int i = 0; i < n_mounts; i++) {
        char unique[64];
        snprintf(unique, sizeof unique, "%s-%d", tag, i);
        mount_tmpfs(&mounts[i], unique, 0, 0);
    }
    unpack_bundle(mounts[0].root);
    /* The last tmpfs (the verifier's logs) belongs to the verifier's user, as Harbor's
     * host-mounted log directory is writable by it. */
    if (user && fchown(mounts[n_mounts - 1].root, uid, gid) != 0)
        recordf('N', "chown %s: %s", mounts[n_mounts - 1].path, strerror(errno));
    recordf('S', "%d", extra);

    double tests_started = now_s();
    pid_t child = fork();
    if (child < 0) no_process(errno);
    if (child == 0) {
        setpgid(0, 0);
        dup2(2, 1);
        if (chdir(workdir) != 0) {
            dprintf(2, "rsr-verify: cannot enter working directory %s: %s\n", workdir, strerror(errno));
            _exit(126);
        }
        for (int cap = 0; cap <= top; cap++) {
            if (!(test_caps & (1ULL << cap))) prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        if (user && uid != 0) {
            prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0);
            if (setgroups(1, &gid) != 0 || setgid(gid) != 0 || setuid(uid) != 0) {
                dprintf(2, "rsr-verify: cannot become %s: %s\n", user, strerror(errno));
                _exit(126);
            }
            uint64_t keep = 1ULL << extra;
            set_caps(keep, keep);
            if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, extra, 0, 0) != 0) {
                dprintf(2, "rsr-verify: ambient capability: %s\n", strerror(errno));
                _exit(126);
            }
        } else {
            set_caps(test_caps, 0);
        }
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);  /* as the sandbox's own processes run */
        deny_syscalls();
        char *args[] = {"bash", "-c", (char *)command, NULL};
        execve("/bin/bash", args, envp);
        execve("/usr/bin/bash", args, envp);
        dprintf(2, "rsr-verify: cannot run /bin/bash in the sandbox: %s\n", strerror(errno));
        _exit(127);
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval timer = {{0, 0}, {(time_t)timeout_s, (suseconds_t)((timeout_s - (time_t)timeout_s) * 1e6)}};
    if (timer.it_value.tv_sec == 0 && timer.it_value.tv_usec == 0) timer.it_value.tv_usec = 1000;
    setitimer(ITIMER_REAL, &timer, NULL);
    int status = 0, timed_out = 0;
    for (;;) {
        pid_t done = waitpid(child, &status, 0);
        if (done == child) break;
        if (done < 0 && errno == EINTR && alarmed) {
            alarmed = 0;
            if (!timed_out) {
                timed_out = 1;
                kill(-child, SIGTERM);
                struct itimerval grace = {{0, 0}, {(time_t)kill_after_s, 1000}};
                setitimer(ITIMER_REAL, &grace, NULL);
            } else {
                kill(-child, SIGKILL);
            }
        } else if (done < 0 && errno != EINTR) {
            fail("waitpid: %s", strerror(errno));
        }
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    double tests_ended = now_s();
    kill_namespace();

    for (int i = 0; i < n_mounts; i++) {
        struct stat st;
        if (stat(mounts[i].path, &st) != 0 || st.st_dev != mounts[i].dev)
            recordf('T', "%s was moved or replaced while the tests ran", mounts[i].path);
    }
    /* Leave the sandbox as it was: the empty directories made for the mounts go
     * (after the mounts, in this private namespace only) unless something was put there. */
    for (int i = n_mounts - 1; i >= 0; i--) umount2(mounts[i].path, MNT_DETACH);
    for (int i = n_created - 1; i >= 0; i--) rmdir(created[i]);
    if (timed_out) recordf('X', "timeout");
    else if (WIFSIGNALED(status)) recordf('X', "signal %d", WTERMSIG(status));
    else recordf('X', "exit %d", WEXITSTATUS(status));
    send_tree(mounts[n_mounts - 1].root, "", 1);
    recordf('Q', "%.6f %.6f %.6f", tests_started - started, tests_ended - tests_started, now_s() - tests_ended);
    record('D', NULL, 0);
    return 0;
}
