/* Counts from 0 to 40 and prints each value, slowly enough (guest code is emulated by KVM-PVM, see
 * guest.h) that a test can pause and snapshot mid-way; the counter lives in guest RAM and in
 * registers, so a restored clone continues from where the snapshot was taken. */
#include "guest.h"

static volatile u64 counter;

void guest_main(u8* zp) {
  (void)zp;
  puts_("counter start\n");
  for (counter = 0; counter <= 40; ++counter) {
    puts_("tick ");
    putu(counter);
    puts_("\n");
    for (volatile u64 spin = 0; spin < 2000; ++spin) {
    }
  }
  puts_("counter done\n");
  guest_exit();
}
