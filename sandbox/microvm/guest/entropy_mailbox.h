// The guest agent's side of the entropy contract (vmm/snapshot/entropy.h), shared by the microVM
// sandbox's init (microvm_init.c) and the nested boot test's guest init (tests/nested/
// guest_init.c). Static C for static inits: header-only, so each stays one translation unit.
//
// The mailbox page at 0xC0FFF000 is mapped through /dev/mem (Debian's STRICT_DEVMEM and
// IO_STRICT_DEVMEM refuse RAM and pages a driver claimed, and allow this one: it is neither).
// em_check() compares the generation id with the one last seen; on a change it feeds the 64-byte
// seed to the kernel (RNDADDENTROPY crediting 512 bits, then RNDRESEEDCRNG so that the CRNG is
// rekeyed now, not at its next scheduled reseed), ACKs it (the monitor wipes the seed) and
// records the generation. A restored clone resumes wherever it was, so the caller runs the check
// before it answers anything.
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <linux/random.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#define EM_ADDR 0xC0FFF000L
#define EM_MAGIC 0x4445455344524F43ull  // "CORDSEED"
#define EM_GEN 0x10
#define EM_RESTORED 0x20
#define EM_SEED 0x40
#define EM_ACK 0x80
#define EM_SEED_BYTES 64

struct entropy_mailbox {
  volatile uint32_t* page;  // NULL: not open (no mailbox, or /dev/mem refused)
  int random_fd;
  unsigned char last_gen[16];
  unsigned reseeds;
  unsigned last_restored;
  int crng_reseed_ok;  // -1 unknown, 0 RNDRESEEDCRNG refused, 1 done
  char error[160];     // why the last call failed, or a warning after a successful reseed
};

#define ENTROPY_MAILBOX_INIT   \
  {                            \
    NULL, -1, {0}, 0, 0, -1, { \
      0                        \
    }                          \
  }

// 32-bit volatile loads: each one is a single MMIO exit; no memcpy, whose vector moves the
// monitor's instruction decoder would have to emulate.
static inline uint32_t em_read32(const struct entropy_mailbox* m, unsigned off) {
  return m->page[off / 4];
}

static inline void em_read(const struct entropy_mailbox* m, unsigned off, unsigned char* out,
                           unsigned len) {
  for (unsigned i = 0; i < len; i += 4) {
    uint32_t v = em_read32(m, off + i);
    memcpy(out + i, &v, 4);
  }
}

static inline void em_hex(const unsigned char* b, unsigned len, char* out) {
  static const char kHex[] = "0123456789abcdef";
  for (unsigned i = 0; i < len; i++) {
    out[2 * i] = kHex[b[i] >> 4];
    out[2 * i + 1] = kHex[b[i] & 15];
  }
  out[2 * len] = 0;
}

// 0: mapped and checked; -1: m->error says why (the mailbox stays closed).
static inline int em_open(struct entropy_mailbox* m) {
  m->error[0] = 0;
  int fd = open("/dev/mem", O_RDWR | O_SYNC | O_CLOEXEC);
  if (fd < 0) {
    snprintf(m->error, sizeof m->error, "/dev/mem: %s", strerror(errno));
    return -1;
  }
  void* p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, EM_ADDR);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED) {
    snprintf(m->error, sizeof m->error, "mmap /dev/mem at 0x%lx: %s", EM_ADDR, strerror(err));
    return -1;
  }
  m->page = p;
  uint64_t magic = (uint64_t)em_read32(m, 0) | ((uint64_t)em_read32(m, 4) << 32);
  uint32_t version = em_read32(m, 8), seed_len = em_read32(m, 12);
  if (magic != EM_MAGIC || version != 1 || seed_len != EM_SEED_BYTES) {
    snprintf(m->error, sizeof m->error, "no mailbox at 0x%lx (magic %016llx version %u seed %u)",
             EM_ADDR, (unsigned long long)magic, version, seed_len);
    munmap(p, 4096);
    m->page = NULL;
    return -1;
  }
  m->random_fd = open("/dev/urandom", O_RDWR | O_CLOEXEC);
  if (m->random_fd < 0) {
    snprintf(m->error, sizeof m->error, "/dev/urandom: %s", strerror(errno));
    munmap(p, 4096);
    m->page = NULL;
    return -1;
  }
  return 0;
}

// 1: reseeded for a new generation (m->error may hold a warning); 0: the generation already
// seen; -1: failed, m->error says why.
static inline int em_check(struct entropy_mailbox* m) {
  m->error[0] = 0;
  if (!m->page) {
    snprintf(m->error, sizeof m->error, "the mailbox is not open");
    return -1;
  }
  unsigned char gen[16], again[16];
  struct {
    struct rand_pool_info info;
    unsigned char bytes[EM_SEED_BYTES];
  } seed;
  for (int tries = 0;; tries++) {
    em_read(m, EM_GEN, gen, sizeof gen);
    if (m->reseeds > 0 && memcmp(gen, m->last_gen, sizeof gen) == 0) return 0;
    em_read(m, EM_SEED, seed.bytes, EM_SEED_BYTES);
    em_read(m, EM_GEN, again, sizeof again);
    // A snapshot between the two reads of the generation would pair an old seed with a new id.
    if (memcmp(gen, again, sizeof gen) == 0) break;
    if (tries >= 3) {
      snprintf(m->error, sizeof m->error, "generation keeps changing");
      return -1;
    }
  }
  unsigned char any = 0;
  for (unsigned i = 0; i < EM_SEED_BYTES; i++) any |= seed.bytes[i];
  if (!any) {
    // Someone ACKed this generation already (we are the only reader): say so, do not pretend.
    snprintf(m->error, sizeof m->error, "the new generation's seed is already wiped");
    return -1;
  }
  seed.info.entropy_count = EM_SEED_BYTES * 8;
  seed.info.buf_size = EM_SEED_BYTES;
  int rc = ioctl(m->random_fd, RNDADDENTROPY, &seed.info);
  int err = errno;
  explicit_bzero(&seed, sizeof seed);
  if (rc != 0) {
    snprintf(m->error, sizeof m->error, "RNDADDENTROPY: %s", strerror(err));
    return -1;
  }
  // Crediting 512 bits already reseeds a CRNG that was not yet initialized; RNDRESEEDCRNG
  // (Linux >= 4.17) rekeys an initialized one at once.
  m->crng_reseed_ok = ioctl(m->random_fd, RNDRESEEDCRNG) == 0;
  if (!m->crng_reseed_ok) snprintf(m->error, sizeof m->error, "RNDRESEEDCRNG: %s", strerror(errno));
  m->page[EM_ACK / 4] = 1;
  if (em_read32(m, EM_SEED) != 0 && !m->error[0])
    snprintf(m->error, sizeof m->error, "seed not wiped after ACK");
  m->last_restored = em_read32(m, EM_RESTORED);
  memcpy(m->last_gen, gen, sizeof gen);
  m->reseeds++;
  return 1;
}
