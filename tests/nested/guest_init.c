// guest_init: PID 1 of the L2 guest in the nested boot test (tests/nested/README.md). Static, no
// libc beyond the syscalls; it trusts nothing but its own initramfs.
//
// 1. Prints the boot marker "CORDON-GUEST-INIT" on the console first thing (the inner host times
//    monitor start -> this line) and writes the boot-timer byte (0xC0000000, cordon-vmm only).
// 2. With "cordon.mode=bench" on the command line: reboots at once (the monitor exits).
// 3. Otherwise loads the virtio modules from /lib/modules in dependency order (no modules.dep),
//    configures eth0 (10.0.2.2/24), sends "NET-HELLO" by UDP to the inner host's TAP address
//    10.0.2.1:7001, and "VSOCK-HELLO" over vsock to the host (CID 2, port 7000).
// 4. Then serves vsock port 7002 forever: each connection gets, for its line,
//      "PONG <n> gen=<hex> reseeds=<k> restored=<r> fresh=<0|1> crng_reseed=<-1|0|1>
//       random=<hex> [pre=<hex>] uptime=<s>"
//    n counts the pings served since boot (a restored guest proves it continued); gen is the
//    entropy-mailbox generation the kernel was last reseeded for, k the reseeds since boot,
//    fresh=1 on the first reply delivered after a reseed, random 16 bytes of getrandom()
//    drawn after the check. A request line containing "probe" also gets pre=: 16 bytes drawn
//    BEFORE the check, i.e. what code running ahead of the agent would have drawn (the control).
//
// Entropy (the guest-agent contract of vmm/snapshot/entropy.h): the mailbox page at 0xC0FFF000
// is mapped through /dev/mem. Debian's cloud kernel has STRICT_DEVMEM and IO_STRICT_DEVMEM, which
// refuse RAM and pages claimed busy by a driver, but allow this page: it is neither RAM nor
// claimed (the same holds for the boot-timer page). At boot and before every request the agent
// compares the generation id with the one it last saw; on a change it feeds the 64-byte seed to
// the kernel (RNDADDENTROPY, 512 bits credited, then RNDRESEEDCRNG so that the CRNG is rekeyed
// now and not at its next scheduled reseed), ACKs the seed, and records the generation. A
// restored clone resumes inside accept(), so its first act on any request is this check.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/random.h>
#include <linux/vm_sockets.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/microvm/guest/entropy_mailbox.h"

static const char* const kModules[] = {
    "virtio_ring",
    "virtio",
    "virtio_mmio",
    "failover",
    "net_failover",
    "virtio_net",
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
  ssize_t w = write(1, buf, (size_t)n);
  (void)w;
}

static double uptime_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

// Firecracker's boot-timer convention: a write of 123 to the first byte of 0xC0000000. Only
// cordon-vmm has the device; under other monitors /dev/mem refuses or the write is ignored.
static void boot_timer(void) {
  int fd = open("/dev/mem", O_RDWR | O_SYNC | O_CLOEXEC);
  if (fd < 0) return;
  void* p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0xC0000000L);
  if (p != MAP_FAILED) {
    *(volatile unsigned char*)p = 123;
    munmap(p, 4096);
  }
  close(fd);
}

// --- entropy mailbox (sandbox/microvm/guest/entropy_mailbox.h) -------------------------------
static struct entropy_mailbox em = ENTROPY_MAILBOX_INIT;

static void entropy_open(void) {
  if (em_open(&em) != 0) say("guest: entropy: %s\n", em.error);
}

// Returns 1 if it reseeded for a new generation, 0 if the generation is the one already seen,
// -1 on failure (reported on the console).
static int entropy_check(void) {
  int r = em_check(&em);
  if (em.error[0] && em.page) say("guest: entropy: %s\n", em.error);
  return r;
}

static void random16_hex(char* out) {
  unsigned char b[16];
  if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
    snprintf(out, 33, "error");
    return;
  }
  em_hex(b, sizeof b, out);
}

static int load_module(const char* name) {
  char path[128];
  snprintf(path, sizeof path, "/lib/modules/%s.ko", name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    say("guest: %s: %s\n", path, strerror(errno));
    return -1;
  }
  long r = syscall(SYS_finit_module, fd, "", 0);
  int err = errno;
  close(fd);
  if (r != 0 && err != EEXIST) {
    say("guest: finit_module %s: %s\n", name, strerror(err));
    return -1;
  }
  return 0;
}

static int if_up(const char* name, const char* addr) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name);
  int rc = 0;
  if (addr) {
    struct sockaddr_in* sin = (struct sockaddr_in*)&ifr.ifr_addr;
    sin->sin_family = AF_INET;
    inet_pton(AF_INET, addr, &sin->sin_addr);
    if (ioctl(s, SIOCSIFADDR, &ifr) != 0) rc = -1;
    inet_pton(AF_INET, "255.255.255.0", &sin->sin_addr);
    if (rc == 0 && ioctl(s, SIOCSIFNETMASK, &ifr) != 0) rc = -1;
  }
  if (rc == 0 && ioctl(s, SIOCGIFFLAGS, &ifr) != 0) rc = -1;
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (rc == 0 && ioctl(s, SIOCSIFFLAGS, &ifr) != 0) rc = -1;
  if (rc != 0) say("guest: configuring %s: %s\n", name, strerror(errno));
  close(s);
  return rc;
}

static void net_hello(void) {
  for (int i = 0; i < 50 && if_nametoindex("eth0") == 0; i++) sleep_ms(100);
  if (if_nametoindex("eth0") == 0) {
    say("guest: no eth0\n");
    return;
  }
  if (if_up("eth0", "10.0.2.2") != 0) return;
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(7001)};
  inet_pton(AF_INET, "10.0.2.1", &to.sin_addr);
  char msg[128];
  // Repeated: the first datagram may wait on ARP, and the host listener may start late.
  for (int i = 0; i < 5; i++) {
    int n = snprintf(msg, sizeof msg, "NET-HELLO %d uptime=%.3f\n", i, uptime_s());
    if (sendto(s, msg, (size_t)n, 0, (struct sockaddr*)&to, sizeof to) < 0)
      say("guest: udp send: %s\n", strerror(errno));
    sleep_ms(200);
  }
  close(s);
}

static void vsock_hello(void) {
  for (int attempt = 0; attempt < 20; attempt++) {
    int s = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) {
      say("guest: vsock socket: %s\n", strerror(errno));
      return;
    }
    struct sockaddr_vm a = {.svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_HOST, .svm_port = 7000};
    if (connect(s, (struct sockaddr*)&a, sizeof a) == 0) {
      char msg[128];
      int n = snprintf(msg, sizeof msg, "VSOCK-HELLO uptime=%.3f\n", uptime_s());
      if (write(s, msg, (size_t)n) != n) say("guest: vsock write: %s\n", strerror(errno));
      close(s);
      say("guest: vsock hello sent\n");
      return;
    }
    say("guest: vsock connect (attempt %d): %s\n", attempt, strerror(errno));
    close(s);
    sleep_ms(250);
  }
}

static void serve_pings(void) {
  int l = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_vm a = {.svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_ANY, .svm_port = 7002};
  if (l < 0 || bind(l, (struct sockaddr*)&a, sizeof a) != 0 || listen(l, 4) != 0) {
    say("guest: vsock listen: %s\n", strerror(errno));
    return;
  }
  say("guest: serving vsock port 7002\n");
  unsigned served = 0;
  int fresh = 0;  // 1 until a reply that follows a reseed has been delivered
  for (;;) {
    // A clone resumes inside this accept(): the check below is the first thing it does for any
    // request, so nothing the request causes runs on the template's CRNG state.
    int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) {
      sleep_ms(10);
      continue;
    }
    char line[128];
    ssize_t n = read(c, line, sizeof line - 1);
    if (n > 0) {
      line[n] = 0;
      // The control sample, drawn before this request's check: what code running ahead of the
      // agent would have drawn (after a restore: from the CRNG state the snapshot carried).
      char pre[40] = "";
      if (strstr(line, "probe")) {
        char h[33];
        random16_hex(h);
        snprintf(pre, sizeof pre, " pre=%s", h);
      }
      // The check that must precede everything the request causes.
      if (entropy_check() == 1) fresh = 1;
      served++;
      char gen[33], rnd[33];
      em_hex(em.last_gen, sizeof em.last_gen, gen);
      random16_hex(rnd);
      char reply[400];
      int m = snprintf(reply, sizeof reply,
                       "PONG %u gen=%s reseeds=%u restored=%u fresh=%d crng_reseed=%d random=%s%s "
                       "uptime=%.3f\n",
                       served, em.page ? gen : "none", em.reseeds, em.last_restored, fresh,
                       em.crng_reseed_ok, rnd, pre, uptime_s());
      if (write(c, reply, (size_t)m) != m)
        say("guest: vsock reply: %s\n", strerror(errno));
      else
        fresh = 0;
    }
    close(c);
  }
}

int main(void) {
  // The marker goes first: it ends the "monitor start -> guest init" interval.
  say("CORDON-GUEST-INIT uptime=%.3f\n", uptime_s());
  mkdir("/proc", 0755);
  mkdir("/sys", 0755);
  mkdir("/dev", 0755);
  mount("proc", "/proc", "proc", 0, NULL);
  mount("sysfs", "/sys", "sysfs", 0, NULL);
  mount("devtmpfs", "/dev", "devtmpfs", 0, NULL);
  boot_timer();

  char cmdline[1024] = {0};
  int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n = read(fd, cmdline, sizeof cmdline - 1);
    (void)n;
    close(fd);
  }
  if (strstr(cmdline, "cordon.mode=bench")) {
    sync();
    reboot(RB_AUTOBOOT);
    return 0;
  }

  // Fresh entropy before anything else runs (there is nothing else in this guest, but the order
  // is the contract's).
  entropy_open();
  if (entropy_check() == 1) {
    char gen[33];
    em_hex(em.last_gen, sizeof em.last_gen, gen);
    say("guest: entropy: reseeded at boot, gen=%s restored=%u crng_reseed=%d\n", gen,
        em.last_restored, em.crng_reseed_ok);
  }
  for (size_t i = 0; i < sizeof kModules / sizeof kModules[0]; i++) load_module(kModules[i]);
  if_up("lo", NULL);
  say("guest: modules loaded uptime=%.3f\n", uptime_s());
  net_hello();
  vsock_hello();
  say("guest: reports sent uptime=%.3f\n", uptime_s());
  serve_pings();
  for (;;) pause();
}
