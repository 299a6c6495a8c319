/* The kernel harness: the only program that runs a candidate kernel (see harness.py, which compiles it once and
 * starts it inside the sandbox). It holds no Python and no reference: the candidate, its buffers, a clock.
 *
 * stdin  (little-endian, written by the parent before anything runs):
 *   u32 magic, u32 n_inputs, u32 n_sizes, u32 n_sets, u32 n_calls
 *   per set:  i32 sizes[n_sizes], u64 counts[n_inputs], u64 out_count, then each input's float32 values
 *   per call: u32 set, u32 stack_shift (bytes the candidate's frame is moved down by on that call)
 * stdout (fixed-size records, parsed by the parent as numbers, never executed):
 *   per call:   u32 RECORD_CALL, u32 set, u64 nanoseconds, float32 out[out_count]
 *   on failure: u32 RECORD_FAULT, u32 kind (FAULT_*), u32 call, u32 signal (FAULT_SETUP: the source line)
 *   at the end: u32 RECORD_END
 *
 * Layers, in the order they are set up:
 * - a seccomp filter from the first instruction: files may be opened for reading only; no new processes, no
 *   sockets, no signals to others, no mounts or namespaces (those calls fail with EPERM);
 * - every buffer sits between PROT_NONE guard pages, its end at the end of a page (rounded up to 64 bytes, the
 *   few bytes of slack filled with a canary): a read or write past an input or past `out` faults;
 * - inputs are read-only (PROT_READ): a kernel that writes to its inputs faults;
 * - the candidate is loaded (dlopen), then a second, strict filter allows only write to stdout, the clock and
 *   exit: the candidate cannot open, map, protect, allocate or fork anything;
 * - before every call `out` is filled with NaN and the stack below the call is zeroed (a cache kept below the
 *   frame is gone), the inputs are read once (into the cache, where the reference has its own), and the call's
 *   frame is moved down by a shift the parent drew (its address never repeats).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <alloca.h>

#define MAGIC 0x4e52484bu /* "KHRN" */
#define RECORD_CALL 1u
#define RECORD_FAULT 2u
#define RECORD_END 3u
#define FAULT_INPUT_WRITE 1u  /* wrote to an input */
#define FAULT_GUARD 2u        /* read or wrote past a buffer (a guard page) */
#define FAULT_CRASH 3u        /* any other fatal signal */
#define FAULT_CANARY 4u       /* wrote into the slack next to out */
#define FAULT_SETUP 5u        /* the harness could not load the library or read its input */
#define MAX_INPUTS 6
#define MAX_SIZES 6
#define MAX_SETS 64
#define CANARY 0x7fc0dead
#define ALIGN 64
#define MAX_SHIFT (64u << 10)

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#else
#error "the kernel harness knows the system-call numbers of x86-64 and aarch64 only"
#endif

struct region {
    unsigned char* base; /* first guard page */
    size_t span;         /* guard + data pages + guard */
    float* data;
    size_t count;
    size_t slack_head, slack_tail; /* bytes between the guards and the data */
};

struct set {
    int32_t sizes[MAX_SIZES];
    struct region inputs[MAX_INPUTS];
    struct region out;
};

static struct set sets[MAX_SETS];
static uint32_t n_inputs, n_sizes, n_sets, n_calls, current_call;
static size_t page;

static void write_all(const void* data, size_t size) {
    const unsigned char* p = data;
    while (size > 0) {
        ssize_t done = write(1, p, size);
        if (done <= 0) {
            if (done < 0 && errno == EINTR) continue;
            syscall(SYS_exit_group, 2);
        }
        p += done;
        size -= (size_t)done;
    }
}

static void fail(uint32_t kind, uint32_t signal_number) {
    uint32_t record[4] = {RECORD_FAULT, kind, current_call, signal_number};
    write_all(record, sizeof record);
    syscall(SYS_exit_group, 0);
}

static void read_all(void* data, size_t size) {
    unsigned char* p = data;
    while (size > 0) {
        ssize_t done = read(0, p, size);
        if (done <= 0) {
            if (done < 0 && errno == EINTR) continue;
            fail(FAULT_SETUP, 112);
        }
        p += done;
        size -= (size_t)done;
    }
}

static int inside(const struct region* r, uintptr_t address, int with_guards) {
    uintptr_t start = (uintptr_t)r->base + (with_guards ? 0 : page);
    uintptr_t end = (uintptr_t)r->base + r->span - (with_guards ? 0 : page);
    return r->base != NULL && address >= start && address < end;
}

static void on_fault(int signal_number, siginfo_t* info, void* context) {
    (void)context;
    uintptr_t address = (uintptr_t)info->si_addr;
    if (signal_number == SIGSEGV) {
        for (uint32_t s = 0; s < n_sets; s++) {
            for (uint32_t i = 0; i < n_inputs; i++)
                if (inside(&sets[s].inputs[i], address, 0)) fail(FAULT_INPUT_WRITE, (uint32_t)signal_number);
            for (uint32_t i = 0; i < n_inputs; i++)
                if (inside(&sets[s].inputs[i], address, 1)) fail(FAULT_GUARD, (uint32_t)signal_number);
            if (inside(&sets[s].out, address, 1)) fail(FAULT_GUARD, (uint32_t)signal_number);
        }
    }
    fail(FAULT_CRASH, (uint32_t)signal_number);
}

/* A buffer of `count` floats between two guard pages, its end 64 bytes or less before the second guard. */
static void allocate(struct region* r, size_t count) {
    size_t bytes = count * sizeof(float);
    size_t padded = (bytes + ALIGN - 1) / ALIGN * ALIGN;
    size_t pages = (padded + page - 1) / page;
    if (pages == 0) pages = 1;
    r->span = (pages + 2) * page;
    r->base = mmap(NULL, r->span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r->base == MAP_FAILED) fail(FAULT_SETUP, 148);
    unsigned char* data_end = r->base + (pages + 1) * page;
    r->data = (float*)(data_end - padded);
    r->count = count;
    r->slack_head = (size_t)((unsigned char*)r->data - (r->base + page));
    r->slack_tail = padded - bytes;
    uint32_t canary = CANARY;
    for (unsigned char* p = r->base + page; p < (unsigned char*)r->data; p += 4) memcpy(p, &canary, 4);
    for (unsigned char* p = (unsigned char*)(r->data + count); p < data_end; p += 4) memcpy(p, &canary, 4);
}

/* Guard pages unreadable, and an input's data pages read-only. Done after loading the library, so that
 * nothing its loading ran can have changed them. */
static void protect(struct region* r, int read_only) {
    if (mprotect(r->base, page, PROT_NONE) || mprotect(r->base + r->span - page, page, PROT_NONE) ||
        (read_only && mprotect(r->base + page, r->span - 2 * page, PROT_READ)))
        fail(FAULT_SETUP, 164);
}

static int canaries_intact(const struct region* r) {
    uint32_t value;
    for (unsigned char* p = r->base + page; p < (unsigned char*)r->data; p += 4) {
        memcpy(&value, p, 4);
        if (value != CANARY) return 0;
    }
    for (unsigned char* p = (unsigned char*)(r->data + r->count); p < (unsigned char*)(r->data + r->count) + r->slack_tail;
         p += 4) {
        memcpy(&value, p, 4);
        if (value != CANARY) return 0;
    }
    return 1;
}

/* --- seccomp filters ------------------------------------------------------------------------------------- */
#define LOAD(field) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, field))
#define LOAD_ARG(n) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[n]))
#define RETURN(action) BPF_STMT(BPF_RET | BPF_K, (action))
#define ALLOW_IF(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), RETURN(SECCOMP_RET_ALLOW)
/* allow `nr` only when argument `arg` (its low 32 bits) has none of the bits in `bits`; then reload nr */
#define ALLOW_IF_ARG_LACKS(nr, arg, bits)                                                         \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 4), LOAD_ARG(arg),                              \
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, (bits), 1, 0), RETURN(SECCOMP_RET_ALLOW), RETURN(DENY)
/* allow `nr` only when argument `arg` equals `value` */
#define ALLOW_IF_ARG_IS(nr, arg, value)                                                           \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 4), LOAD_ARG(arg),                              \
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (value), 0, 1), RETURN(SECCOMP_RET_ALLOW), RETURN(DENY)
/* allow `nr` only when argument `arg` equals `a` or `b` */
#define ALLOW_IF_ARG_IS_EITHER(nr, arg, a, b)                                                     \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 5), LOAD_ARG(arg),                              \
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (a), 1, 0), BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (b), 0, 1), \
        RETURN(SECCOMP_RET_ALLOW), RETURN(DENY)
#define ARCH_CHECK LOAD(arch), BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0), RETURN(SECCOMP_RET_KILL_PROCESS), \
    LOAD(nr)
#define WRITE_FLAGS (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND | 020000000 /* __O_TMPFILE */)

static void install(struct sock_filter* filter, unsigned short length) {
    struct sock_fprog program = {length, filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program))
        fail(FAULT_SETUP, 201);
}

/* While loading: what the dynamic loader and the harness's setup need; anything else fails with EPERM. */
static void install_loading_filter(void) {
#define DENY (SECCOMP_RET_ERRNO | EPERM)
    struct sock_filter filter[] = {
        ARCH_CHECK,
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1), RETURN(SECCOMP_RET_KILL_PROCESS), /* x32 */
        ALLOW_IF(__NR_read), ALLOW_IF(__NR_pread64), ALLOW_IF(__NR_close), ALLOW_IF(__NR_fstat),
        ALLOW_IF(__NR_newfstatat), ALLOW_IF(__NR_statx), ALLOW_IF(__NR_lseek), ALLOW_IF(__NR_mmap),
        ALLOW_IF(__NR_munmap), ALLOW_IF(__NR_brk), ALLOW_IF(__NR_futex),
        ALLOW_IF(__NR_rt_sigaction), ALLOW_IF(__NR_rt_sigprocmask), ALLOW_IF(__NR_rt_sigreturn),
        ALLOW_IF(__NR_sigaltstack), ALLOW_IF(__NR_prctl), ALLOW_IF(__NR_seccomp), ALLOW_IF(__NR_getrandom),
        ALLOW_IF(__NR_clock_gettime), ALLOW_IF(__NR_exit), ALLOW_IF(__NR_exit_group), ALLOW_IF(__NR_getpid),
        ALLOW_IF(__NR_getrlimit), ALLOW_IF(__NR_prlimit64), ALLOW_IF(__NR_madvise), ALLOW_IF(__NR_faccessat),
#ifdef __NR_access
        ALLOW_IF(__NR_access), ALLOW_IF(__NR_stat), ALLOW_IF(__NR_lstat),
#endif
#ifdef __NR_faccessat2
        ALLOW_IF(__NR_faccessat2),
#endif
        ALLOW_IF_ARG_IS_EITHER(__NR_write, 0, 1, 2),
        LOAD(nr), ALLOW_IF_ARG_LACKS(__NR_openat, 2, WRITE_FLAGS),
        LOAD(nr), ALLOW_IF_ARG_LACKS(__NR_mprotect, 2, PROT_WRITE | PROT_EXEC),
#ifdef __NR_open
        LOAD(nr), ALLOW_IF_ARG_LACKS(__NR_open, 1, WRITE_FLAGS),
#endif
        RETURN(DENY),
    };
    install(filter, (unsigned short)(sizeof filter / sizeof filter[0]));
#undef DENY
}

/* While the candidate runs: write to stdout, read the clock, return from a signal handler, exit. */
static void install_running_filter(void) {
#define DENY SECCOMP_RET_KILL_PROCESS
    struct sock_filter filter[] = {
        ARCH_CHECK,
        ALLOW_IF(__NR_clock_gettime), ALLOW_IF(__NR_rt_sigreturn), ALLOW_IF(__NR_exit),
        ALLOW_IF(__NR_exit_group),
        ALLOW_IF_ARG_IS(__NR_write, 0, 1),
        RETURN(DENY),
    };
    install(filter, (unsigned short)(sizeof filter / sizeof filter[0]));
#undef DENY
}

/* --- calling the candidate ------------------------------------------------------------------------------- */
/* Every argument of a kernel (pointers, then ints) travels in an integer register or an 8-byte stack slot on
 * x86-64 and aarch64, so one function type with eight integer arguments calls every task's signature. */
typedef void (*kernel_fn)(intptr_t, intptr_t, intptr_t, intptr_t, intptr_t, intptr_t, intptr_t, intptr_t);

static size_t scrub_bytes;

/* Zero the stack below this frame: whatever an earlier call left there (a cache) is gone. */
__attribute__((noinline)) static void scrub_stack(void) {
    unsigned char* below = alloca(scrub_bytes);
    memset(below, 0, scrub_bytes);
    __asm__ volatile("" : : "r"(below) : "memory");
}

/* Read every cache line of a set's inputs: the reference is timed with its inputs in cache, so is the kernel
 * (the timing compares kernels, not what the stack scrub left in the cache). */
static void warm(const struct set* set) {
    float sum = 0.0f;
    for (uint32_t i = 0; i < n_inputs; i++)
        for (size_t j = 0; j < set->inputs[i].count; j += 16) sum += set->inputs[i].data[j];
    __asm__ volatile("" : : "r"(&sum), "m"(sum) : "memory");
}

__attribute__((noinline)) static uint64_t timed_call(kernel_fn kernel, const intptr_t* args, uint32_t shift) {
    unsigned char* moved = alloca(shift + 1);
    __asm__ volatile("" : : "r"(moved) : "memory");
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    kernel(args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7]);
    clock_gettime(CLOCK_MONOTONIC, &end);
    return (uint64_t)(end.tv_sec - start.tv_sec) * 1000000000u + (uint64_t)(end.tv_nsec - start.tv_nsec);
}

int main(int argc, char** argv) {
    install_loading_filter();
    page = (size_t)sysconf(_SC_PAGESIZE);
    if (argc != 2) fail(FAULT_SETUP, 286);
    uint32_t header[5];
    read_all(header, sizeof header);
    n_inputs = header[1], n_sizes = header[2], n_sets = header[3], n_calls = header[4];
    if (header[0] != MAGIC || n_inputs > MAX_INPUTS || n_inputs + 1 + n_sizes > 8 || n_sizes > MAX_SIZES ||
        n_sets == 0 || n_sets > MAX_SETS)
        fail(FAULT_SETUP, 292);
    for (uint32_t s = 0; s < n_sets; s++) {
        uint64_t counts[MAX_INPUTS], out_count;
        read_all(sets[s].sizes, n_sizes * sizeof(int32_t));
        read_all(counts, n_inputs * sizeof(uint64_t));
        read_all(&out_count, sizeof out_count);
        for (uint32_t i = 0; i < n_inputs; i++) {
            allocate(&sets[s].inputs[i], counts[i]);
            read_all(sets[s].inputs[i].data, counts[i] * sizeof(float));
        }
        allocate(&sets[s].out, out_count);
    }
    uint32_t* schedule = mmap(NULL, (size_t)n_calls * 8 + 8, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                              -1, 0);
    if (schedule == MAP_FAILED) fail(FAULT_SETUP, 306);
    read_all(schedule, (size_t)n_calls * 8);
    for (uint32_t c = 0; c < n_calls; c++)
        if (schedule[2 * c] >= n_sets || schedule[2 * c + 1] > MAX_SHIFT) fail(FAULT_SETUP, 309);

    struct rlimit stack;
    getrlimit(RLIMIT_STACK, &stack);
    size_t limit = stack.rlim_cur == RLIM_INFINITY || stack.rlim_cur > (64u << 20) ? (64u << 20) : stack.rlim_cur;
    scrub_bytes = limit - (192u << 10); /* all of the stack but the harness's own frames and the largest shift */

    static unsigned char alternate[1 << 16];
    stack_t signal_stack = {.ss_sp = alternate, .ss_size = sizeof alternate, .ss_flags = 0};
    struct sigaction action = {0};
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    if (sigaltstack(&signal_stack, NULL)) fail(FAULT_SETUP, 322);
    int signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGABRT, SIGSYS};
    for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++)
        if (sigaction(signals[i], &action, NULL)) fail(FAULT_SETUP, 325);

    void* library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    kernel_fn kernel = library ? (kernel_fn)(uintptr_t)dlsym(library, "kernel") : NULL;
    if (kernel == NULL) {
        const char* why = dlerror();
        if (why != NULL) (void)!write(2, why, strlen(why));
        fail(FAULT_SETUP, 329);
    }
    for (uint32_t s = 0; s < n_sets; s++) {
        for (uint32_t i = 0; i < n_inputs; i++) protect(&sets[s].inputs[i], 1);
        protect(&sets[s].out, 0);
    }
    scrub_stack(); /* the stack pages exist before the filter forbids growing anything else */
    install_running_filter();

    for (current_call = 0; current_call < n_calls; current_call++) {
        uint32_t s = schedule[2 * current_call];
        struct set* set = &sets[s];
        intptr_t args[8] = {0};
        uint32_t a = 0;
        for (uint32_t i = 0; i < n_inputs; i++) args[a++] = (intptr_t)set->inputs[i].data;
        args[a++] = (intptr_t)set->out.data;
        for (uint32_t i = 0; i < n_sizes; i++) args[a++] = set->sizes[i];
        for (size_t i = 0; i < set->out.count; i++) set->out.data[i] = NAN; /* a kernel that writes nothing is wrong */
        scrub_stack();
        warm(set);
        uint64_t nanoseconds = timed_call(kernel, args, schedule[2 * current_call + 1]);
        if (!canaries_intact(&set->out)) fail(FAULT_CANARY, 0);
        uint32_t record[2] = {RECORD_CALL, s};
        write_all(record, sizeof record);
        write_all(&nanoseconds, sizeof nanoseconds);
        write_all(set->out.data, set->out.count * sizeof(float));
    }
    uint32_t end = RECORD_END;
    write_all(&end, sizeof end);
    syscall(SYS_exit_group, 0);
}
