/* A minimal bzImage wrapper for a flat 64-bit guest: two 512-byte setup sectors (setup_sects = 1)
 * holding the setup header (boot protocol 2.15, 64-bit entry in xloadflags), followed by the
 * payload, which the monitor copies to 1 MiB and enters at 1 MiB + 0x200. */
  .section .setup, "a"
  .org 0x1F1
  .byte 1              /* setup_sects */
  .word 0              /* root_flags */
  .long 0              /* syssize */
  .word 0              /* ram_size */
  .word 0              /* vid_mode */
  .word 0              /* root_dev */
  .word 0xAA55         /* boot_flag at 0x1FE */
  .byte 0xEB, 0x66     /* jump at 0x200 */
  .ascii "HdrS"        /* 0x202 */
  .word 0x020F         /* version 0x206 */
  .org 0x211
  .byte 0x01           /* loadflags: LOADED_HIGH */
  .org 0x214
  .long 0x100000       /* code32_start */
  .org 0x22C
  .long 0x7FFFFFFF     /* initrd_addr_max */
  .long 0x200000       /* kernel_alignment */
  .byte 0              /* relocatable */
  .byte 0
  .word 0x0001         /* xloadflags at 0x236: XLF_KERNEL_64 */
  .long 2047           /* cmdline_size */
  .org 0x260
  .long 0x200000       /* init_size */
  .org 0x268
  .org 0x400
