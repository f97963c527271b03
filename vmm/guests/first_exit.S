/* The set-up benchmark's guest (bench/vmm): its first instruction is a write to the POST port
 * 0x80, so the first VM exit marks the guest's first instruction; then it resets (i8042). */
  .section .text.entry, "ax"
  .globl _start
  .code64
_start:
  outb %al, $0x80
1:
  movb $0xFE, %al
  outb %al, $0x64
  jmp 1b
