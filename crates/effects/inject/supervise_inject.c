/*
 * supervise's preload library, for `listen: {address, inject: true}`.
 *
 * supervise binds the listening socket once and hands it to every instance
 * (fd 3, 4, … as LISTEN_FDS says). A server that binds its port itself
 * never looks there. Preloaded into it, this library puts the inherited
 * socket in place of the program's own when the program calls bind() on
 * the same address (any address, for a wildcard on either side) and port:
 * dup3() over the program's fd, keeping its close-on-exec flag, and bind()
 * returns 0. O_NONBLOCK is not the fd's but the open file description's,
 * which every instance shares: a program whose socket was non-blocking
 * sets it there, and it is never cleared (another instance may rely on
 * it). The options the program set on its own socket go with it: they are
 * not carried over (which ones it chose cannot be told from defaults). The
 * listen() that follows on that fd returns 0 without touching the socket
 * (so the program's backlog does not replace supervise's). Every other
 * socket and call goes to libc untouched, and getsockname() tells the
 * truth, since the fd is the real socket.
 *
 * shutdown() on such an fd is a no-op too: the socket is every instance's,
 * and a stopping program that shuts its listener down would take the port
 * from all of them.
 *
 * A bind of the port gets the kernel's answer to a program alone while
 * the process holds a bind it was handed the socket for: EADDRINUSE where
 * the kernel would refuse the two sockets the port — the same address, or
 * a wildcard on one side over the other's address, across families only
 * through `::` without IPV6_V6ONLY or a v4-mapped address — unless both set
 * SO_REUSEPORT. Otherwise it is handed the socket again: 127.0.0.1 and
 * 127.0.0.2, 127.0.0.1 and ::1, 0.0.0.0 and :: with IPV6_V6ONLY each get
 * supervise's one socket, which holds all of them when it is a wildcard
 * (binding the second for real would meet supervise's socket and fail, and
 * refusing it would fail a program the kernel lets run; each of its fds
 * then accepts connections to either address). Every bind that holds the
 * socket is weighed, up to MAX_HANDED at once (see claim_slot). Handing it
 * regardless would tell a program that binds its address twice, or a
 * forked child that binds what it inherited, that it worked. Threads that
 * bind one port at once are answered one after the other (see lock_port).
 *
 * Each substitution is reported to supervise on its notify socket
 * ("SUPERVISE_INJECTED=FD"), so an instance that becomes ready without one
 * (a static binary, raw syscalls) is warned about.
 *
 * Everything that needs the environment or allocation happens in the
 * constructor. Once it has run, bind(), listen() and shutdown() use only
 * async-signal-safe calls (getsockopt, fstat, fcntl, dup3, getpid, poll,
 * socket, sendto, close), GCC's __atomic builtins and no memory but the
 * stack and the static table: a program may call them between fork() and
 * exec(). Only a call made before the constructor (from another library's
 * constructor) looks libc up with dlsym() first.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* The most injected sockets one instance has (supervise refuses more). */
#define MAX_INJECTED 16
/* The most binds this process can be handed one inherited socket for and
 * still hold at once (see claim_slot for one more). */
#define MAX_HANDED 16
/* How often a bind tries for the lock of its port that another thread of
 * this process holds (see lock_port), and how long it waits between. */
#define LOCK_TRIES 1000
#define LOCK_WAIT_MS 1

/* What a program's bind() asked for: the address, and the options of its
 * own socket that decide whether the kernel lets two sockets have one
 * port, read before the socket is replaced. */
struct request {
    int family;
    int wildcard;
    struct in_addr v4;  /* AF_INET */
    struct in6_addr v6; /* AF_INET6 */
    int v6only;
    int reuseport;
};

/* A bind this process was handed the socket for: the fd, and what the
 * program asked for there. `held` is written last (release) and read first
 * (acquire), so whoever sees it set sees the fields it covers. */
struct handed {
    int held;
    int fd;
    struct request asked;
};

struct injected {
    int fd;
    int port;
    int wildcard;
    int family;
    struct in_addr v4;
    struct in6_addr v6;
    dev_t dev;
    ino_t ino;
    /* The lock of the bind() calls of this port: 0, or the pid of the
     * process one of whose threads holds it (see lock_port). */
    int owner;
    /* The binds of this process that hold the socket (see conflicts). */
    struct handed handed[MAX_HANDED];
};

static struct injected table[MAX_INJECTED];
static int table_len;
static int (*real_bind)(int, const struct sockaddr *, socklen_t);
static int (*real_listen)(int, int);
static int (*real_shutdown)(int, int);
static struct sockaddr_un report_address;
static socklen_t report_length;

static int parse_fd(const char **cursor) {
    int value = 0, digits = 0;
    while (**cursor >= '0' && **cursor <= '9' && digits < 6) {
        value = value * 10 + (**cursor - '0');
        (*cursor)++;
        digits++;
    }
    if (**cursor == ',') (*cursor)++;
    return digits ? value : -1;
}

static int option(int fd, int level, int name) {
    int value = 0;
    socklen_t length = sizeof value;
    return getsockopt(fd, level, name, &value, &length) == 0 && value;
}

/* libc's functions. Looked up in the constructor, and again on a call that
 * comes before it (a constructor of a library linked into the program runs
 * first). */
static void resolve(void) {
    if (!real_bind) real_bind = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "bind");
    if (!real_listen) real_listen = (int (*)(int, int))dlsym(RTLD_NEXT, "listen");
    if (!real_shutdown) real_shutdown = (int (*)(int, int))dlsym(RTLD_NEXT, "shutdown");
}

__attribute__((constructor)) static void supervise_inject_init(void) {
    resolve();
    const char *fds = getenv("SUPERVISE_INJECT_FDS");
    while (fds && *fds && table_len < MAX_INJECTED) {
        int fd = parse_fd(&fds);
        if (fd < 0) break;
        struct sockaddr_storage address;
        socklen_t length = sizeof address;
        struct stat st;
        /* A listening socket only: a program's child, which inherits the
         * environment, may have another socket at that number (a
         * connection, whose local port is the one it would bind). */
        if (getsockname(fd, (struct sockaddr *)&address, &length) != 0 || fstat(fd, &st) != 0 ||
            !option(fd, SOL_SOCKET, SO_ACCEPTCONN))
            continue;
        struct injected *entry = &table[table_len];
        memset(entry, 0, sizeof *entry);
        entry->fd = fd;
        entry->dev = st.st_dev;
        entry->ino = st.st_ino;
        if (address.ss_family == AF_INET) {
            struct sockaddr_in *in = (struct sockaddr_in *)&address;
            entry->family = AF_INET;
            entry->port = ntohs(in->sin_port);
            entry->v4 = in->sin_addr;
            entry->wildcard = in->sin_addr.s_addr == htonl(INADDR_ANY);
        } else if (address.ss_family == AF_INET6) {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&address;
            entry->family = AF_INET6;
            entry->port = ntohs(in6->sin6_port);
            entry->v6 = in6->sin6_addr;
            entry->wildcard = IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr);
        } else {
            continue;
        }
        table_len++;
    }
    /* "@name": an abstract socket, as NOTIFY_SOCKET spells it. */
    const char *report = getenv("SUPERVISE_INJECT_REPORT");
    if (report && report[0] == '@' && strlen(report) < sizeof report_address.sun_path) {
        size_t name = strlen(report + 1);
        report_address.sun_family = AF_UNIX;
        report_address.sun_path[0] = '\0';
        memcpy(report_address.sun_path + 1, report + 1, name);
        report_length = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + name);
    }
}

/* Whether the program's address asks for the socket `entry` is. */
static int matches(const struct injected *entry, const struct sockaddr *address, socklen_t length) {
    if (address->sa_family == AF_INET && length >= (socklen_t)sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)address;
        if (ntohs(in->sin_port) != entry->port) return 0;
        if (entry->wildcard || in->sin_addr.s_addr == htonl(INADDR_ANY)) return 1;
        return entry->family == AF_INET && entry->v4.s_addr == in->sin_addr.s_addr;
    }
    if (address->sa_family == AF_INET6 && length >= (socklen_t)sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)address;
        if (ntohs(in6->sin6_port) != entry->port) return 0;
        if (entry->wildcard || IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr)) return 1;
        if (entry->family == AF_INET6) return IN6_ARE_ADDR_EQUAL(&entry->v6, &in6->sin6_addr);
        /* ::ffff:a.b.c.d names an IPv4 address. */
        return IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) &&
               memcmp(&in6->sin6_addr.s6_addr[12], &entry->v4.s_addr, 4) == 0;
    }
    return 0;
}

static void report_substitution(int fd) {
    if (!report_length) return;
    char message[40] = "SUPERVISE_INJECTED=";
    size_t at = strlen(message);
    char digits[12];
    int count = 0;
    unsigned value = (unsigned)fd;
    do {
        digits[count++] = (char)('0' + value % 10);
        value /= 10;
    } while (value && count < (int)sizeof digits);
    while (count) message[at++] = digits[--count];
    int sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (sock < 0) return;
    /* Never wait on supervise: a full queue loses one report, not a bind. */
    sendto(sock, message, at, MSG_NOSIGNAL | MSG_DONTWAIT, (const struct sockaddr *)&report_address, report_length);
    close(sock);
}

/* The inherited socket `fd` is, if it is one. */
static const struct injected *inherited(int fd) {
    struct stat st;
    if (table_len == 0 || fstat(fd, &st) != 0) return NULL;
    for (int i = 0; i < table_len; i++)
        if (table[i].dev == st.st_dev && table[i].ino == st.st_ino) return &table[i];
    return NULL;
}

/* Whether the inherited fd of `entry` is still the socket supervise handed
 * over (a program may have closed fd 3 and reused the number). */
static int still_inherited(const struct injected *entry) {
    struct stat st;
    return fstat(entry->fd, &st) == 0 && st.st_dev == entry->dev && st.st_ino == entry->ino;
}

/* Which addresses of the port a socket that asked for `asked` would hold,
 * as the kernel sees it: its IPv4 part (none, all or one), and its IPv6
 * part. `::` holds every IPv6 address, and every IPv4 one unless
 * IPV6_V6ONLY; `::ffff:a.b.c.d` holds a.b.c.d; another IPv6 address holds
 * itself only (the kernel sets IPV6_V6ONLY on binding it). */
enum { NONE, ALL, ONE };
struct reach {
    int v4;
    struct in_addr a4;
    int v6;
    struct in6_addr a6;
};

static struct reach reach_of(const struct request *asked) {
    struct reach reach;
    memset(&reach, 0, sizeof reach);
    if (asked->family == AF_INET) {
        reach.v4 = asked->wildcard ? ALL : ONE;
        reach.a4 = asked->v4;
    } else if (IN6_IS_ADDR_V4MAPPED(&asked->v6)) {
        memcpy(&reach.a4.s_addr, &asked->v6.s6_addr[12], sizeof reach.a4.s_addr);
        reach.v4 = reach.a4.s_addr == htonl(INADDR_ANY) ? ALL : ONE;
    } else if (asked->wildcard) {
        reach.v6 = ALL;
        reach.v4 = asked->v6only ? NONE : ALL;
    } else {
        reach.v6 = ONE;
        reach.a6 = asked->v6;
    }
    return reach;
}

/* Whether the kernel would refuse a socket asking for `wanted` the port
 * while a socket that asked for `held` has it: unless both set
 * SO_REUSEPORT, when what they hold meets — the same address, or a
 * wildcard on either side over the other's. So 127.0.0.1 beside
 * 127.0.0.2, 127.0.0.1 beside ::1, 0.0.0.0 beside :: with IPV6_V6ONLY
 * (asyncio's create_server) all have the port; 0.0.0.0 beside 127.0.0.1,
 * or beside :: without IPV6_V6ONLY, do not. */
static int conflicts(const struct request *wanted, const struct request *held) {
    if (wanted->reuseport && held->reuseport) return 0;
    struct reach a = reach_of(wanted), b = reach_of(held);
    if (a.v4 != NONE && b.v4 != NONE && (a.v4 == ALL || b.v4 == ALL || a.a4.s_addr == b.a4.s_addr)) return 1;
    return a.v6 != NONE && b.v6 != NONE && (a.v6 == ALL || b.v6 == ALL || IN6_ARE_ADDR_EQUAL(&a.a6, &b.a6));
}

/* What the program's bind() of `fd` asks for, and 1, if it is one the
 * library may act on: a TCP socket of the address's family, an address of
 * that family long enough to read. 0 otherwise (the kernel answers). */
static int request_of(int fd, const struct sockaddr *address, socklen_t length, struct request *asked,
                      int *port) {
    int type = 0, domain = 0;
    socklen_t type_length = sizeof type, domain_length = sizeof domain;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &type_length) != 0 || type != SOCK_STREAM ||
        getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &domain_length) != 0 || domain != address->sa_family)
        return 0;
    memset(asked, 0, sizeof *asked);
    asked->family = domain;
    asked->reuseport = option(fd, SOL_SOCKET, SO_REUSEPORT);
    if (domain == AF_INET && length >= (socklen_t)sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)address;
        asked->v4 = in->sin_addr;
        asked->wildcard = in->sin_addr.s_addr == htonl(INADDR_ANY);
        *port = ntohs(in->sin_port);
        return 1;
    }
    if (domain == AF_INET6 && length >= (socklen_t)sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)address;
        asked->v6 = in6->sin6_addr;
        asked->wildcard = IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr);
        asked->v6only = option(fd, IPPROTO_IPV6, IPV6_V6ONLY);
        *port = ntohs(in6->sin6_port);
        return 1;
    }
    return 0;
}

/* Give back the locks of the entries for `port` before entry `upto`. */
static void unlock_port(int port, int upto) {
    for (int i = 0; i < upto; i++)
        if (table[i].port == port) __atomic_store_n(&table[i].owner, 0, __ATOMIC_RELEASE);
}

/* Take the locks of every entry for `port`, in table order (so two binds
 * of one port never wait on each other crosswise); 1 once all are held.
 * The check of what this process holds and the substitution that adds to
 * it are one step under them: two threads binding the port at once are
 * answered one after the other, as the kernel answers them, and never both
 * handed the socket where the kernel would refuse one. A lock is a
 * compare-and-swap of 0 to this process's pid; one whose pid is another
 * process's was copied by fork() from a thread that does not exist here
 * and is taken over. No thread waits for ever: after LOCK_TRIES waits of
 * LOCK_WAIT_MS (a thread stuck inside bind(), or a signal handler that
 * binds while the thread it interrupted holds the lock) the bind gets
 * EADDRINUSE, what the kernel answers when the port is taken. */
static int lock_port(int port) {
    int self = getpid();
    for (int i = 0; i < table_len; i++) {
        if (table[i].port != port) continue;
        for (int tries = 0;; tries++) {
            int owner = __atomic_load_n(&table[i].owner, __ATOMIC_RELAXED);
            if (owner != self &&
                __atomic_compare_exchange_n(&table[i].owner, &owner, self, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
                break;
            if (tries >= LOCK_TRIES) {
                unlock_port(port, i);
                return 0;
            }
            poll(NULL, 0, LOCK_WAIT_MS);
        }
    }
    return 1;
}

/* Whether `slot` is a bind that still holds the socket of `entry` (the
 * program may have closed that fd since, or put another file there). */
static int holds(const struct injected *entry, const struct handed *slot) {
    struct stat st;
    return __atomic_load_n(&slot->held, __ATOMIC_ACQUIRE) && fstat(slot->fd, &st) == 0 &&
           st.st_dev == entry->dev && st.st_ino == entry->ino;
}

/* Whether a bind this process holds for `port` keeps `wanted` from it.
 * Under the port's lock. */
static int taken(int port, const struct request *wanted) {
    for (int i = 0; i < table_len; i++) {
        if (table[i].port != port) continue;
        for (int k = 0; k < MAX_HANDED; k++)
            if (holds(&table[i], &table[i].handed[k]) && conflicts(wanted, &table[i].handed[k].asked)) return 1;
    }
    return 0;
}

/* A slot of `entry` for one more bind, freeing those that no longer hold
 * the socket; NULL when all MAX_HANDED still do. Under the port's lock.
 * The bind then gets EADDRINUSE, the kernel's answer when the port is
 * taken: it is the safe one, since a socket handed unrecorded could not be
 * weighed against later binds, which might then be told they worked where
 * the kernel would refuse them. */
static struct handed *claim_slot(struct injected *entry) {
    struct handed *free_slot = NULL;
    for (int k = 0; k < MAX_HANDED; k++) {
        struct handed *slot = &entry->handed[k];
        if (!holds(entry, slot)) {
            __atomic_store_n(&slot->held, 0, __ATOMIC_RELEASE);
            if (!free_slot) free_slot = slot;
        }
    }
    return free_slot;
}

/* Put the socket of `entry` in place of `fd`; 0 once done. */
static int substitute(const struct injected *entry, int fd) {
    int descriptor_flags = fcntl(fd, F_GETFD);
    int status_flags = fcntl(fd, F_GETFL);
    if (descriptor_flags < 0 || status_flags < 0) return -1;
    if (dup3(entry->fd, fd, (descriptor_flags & FD_CLOEXEC) ? O_CLOEXEC : 0) != fd) return -1;
    /* The status flags belong to the shared socket: only ever add
     * non-blocking (see the README on programs that accept blocking). */
    if (status_flags & O_NONBLOCK) {
        int now = fcntl(fd, F_GETFL);
        if (now >= 0 && !(now & O_NONBLOCK)) fcntl(fd, F_SETFL, now | O_NONBLOCK);
    }
    return 0;
}

/* The entry whose socket a bind of `address` is handed: one of the
 * program's own family first. An IPv4 socket may stand in for an IPv6 one
 * (its addresses fit the program's buffers), never the other way round. */
static struct injected *chosen(const struct sockaddr *address, socklen_t length) {
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < table_len; i++) {
            struct injected *entry = &table[i];
            int same = entry->family == address->sa_family;
            int fits = address->sa_family == AF_INET6 && entry->family == AF_INET;
            if ((pass == 0 ? same : fits) && matches(entry, address, length) && still_inherited(entry)) return entry;
        }
    }
    return NULL;
}

/* What bind() answers for a bind of `port` the library may act on, under
 * the port's lock: -1 with errno when taken; 0 when handed the socket
 * (*handed set); 1 to leave it to the kernel. */
static int decide(int fd, const struct sockaddr *address, socklen_t length, int port,
                  const struct request *wanted, int *handed) {
    /* The kernel's answer to the program alone, whether or not this bind
     * is one to hand over: a bind this process holds keeps the port. */
    if (taken(port, wanted)) {
        errno = EADDRINUSE;
        return -1;
    }
    struct injected *entry = chosen(address, length);
    if (!entry) return 1;
    struct handed *slot = claim_slot(entry);
    if (!slot) {
        errno = EADDRINUSE;
        return -1;
    }
    if (substitute(entry, fd) != 0) return 1;
    slot->fd = fd;
    slot->asked = *wanted;
    __atomic_store_n(&slot->held, 1, __ATOMIC_RELEASE);
    *handed = 1;
    return 0;
}

int bind(int fd, const struct sockaddr *address, socklen_t length) {
    resolve();
    if (!real_bind) {
        errno = ENOSYS;
        return -1;
    }
    /* Not a socket already handed over (binding it again is the kernel's
     * EINVAL), and a TCP socket of the address's family (the kernel
     * answers a mismatch). */
    struct request wanted;
    int port = -1;
    if (!address || !table_len || inherited(fd) || !request_of(fd, address, length, &wanted, &port))
        return real_bind(fd, address, length);
    int ours = 0;
    for (int i = 0; i < table_len; i++) ours |= table[i].port == port;
    if (!ours) return real_bind(fd, address, length);
    if (!lock_port(port)) {
        errno = EADDRINUSE;
        return -1;
    }
    int handed = 0;
    int answer = decide(fd, address, length, port, &wanted, &handed);
    int saved = errno;
    unlock_port(port, table_len);
    errno = saved;
    if (handed) report_substitution(fd);
    return answer == 1 ? real_bind(fd, address, length) : answer;
}

int listen(int fd, int backlog) {
    resolve();
    if (!real_listen) {
        errno = ENOSYS;
        return -1;
    }
    /* Already listening, with supervise's backlog: keep it. */
    if (inherited(fd)) return 0;
    return real_listen(fd, backlog);
}

int shutdown(int fd, int how) {
    resolve();
    if (!real_shutdown) {
        errno = ENOSYS;
        return -1;
    }
    /* The socket is every instance's: shutting it down would stop them all. */
    if (inherited(fd)) return 0;
    return real_shutdown(fd, how);
}
