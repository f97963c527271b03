/* PVH test guest: 32-bit protected mode, paging off, EBX -> hvm_start_info. Prints "PVH ok" when
 * the start_info magic is right, then the command line, and resets. */
  .section .note.Xen, "a"
  .align 4
  .long 4          /* namesz */
  .long 4          /* descsz */
  .long 18         /* XEN_ELFNOTE_PHYS32_ENTRY */
  .asciz "Xen"
  .long pvh_start

  .section .text.entry, "ax"
  .code32
  .globl _start
_start:
pvh_start:
  movl $0x7F000, %esp
  cmpl $0x336EC578, (%ebx)
  jne bad
  movl $msg_ok, %esi
  call puts32
  movl 24(%ebx), %esi      /* cmdline_paddr (low 32 bits) */
  call puts32
  movl $msg_nl, %esi
  call puts32
  jmp done
bad:
  movl $msg_bad, %esi
  call puts32
done:
  movb $0xFE, %al
  outb %al, $0x64
  jmp done

puts32:
  movw $0x3F8, %dx
1:
  movb (%esi), %al
  testb %al, %al
  jz 2f
  outb %al, %dx
  incl %esi
  jmp 1b
2:
  ret

  .section .rodata
msg_ok: .asciz "PVH ok cmdline: "
msg_bad: .asciz "PVH bad magic\n"
msg_nl: .asciz "\n"
