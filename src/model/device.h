// Which compute devices this process has: the CPU always, CUDA GPUs where libtorch finds a
// driver and a device. The build always links libtorch's CUDA half (the wheel is the CUDA
// build); on a machine without a GPU these report none instead of failing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace brl::model {

struct CudaDevice {
  int index = 0;
  std::string name;            // e.g. "NVIDIA H200"
  int major = 0, minor = 0;    // compute capability
  int64_t total_memory = 0;    // bytes
};

// CUDA devices visible to this process (CUDA_VISIBLE_DEVICES applies); empty without a GPU.
std::vector<CudaDevice> cuda_devices();
bool cuda_available();

// One line for logs and `bucketrl version`: libtorch's version and build, the CPU threads,
// and each GPU (or why there is none).
std::string describe_compute();

}  // namespace brl::model
