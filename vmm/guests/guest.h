/* Freestanding test guests for cordon-vmm.
 *
 * What the KVM-PVM host of the development machines accepts (probed 2026-11-30 with a raw KVM
 * program before writing these): real mode runs (emulated, ~0.25 us per instruction); 32-bit
 * protected mode with paging off runs (the PVH entry); 64-bit long mode entered directly with
 * the monitor's identity page tables (CR0.PG|PE, CR4.PAE, EFER.LME|LMA, 2 MiB pages) runs
 * (but KVM-PVM emulates a non-PVM guest's kernel-mode code: a loop iteration costs tens of
 * microseconds, so guests keep their loops short), and port I/O and MMIO exits reach user space in
 * about 15 us each. With the in-kernel irqchip a HLT never returns to user space, so guests end
 * with the i8042 reset (outb 0xFE to port 0x64), which the monitor treats as "stop". The monitor
 * maps only the first 1 GiB; guests that touch virtio-mmio (0xC0001000) map the 3-4 GiB range
 * themselves (map_mmio_gap()).
 *
 * So the guests are 64-bit C, linked at 1 MiB, loaded as ELF (64-bit entry) or wrapped as a
 * bzImage (entry at load address + 0x200) and run with the monitor's boot state; one guest is
 * 32-bit assembly with a PVH note. They print to COM1 by polling and never take interrupts.
 */
#ifndef CORDON_VMM_GUEST_H
#define CORDON_VMM_GUEST_H

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

static inline void outb(u16 port, u8 v) {
  __asm__ volatile("outb %0, %1" ::"a"(v), "Nd"(port));
}
static inline u8 inb(u16 port) {
  u8 v;
  __asm__ volatile("inb %1, %0" : "=a"(v) : "Nd"(port));
  return v;
}
static inline u32 mmio_read32(u64 addr) {
  return *(volatile u32*)addr;
}
static inline void mmio_write32(u64 addr, u32 v) {
  *(volatile u32*)addr = v;
}
static inline void mmio_write8(u64 addr, u8 v) {
  *(volatile u8*)addr = v;
}
#define barrier() __asm__ volatile("mfence" ::: "memory")

static void putc_(char c) {
  while (!(inb(0x3F8 + 5) & 0x20)) {
  }
  outb(0x3F8, (u8)c);
}
static void puts_(const char* s) {
  while (*s) putc_(*s++);
}
static void putu(u64 v) {
  char b[24];
  int i = 0;
  do {
    b[i++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (i) putc_(b[--i]);
}
static void puthex(u64 v) {
  const char* d = "0123456789abcdef";
  puts_("0x");
  for (int s = 60; s >= 0; s -= 4) putc_(d[(v >> s) & 0xF]);
}
static void guest_exit(void) {
  for (;;) outb(0x64, 0xFE);
}
static void* memset_(void* p, int c, u64 n) {
  u8* b = (u8*)p;
  while (n--) *b++ = (u8)c;
  return p;
}
static void memcpy_(void* d, const void* s, u64 n) {
  u8* a = (u8*)d;
  const u8* b = (const u8*)s;
  while (n--) *a++ = *b++;
}

/* Map 3-4 GiB (the MMIO gap) uncached with 2 MiB pages: PDPT[3] -> a page directory at 0x30000. */
static void map_mmio_gap(void) {
  u64 cr3;
  __asm__ volatile("mov %%cr3, %0" : "=r"(cr3));
  u64* pml4 = (u64*)(cr3 & ~0xFFFull);
  u64* pdpt = (u64*)(pml4[0] & ~0xFFFull);
  u64* pd = (u64*)0x30000;
  for (u64 i = 0; i < 512; ++i) pd[i] = (0xC0000000ull + (i << 21)) | 0x83 | 0x18; /* PCD|PWT */
  pdpt[3] = 0x30000 | 3;
  __asm__ volatile("mov %0, %%cr3" ::"r"(cr3) : "memory");
}

#endif
