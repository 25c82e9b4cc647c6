/* See numabind.h.  Deliberately tiny: wrappers only, errno returned as -errno. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "numabind.h"

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

long nb_sys_mbind(void *addr, unsigned long len, int mode, const unsigned long *nodemask,
                  unsigned long maxnode, unsigned int flags)
{
    RET(syscall(SYS_mbind, addr, len, mode, nodemask, maxnode, flags));
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

long nb_sys_sched_setaffinity(int tid, size_t size, const unsigned long *mask)
{
    RET(syscall(SYS_sched_setaffinity, tid, size, mask));
}

long nb_sys_sched_getaffinity(int tid, size_t size, unsigned long *mask)
{
    /* The raw call returns the number of bytes the kernel wrote. */
    RET(syscall(SYS_sched_getaffinity, tid, size, mask));
}

long nb_gettid(void)
{
    return (long)syscall(SYS_gettid);
}

/* ---- libnuma via dlopen -------------------------------------------------- */
struct nb_bitmask { unsigned long size; unsigned long *maskp; };  /* libnuma's struct bitmask */

static void *numa_handle;
static int (*p_numa_available)(void);
static int (*p_numa_max_possible_node)(void);
static int (*p_numa_num_possible_cpus)(void);
static long (*p_set_mempolicy)(int, const unsigned long *, unsigned long);
static long (*p_get_mempolicy)(int *, unsigned long *, unsigned long, void *, unsigned long);
static long (*p_mbind)(void *, unsigned long, int, const unsigned long *, unsigned long, unsigned);
static long (*p_migrate_pages)(int, unsigned long, const unsigned long *, const unsigned long *);
static long (*p_move_pages)(int, unsigned long, void **, const int *, int *, int);
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
    SYM(p_numa_max_possible_node, "numa_max_possible_node");
    SYM(p_numa_num_possible_cpus, "numa_num_possible_cpus");
    SYM(p_set_mempolicy, "set_mempolicy");
    SYM(p_get_mempolicy, "get_mempolicy");
    SYM(p_mbind, "mbind");
    SYM(p_migrate_pages, "migrate_pages");
    SYM(p_move_pages, "move_pages");
    SYM(p_sched_setaffinity, "numa_sched_setaffinity");
    SYM(p_sched_getaffinity, "numa_sched_getaffinity");
#undef SYM
    numa_handle = h;
    return 0;
}

int nb_numa_loaded(void) { return numa_handle != NULL; }
int nb_numa_available(void) { return numa_handle ? p_numa_available() : -1; }
int nb_numa_max_possible_node(void) { return numa_handle ? p_numa_max_possible_node() : -1; }
int nb_numa_num_possible_cpus(void) { return numa_handle ? p_numa_num_possible_cpus() : -1; }

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

long nb_numa_mbind(void *addr, unsigned long len, int mode, const unsigned long *nodemask,
                   unsigned long maxnode, unsigned int flags)
{
    NEED_NUMA();
    RET(p_mbind(addr, len, mode, nodemask, maxnode, flags));
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
