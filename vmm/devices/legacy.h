// Legacy devices of the microVM: a 16550A UART (COM1, the console), the i8042 controller (only
// its CPU-reset command matters: reset = stop the VM, like Firecracker) and Firecracker's
// boot-timer MMIO page (the guest writes 123 when it considers itself booted). Guest writes are
// untrusted register values; nothing here touches guest memory.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>

#include "vmm/devices/bus.h"

namespace cordon::vmm::devices {

class Serial : public BusDevice {
 public:
  using Sink = std::function<void(const char* data, size_t len)>;
  using Irq = std::function<void()>;
  Serial(Sink sink, Irq irq) : sink_(std::move(sink)), irq_(std::move(irq)) {}
  void read(uint64_t offset, uint8_t* data, size_t len) override;
  void write(uint64_t offset, const uint8_t* data, size_t len) override;
  // Host input (console stdin); raises the receive interrupt when enabled.
  void enqueue_input(const std::string& bytes);

  struct State {
    uint8_t ier, lcr, mcr, scr, dll, dlm;
    bool thre_pending;
  };
  State save() const;
  void restore(const State& s);

 private:
  uint8_t iir_locked() const;
  Sink sink_;
  Irq irq_;
  mutable std::mutex mu_;
  uint8_t ier_ = 0, lcr_ = 0x03, mcr_ = 0x08, scr_ = 0, dll_ = 0x0C, dlm_ = 0;
  bool thre_pending_ = false;
  std::deque<uint8_t> input_;
};

class I8042 : public BusDevice {
 public:
  explicit I8042(std::function<void()> reset) : reset_(std::move(reset)) {}
  void read(uint64_t offset, uint8_t* data, size_t len) override;
  void write(uint64_t offset, const uint8_t* data, size_t len) override;

 private:
  std::function<void()> reset_;
  std::mutex mu_;
  uint8_t command_byte_ = 0x45;  // translate, system flag, keyboard interrupt
  bool has_output_ = false;
  uint8_t output_ = 0;
  uint8_t pending_command_ = 0;
};

class BootTimer : public BusDevice {
 public:
  explicit BootTimer(std::function<void()> on_boot) : on_boot_(std::move(on_boot)) {}
  void read(uint64_t, uint8_t* data, size_t len) override {
    for (size_t i = 0; i < len; ++i) data[i] = 0;
  }
  void write(uint64_t offset, const uint8_t* data, size_t len) override {
    if (offset == 0 && len >= 1 && data[0] == 123) on_boot_();
  }

 private:
  std::function<void()> on_boot_;
};

}  // namespace cordon::vmm::devices
