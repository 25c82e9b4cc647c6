/* numabind native core: thin wrappers over the NUMA and affinity system calls,
 * and over the same calls in a libnuma loaded at run time with dlopen().
 *
 * Every function returns >= 0 on success and -errno on failure; no policy
 * lives here, all decisions are made in Python.  No libnuma header is needed.
 */
#ifndef NUMABIND_H
#define NUMABIND_H

#include <stddef.h>

/* The numabind version this core was compiled for (build_ffi.py passes the package's __version__ as
 * NB_VERSION): Python refuses a core whose version differs from the package's (a stale build). */
const char *nb_version(void);

/* ---- raw system calls (the "syscall" backend) ---------------------------- */
long nb_sys_set_mempolicy(int mode, const unsigned long *nodemask, unsigned long maxnode);
long nb_sys_get_mempolicy(int *mode, unsigned long *nodemask, unsigned long maxnode,
                          void *addr, unsigned long flags);
long nb_sys_migrate_pages(int pid, unsigned long maxnode, const unsigned long *old_nodes,
                          const unsigned long *new_nodes);
long nb_sys_move_pages(int pid, unsigned long count, void **pages, const int *nodes,
                       int *status, int flags);
/* mbind(2): the memory policy of the range [addr, addr + len) (addr page-aligned), flags MPOL_MF_*. */
long nb_sys_mbind(void *addr, unsigned long len, int mode, const unsigned long *nodemask, unsigned long maxnode,
                  unsigned int flags);
long nb_sys_sched_setaffinity(int tid, size_t size, const unsigned long *mask);
long nb_sys_sched_getaffinity(int tid, size_t size, unsigned long *mask);

/* ---- small files (numabind._fs: sysfs and procfs) ------------------------- */
/* Reads the file at `path`, opened O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, into buf: at most cap bytes,
 * until the end of the file, or until a short read of a file that has a size (a sysfs attribute, a file on
 * disk; procfs files, of size 0, are read until read() returns nothing).  Returns the bytes read (cap: maybe
 * more to read); -errno when it cannot be opened, stat'ed or read; NB_NOT_REGULAR - (st_mode >> 12) when it
 * is not a regular file (a FIFO, a device, a directory: nothing is read). */
enum { NB_NOT_REGULAR = -100000 };
long nb_read_file(const char *path, char *buf, size_t cap);

/* The ids N of the entries named `prefix`N of the directory at `path` (N: 1 to 9 ASCII digits, no leading zero
 * but "0" itself), in the directory's order.  Returns how many there are (when more than cap, only cap were
 * written: call again with more room); -errno when the directory cannot be opened or read. */
long nb_list_numbered(const char *path, const char *prefix, int *ids, size_t cap);

/* Files of the directory `dir` and of its numbered subdirectories, read with one opening of `dir` and nothing
 * else in between, each as nb_read_file reads one (the same flags, the same refusals):
 *  - first the `count` files `names` (each ended by a NUL, relative to dir);
 *  - then the entries `prefix`N of the subdirectory `sub` are listed as nb_list_numbered lists them (their
 *    ids written to ids, idcap at most), and for each N in that order, unless bit N of `skip` is set (N < 64),
 *    the `per` files `each` of sub/prefixN.
 * Each file's bytes follow the previous file's in buf (cap bytes in all), `slot` bytes at most. A file's
 * length is counted up to its first NUL byte; instead of a length, a file gets what nb_read_file would return
 * when that is an error (every file gets the directory's -errno when dir cannot be opened), or NB_RETRY when
 * it filled the room it had (read it alone). No more than `files` files are read, and none below `sub` when
 * it lists more than idcap entries. out[0] is the bytes of buf used, then file k's start is out[1 + 2k] and its
 * length out[2 + 2k] (2 * files + 1 longs in all).  Returns what nb_list_numbered would return for dir/sub. */
enum { NB_RETRY = -200000 };
long nb_read_tree(const char *dir, const char *names, size_t count, const char *sub, const char *prefix,
                  const char *each, size_t per, unsigned long long skip, int *ids, size_t idcap,
                  char *buf, size_t cap, size_t slot, long *out, size_t files);

/* ---- the running process: threads, and affinity of many threads in one call ---- */
/* Thread ids of this process (one getdents64 pass over a cached /proc/self/task descriptor, re-read from
 * its start on every call; none when the directory's link count says the only thread is the caller, the
 * main thread of the process that opened it, a count trusted once it agreed with a listing).  `first` is
 * the calling thread's id (0: looked up here); when listed it is put at index 0, and a cached descriptor whose listing lacks it is another process's (a child forked without the
 * atfork handler): it is reopened.  Returns the number of threads; when that is more than `cap`, only `cap`
 * were written and the caller retries with a larger buffer (listing has no side effect).  -errno on failure. */
long nb_task_list(int first, int *tids, size_t cap);

/* Per-thread outcome of nb_*_affinity_many. */
enum nb_thread_status {
    NB_BOUND = 0,          /* set, then read back into after[] */
    NB_LEFT_ALONE = 1,     /* NB_MATCHING: its affinity differed from tids[0]'s before; not touched */
    NB_EXITED = 2,         /* ESRCH: the thread is gone */
    NB_UNCHANGED = 3,      /* mask == NULL: only read */
    NB_NOT_TRIED = 4,      /* after a stop (NB_STOP_ON_ERROR, NB_CHECK_FIRST) */
    NB_DIFFERS = 5         /* set, but read back other CPUs than tids[0] was (both in after[]) */
};
/* Flags of nb_*_affinity_many. */
enum nb_affinity_flags {
    NB_MATCHING = 1,       /* leave alone threads whose before differs from tids[0]'s before */
    NB_STOP_ON_ERROR = 2,  /* stop at the first thread whose set fails with anything but ESRCH */
    NB_CHECK_FIRST = 4     /* stop after tids[0] unless it was set and its after equals mask exactly */
};

/* For each of the n threads: read its affinity into before[i*words..], set it to `mask` (NULL: only read),
 * read it back into after[i*words..]; status[i] is one of NB_* above or -errno (the set failed).
 * `words` 64-bit words per mask (mask_bytes = 8 * words).  Returns how many threads were processed
 * (n unless stopped), or -errno when an argument is invalid.  The _sys_ form calls the system calls,
 * the _numa_ form libnuma's numa_sched_{set,get}affinity (-ENOSYS until nb_numa_load). */
/* The calling thread's memory policy replaced in one call: get_mempolicy into old_mode/old_mask, then
 * set_mempolicy(mode, mask, maxnode) (mask NULL: no nodes), then get_mempolicy into now_mode/now_mask.
 * errs[0..2] receive 0 or -errno of each step; a step after a failed set is skipped (errs = 1).  With
 * need_old, a failed first read stops before anything is set.  old_mask and now_mask hold maxnode - 1
 * bits.  Returns 0, or -ENOSYS for the _numa_ form before nb_numa_load. */
long nb_sys_swap_mempolicy(int mode, const unsigned long *mask, unsigned long maxnode, int need_old,
                           int *old_mode, unsigned long *old_mask, int *now_mode, unsigned long *now_mask, int *errs);
long nb_numa_swap_mempolicy(int mode, const unsigned long *mask, unsigned long maxnode, int need_old,
                            int *old_mode, unsigned long *old_mask, int *now_mode, unsigned long *now_mask, int *errs);

long nb_sys_affinity_many(const int *tids, size_t n, const unsigned long *mask, size_t words, int flags,
                          unsigned long *before, unsigned long *after, int *status);
long nb_numa_affinity_many(const int *tids, size_t n, const unsigned long *mask, size_t words, int flags,
                           unsigned long *before, unsigned long *after, int *status);

/* A whole bind in one call: list the threads (the caller first), swap the calling thread's memory policy
 * (as nb_*_swap_mempolicy), then walk every thread's affinity (as nb_*_affinity_many, `flags` among
 * nb_affinity_flags, plus NB_ONLY_CALLER: the calling thread alone, nothing listed).
 * mode < 0 sets no policy and only reads the current one into the "now" slots.  When the set is
 * refused, or need_old and the old policy is unreadable, it stops before the walk (NB_BIND_WALKED 0).
 * After a walk that set a CPU mask on every listed thread (more than one, none refused), the threads are
 * listed again into the room left in the buffer, and those not seen yet (started meanwhile by a thread not
 * bound yet) are walked too and appended, up to R more times, R = (flags >> NB_SETTLE_SHIFT) & 0xff (0: list
 * once more, bind nothing): NB_BIND_SETTLED says how that ended.
 * out[] holds everything, in one buffer aligned for unsigned long: the header below, then cap thread ids,
 * then cap statuses; then, from the first even index after those (NB_BIND_HEADER + 2 * cap, rounded up),
 * unsigned longs: the old node mask and the node mask now (node_words each), then cap `before` and cap
 * `after` CPU masks (words each).  cap is at most 2^24; listing again needs room for every thread after
 * the walked ones (cap >= 2 * threads), else NB_BIND_SETTLED is NB_NO_ROOM.
 * The call takes the process's bind lock (nb_bind_hold with out) and returns holding it (NB_BIND_HELD 1)
 * whenever it returns 0..cap (something may have been changed: the caller explains, rolls back, then calls
 * nb_bind_release(out)), except after a clean bind of the calling thread alone without NB_KEEP_LOCK in flags:
 * then nothing is left to explain or undo, and it releases the lock itself.
 * Returns the number of threads (walked, the ones found after the walk included); more than cap: nothing was
 * done, call again with a larger cap.
 * -errno when the threads cannot be listed (nothing was done) or an argument is invalid; NB_CALLER_NOT_LISTED
 * (nothing was done) when the listing lacks the calling thread: /proc/self/task then shows another PID
 * namespace's ids (a /proc mounted for another namespace), or nothing, and no thread of it can be trusted. */
enum nb_bind_slot {
    NB_BIND_TID = 0,        /* the calling thread's id */
    NB_BIND_OLD_MODE = 1,   /* the three slots nb_*_swap_mempolicy fills: old mode, mode now, */
    NB_BIND_NOW_MODE = 2,
    NB_BIND_ERRS = 3,       /* and the three steps' errors (3, 4, 5) */
    NB_BIND_WALKED = 6,     /* 1 when the walk ran */
    NB_BIND_PROCESSED = 7,  /* threads the walk processed (those found after it included) */
    NB_BIND_EXITED = 8,     /* threads other than the caller that exited during the walk */
    NB_BIND_CLEAN = 9,      /* 1: every step succeeded and read back exactly what was asked, and it settled */
    NB_BIND_HELD = 10,      /* 1: this buffer holds the process's bind lock (nb_bind_hold, nb_bind_release) */
    NB_BIND_GEN = 11,       /* which taking of the lock this buffer's was (see nb_bind_hold) */
    NB_BIND_SETTLED = 12,   /* 1: no thread appeared after the walk that was not walked (or none was looked for);
                             * 0: after R listings new threads still appeared: NB_BIND_UNSEEN of them, their ids
                             * right after the NB_BIND_PROCESSED walked ones; NB_NO_ROOM: no room to list again
                             * (nothing looked for); -errno or NB_CALLER_NOT_LISTED: listing again failed */
    NB_BIND_UNSEEN = 13,
    NB_BIND_HEADER = 14
};
enum { NB_ONLY_CALLER = 8, NB_KEEP_LOCK = 16, NB_SETTLE_SHIFT = 8, NB_CALLER_NOT_LISTED = -300000,
       NB_NO_ROOM = -400000 };
/* The process's bind lock: one bind (and its rollback) at a time. Recursive (a signal handler may bind in a
 * thread that holds it); a forked child starts with it free. `out` is a buffer of at least NB_BIND_HEADER ints
 * (a nb_*_bind buffer, or one of its own) whose NB_BIND_HELD slot says whether it holds the lock: nb_bind_hold
 * takes the lock unless the slot is set, then sets it, and NB_BIND_GEN to which taking of the lock this is;
 * it returns 1 when the slot was set already, or when no other taking happened since the one NB_BIND_GEN named
 * (a bind that released the lock and takes it again to undo its changes may undo its CPUs then: no other bind
 * set them meanwhile), else 0; -errno on failure. nb_bind_release releases the lock only when the slot is set,
 * and clears it (releasing twice is harmless); 0 or -errno. */
long nb_bind_hold(int *out);
long nb_bind_release(int *out);
long nb_sys_bind(int mode, const unsigned long *nodemask, unsigned long maxnode, size_t node_words, int need_old,
                 const unsigned long *cpumask, size_t words, int flags, size_t cap, int *out);
long nb_numa_bind(int mode, const unsigned long *nodemask, unsigned long maxnode, size_t node_words, int need_old,
                  const unsigned long *cpumask, size_t words, int flags, size_t cap, int *out);

/* ---- libnuma, loaded at run time (the "libnuma" backend) ----------------- */
/* Loads `soname` (e.g. "libnuma.so.1"); 0 on success, else -1 with a message in errbuf. */
int nb_numa_load(const char *soname, char *errbuf, size_t errlen);
/* numa_available() of the loaded libnuma; -1 before nb_numa_load succeeded. */
int nb_numa_available(void);
long nb_numa_set_mempolicy(int mode, const unsigned long *nodemask, unsigned long maxnode);
long nb_numa_get_mempolicy(int *mode, unsigned long *nodemask, unsigned long maxnode,
                           void *addr, unsigned long flags);
long nb_numa_migrate_pages(int pid, unsigned long maxnode, const unsigned long *old_nodes,
                           const unsigned long *new_nodes);
long nb_numa_move_pages(int pid, unsigned long count, void **pages, const int *nodes,
                        int *status, int flags);
/* size is in bits here: libnuma's struct bitmask counts bits. */
long nb_numa_mbind(void *addr, unsigned long len, int mode, const unsigned long *nodemask, unsigned long maxnode,
                   unsigned int flags);
long nb_numa_sched_setaffinity(int tid, unsigned long nbits, unsigned long *mask);
long nb_numa_sched_getaffinity(int tid, unsigned long nbits, unsigned long *mask);

#endif
