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

/* The kernel's memory-policy numbers (<linux/mempolicy.h>), read by Python from lib and never written there: the
 * modes set_mempolicy and mbind take, the flags of a mode word, of get_mempolicy and of mbind.  numabind.c checks
 * them against the kernel's header where the build machine has one. */
enum nb_mpol {
    NB_MPOL_DEFAULT = 0,
    NB_MPOL_PREFERRED = 1,
    NB_MPOL_BIND = 2,
    NB_MPOL_INTERLEAVE = 3,
    NB_MPOL_LOCAL = 4,
    NB_MPOL_PREFERRED_MANY = 5,         /* Linux 5.15 */
    NB_MPOL_WEIGHTED_INTERLEAVE = 6,    /* Linux 6.9 */
    NB_MPOL_F_STATIC_NODES = 1 << 15,   /* flags of a mode word */
    NB_MPOL_F_RELATIVE_NODES = 1 << 14,
    NB_MPOL_F_NUMA_BALANCING = 1 << 13,
    NB_MPOL_F_NODE = 1 << 0,            /* flags of get_mempolicy */
    NB_MPOL_F_ADDR = 1 << 1,
    NB_MPOL_MF_STRICT = 1 << 0,         /* flags of mbind */
    NB_MPOL_MF_MOVE = 1 << 1,
    NB_MPOL_MF_MOVE_ALL = 1 << 2
};

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

/* What nb_read_tree reads below a directory: the same for many directories, so the caller keeps one. */
struct nb_tree {
    const char *names;     /* `count` files of the directory itself, each ended by a NUL */
    size_t count;
    const char *sub;       /* the subdirectory whose entries `prefix`N are listed (as nb_list_numbered lists) */
    const char *prefix;
    const char *each;      /* `per` files of each sub/prefixN, each ended by a NUL */
    size_t per;
};
/* Where nb_read_tree writes: the caller's buffers, reused from call to call. */
struct nb_tree_room {
    int *ids;              /* the ids listed, idcap at most */
    size_t idcap;
    char *buf;             /* the bytes read, cap in all, slot at most per file */
    size_t cap;
    size_t slot;
    long *out;             /* out[0]: the bytes of buf used; then file k's start out[1 + 2k] and length out[2 + 2k] */
    size_t files;          /* files read at most (out holds 2 * files + 1 longs) */
};
/* Files of the directory `dir` and of its numbered subdirectories, read with one opening of `dir` and nothing
 * else in between, each as nb_read_file reads one (the same flags, the same refusals): first what->names, then,
 * for each id N listed in what->sub (in the directory's order) unless bit N of `skip` is set (N < 64), the files
 * what->each of sub/prefixN.  Each file's bytes follow the previous file's in room->buf.  A file's length is
 * counted up to its first NUL byte; instead of a length, a file gets what nb_read_file would return when that is
 * an error (every file gets the directory's -errno when dir cannot be opened), or NB_RETRY when it filled the
 * room it had (read it alone).  No more than room->files files are read, and none below sub when it lists more
 * than room->idcap entries.  Returns what nb_list_numbered would return for dir/sub. */
enum { NB_RETRY = -200000 };
long nb_read_tree(const char *dir, unsigned long long skip, const struct nb_tree *what, const struct nb_tree_room *room);

/* ---- the running process: threads, and affinity of many threads in one call ---- */
/* Thread ids of this process: one getdents64 pass over a cached /proc/self/task descriptor, re-read from its
 * start on every call.  `first` is the calling thread's id (0: looked up here); when listed it is put at index 0,
 * and a cached descriptor whose listing lacks it is another process's (a child forked without the atfork
 * handler): it is reopened.  Returns the number of threads; when that is more than `cap`, only `cap` were
 * written and the caller retries with a larger buffer (listing has no side effect).  -errno on failure. */
long nb_task_list(int first, int *tids, size_t cap);

/* Per-thread outcome of nb_*_affinity_many. */
enum nb_thread_status {
    NB_BOUND = 0,          /* set, then read back into after[] (see below) */
    NB_LEFT_ALONE = 1,     /* NB_MATCHING: its affinity differed from tids[0]'s before; not touched */
    NB_EXITED = 2,         /* ESRCH: the thread is gone */
    NB_UNCHANGED = 3,      /* mask == NULL: only read */
    NB_NOT_TRIED = 4,      /* after a stop (NB_STOP_ON_ERROR, NB_CHECK_FIRST) */
    NB_DIFFERS = 5         /* set, but read back other CPUs than tids[0] was (both in after[]) */
};
/* Flags of nb_*_affinity_many (and of nb_*_bind, with the ones below). */
enum nb_affinity_flags {
    NB_MATCHING = 1,       /* leave alone threads whose before differs from tids[0]'s before */
    NB_STOP_ON_ERROR = 2,  /* stop at the first thread whose set fails with anything but ESRCH */
    NB_CHECK_FIRST = 4     /* stop after tids[0] unless it was set and its after equals mask exactly */
};

/* For each of the n threads: read its affinity into before[i*words..], set it to `mask` (NULL: only read),
 * read it back into after[i*words..], unless it held `mask` exactly (the set leaves CPUs a thread holds: its read
 * is its read-back, copied); status[i] is one of NB_* above or -errno (the set failed).
 * `words` 64-bit words per mask (mask_bytes = 8 * words).  Returns how many threads were processed
 * (n unless stopped), or -errno when an argument is invalid.  The _sys_ form calls the system calls,
 * the _numa_ form libnuma's numa_sched_{set,get}affinity (-ENOSYS until nb_numa_load). */
long nb_sys_affinity_many(const int *tids, size_t n, const unsigned long *mask, size_t words, int flags,
                          unsigned long *before, unsigned long *after, int *status);
long nb_numa_affinity_many(const int *tids, size_t n, const unsigned long *mask, size_t words, int flags,
                           unsigned long *before, unsigned long *after, int *status);

/* The calling thread's memory policy replaced in one call: get_mempolicy into old_mode/old_mask, then
 * set_mempolicy(mode, mask, maxnode) (mask NULL: no nodes), then get_mempolicy into now_mode/now_mask.
 * errs[0..2] receive 0 or -errno of each step; a step after a failed set is skipped (errs = 1).  With
 * need_old, a failed first read stops before anything is set.  old_mask and now_mask hold maxnode - 1
 * bits.  Returns 0, or -ENOSYS for the _numa_ form before nb_numa_load. */
long nb_sys_swap_mempolicy(int mode, const unsigned long *mask, unsigned long maxnode, int need_old,
                           int *old_mode, unsigned long *old_mask, int *now_mode, unsigned long *now_mask, int *errs);
long nb_numa_swap_mempolicy(int mode, const unsigned long *mask, unsigned long maxnode, int need_old,
                            int *old_mode, unsigned long *old_mask, int *now_mode, unsigned long *now_mask, int *errs);

/* What nb_*_bind sets: the same for every bind of one plan, so the caller keeps one per plan. */
struct nb_bind_request {
    int mode;                        /* the MPOL_* mode to set; < 0: set none, only read the policy */
    const unsigned long *nodemask;   /* the nodes (NULL: none), node_words words */
    unsigned long maxnode;           /* as set_mempolicy takes it; at most 64 * node_words + 1 */
    size_t node_words;
    const unsigned long *cpumask;    /* the CPUs (NULL: set none, only read them), words words */
    size_t words;
};

/* A whole bind in one call: list the threads (the caller first), swap the calling thread's memory policy
 * (as nb_*_swap_mempolicy), then walk every thread's affinity (as nb_*_affinity_many, `flags` among
 * nb_affinity_flags, plus those of nb_bind_flags).  When the set is refused, or under NB_NEED_OLD the old
 * policy is unreadable, it stops before the walk (NB_WALKED not among the facts).  After a walk that set a CPU
 * mask on every listed thread (more than one, none refused), the threads started meanwhile (by a thread not bound
 * yet) are looked for, into the room left in the buffer, and those not seen yet are walked too and appended, up to
 * R more times, R = (flags >> NB_SETTLE_SHIFT) & 0xff (0: look once more, bind nothing): NB_BIND_SETTLED says how
 * that ended.  Looking is one short read: the directory is read on from the last thread listed (a thread
 * started later is listed after it), and only when a thread that was listed has gone meanwhile (its place
 * moved) is it listed again from its start.  It returns facts, never a verdict: the caller decides what they mean.
 * out[] holds everything, in one buffer aligned for unsigned long: the header below, then cap thread ids,
 * then cap statuses; then, from the first even index after those (NB_BIND_HEADER + 2 * cap, rounded up),
 * unsigned longs: the old node mask and the node mask now (node_words each), then cap `before` and cap
 * `after` CPU masks (words each).  cap is at most 2^24; listing again needs room for every thread after
 * the walked ones (cap >= 2 * threads), else NB_BIND_SETTLED is NB_NO_ROOM.  Only the slots a call wrote
 * are meaningful (the buffer may hold an earlier call's bytes): the facts say which.
 * The call takes the process's bind lock (nb_bind_hold with out) and returns holding it whenever it returns
 * 0..cap (something may have been changed: the caller explains, rolls back, then calls nb_bind_release(out)).
 * Returns the number of threads (walked, the ones found after the walk included); more than cap: nothing was
 * done (the lock is not held), call again with a larger cap.
 * -errno when the threads cannot be listed (nothing was done) or an argument is invalid; NB_CALLER_NOT_LISTED
 * (nothing was done) when the listing lacks the calling thread: /proc/self/task then shows another PID
 * namespace's ids (a /proc mounted for another namespace), or nothing, and no thread of it can be trusted. */
enum nb_bind_slot {
    NB_BIND_TID = 0,        /* the calling thread's id (0: the call stopped before changing anything) */
    NB_BIND_OLD_MODE = 1,   /* the three slots nb_*_swap_mempolicy fills: old mode, mode now, */
    NB_BIND_NOW_MODE = 2,
    NB_BIND_ERRS = 3,       /* and the three steps' errors (3, 4, 5) */
    NB_BIND_FACTS = 6,      /* what happened: bits of enum nb_bind_fact */
    NB_BIND_PROCESSED = 7,  /* threads the walk processed (those found after it included) */
    NB_BIND_EXITED = 8,     /* threads other than the caller that exited during the walk */
    NB_BIND_LINKS = 9,      /* the link count of the /proc/self/task directory listed (0: not read) */
    NB_BIND_HELD = 10,      /* 1: this buffer holds the process's bind lock (nb_bind_hold, nb_bind_release) */
    NB_BIND_GEN = 11,       /* which taking of the lock this buffer's was (see nb_bind_hold) */
    NB_BIND_SETTLED = 12,   /* 1: no thread appeared after the walk that was not walked (or none was looked for);
                             * 0: after R more looks new threads still appeared: NB_BIND_UNSEEN of them, their ids
                             * right after the NB_BIND_PROCESSED walked ones; NB_NO_ROOM: no room to look again
                             * (nothing looked for); -errno or NB_CALLER_NOT_LISTED: looking again failed */
    NB_BIND_UNSEEN = 13,
    NB_BIND_HEADER = 14
};
/* Facts of a bind (NB_BIND_FACTS): each bit one thing that happened, nothing judged. */
enum nb_bind_fact {
    NB_OLD_READ = 1,        /* the policy before was read (NB_BIND_OLD_MODE, the old node mask) */
    NB_POLICY_SET = 2,      /* set_mempolicy accepted the policy asked for */
    NB_NOW_READ = 4,        /* the policy was read after (NB_BIND_NOW_MODE, the node mask now) */
    NB_MODE_AS_SET = 8,     /* the mode read after is the one set */
    NB_NODES_AS_SET = 16,   /* the node mask read after is the one set (node_words words; NULL: no nodes) */
    NB_WALKED = 32,         /* the walk ran */
    NB_CALLER_SET = 64,     /* the calling thread's CPUs were set and read back (its status NB_BOUND) */
    NB_CALLER_AS_SET = 128, /* the calling thread's CPUs read back are exactly the mask set */
    NB_COUNTED = 256        /* NB_COUNT_LINKS: the link count said the caller is alone; nothing was listed */
};
/* Flags of nb_*_bind besides nb_affinity_flags. */
enum nb_bind_flags {
    NB_ONLY_CALLER = 8,     /* the calling thread alone: nothing listed */
    NB_NEED_OLD = 16,       /* stop before setting anything when the old policy cannot be read */
    NB_COUNT_LINKS = 32,    /* when the cached task directory is this process's (the caller is the main thread of
                             * the process that opened it) and its link count (procfs: 2 + threads) says one
                             * thread, take the caller alone without listing (NB_COUNTED) */
    NB_SETTLE_SHIFT = 8     /* R, the rounds of listing again, in bits 8..15 */
};
enum { NB_CALLER_NOT_LISTED = -300000, NB_NO_ROOM = -400000 };
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
long nb_sys_bind(const struct nb_bind_request *req, int flags, size_t cap, int *out);
long nb_numa_bind(const struct nb_bind_request *req, int flags, size_t cap, int *out);

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


/* ---- System V shared memory and a range's pages (numactl's --shm/--touch: numabind.backends.segment) ---- */
/* ftok(3): the System V key of the file at `path` with `proj_id` (as ipcrm and numactl compute it), or -errno. */
long nb_ftok(const char *path, int proj_id);
/* shmget(2): the id of the segment of `key` of at least `size` bytes (`flags`: IPC_CREAT, SHM_HUGETLB and the
 * permission bits), or -errno. */
long nb_shmget(long key, size_t size, int flags);
/* The size in bytes of the segment `shmid` (shmctl IPC_STAT) into *size; 0, or -errno. */
long nb_shm_size(int shmid, unsigned long long *size);
/* shmat(2) at an address the kernel picks, read-write: 0 and the address in *addr, or -errno. */
long nb_shmat(int shmid, void **addr);
/* shmdt(2) of an address nb_shmat returned; 0, or -errno. */
long nb_shmdt(void *addr);
/* Faults in every `step` bytes of [addr, addr + len) with an atomic or of 0 into one byte of each (a write that
 * changes nothing, safe beside other writers of a shared segment): each page is allocated under its range's
 * policy.  Returns the pages touched, or -EINVAL for a step of 0. */
long nb_touch_range(void *addr, size_t len, size_t step);

/* ---- Measuring memory (numabind check --measure: numabind.preflight.measure).  Primitives only: the caller
 * allocates, binds and verifies the memory, and decides what the figures mean.  Each loop reads CLOCK_MONOTONIC
 * between small batches and stops once `budget_ns` has passed (after at least one batch). ---- */
/* Links the `len / stride` lines of `buf` (each `stride` bytes, a multiple of sizeof(void *), at least 2 lines)
 * into one random cycle (Sattolo's shuffle, seeded by `seed`): the first word of each line points at the next,
 * so a chase visits every line once per lap in an order no prefetcher predicts.  Writes (faults in) every line.
 * Returns the lines linked, or -EINVAL. */
long nb_chase_link(void *buf, size_t len, size_t stride, unsigned long long seed);
/* Dependent loads along the cycle nb_chase_link made, from `buf`, for `budget_ns`: the loads made into *loads and
 * the nanoseconds per load into *ns_per_load.  0, or -EINVAL. */
long nb_chase(const void *buf, unsigned long long budget_ns, double *ns_per_load, unsigned long long *loads);
/* Streaming read of [buf, buf + len) (64-bit words, summed), pass after pass, for `budget_ns`: the bytes read
 * into *bytes and bytes per second into *bytes_per_s.  0, or -EINVAL (len under 8 bytes). */
long nb_stream_read(const void *buf, size_t len, unsigned long long budget_ns, double *bytes_per_s,
                    unsigned long long *bytes);
/* Copy of [src, src + len) to [dst, dst + len) (memcpy, in chunks), pass after pass, for `budget_ns`: the bytes
 * moved (read plus written, as STREAM counts a copy) into *bytes and bytes per second into *bytes_per_s.  0, or
 * -EINVAL (len 0, or the ranges overlap). */
long nb_stream_copy(void *dst, const void *src, size_t len, unsigned long long budget_ns, double *bytes_per_s,
                    unsigned long long *bytes);

#endif
