/* 64-bit entry shared by the C test guests: the monitor enters here in long mode with its page
 * tables, RSI = zero page. Set our own stack, then call guest_main(zero_page). */
  .section .text.entry, "ax"
  .globl _start
  .code64
_start:
  movq %rsi, %rdi
  movq $0x80000, %rsp
  call guest_main
1:
  movb $0xFE, %al
  outb %al, $0x64
  jmp 1b
