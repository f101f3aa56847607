#include "runtime/device_mirror.hpp"

#include <algorithm>
#include <span>

#include "tilefmha/error.hpp"

namespace tilefmha::runtime {
namespace {

int64_t view_bytes(const TensorView& view) {
  return view.extent() * dtype_size(view.dtype);
}

// The tensors a forward-type family writes.
bool is_output(const Problem& problem, const TensorView& view) {
  return &view == &problem.o || &view == &problem.lse;
}

}  // namespace

TensorView DeviceMirror::mirror(const TensorView& host, bool poison) {
  if (host.empty()) return host;
  if (host.space != MemorySpace::host)
    throw Error(ErrorKind::invalid_argument, "DeviceMirror expects host views");
  const int64_t bytes = view_bytes(host);
  auto buffer = std::make_unique<jit::DeviceBuffer>(std::max<int64_t>(bytes, 1));
  if (poison) {
    buffer->fill_bytes(kPoisonByte);
  } else if (bytes > 0) {
    buffer->copy_from_host(std::span(static_cast<const std::byte*>(host.data), bytes));
  }
  TensorView device = host;
  device.data = reinterpret_cast<void*>(buffer->address());
  device.space = MemorySpace::device;
  buffers_.push_back(std::move(buffer));
  return device;
}

DeviceMirror::DeviceMirror(const Problem& host) : device_(host) {
  for (TensorView Problem::*member :
       {&Problem::q, &Problem::k, &Problem::v, &Problem::o, &Problem::lse, &Problem::bias,
        &Problem::alibi_slopes, &Problem::sink_logits})
    device_.*member = mirror(host.*member, is_output(host, host.*member));
  for (TensorView AppendKv::*member :
       {&AppendKv::k_new, &AppendKv::v_new, &AppendKv::rope_cos, &AppendKv::rope_sin})
    device_.append.*member = mirror(host.append.*member, false);
}

jit::DeviceBuffer* DeviceMirror::find_buffer(const void* device_data) const {
  for (const auto& buffer : buffers_)
    if (reinterpret_cast<const void*>(buffer->address()) == device_data) return buffer.get();
  return nullptr;
}

void DeviceMirror::copy_outputs_to(const Problem& host) const {
  for (TensorView Problem::*member : {&Problem::o, &Problem::lse}) {
    const TensorView& target = host.*member;
    if (target.empty()) continue;
    if (const jit::DeviceBuffer* buffer = find_buffer((device_.*member).data))
      buffer->copy_to_host(std::span(static_cast<std::byte*>(target.data), view_bytes(target)));
  }
}

void DeviceMirror::poison_outputs() const {
  for (TensorView Problem::*member : {&Problem::o, &Problem::lse})
    if (jit::DeviceBuffer* buffer = find_buffer((device_.*member).data))
      buffer->fill_bytes(kPoisonByte);
}

DeviceMirror::HostBytes DeviceMirror::download(const TensorView& device_view) const {
  const jit::DeviceBuffer* buffer = find_buffer(device_view.data);
  if (buffer == nullptr)
    throw Error(ErrorKind::invalid_argument,
                "DeviceMirror::download: the view is not one of this mirror's tensors");
  HostBytes host{std::vector<std::byte>(static_cast<size_t>(buffer->bytes())), device_view};
  buffer->copy_to_host(host.bytes);
  host.view.data = host.bytes.data();
  host.view.space = MemorySpace::host;
  return host;
}

}  // namespace tilefmha::runtime
