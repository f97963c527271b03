/* Restore-entropy guest: reads the entropy mailbox (vmm/snapshot/entropy.h) at boot and prints
 * its generation id, then polls the generation id until it changes, which only a restore does. A
 * clone then prints the restored flag, its generation id and its 64-byte seed, ACKs the seed and
 * checks that it now reads as zeros, and resets. Two clones of one snapshot must print different
 * seeds: this is the guest half of what a real agent does before it lets user code run. */
#include "guest.h"

#define MAILBOX 0xC0FFF000ull

static u64 rd64(u64 off) {
  return (u64)mmio_read32(MAILBOX + off) | ((u64)mmio_read32(MAILBOX + off + 4) << 32);
}

void guest_main(u8* zp) {
  (void)zp;
  map_mmio_gap();
  if (rd64(0x00) != 0x4445455344524F43ull) { /* "CORDSEED" */
    puts_("no entropy mailbox\n");
    guest_exit();
  }
  u64 g0 = rd64(0x10), g1 = rd64(0x18);
  puts_("boot gen ");
  puthex(g0);
  puthex(g1);
  puts_(" restored ");
  putu(mmio_read32(MAILBOX + 0x20));
  puts_("\nwaiting\n");
  while (rd64(0x10) == g0 && rd64(0x18) == g1) {
  }
  puts_("restored ");
  putu(mmio_read32(MAILBOX + 0x20));
  puts_(" gen ");
  puthex(rd64(0x10));
  puthex(rd64(0x18));
  puts_("\nseed ");
  for (u64 i = 0; i < 64; i += 8) puthex(rd64(0x40 + i));
  puts_("\n");
  mmio_write32(MAILBOX + 0x80, 1); /* ACK: the seed is consumed */
  u64 left = 0;
  for (u64 i = 0; i < 64; i += 8) left |= rd64(0x40 + i);
  puts_(left ? "after ack nonzero\n" : "after ack zero\n");
  guest_exit();
}
