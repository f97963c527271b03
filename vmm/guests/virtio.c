/* Drives cordon-vmm's virtio-mmio devices end to end with a polling driver. The command line
 * picks the test: "test=rng" reads 64 random bytes twice and prints them in hex; "test=vsock"
 * listens on vsock port 1234 and echoes one connection's data back in upper case, then closes;
 * "test=net" transmits one Ethernet frame and waits for one frame, printing its length. */
#include "guest.h"

#define VIRTIO_BASE 0xC0001000ull
#define QSIZE 16

struct desc {
  u64 addr;
  u32 len;
  u16 flags;
  u16 next;
};
struct vq {
  u16 idx; /* queue index */
  struct desc* d;
  u16* avail; /* flags, idx, ring[QSIZE], used_event */
  u32* used;  /* flags|idx (u16,u16), then {id,len} pairs */
  u16 last_used;
  u16 next_desc;
};

static u64 dev_base;
static u64 alloc_ptr = 0x200000; /* 2 MiB: simple bump allocator for rings and buffers */
static void* alloc(u64 n, u64 align) {
  alloc_ptr = (alloc_ptr + align - 1) & ~(align - 1);
  void* p = (void*)alloc_ptr;
  alloc_ptr += n;
  memset_(p, 0, n);
  return p;
}

static u32 reg(u32 off) {
  return mmio_read32(dev_base + off);
}
static void wreg(u32 off, u32 v) {
  mmio_write32(dev_base + off, v);
}

static int find_device(u32 id) {
  for (int slot = 0; slot < 8; ++slot) {
    u64 b = VIRTIO_BASE + (u64)slot * 0x1000;
    if (mmio_read32(b) == 0x74726976 && mmio_read32(b + 8) == id) {
      dev_base = b;
      return slot;
    }
  }
  return -1;
}

static int init_device(u32 nqueues, struct vq* qs) {
  wreg(0x70, 0);
  wreg(0x70, 1);
  wreg(0x70, 1 | 2);
  wreg(0x24, 1);
  wreg(0x20, 1); /* VERSION_1 */
  wreg(0x24, 0);
  wreg(0x20, 0);
  wreg(0x70, 1 | 2 | 8);
  if (!(reg(0x70) & 8)) return -1;
  for (u32 q = 0; q < nqueues; ++q) {
    struct vq* v = &qs[q];
    v->idx = (u16)q;
    v->d = alloc(16 * QSIZE, 16);
    v->avail = alloc(6 + 2 * QSIZE, 2);
    v->used = alloc(6 + 8 * QSIZE, 4);
    wreg(0x30, q);
    if (reg(0x34) < QSIZE) return -2;
    wreg(0x38, QSIZE);
    wreg(0x80, (u32)(u64)v->d);
    wreg(0x84, 0);
    wreg(0x90, (u32)(u64)v->avail);
    wreg(0x94, 0);
    wreg(0xA0, (u32)(u64)v->used);
    wreg(0xA4, 0);
    wreg(0x44, 1);
    if (reg(0x44) != 1) return -3;
  }
  wreg(0x70, 1 | 2 | 8 | 4);
  return (reg(0x70) & 0x40) ? -4 : 0;
}

/* Posts one buffer (a one-descriptor chain) and notifies. */
static void post(struct vq* v, void* buf, u32 len, int writable) {
  u16 i = v->next_desc;
  v->next_desc = (u16)((i + 1) % QSIZE);
  v->d[i].addr = (u64)buf;
  v->d[i].len = len;
  v->d[i].flags = writable ? 2 : 0;
  v->d[i].next = 0;
  u16 aidx = v->avail[1];
  v->avail[2 + aidx % QSIZE] = i;
  barrier();
  v->avail[1] = (u16)(aidx + 1);
  barrier();
  wreg(0x50, v->idx);
}

/* Waits for the next used element; returns its length (or -1 on timeout). */
static long wait_used(struct vq* v, u64 spins) {
  for (u64 s = 0; s < spins; ++s) {
    barrier();
    u16 used_idx = (u16)(v->used[0] >> 16);
    if (used_idx != v->last_used) {
      u32 len = v->used[1 + 2 * (v->last_used % QSIZE) + 1];
      v->last_used++;
      return (long)len;
    }
  }
  return -1;
}

static int streq_prefix(const char* s, const char* p) {
  while (*p)
    if (*s++ != *p++) return 0;
  return 1;
}
static const char* find(const char* s, const char* needle) {
  for (; *s; ++s)
    if (streq_prefix(s, needle)) return s;
  return 0;
}

static void test_rng(void) {
  struct vq q[1];
  memset_(q, 0, sizeof q);
  if (find_device(4) < 0) {
    puts_("rng: no device\n");
    return;
  }
  int r = init_device(1, q);
  if (r) {
    puts_("rng: init failed ");
    putu((u64)-r);
    puts_("\n");
    return;
  }
  for (int round = 0; round < 2; ++round) {
    u8* buf = alloc(64, 8);
    post(&q[0], buf, 64, 1);
    long n = wait_used(&q[0], 100000000);
    puts_("rng: ");
    putu((u64)n);
    puts_(" bytes ");
    for (int i = 0; i < 16; ++i) {
      const char* d = "0123456789abcdef";
      putc_(d[buf[i] >> 4]);
      putc_(d[buf[i] & 15]);
    }
    puts_("\n");
  }
}

#include "virtio_vsock_net.inc"

void guest_main(u8* zp) {
  map_mmio_gap();
  const char* cmd = (const char*)(u64) * (u32*)(zp + 0x228);
  if (find(cmd, "test=rng")) test_rng();
  if (find(cmd, "test=vsock")) test_vsock();
  if (find(cmd, "test=net")) test_net();
  puts_("virtio guest done\n");
  guest_exit();
}
