// nested_tool: the small helpers that the inner machine's /init (inner_init.sh) needs and that
// busybox lacks: a monotonic clock in milliseconds, a persistent TAP, waiting for a marker in a
// growing file, one-shot UDP and Unix-socket listeners, the vsock host side of cordon-vmm
// ("CONNECT <port>\n" / "OK <n>\n") and one control-socket request. Static; runs inside the inner
// machine only. Every wait has a timeout, and every failure exits non-zero with a message.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int die(const char* what) {
  fprintf(stderr, "nested_tool: %s: %s\n", what, strerror(errno));
  return 1;
}

static int usage(void) {
  fprintf(stderr,
          "usage: nested_tool now\n"
          "       nested_tool mktap NAME\n"
          "       nested_tool wait-file FILE MARKER TIMEOUT_MS   (prints now_ms when found)\n"
          "       nested_tool udp-recv ADDR PORT TIMEOUT_MS\n"
          "       nested_tool uds-accept PATH TIMEOUT_MS\n"
          "       nested_tool vsock-connect UDS PORT MESSAGE TIMEOUT_MS\n"
          "       nested_tool api UDS JSON TIMEOUT_MS\n");
  return 2;
}

// Reads one line (or until EOF) within the deadline; returns its length or -1.
static int read_line(int fd, char* buf, size_t cap, double deadline) {
  size_t len = 0;
  while (len + 1 < cap) {
    int left = (int)(deadline - now_ms());
    if (left <= 0) {
      errno = ETIMEDOUT;
      return -1;
    }
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r = poll(&p, 1, left);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = ETIMEDOUT;
      return -1;
    }
    ssize_t n = read(fd, buf + len, 1);
    if (n < 0) return -1;
    if (n == 0) break;
    len++;
    if (buf[len - 1] == '\n') break;
  }
  buf[len] = 0;
  return (int)len;
}

static int write_all(int fd, const char* s, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    s += w;
    n -= (size_t)w;
  }
  return 0;
}

static int uds_connect(const char* path) {
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (s < 0 || strlen(path) >= sizeof a.sun_path) return -1;
  strcpy(a.sun_path, path);
  if (connect(s, (struct sockaddr*)&a, sizeof a) != 0) {
    close(s);
    return -1;
  }
  return s;
}

static int cmd_mktap(const char* name) {
  int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
  if (fd < 0) return die("/dev/net/tun");
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
  snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name);
  if (ioctl(fd, TUNSETIFF, &ifr) != 0) return die("TUNSETIFF");
  if (ioctl(fd, TUNSETPERSIST, 1) != 0) return die("TUNSETPERSIST");
  close(fd);
  return 0;
}

static int cmd_wait_file(const char* file, const char* marker, int timeout_ms) {
  double deadline = now_ms() + timeout_ms;
  static char buf[1 << 20];
  while (now_ms() < deadline) {
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ssize_t n = read(fd, buf, sizeof buf - 1);
      close(fd);
      if (n > 0) {
        buf[n] = 0;
        if (memmem(buf, (size_t)n, marker, strlen(marker))) {
          printf("%.3f\n", now_ms());
          return 0;
        }
      }
    }
    struct timespec ts = {0, 2 * 1000000L};  // 2 ms: the resolution of the boot time
    nanosleep(&ts, NULL);
  }
  fprintf(stderr, "nested_tool: \"%s\" did not appear in %s within %d ms\n", marker, file,
          timeout_ms);
  return 1;
}

static int cmd_udp_recv(const char* addr, int port, int timeout_ms) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (s < 0 || inet_pton(AF_INET, addr, &a.sin_addr) != 1) return die("udp socket");
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  // IP_FREEBIND: the TAP's address may not be configured yet when the listener starts.
  setsockopt(s, IPPROTO_IP, IP_FREEBIND, &one, sizeof one);
  if (bind(s, (struct sockaddr*)&a, sizeof a) != 0) return die("udp bind");
  struct pollfd p = {.fd = s, .events = POLLIN};
  if (poll(&p, 1, timeout_ms) <= 0) {
    fprintf(stderr, "nested_tool: no UDP datagram on %s:%d within %d ms\n", addr, port, timeout_ms);
    return 1;
  }
  char buf[512];
  ssize_t n = recv(s, buf, sizeof buf - 1, 0);
  if (n < 0) return die("udp recv");
  buf[n] = 0;
  printf("%s", buf);
  return 0;
}

static int cmd_uds_accept(const char* path, int timeout_ms) {
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (s < 0 || strlen(path) >= sizeof a.sun_path) return die("unix socket");
  strcpy(a.sun_path, path);
  unlink(path);
  if (bind(s, (struct sockaddr*)&a, sizeof a) != 0 || listen(s, 1) != 0) return die(path);
  double deadline = now_ms() + timeout_ms;
  struct pollfd p = {.fd = s, .events = POLLIN};
  if (poll(&p, 1, timeout_ms) <= 0) {
    fprintf(stderr, "nested_tool: no connection on %s within %d ms\n", path, timeout_ms);
    return 1;
  }
  int c = accept4(s, NULL, NULL, SOCK_CLOEXEC);
  if (c < 0) return die("accept");
  char buf[512];
  if (read_line(c, buf, sizeof buf, deadline) < 0) return die("read from guest");
  printf("%s", buf);
  close(c);
  unlink(path);
  return 0;
}

static int cmd_vsock_connect(const char* uds, const char* port, const char* msg, int timeout_ms) {
  double deadline = now_ms() + timeout_ms;
  int s = uds_connect(uds);
  if (s < 0) return die(uds);
  char line[512];
  snprintf(line, sizeof line, "CONNECT %s\n", port);
  if (write_all(s, line, strlen(line)) != 0) return die("write CONNECT");
  if (read_line(s, line, sizeof line, deadline) <= 0 || strncmp(line, "OK ", 3) != 0) {
    fprintf(stderr, "nested_tool: vsock CONNECT %s refused (reply \"%s\")\n", port, line);
    return 1;
  }
  snprintf(line, sizeof line, "%s\n", msg);
  if (write_all(s, line, strlen(line)) != 0) return die("write message");
  if (read_line(s, line, sizeof line, deadline) <= 0) return die("read reply");
  printf("%s", line);
  close(s);
  return 0;
}

static int cmd_api(const char* uds, const char* json, int timeout_ms) {
  double deadline = now_ms() + timeout_ms;
  int s = uds_connect(uds);
  if (s < 0) return die(uds);
  char line[4096];
  snprintf(line, sizeof line, "%s\n", json);
  if (write_all(s, line, strlen(line)) != 0) return die("write request");
  if (read_line(s, line, sizeof line, deadline) <= 0) return die("read reply");
  printf("%s", line);
  close(s);
  return strstr(line, "\"ok\":true") ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const char* cmd = argv[1];
  if (!strcmp(cmd, "now") && argc == 2) {
    printf("%.3f\n", now_ms());
    return 0;
  }
  if (!strcmp(cmd, "mktap") && argc == 3) return cmd_mktap(argv[2]);
  if (!strcmp(cmd, "wait-file") && argc == 5) return cmd_wait_file(argv[2], argv[3], atoi(argv[4]));
  if (!strcmp(cmd, "udp-recv") && argc == 5)
    return cmd_udp_recv(argv[2], atoi(argv[3]), atoi(argv[4]));
  if (!strcmp(cmd, "uds-accept") && argc == 4) return cmd_uds_accept(argv[2], atoi(argv[3]));
  if (!strcmp(cmd, "vsock-connect") && argc == 6)
    return cmd_vsock_connect(argv[2], argv[3], argv[4], atoi(argv[5]));
  if (!strcmp(cmd, "api") && argc == 5) return cmd_api(argv[2], argv[3], atoi(argv[4]));
  return usage();
}
