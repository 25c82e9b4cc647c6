/* See numabind.h.  Deliberately tiny: wrappers and loops of them, no policy, errno returned as -errno. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <errno.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "numabind.h"

#ifndef NB_VERSION
#error "NB_VERSION (the package version, a C string) is not defined: build through build_ffi.py"
#endif

/* numabind.h's memory-policy numbers are the kernel's (those every <linux/mempolicy.h> has) */
#if defined(__has_include)
#if __has_include(<linux/mempolicy.h>)
#include <linux/mempolicy.h>
#define NB_SAME(x) ((long)NB_##x == (long)x)
_Static_assert(NB_SAME(MPOL_DEFAULT) && NB_SAME(MPOL_PREFERRED) && NB_SAME(MPOL_BIND) && NB_SAME(MPOL_INTERLEAVE) &&
               NB_SAME(MPOL_LOCAL), "MPOL_* modes");
_Static_assert(NB_SAME(MPOL_F_STATIC_NODES) && NB_SAME(MPOL_F_RELATIVE_NODES) && NB_SAME(MPOL_F_NODE) &&
               NB_SAME(MPOL_F_ADDR) && NB_SAME(MPOL_MF_STRICT) && NB_SAME(MPOL_MF_MOVE) && NB_SAME(MPOL_MF_MOVE_ALL),
               "MPOL_* flags");
#ifdef MPOL_F_NUMA_BALANCING
_Static_assert(NB_SAME(MPOL_F_NUMA_BALANCING), "MPOL_F_NUMA_BALANCING");
#endif
#undef NB_SAME
#endif
#endif

const char *nb_version(void)
{
    return NB_VERSION;
}

#define RET(expr) do { long r_ = (long)(expr); return r_ < 0 ? -(long)errno : r_; } while (0)

/* ---- raw system calls ---------------------------------------------------- */
long nb_sys_set_mempolicy(int mode, const unsigned long *nodemask, unsigned long maxnode)
{
    RET(syscall(SYS_set_mempolicy, mode, nodemask, maxnode));
}

long nb_sys_get_mempolicy(int *mode, unsigned long *nodemask, unsigned long maxnode,
                          void *addr, unsigned long flags)
{
    RET(syscall(SYS_get_mempolicy, mode, nodemask, maxnode, addr, flags));
}

long nb_sys_migrate_pages(int pid, unsigned long maxnode, const unsigned long *old_nodes,
                          const unsigned long *new_nodes)
{
    RET(syscall(SYS_migrate_pages, pid, maxnode, old_nodes, new_nodes));
}

long nb_sys_move_pages(int pid, unsigned long count, void **pages, const int *nodes,
                       int *status, int flags)
{
    RET(syscall(SYS_move_pages, pid, count, pages, nodes, status, flags));
}

long nb_sys_mbind(void *addr, unsigned long len, int mode, const unsigned long *nodemask, unsigned long maxnode,
                  unsigned int flags)
{
    RET(syscall(SYS_mbind, addr, len, mode, nodemask, maxnode, flags));
}

long nb_sys_sched_setaffinity(int tid, size_t size, const unsigned long *mask)
{
    RET(syscall(SYS_sched_setaffinity, tid, size, mask));
}

long nb_sys_sched_getaffinity(int tid, size_t size, unsigned long *mask)
{
    /* The raw call returns the number of bytes the kernel wrote. */
    RET(syscall(SYS_sched_getaffinity, tid, size, mask));
}

/* ---- libnuma via dlopen -------------------------------------------------- */
struct nb_bitmask { unsigned long size; unsigned long *maskp; };  /* libnuma's struct bitmask */

static void *numa_handle;
static int (*p_numa_available)(void);
static long (*p_set_mempolicy)(int, const unsigned long *, unsigned long);
static long (*p_get_mempolicy)(int *, unsigned long *, unsigned long, void *, unsigned long);
static long (*p_migrate_pages)(int, unsigned long, const unsigned long *, const unsigned long *);
static long (*p_move_pages)(int, unsigned long, void **, const int *, int *, int);
static long (*p_mbind)(void *, unsigned long, int, const unsigned long *, unsigned long, unsigned);
static int (*p_sched_setaffinity)(int, struct nb_bitmask *);
static int (*p_sched_getaffinity)(int, struct nb_bitmask *);

int nb_numa_load(const char *soname, char *errbuf, size_t errlen)
{
    if (numa_handle)
        return 0;
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(errbuf, errlen, "%s", dlerror());
        return -1;
    }
#define SYM(var, name) do { *(void **)(&var) = dlsym(h, name); \
        if (!var) { snprintf(errbuf, errlen, "%s lacks symbol %s", soname, name); dlclose(h); return -1; } } while (0)
    SYM(p_numa_available, "numa_available");
    SYM(p_set_mempolicy, "set_mempolicy");
    SYM(p_get_mempolicy, "get_mempolicy");
    SYM(p_migrate_pages, "migrate_pages");
    SYM(p_move_pages, "move_pages");
    SYM(p_mbind, "mbind");
    SYM(p_sched_setaffinity, "numa_sched_setaffinity");
    SYM(p_sched_getaffinity, "numa_sched_getaffinity");
#undef SYM
    numa_handle = h;
    return 0;
}

int nb_numa_available(void) { return numa_handle ? p_numa_available() : -1; }

#define NEED_NUMA() do { if (!numa_handle) return -ENOSYS; } while (0)

long nb_numa_set_mempolicy(int mode, const unsigned long *nodemask, unsigned long maxnode)
{
    NEED_NUMA();
    RET(p_set_mempolicy(mode, nodemask, maxnode));
}

long nb_numa_get_mempolicy(int *mode, unsigned long *nodemask, unsigned long maxnode,
                           void *addr, unsigned long flags)
{
    NEED_NUMA();
    RET(p_get_mempolicy(mode, nodemask, maxnode, addr, flags));
}

long nb_numa_migrate_pages(int pid, unsigned long maxnode, const unsigned long *old_nodes,
                           const unsigned long *new_nodes)
{
    NEED_NUMA();
    RET(p_migrate_pages(pid, maxnode, old_nodes, new_nodes));
}

long nb_numa_move_pages(int pid, unsigned long count, void **pages, const int *nodes,
                        int *status, int flags)
{
    NEED_NUMA();
    RET(p_move_pages(pid, count, pages, nodes, status, flags));
}

long nb_numa_mbind(void *addr, unsigned long len, int mode, const unsigned long *nodemask, unsigned long maxnode,
                   unsigned int flags)
{
    NEED_NUMA();
    RET(p_mbind(addr, len, mode, nodemask, maxnode, flags));
}

long nb_numa_sched_setaffinity(int tid, unsigned long nbits, unsigned long *mask)
{
    NEED_NUMA();
    struct nb_bitmask bm = { nbits, mask };
    RET(p_sched_setaffinity(tid, &bm));
}

long nb_numa_sched_getaffinity(int tid, unsigned long nbits, unsigned long *mask)
{
    NEED_NUMA();
    struct nb_bitmask bm = { nbits, mask };
    RET(p_sched_getaffinity(tid, &bm));
}

/* ---- directories ---------------------------------------------------------- */
struct nb_dirent64 {             /* the kernel's struct linux_dirent64 */
    unsigned long long d_ino;
    long long d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

/* ---- small files ---------------------------------------------------------- */
/* nb_read_file's read of `path`, relative to the directory `dirfd` (AT_FDCWD: to the working directory). */
static long read_at(int dirfd, const char *path, char *buf, size_t cap)
{
    int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return -(long)errno;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        long e = -(long)errno;
        close(fd);
        return e;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return NB_NOT_REGULAR - (long)((st.st_mode & S_IFMT) >> 12);
    }
    size_t size = 0;
    while (size < cap) {
        size_t want = cap - size < 65536 ? cap - size : 65536;
        ssize_t got = read(fd, buf + size, want);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            long e = -(long)errno;
            close(fd);
            return e;
        }
        if (got == 0)
            break;
        size += (size_t)got;
        if ((size_t)got < want && st.st_size > 0)
            break;
    }
    close(fd);
    return (long)size;
}

long nb_read_file(const char *path, char *buf, size_t cap)
{
    return read_at(AT_FDCWD, path, buf, cap);
}

/* The entries `prefix`N of the directory `path` (relative to dirfd), as nb_list_numbered lists them. */
static long list_at(int dirfd, const char *path, const char *prefix, int *ids, size_t cap)
{
    int fd = openat(dirfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -(long)errno;
    size_t plen = strlen(prefix), count = 0;
    char buf[16384] __attribute__((aligned(8)));
    for (;;) {
        long nread = syscall(SYS_getdents64, fd, buf, sizeof buf);
        if (nread < 0) {
            long e = -(long)errno;
            close(fd);
            return e;
        }
        if (nread == 0)
            break;
        for (long pos = 0; pos < nread;) {
            struct nb_dirent64 *d = (struct nb_dirent64 *)(buf + pos);
            pos += d->d_reclen;
            if (strncmp(d->d_name, prefix, plen) != 0)
                continue;
            const char *p = d->d_name + plen;
            size_t digits = strspn(p, "0123456789");
            if (digits == 0 || digits > 9 || p[digits] != '\0' || (p[0] == '0' && digits > 1))
                continue;
            if (count < cap) {
                int id = 0;
                for (size_t k = 0; k < digits; k++)
                    id = id * 10 + (p[k] - '0');
                ids[count] = id;
            }
            count++;
        }
    }
    close(fd);
    return (long)count;
}

long nb_list_numbered(const char *path, const char *prefix, int *ids, size_t cap)
{
    return list_at(AT_FDCWD, path, prefix, ids, cap);
}

/* One file of nb_read_tree: read after the `*used` bytes of buf, its span written to span[0..1]. */
static void tree_read(int dirfd, long opened, const char *name, char *buf, size_t cap, size_t slot, size_t *used,
                      long *span)
{
    size_t room = cap - *used < slot ? cap - *used : slot;
    long n = opened < 0 ? opened : room == 0 ? NB_RETRY : read_at(dirfd, name, buf + *used, room);
    span[0] = (long)*used;
    if (n >= 0 && (size_t)n == room) {
        span[1] = NB_RETRY;                  /* filled its room: maybe more to read, so read it alone */
    } else if (n >= 0) {
        span[1] = (long)strnlen(buf + *used, (size_t)n);
        *used += (size_t)n;
    } else {
        span[1] = n;
    }
}

long nb_read_tree(const char *dir, unsigned long long skip, const struct nb_tree *what, const struct nb_tree_room *room)
{
    int dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    long opened = dirfd < 0 ? -(long)errno : 0;
    char *buf = room->buf;
    size_t used = 0, k = 0, cap = room->cap, slot = room->slot, files = room->files;
    int *ids = room->ids;
    long *out = room->out;
    const char *names = what->names;
    for (size_t i = 0; i < what->count && k < files; i++, k++, names += strlen(names) + 1)
        tree_read(dirfd, opened, names, buf, cap, slot, &used, out + 1 + 2 * k);
    long listed = opened < 0 ? opened : list_at(dirfd, what->sub, what->prefix, ids, room->idcap);
    for (long i = 0; i < listed && (size_t)listed <= room->idcap && k < files; i++) {
        if (ids[i] < 64 && (skip >> ids[i]) & 1)
            continue;
        const char *name = what->each;
        for (size_t j = 0; j < what->per && k < files; j++, k++, name += strlen(name) + 1) {
            char path[4096];
            int len = snprintf(path, sizeof path, "%s/%s%d/%s", what->sub, what->prefix, ids[i], name);
            if (len < 0 || (size_t)len >= sizeof path) {
                out[1 + 2 * k] = (long)used;
                out[2 + 2 * k] = NB_RETRY;   /* too long a path for here: read it alone */
            } else {
                tree_read(dirfd, opened, path, buf, cap, slot, &used, out + 1 + 2 * k);
            }
        }
    }
    if (dirfd >= 0)
        close(dirfd);
    out[0] = (long)used;
    return listed;
}

/* ---- the running process ------------------------------------------------- */
/* The cached /proc/self/task descriptor: trusted only while fstat still shows the directory it was opened
 * on (a descriptor closed behind our back and reused is never read), and only while its listing holds the
 * calling thread (a child forked without the atfork handler, by a raw clone or glibc's _Fork, inherits the
 * descriptor of its parent's directory, which lists the parent's threads, never the child's). */
static pthread_mutex_t task_lock = PTHREAD_MUTEX_INITIALIZER;
static int task_fd = -1;
static dev_t task_dev;
static ino_t task_ino;
static pid_t task_pid;        /* the process that opened task_fd */
static int atfork_done;

static void task_after_fork_child(void)
{
    /* The only thread of the new process: the parent's lock state and descriptor are not ours. */
    pthread_mutex_init(&task_lock, NULL);
    if (task_fd >= 0) {
        struct stat st;
        if (fstat(task_fd, &st) == 0 && st.st_dev == task_dev && st.st_ino == task_ino)
            close(task_fd);
        task_fd = -1;
    }
}

static int task_open(void)
{
    return open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/* Reads the directory open on fd on from its offset: the ids into tids (cap of them; the count is returned even
 * past it), *last the id read last (unchanged when none); `first`, when listed, is put at index 0. */
static long task_ids(int fd, int first, int *tids, size_t cap, int *last)
{
    char buf[16384] __attribute__((aligned(8)));
    size_t count = 0;
    for (;;) {
        long nread = syscall(SYS_getdents64, fd, buf, sizeof buf);
        if (nread < 0)
            return -(long)errno;
        if (nread == 0)
            break;
        for (long pos = 0; pos < nread;) {
            struct nb_dirent64 *d = (struct nb_dirent64 *)(buf + pos);
            pos += d->d_reclen;
            const char *p = d->d_name;
            if (*p < '0' || *p > '9')
                continue;                       /* "." and ".." */
            long tid = 0;
            for (; *p >= '0' && *p <= '9' && tid <= 0x3fffffff; p++)
                tid = tid * 10 + (*p - '0');
            if (*p)
                continue;
            if (count < cap) {
                tids[count] = (int)tid;
                if ((int)tid == first && count > 0) {   /* the caller first */
                    tids[count] = tids[0];
                    tids[0] = (int)tid;
                }
            }
            *last = (int)tid;
            count++;
        }
    }
    return (long)count;
}

/* Lists the directory open on fd from its start. */
static long task_read(int fd, int first, int *tids, size_t cap, int *last)
{
    if (lseek(fd, 0, SEEK_SET) < 0)
        return -(long)errno;
    return task_ids(fd, first, tids, cap, last);
}

/* nb_task_list, and with `count_links` (NB_COUNT_LINKS) the caller alone without a listing when the cached
 * descriptor's link count says one thread (*counted = 1). *links: the directory's link count (0: not read);
 * *last: the id listed last, in the directory's order (the caller is moved to index 0). */
static long task_list(int first, int *tids, size_t cap, int count_links, int *links, int *counted, int *last)
{
    *links = 0;
    *counted = 0;
    if (first <= 0)
        first = (int)syscall(SYS_gettid);
    *last = first;
    if (pthread_mutex_trylock(&task_lock) != 0) {
        /* another thread is listing right now: use a descriptor of our own for this call */
        int fd = task_open();
        if (fd < 0)
            return -(long)errno;
        long r = task_read(fd, first, tids, cap, last);
        close(fd);
        return r;
    }
    if (!atfork_done) {
        pthread_atfork(NULL, NULL, task_after_fork_child);
        atfork_done = 1;
    }
    struct stat st;
    if (task_fd >= 0 && (fstat(task_fd, &st) != 0 || st.st_dev != task_dev || st.st_ino != task_ino))
        task_fd = -1;                           /* no longer ours: not ours to close either */
    long r;
    for (int fresh = 0;; fresh = 1) {
        if (task_fd < 0) {
            int fd = task_open();
            if (fd < 0 || fstat(fd, &st) != 0) {
                long e = -(long)errno;
                if (fd >= 0)
                    close(fd);
                pthread_mutex_unlock(&task_lock);
                return e;
            }
            task_fd = fd;
            task_dev = st.st_dev;
            task_ino = st.st_ino;
            task_pid = (pid_t)syscall(SYS_getpid);
            fresh = 1;
        }
        *links = st.st_nlink > 0x7fffffff ? 0x7fffffff : (int)st.st_nlink;
        /* One thread in the directory of this very process is the caller alone, and none can appear while it
         * is here. "This very process": the caller's id is the pid that opened the descriptor, so the caller is
         * that process's main thread (a child forked without the atfork handler has another id; were the
         * opener gone and its id reused, its directory would count no thread). Whether procfs's count
         * (2 + threads) is to be trusted at all is the caller's decision (NB_COUNT_LINKS). */
        if (count_links && st.st_nlink == 3 && first == task_pid) {
            if (cap > 0)
                tids[0] = first;
            *counted = 1;
            r = 1;
            break;
        }
        r = task_read(task_fd, first, tids, cap, last);
        /* With room for every thread, the caller not listed first means another process's directory (when it
         * is listed, task_read put it first): reopened, once. A listing too long for cap cannot tell: the
         * caller calls again with more room, and that call checks. */
        if (fresh || r > (long)cap || (r > 0 && tids[0] == first))
            break;
        close(task_fd);
        task_fd = -1;
    }
    pthread_mutex_unlock(&task_lock);
    return r;
}

long nb_task_list(int first, int *tids, size_t cap)
{
    int links, counted, last;
    return task_list(first, tids, cap, 0, &links, &counted, &last);
}

enum { NB_MOVED = -500000 };

/* The cached directory read on from the place of `last`, the thread a listing of `at` threads ended with (the k-th
 * thread of the directory's order is at offset 2 + k, after "." and ".."): a thread is appended to the list when it
 * starts, so `last` and then every thread started since it was listed, into tids (cap).  Returns how many were
 * read, `last` included; NB_MOVED when `last` is not at its place any more (a thread listed before it has gone, so
 * the places moved: only a listing from the start can tell) or the descriptor is not at hand; -errno. */
static long task_read_on(size_t at, int last, int *tids, size_t cap)
{
    if (at == 0 || pthread_mutex_trylock(&task_lock) != 0)
        return NB_MOVED;
    struct stat st;
    long r = NB_MOVED;
    int read_last;
    if (task_fd >= 0 && fstat(task_fd, &st) == 0 && st.st_dev == task_dev && st.st_ino == task_ino) {
        r = lseek(task_fd, (off_t)at + 1, SEEK_SET) < 0 ? -(long)errno : task_ids(task_fd, 0, tids, cap, &read_last);
        if (r == 0 || (r > 0 && cap > 0 && tids[0] != last))
            r = NB_MOVED;
    }
    pthread_mutex_unlock(&task_lock);
    return r;
}

typedef long (*nb_aff_fn)(int, size_t, unsigned long *);

static long sys_set(int tid, size_t words, unsigned long *mask)
{
    RET(syscall(SYS_sched_setaffinity, tid, words * sizeof(unsigned long), mask));
}

static long sys_get(int tid, size_t words, unsigned long *mask)
{
    RET(syscall(SYS_sched_getaffinity, tid, words * sizeof(unsigned long), mask));
}

static long numa_set(int tid, size_t words, unsigned long *mask)
{
    return nb_numa_sched_setaffinity(tid, words * 64, mask);
}

static long numa_get(int tid, size_t words, unsigned long *mask)
{
    return nb_numa_sched_getaffinity(tid, words * 64, mask);
}

/* The kernel writes only as many bytes as it has CPUs: clear the rest first. */
static long get_mask(nb_aff_fn get, int tid, size_t words, unsigned long *out)
{
    memset(out, 0, words * sizeof(unsigned long));
    long r = get(tid, words, out);
    return r < 0 ? r : 0;
}

/* Threads start..n-1 of the arrays (0 for a whole walk; more when threads found after it are added: then one
 * whose CPUs are already mask's is not left alone by NB_MATCHING, it was started by a thread bound already). */
static long affinity_many(nb_aff_fn set, nb_aff_fn get, const int *tids, size_t start, size_t n,
                          const unsigned long *mask, size_t words, int flags,
                          unsigned long *before, unsigned long *after, int *status)
{
    if (words == 0 || (n && (!tids || !before || !after || !status)))
        return -EINVAL;
    size_t bytes = words * sizeof(unsigned long);
    for (size_t i = start; i < n; i++)
        status[i] = NB_NOT_TRIED;
    for (size_t i = start; i < n; i++) {
        unsigned long *b = before + i * words, *a = after + i * words;
        long r = get_mask(get, tids[i], words, b);
        if (r == -ESRCH) {
            status[i] = NB_EXITED;
            continue;
        }
        if (r < 0) {
            status[i] = (int)r;
            if (i == 0 || (flags & NB_STOP_ON_ERROR))
                return (long)i + 1;
            continue;
        }
        if (!mask) {
            memcpy(a, b, bytes);
            status[i] = NB_UNCHANGED;
            continue;
        }
        if ((flags & NB_MATCHING) && i > 0 && memcmp(b, before, bytes) != 0 &&
            (start == 0 || memcmp(b, mask, bytes) != 0)) {
            memcpy(a, b, bytes);
            status[i] = NB_LEFT_ALONE;
            continue;
        }
        r = set(tids[i], words, (unsigned long *)mask);
        if (r == -ESRCH) {
            status[i] = NB_EXITED;
            continue;
        }
        if (r < 0) {
            memcpy(a, b, bytes);
            status[i] = (int)r;
            if (i == 0 || (flags & NB_STOP_ON_ERROR))
                return (long)i + 1;
            continue;
        }
        if (memcmp(b, mask, bytes) == 0) {    /* it held these CPUs: the set left them, its read is the read-back */
            memcpy(a, b, bytes);
        } else if ((r = get_mask(get, tids[i], words, a)) == -ESRCH) {
            status[i] = NB_EXITED;
            continue;
        } else if (r < 0) {                   /* set, but unreadable: an empty after[] shows it */
            memset(a, 0, bytes);
        }
        status[i] = (i > 0 && status[0] == NB_BOUND && memcmp(a, after, bytes) != 0) ? NB_DIFFERS : NB_BOUND;
        if (i == 0 && (flags & NB_CHECK_FIRST) && memcmp(a, mask, bytes) != 0)
            return 1;
    }
    return (long)n;
}

long nb_sys_affinity_many(const int *tids, size_t n, const unsigned long *mask, size_t words, int flags,
                          unsigned long *before, unsigned long *after, int *status)
{
    return affinity_many(sys_set, sys_get, tids, 0, n, mask, words, flags, before, after, status);
}

long nb_numa_affinity_many(const int *tids, size_t n, const unsigned long *mask, size_t words, int flags,
                           unsigned long *before, unsigned long *after, int *status)
{
    if (!numa_handle)
        return -ENOSYS;
    return affinity_many(numa_set, numa_get, tids, 0, n, mask, words, flags, before, after, status);
}

typedef long (*nb_getpol_fn)(int *, unsigned long *, unsigned long, void *, unsigned long);
typedef long (*nb_setpol_fn)(int, const unsigned long *, unsigned long);

static long swap_mempolicy(nb_getpol_fn get, nb_setpol_fn set, int mode, const unsigned long *mask,
                           unsigned long maxnode, int need_old, int *old_mode, unsigned long *old_mask,
                           int *now_mode, unsigned long *now_mask, int *errs)
{
    errs[0] = (int)get(old_mode, old_mask, maxnode, NULL, 0);
    errs[1] = errs[2] = 1;
    if (errs[0] < 0 && need_old)
        return 0;
    errs[1] = (int)set(mode, mask, mask ? maxnode : 0);
    if (errs[1] < 0)
        return 0;
    errs[2] = (int)get(now_mode, now_mask, maxnode, NULL, 0);
    return 0;
}

long nb_sys_swap_mempolicy(int mode, const unsigned long *mask, unsigned long maxnode, int need_old,
                           int *old_mode, unsigned long *old_mask, int *now_mode, unsigned long *now_mask, int *errs)
{
    return swap_mempolicy(nb_sys_get_mempolicy, nb_sys_set_mempolicy, mode, mask, maxnode, need_old,
                          old_mode, old_mask, now_mode, now_mask, errs);
}

long nb_numa_swap_mempolicy(int mode, const unsigned long *mask, unsigned long maxnode, int need_old,
                            int *old_mode, unsigned long *old_mask, int *now_mode, unsigned long *now_mask, int *errs)
{
    NEED_NUMA();
    return swap_mempolicy(nb_numa_get_mempolicy, nb_numa_set_mempolicy, mode, mask, maxnode, need_old,
                          old_mode, old_mask, now_mode, now_mask, errs);
}

/* Whether the node mask read back (node_words words) is exactly `want` (NULL: no nodes). */
static int same_nodes(const unsigned long *got, const unsigned long *want, size_t node_words)
{
    for (size_t i = 0; i < node_words; i++)
        if (got[i] != (want ? want[i] : 0))
            return 0;
    return 1;
}

/* ---- one bind at a time in this process ---------------------------------- */
/* Recursive: a signal handler that binds while its thread holds it must not deadlock. A forked child gets a
 * fresh one (the thread holding it in the parent does not exist there). */
static pthread_mutex_t bind_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pthread_once_t bind_once = PTHREAD_ONCE_INIT;
static int bind_gen;          /* times the lock was taken (under the lock) */

static void bind_after_fork_child(void)
{
    pthread_mutex_t fresh = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
    bind_lock = fresh;
}

static void bind_lock_init(void)
{
    pthread_atfork(NULL, NULL, bind_after_fork_child);
}

long nb_bind_hold(int *out)
{
    if (!out)
        return -EINVAL;
    if (out[NB_BIND_HELD])
        return 1;
    pthread_once(&bind_once, bind_lock_init);
    int r = pthread_mutex_lock(&bind_lock);
    if (r)
        return -(long)r;
    int quiet = out[NB_BIND_GEN] == bind_gen;
    out[NB_BIND_GEN] = ++bind_gen;
    out[NB_BIND_HELD] = 1;
    return quiet;
}

long nb_bind_release(int *out)
{
    if (!out || !out[NB_BIND_HELD])
        return 0;
    out[NB_BIND_HELD] = 0;
    return -(long)pthread_mutex_unlock(&bind_lock);
}

/* The ids of tids[n..n+m) (a listing) not among tids[0..n) (those seen), moved to tids[n..n+k); returns k. */
static size_t unseen(int *tids, size_t n, size_t m)
{
    size_t k = 0, next = 0;
    for (size_t i = 0; i < m; i++) {
        int t = tids[n + i];
        if (next < n && tids[next] == t) {    /* listed in the same order as before: the usual case */
            next++;
            continue;
        }
        size_t s = 0;
        while (s < n && tids[s] != t)
            s++;
        if (s < n)
            next = s + 1;
        else
            tids[n + k++] = t;
    }
    return k;
}

/* Threads started while the walk ran, by a thread not bound yet (they inherit its old CPUs): look for them into
 * the room after the n threads walked, bind the ids not seen yet (appended), up to `rounds` times; sets
 * NB_BIND_SETTLED and NB_BIND_UNSEEN (see numabind.h). `at` and `last`: how many threads the walk's listing
 * held and which it ended with, in the directory's order. Looking reads the directory on from `last`
 * (task_read_on), and lists it again from its start only when the places moved. Returns the threads walked. */
static long settle(nb_aff_fn seta, nb_aff_fn geta, int me, size_t n, size_t at, int last, const unsigned long *cpumask,
                   size_t words, int flags, int rounds, size_t cap, int *ints, unsigned long *before,
                   unsigned long *after)
{
    int *tids = ints + NB_BIND_HEADER, *status = tids + cap;
    for (int round = 0;; round++) {
        size_t room = cap - n, k = 0;   /* the threads not seen yet, at tids[n..n+k) */
        long m = task_read_on(at, last, tids + n, room);   /* `last`, then the threads started since */
        if (m > 0 && (size_t)m <= room) {
            k = (size_t)m - 1;
            memmove(tids + n, tids + n + 1, k * sizeof *tids);
            at += k;
            if (k)
                last = tids[n + k - 1];
        } else if (m == NB_MOVED) {
            int links, counted;
            m = task_list(me, tids + n, room, 0, &links, &counted, &last);
            if (m >= 0 && (size_t)m <= room && (m == 0 || tids[n] != me))
                m = NB_CALLER_NOT_LISTED;
            if (m > 0 && (size_t)m <= room) {
                at = (size_t)m;
                k = unseen(tids, n, at);
            }
        }
        if (m < 0 || (size_t)m > room) {
            ints[NB_BIND_SETTLED] = m < 0 ? (int)m : NB_NO_ROOM;
            return (long)n;
        }
        if (k == 0) {
            ints[NB_BIND_SETTLED] = 1;
            return (long)n;
        }
        if (round >= rounds) {
            ints[NB_BIND_SETTLED] = 0;
            ints[NB_BIND_UNSEEN] = (int)k;
            return (long)n;
        }
        long done = affinity_many(seta, geta, tids, n, n + k, cpumask, words, flags, before, after, status);
        if (done < 0 || (size_t)done < n + k) {   /* stopped at a refusal (NB_STOP_ON_ERROR): the caller says so */
            ints[NB_BIND_SETTLED] = 1;
            return done < 0 ? (long)n : done;
        }
        n += k;
    }
}

static long bind_locked(nb_getpol_fn getp, nb_setpol_fn setp, nb_aff_fn seta, nb_aff_fn geta,
                        const struct nb_bind_request *req, int flags, size_t cap, int *ints)
{
    int mode = req->mode;
    const unsigned long *nodemask = req->nodemask, *cpumask = req->cpumask;
    size_t node_words = req->node_words, words = req->words;
    int *tids = ints + NB_BIND_HEADER, *status = tids + cap;
    unsigned long *masks = (unsigned long *)(ints + ((NB_BIND_HEADER + 2 * cap + 1) & ~(size_t)1));
    unsigned long *old_mask = masks, *now_mask = masks + node_words;
    unsigned long *before = now_mask + node_words, *after = before + cap * words;
    int me = (int)syscall(SYS_gettid);
    int facts = 0, last = me;
    long n = 1;
    ints[NB_BIND_TID] = 0;
    ints[NB_BIND_LINKS] = 0;
    tids[0] = me;
    if (!(flags & NB_ONLY_CALLER)) {
        int counted = 0;
        n = task_list(me, tids, cap, flags & NB_COUNT_LINKS, ints + NB_BIND_LINKS, &counted, &last);
        if (n < 0 || (size_t)n > cap)
            return n;
        if (n == 0 || tids[0] != me)            /* not this process's threads (another PID namespace's /proc) */
            return NB_CALLER_NOT_LISTED;
        if (counted)
            facts |= NB_COUNTED;
    }
    int *errs = ints + NB_BIND_ERRS;
    ints[NB_BIND_TID] = me;
    ints[NB_BIND_PROCESSED] = ints[NB_BIND_EXITED] = 0;
    ints[NB_BIND_SETTLED] = 1;
    ints[NB_BIND_UNSEEN] = 0;
    if (mode >= 0) {
        swap_mempolicy(getp, setp, mode, nodemask, req->maxnode, flags & NB_NEED_OLD, ints + NB_BIND_OLD_MODE,
                       old_mask, ints + NB_BIND_NOW_MODE, now_mask, errs);
        facts |= (errs[0] == 0 ? NB_OLD_READ : 0) | (errs[1] == 0 ? NB_POLICY_SET : 0) |
                 (errs[2] == 0 ? NB_NOW_READ : 0);
        if (errs[2] == 0 && ints[NB_BIND_NOW_MODE] == mode)
            facts |= NB_MODE_AS_SET;
        if (errs[2] == 0 && same_nodes(now_mask, nodemask, node_words))
            facts |= NB_NODES_AS_SET;
        if (errs[1] != 0) {                    /* refused, or not tried: the caller decides what comes next */
            ints[NB_BIND_FACTS] = facts;
            return n;
        }
    } else {
        errs[0] = errs[1] = 1;
        errs[2] = (int)getp(ints + NB_BIND_NOW_MODE, now_mask, req->maxnode, NULL, 0);
        facts |= errs[2] == 0 ? NB_NOW_READ : 0;
    }
    int walk_flags = flags & (NB_MATCHING | NB_STOP_ON_ERROR | NB_CHECK_FIRST);
    long done = affinity_many(seta, geta, tids, 0, (size_t)n, cpumask, words, walk_flags, before, after, status);
    if (done < 0) {
        ints[NB_BIND_FACTS] = facts;
        return done;
    }
    facts |= NB_WALKED;
    if (status[0] == NB_BOUND)
        facts |= NB_CALLER_SET;
    if (cpumask && status[0] == NB_BOUND && memcmp(after, cpumask, words * sizeof(unsigned long)) == 0)
        facts |= NB_CALLER_AS_SET;
    int refused = 0;
    for (long i = 0; i < done; i++)
        refused |= status[i] < 0;
    if (cpumask && !(flags & NB_ONLY_CALLER) && done == n && n > 1 && !refused)
        done = n = settle(seta, geta, me, (size_t)n, (size_t)n, last, cpumask, words, walk_flags,
                          (flags >> NB_SETTLE_SHIFT) & 0xff, cap, ints, before, after);
    ints[NB_BIND_PROCESSED] = (int)done;
    int exited = 0;
    for (long i = 1; i < done; i++)
        exited += status[i] == NB_EXITED;
    ints[NB_BIND_EXITED] = exited;
    ints[NB_BIND_FACTS] = facts;
    return n;
}

static long bind_all(nb_getpol_fn getp, nb_setpol_fn setp, nb_aff_fn seta, nb_aff_fn geta,
                     const struct nb_bind_request *req, int flags, size_t cap, int *ints)
{
    if (!req || !ints || (uintptr_t)ints % _Alignof(unsigned long) || req->words == 0 || cap == 0 ||
        req->node_words == 0 || req->maxnode > 64 * req->node_words + 1 || cap > (size_t)1 << 24)
        return -EINVAL;
    long r = nb_bind_hold(ints);
    if (r < 0)
        return r;
    r = bind_locked(getp, setp, seta, geta, req, flags, cap, ints);
    if (r < 0 || (size_t)r > cap)
        nb_bind_release(ints);        /* nothing was done: nothing to hold */
    return r;
}

long nb_sys_bind(const struct nb_bind_request *req, int flags, size_t cap, int *out)
{
    return bind_all(nb_sys_get_mempolicy, nb_sys_set_mempolicy, sys_set, sys_get, req, flags, cap, out);
}

long nb_numa_bind(const struct nb_bind_request *req, int flags, size_t cap, int *out)
{
    NEED_NUMA();
    return bind_all(nb_numa_get_mempolicy, nb_numa_set_mempolicy, numa_set, numa_get, req, flags, cap, out);
}

/* ---- System V shared memory and a range's pages ---------------------------- */
long nb_ftok(const char *path, int proj_id)
{
    key_t key = ftok(path, proj_id);
    return key == (key_t)-1 ? -(long)errno : (long)key;
}

long nb_shmget(long key, size_t size, int flags)
{
    RET(shmget((key_t)key, size, flags));
}

long nb_shm_size(int shmid, unsigned long long *size)
{
    struct shmid_ds ds;
    if (shmctl(shmid, IPC_STAT, &ds) < 0)
        return -(long)errno;
    *size = (unsigned long long)ds.shm_segsz;
    return 0;
}

long nb_shmat(int shmid, void **addr)
{
    void *p = shmat(shmid, NULL, 0);
    if (p == (void *)-1)
        return -(long)errno;
    *addr = p;
    return 0;
}

long nb_shmdt(void *addr)
{
    RET(shmdt(addr));
}

long nb_touch_range(void *addr, size_t len, size_t step)
{
    if (step == 0)
        return -EINVAL;
    long pages = 0;
    for (size_t off = 0; off < len; off += step, pages++)
        __atomic_fetch_or((volatile char *)addr + off, (char)0, __ATOMIC_RELAXED);
    return pages;
}


/* ---- Measuring memory (see numabind.h) ---- */
/* Results land here so the compiler keeps the loads that make them. */
static volatile uintptr_t nb_sink;

#define NB_CHASE_BATCH 256            /* loads between two reads of the clock */
#define NB_STREAM_CHUNK (1UL << 20)   /* bytes between two reads of the clock */

static unsigned long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}

/* splitmix64: a small, good generator for the shuffle (not for anything secret) */
static unsigned long long next_random(unsigned long long *state)
{
    unsigned long long z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

long nb_chase_link(void *buf, size_t len, size_t stride, unsigned long long seed)
{
    if (buf == NULL || stride < sizeof(void *) || stride % sizeof(void *) != 0 || len / stride < 2)
        return -EINVAL;
    size_t lines = len / stride;
    char *base = buf;
    for (size_t i = 0; i < lines; i++)             /* the identity, as indexes in each line's first word */
        *(size_t *)(base + i * stride) = i;
    for (size_t i = lines - 1; i > 0; i--) {       /* Sattolo: j < i, so the result is a single cycle */
        size_t j = (size_t)(next_random(&seed) % i);
        size_t *a = (size_t *)(base + i * stride), *b = (size_t *)(base + j * stride);
        size_t t = *a;
        *a = *b;
        *b = t;
    }
    for (size_t i = 0; i < lines; i++) {           /* indexes to addresses */
        size_t *word = (size_t *)(base + i * stride);
        *(void **)word = base + *word * stride;
    }
    return (long)lines;
}

long nb_chase(const void *buf, unsigned long long budget_ns, double *ns_per_load, unsigned long long *loads)
{
    if (buf == NULL || ns_per_load == NULL || loads == NULL)
        return -EINVAL;
    void *const *p = buf;
    unsigned long long count = 0, start = now_ns(), elapsed;
    do {
        for (int i = 0; i < NB_CHASE_BATCH; i += 4) {
            p = *p;
            p = *p;
            p = *p;
            p = *p;
        }
        count += NB_CHASE_BATCH;
        elapsed = now_ns() - start;
    } while (elapsed < budget_ns);
    nb_sink = (uintptr_t)p;
    *loads = count;
    *ns_per_load = (double)elapsed / (double)count;
    return 0;
}

static uint64_t sum_words(const uint64_t *w, size_t n)
{
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += w[i];
    return s;
}

long nb_stream_read(const void *buf, size_t len, unsigned long long budget_ns, double *bytes_per_s,
                    unsigned long long *bytes)
{
    if (buf == NULL || len < sizeof(uint64_t) || bytes_per_s == NULL || bytes == NULL)
        return -EINVAL;
    size_t words = len / sizeof(uint64_t), at = 0;
    uint64_t sum = 0;
    unsigned long long done = 0, start = now_ns(), elapsed;
    do {
        size_t n = NB_STREAM_CHUNK / sizeof(uint64_t);
        if (n > words - at)
            n = words - at;
        sum += sum_words((const uint64_t *)buf + at, n);
        done += n * sizeof(uint64_t);
        at = (at + n == words) ? 0 : at + n;
        elapsed = now_ns() - start;
    } while (elapsed < budget_ns);
    nb_sink = (uintptr_t)sum;
    *bytes = done;
    *bytes_per_s = elapsed ? (double)done * 1e9 / (double)elapsed : 0.0;
    return 0;
}

long nb_stream_copy(void *dst, const void *src, size_t len, unsigned long long budget_ns, double *bytes_per_s,
                    unsigned long long *bytes)
{
    const char *s = src;
    char *d = dst;
    if (d == NULL || s == NULL || len == 0 || bytes_per_s == NULL || bytes == NULL || (d < s + len && s < d + len))
        return -EINVAL;
    size_t at = 0;
    unsigned long long done = 0, start = now_ns(), elapsed;
    do {
        size_t n = NB_STREAM_CHUNK;
        if (n > len - at)
            n = len - at;
        memcpy(d + at, s + at, n);
        done += 2ULL * n;
        at = (at + n == len) ? 0 : at + n;
        elapsed = now_ns() - start;
    } while (elapsed < budget_ns);
    nb_sink = (uintptr_t)d[0];
    *bytes = done;
    *bytes_per_s = elapsed ? (double)done * 1e9 / (double)elapsed : 0.0;
    return 0;
}
