#include "model/device.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/headeronly/version.h>

#include <string>

#include "model/threads.h"

namespace brl::model {

std::vector<CudaDevice> cuda_devices() {
  std::vector<CudaDevice> out;
  // hasCUDA: libtorch's CUDA half loaded and a driver answered; device_count() may still be 0.
  if (!at::hasCUDA()) return out;
  int n = c10::cuda::device_count();
  for (int i = 0; i < n; ++i) {
    const cudaDeviceProp* p = at::cuda::getDeviceProperties(i);
    out.push_back({i, p->name, p->major, p->minor, static_cast<int64_t>(p->totalGlobalMem)});
  }
  return out;
}

bool cuda_available() { return at::hasCUDA() && c10::cuda::device_count() > 0; }

std::string describe_compute() {
  std::string s = "libtorch " + std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
                  std::to_string(TORCH_VERSION_PATCH);
  // CUDA_VERSION (cuda.h, via CUDAContext.h): the toolkit this file was compiled against.
  s += " (CUDA " + std::to_string(CUDA_VERSION / 1000) + "." + std::to_string(CUDA_VERSION % 1000 / 10) + " build)";
  s += "; cpu: " + std::to_string(at::get_num_threads()) + " threads, OpenMP wait policy " + omp_wait_policy();
  auto gpus = cuda_devices();
  if (gpus.empty()) s += "; cuda: no device";
  for (auto& g : gpus)
    s += "; cuda:" + std::to_string(g.index) + " " + g.name + " (sm_" + std::to_string(g.major) + std::to_string(g.minor) + ", " +
         std::to_string(g.total_memory >> 30) + " GiB)";
  return s;
}

}  // namespace brl::model
