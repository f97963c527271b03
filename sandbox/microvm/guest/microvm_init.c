// cordon-microvm-init: PID 1 of a microVM sandbox (sandbox/microvm/microvm_backend.h). Static C;
// it runs from the guest initramfs, which holds only it and the virtio modules.
//
// Boot: mounts proc/sys/devtmpfs, loads the virtio modules from /lib/modules in dependency
// order (Debian's cloud kernel ships no modules.dep), reseeds the kernel from the monitor's
// entropy mailbox, mounts /dev/vda (the template's ext4 through the sandbox's copy-on-write
// overlay) and makes it the root, starts the agent (/usr/local/bin/cordon-agent --vsock 49983,
// restarted if it exits) and serves vsock port 49990, one line per connection:
//   PING                                  -> OK gen=<hex> reseeds=<n> restored=<0|1>
//   SETUP ip=A.B.C.D/N gw=G dns=D host=H  -> the same, after eth0, the default route,
//                                            /etc/resolv.conf, /etc/hostname, /etc/hosts
// Entropy (the guest-agent contract of vmm/snapshot/entropy.h): before answering any request,
// the generation id in the mailbox (0xC0FFF000, through /dev/mem) is compared with the one seen
// last; on a change (every restore: a clone of the template snapshot, or a resumed sandbox) its
// 64-byte seed goes to the kernel (RNDADDENTROPY crediting 512 bits, RNDRESEEDCRNG), is ACKed,
// and only then comes the reply. The host talks to the agent only after that reply, and the
// agent has no TCP listener, so no request reaches user space on the template's CRNG state.
// A snapshot is only taken while this init waits in poll() and the agent in accept().
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/random.h>
#include <linux/vm_sockets.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/microvm/guest/entropy_mailbox.h"

#define INIT_PORT 49990
#define AGENT "/usr/local/bin/cordon-agent"

static const char* const kModules[] = {
    "virtio_ring",
    "virtio",
    "virtio_mmio",
    "failover",
    "net_failover",
    "virtio_net",
    "virtio_blk",
    "vsock",
    "vmw_vsock_virtio_transport_common",
    "vmw_vsock_virtio_transport",
    "virtio-rng",
};

static void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n >= sizeof buf) n = sizeof buf - 1;
  ssize_t w = write(2, buf, (size_t)n);
  (void)w;
}

static void die(const char* what) {
  say("cordon-init: fatal: %s: %s\n", what, strerror(errno));
  sync();
  reboot(RB_AUTOBOOT);  // reboot=k: the monitor exits
  _exit(1);
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

// --- entropy mailbox (entropy_mailbox.h) -----------------------------------------------------
static struct entropy_mailbox em = ENTROPY_MAILBOX_INIT;

static void entropy_open(void) {
  if (em_open(&em) != 0) {
    say("cordon-init: entropy: %s\n", em.error);
    errno = ENODEV;
    die("no usable cordon-vmm entropy mailbox");
  }
}

// 1: reseeded for a new generation; 0: same generation as before; -1: failed (said why).
static int entropy_check(void) {
  int r = em_check(&em);
  if (em.error[0]) say("cordon-init: entropy: %s\n", em.error);
  return r;
}

// --- boot ------------------------------------------------------------------------------------
static void load_modules(void) {
  for (size_t i = 0; i < sizeof kModules / sizeof kModules[0]; i++) {
    char path[128];
    snprintf(path, sizeof path, "/lib/modules/%s.ko", kModules[i]);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // built into this kernel, or not needed
    if (syscall(SYS_finit_module, fd, "", 0) != 0 && errno != EEXIST)
      say("cordon-init: finit_module %s: %s\n", kModules[i], strerror(errno));
    close(fd);
  }
}

static void mount_root(void) {
  struct stat st;
  for (int i = 0; i < 100 && stat("/dev/vda", &st) != 0; i++) sleep_ms(50);
  mkdir("/newroot", 0755);
  if (mount("/dev/vda", "/newroot", "ext4", MS_NOATIME, "") != 0) die("mount /dev/vda (ext4)");
  const char* moves[] = {"/dev", "/proc", "/sys"};
  for (int i = 0; i < 3; i++) {
    char to[64];
    snprintf(to, sizeof to, "/newroot%s", moves[i]);
    mkdir(to, 0755);
    if (mount(moves[i], to, NULL, MS_MOVE, NULL) != 0) die("move a mount into the new root");
  }
  if (chdir("/newroot") != 0 || mount(".", "/", NULL, MS_MOVE, NULL) != 0 || chroot(".") != 0 ||
      chdir("/") != 0)
    die("switch to the new root");
  mkdir("/dev/pts", 0755);
  mkdir("/dev/shm", 01777);
  mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
        "newinstance,ptmxmode=0666,mode=620");
  mount("shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=1777");
  mkdir("/run", 0755);
  mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=755");
  mkdir("/sys/fs/cgroup", 0755);
  mount("cgroup2", "/sys/fs/cgroup", "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, "");
}

static int ifreq_socket(struct ifreq* ifr, const char* name) {
  memset(ifr, 0, sizeof *ifr);
  snprintf(ifr->ifr_name, IFNAMSIZ, "%s", name);
  return socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
}

static int link_up(const char* name) {
  struct ifreq ifr;
  int s = ifreq_socket(&ifr, name);
  if (s < 0) return -1;
  int rc = ioctl(s, SIOCGIFFLAGS, &ifr);
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (rc == 0) rc = ioctl(s, SIOCSIFFLAGS, &ifr);
  close(s);
  return rc;
}

static pid_t start_agent(void) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  setsid();
  char* argv[] = {"cordon-agent", "--vsock", "49983", NULL};
  char* envp[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
                  NULL};
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  execve(AGENT, argv, envp);
  say("cordon-init: exec %s: %s\n", AGENT, strerror(errno));
  _exit(127);
}

// --- SETUP -----------------------------------------------------------------------------------
static const char* word(const char* line, const char* key, char* out, size_t cap) {
  size_t k = strlen(key);
  for (const char* p = line; (p = strstr(p, key)) != NULL; p += k) {
    if (p != line && p[-1] != ' ') continue;
    if (p[k] != '=') continue;
    const char* v = p + k + 1;
    size_t n = strcspn(v, " ");
    if (n == 0 || n >= cap) return NULL;
    memcpy(out, v, n);
    out[n] = 0;
    return out;
  }
  return NULL;
}

static int valid_chars(const char* s, const char* allowed) {
  for (; *s; s++)
    if (!isalnum((unsigned char)*s) && !strchr(allowed, *s)) return 0;
  return 1;
}

static int write_text(const char* path, const char* text) {
  unlink(path);  // may be a symlink into somewhere else
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return -1;
  size_t n = strlen(text);
  int rc = write(fd, text, n) == (ssize_t)n ? 0 : -1;
  close(fd);
  return rc;
}

// Returns NULL on success, else what failed.
static const char* setup(const char* line) {
  char ip[32], gw[32], dns[32], host[64];
  if (!word(line, "ip", ip, sizeof ip) || !word(line, "gw", gw, sizeof gw) ||
      !word(line, "dns", dns, sizeof dns) || !word(line, "host", host, sizeof host))
    return "SETUP needs ip= gw= dns= host=";
  if (!valid_chars(host, "-") || !valid_chars(ip, "./") || !valid_chars(gw, ".") ||
      !valid_chars(dns, "."))
    return "SETUP: bad characters";
  char* slash = strchr(ip, '/');
  int prefix = slash ? atoi(slash + 1) : 32;
  if (slash) *slash = 0;
  if (prefix < 1 || prefix > 32) return "SETUP: bad prefix length";
  struct in_addr a, g;
  if (inet_pton(AF_INET, ip, &a) != 1 || inet_pton(AF_INET, gw, &g) != 1) return "SETUP: bad ip";
  for (int i = 0; i < 100 && if_nametoindex("eth0") == 0; i++) sleep_ms(50);
  struct ifreq ifr;
  int s = ifreq_socket(&ifr, "eth0");
  if (s < 0) return "socket";
  struct sockaddr_in* sin = (struct sockaddr_in*)&ifr.ifr_addr;
  sin->sin_family = AF_INET;
  sin->sin_addr = a;
  const char* err = NULL;
  if (ioctl(s, SIOCSIFADDR, &ifr) != 0) err = "SIOCSIFADDR eth0";
  sin->sin_addr.s_addr = htonl(prefix == 32 ? 0xFFFFFFFFu : ~(0xFFFFFFFFu >> prefix));
  if (!err && ioctl(s, SIOCSIFNETMASK, &ifr) != 0) err = "SIOCSIFNETMASK eth0";
  if (!err && (ioctl(s, SIOCGIFFLAGS, &ifr) != 0 ||
               (ifr.ifr_flags |= IFF_UP | IFF_RUNNING, ioctl(s, SIOCSIFFLAGS, &ifr) != 0)))
    err = "eth0 up";
  if (!err) {
    struct rtentry rt;
    memset(&rt, 0, sizeof rt);
    ((struct sockaddr_in*)&rt.rt_dst)->sin_family = AF_INET;
    ((struct sockaddr_in*)&rt.rt_genmask)->sin_family = AF_INET;
    struct sockaddr_in* rg = (struct sockaddr_in*)&rt.rt_gateway;
    rg->sin_family = AF_INET;
    rg->sin_addr = g;
    rt.rt_flags = RTF_UP | RTF_GATEWAY;
    (void)ioctl(s, SIOCDELRT, &rt);  // a resume sets the same route again
    if (ioctl(s, SIOCADDRT, &rt) != 0 && errno != EEXIST) err = "default route";
  }
  close(s);
  if (err) return err;
  char text[256];
  snprintf(text, sizeof text, "nameserver %s\n", dns);
  if (write_text("/etc/resolv.conf", text) != 0) return "/etc/resolv.conf";
  snprintf(text, sizeof text, "%s\n", host);
  if (write_text("/etc/hostname", text) != 0) return "/etc/hostname";
  snprintf(text, sizeof text, "127.0.0.1 localhost\n::1 localhost\n127.0.1.1 %s\n", host);
  if (write_text("/etc/hosts", text) != 0) return "/etc/hosts";
  if (sethostname(host, strlen(host)) != 0) return "sethostname";
  return NULL;
}

static void serve(int c) {
  struct timeval tv = {5, 0};
  setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char line[512];
  size_t n = 0;
  while (n < sizeof line - 1) {
    ssize_t r = read(c, line + n, 1);
    if (r <= 0 || line[n] == '\n') break;
    n++;
  }
  line[n] = 0;
  // First thing on every request: a restored guest must not act on the template's CRNG state.
  int e = entropy_check();
  const char* err = e < 0 ? "entropy reseed failed" : NULL;
  if (!err && strncmp(line, "SETUP ", 6) == 0)
    err = setup(line + 6);
  else if (!err && strcmp(line, "PING") != 0)
    err = "unknown request";
  char gen[33], reply[256];
  em_hex(em.last_gen, sizeof em.last_gen, gen);
  if (err)
    snprintf(reply, sizeof reply, "ERR %s (%s)\n", err, strerror(errno));
  else
    snprintf(reply, sizeof reply, "OK gen=%s reseeds=%u restored=%u\n", gen, em.reseeds,
             em.last_restored);
  ssize_t w = write(c, reply, strlen(reply));
  (void)w;
}

int main(void) {
  if (getpid() != 1) {
    fprintf(stderr, "cordon-microvm-init: must run as PID 1 of a microVM guest\n");
    return 2;
  }
  mount("proc", "/proc", "proc", 0, "");
  mount("sysfs", "/sys", "sysfs", 0, "");
  mount("devtmpfs", "/dev", "devtmpfs", 0, "");
  int con = open("/dev/console", O_RDWR | O_CLOEXEC);
  if (con >= 0) {
    dup2(con, 0);
    dup2(con, 1);
    dup2(con, 2);
  }
  load_modules();
  entropy_open();
  if (entropy_check() != 1) die("entropy reseed at boot");
  mount_root();
  link_up("lo");
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, NULL);  // reaped in the loop below
  int l = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_vm a = {.svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_ANY, .svm_port = INIT_PORT};
  if (l < 0 || bind(l, (struct sockaddr*)&a, sizeof a) != 0 || listen(l, 8) != 0)
    die("vsock listen");
  pid_t agent = start_agent();
  say("cordon-init: ready (vsock %d, agent pid %d)\n", INIT_PORT, (int)agent);
  for (;;) {
    struct pollfd p = {l, POLLIN, 0};
    int n = poll(&p, 1, 1000);
    if (n == 1) {
      int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
      if (c >= 0) {
        serve(c);
        close(c);
      }
    }
    // PID 1 reaps every orphan; the agent is restarted when it ends.
    int status;
    pid_t dead;
    while ((dead = waitpid(-1, &status, WNOHANG)) > 0) {
      if (dead == agent) {
        say("cordon-init: agent exited (status %d), restarting\n", status);
        sleep_ms(500);
        agent = start_agent();
      }
    }
  }
}
