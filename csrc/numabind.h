/* numabind native core: thin wrappers over the NUMA and affinity system calls,
 * and over the same calls in a libnuma loaded at run time with dlopen().
 *
 * Every function returns >= 0 on success and -errno on failure; no policy
 * lives here, all decisions are made in Python.  No libnuma header is needed.
 */
#ifndef NUMABIND_H
#define NUMABIND_H

#include <stddef.h>

/* ---- raw system calls (the "syscall" backend) ---------------------------- */
long nb_sys_set_mempolicy(int mode, const unsigned long *nodemask, unsigned long maxnode);
long nb_sys_get_mempolicy(int *mode, unsigned long *nodemask, unsigned long maxnode,
                          void *addr, unsigned long flags);
long nb_sys_mbind(void *addr, unsigned long len, int mode, const unsigned long *nodemask,
                  unsigned long maxnode, unsigned int flags);
long nb_sys_migrate_pages(int pid, unsigned long maxnode, const unsigned long *old_nodes,
                          const unsigned long *new_nodes);
long nb_sys_move_pages(int pid, unsigned long count, void **pages, const int *nodes,
                       int *status, int flags);
long nb_sys_sched_setaffinity(int tid, size_t size, const unsigned long *mask);
long nb_sys_sched_getaffinity(int tid, size_t size, unsigned long *mask);
long nb_gettid(void);

/* ---- libnuma, loaded at run time (the "libnuma" backend) ----------------- */
/* Loads `soname` (e.g. "libnuma.so.1"); 0 on success, else -1 with a message in errbuf. */
int nb_numa_load(const char *soname, char *errbuf, size_t errlen);
int nb_numa_loaded(void);
int nb_numa_available(void);
int nb_numa_max_possible_node(void);
int nb_numa_num_possible_cpus(void);
long nb_numa_set_mempolicy(int mode, const unsigned long *nodemask, unsigned long maxnode);
long nb_numa_get_mempolicy(int *mode, unsigned long *nodemask, unsigned long maxnode,
                           void *addr, unsigned long flags);
long nb_numa_mbind(void *addr, unsigned long len, int mode, const unsigned long *nodemask,
                   unsigned long maxnode, unsigned int flags);
long nb_numa_migrate_pages(int pid, unsigned long maxnode, const unsigned long *old_nodes,
                           const unsigned long *new_nodes);
long nb_numa_move_pages(int pid, unsigned long count, void **pages, const int *nodes,
                        int *status, int flags);
/* size is in bits here: libnuma's struct bitmask counts bits. */
long nb_numa_sched_setaffinity(int tid, unsigned long nbits, unsigned long *mask);
long nb_numa_sched_getaffinity(int tid, unsigned long nbits, unsigned long *mask);

#endif
