// Which compute devices this process has: the CPU always, CUDA GPUs where libtorch finds a
// driver and a device. The build always links libtorch's CUDA half (the wheel is the CUDA
// build); on a machine without a GPU these report none instead of failing.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <string>
#include <vector>

namespace brl::model {

struct CudaDevice {
  int index = 0;
  std::string name;          // e.g. "NVIDIA H200"
  int major = 0, minor = 0;  // compute capability
  int64_t total_memory = 0;  // bytes
};

// CUDA devices visible to this process (CUDA_VISIBLE_DEVICES applies); empty without a GPU.
std::vector<CudaDevice> cuda_devices();
bool cuda_available();

// A device name as users write it (--device, [model] device): "auto" (the first GPU when
// there is one, else the CPU), "cpu", "cuda" or "cuda:N". UserError naming the value when it
// is none of those or names a GPU this process does not have.
c10::Device resolve_device(const std::string& name);
// A weight dtype name ([model] dtype): "auto" (bfloat16 on a GPU, float32 on the CPU),
// "float32" / "f32", "bfloat16" / "bf16". UserError naming the value otherwise.
c10::ScalarType resolve_dtype(const std::string& name, const c10::Device& device);
// The device as a heartbeat names it: "cuda:0 NVIDIA H200", "cpu (8 threads)".
std::string device_label(const c10::Device& device);
// Bytes the caching allocator holds on the device (0 on the CPU): the heartbeat's figure.
int64_t device_memory_bytes(const c10::Device& device);
// Bytes a new tensor could take on the GPU now: the driver's free memory plus what the caching
// allocator holds unused (0 on the CPU).
int64_t device_free_memory_bytes(const c10::Device& device);
// The most bytes of tensors allocated at once on the GPU since the last reset (benchmarks:
// what a step needs); on the CPU the process's peak resident set, which is never reset.
int64_t peak_memory_bytes(const c10::Device& device);
void reset_peak_memory(const c10::Device& device);

// An allocation failure: CUDA's (c10::OutOfMemoryError) or the CPU allocator's (a plain
// c10::Error; under a memory limit such as RLIMIT_AS), as opposed to any other error.
bool is_out_of_memory(const c10::Error& e);
// Hands the caching allocator's unused blocks back to the GPU (after an out-of-memory error,
// so a retry with less finds whole free memory rather than fragments); nothing on the CPU.
void release_cached_memory(const c10::Device& device);

// One line for logs and `bucketrl version`: libtorch's version and build, the CPU threads,
// and each GPU (or why there is none).
std::string describe_compute();

}  // namespace brl::model
