/* Prints a greeting, the command line and the first e820 entries from the zero page, then the
 * first bytes of the initrd, marks the boot timer and resets. */
#include "guest.h"

void guest_main(u8* zp) {
  map_mmio_gap();
  mmio_write8(0xC0000000, 123); /* boot timer: "booted" */
  puts_("hello from cordon guest\n");
  u32 cmd = *(u32*)(zp + 0x228);
  puts_("cmdline: ");
  puts_((const char*)(u64)cmd);
  puts_("\n");
  u8 n = zp[0x1E8];
  puts_("e820 entries: ");
  putu(n);
  puts_("\n");
  for (u8 i = 0; i < n; ++i) {
    u8* e = zp + 0x2D0 + 20 * i;
    puts_("e820 ");
    puthex(*(u64*)e);
    puts_(" ");
    puthex(*(u64*)(e + 8));
    puts_(" ");
    putu(*(u32*)(e + 16));
    puts_("\n");
  }
  u32 rd = *(u32*)(zp + 0x218), rdsz = *(u32*)(zp + 0x21C);
  if (rdsz) {
    puts_("initrd: ");
    for (u32 i = 0; i < rdsz && i < 16; ++i) putc_(((char*)(u64)rd)[i]);
    puts_("\n");
  }
  u64 rsdp = *(u64*)(zp + 0x70);
  if (rsdp) {
    puts_("rsdp sig: ");
    for (int i = 0; i < 8; ++i) putc_(((char*)rsdp)[i]);
    puts_("\n");
  }
  puts_("bye\n");
  guest_exit();
}
