# libtorch from PyPI's torch wheel, in the project's virtual environment (scripts/setup.sh
# makes .venv and pins the version). One build serves CPU and CUDA: the wheel is the CUDA
# build, and find_package(Torch) finds the CUDA toolkit (nvcc, cuDNN) to link libtorch_cuda.
#   -DBRL_PYTHON=/path/to/python   another interpreter whose torch to use (the GPU machine's)
#   -DTorch_DIR=...                or point CMake at a libtorch directly
if(NOT Torch_DIR)
  if(NOT EXISTS "${BRL_PYTHON}")
    message(FATAL_ERROR "no Python at ${BRL_PYTHON} to find libtorch: run scripts/setup.sh (it makes .venv "
                        "with the pinned torch wheel), or pass -DBRL_PYTHON=<python with torch> or -DTorch_DIR=<libtorch>/share/cmake/Torch")
  endif()
  execute_process(COMMAND "${BRL_PYTHON}" -c "import torch; print(torch.utils.cmake_prefix_path)"
                  OUTPUT_VARIABLE _brl_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _brl_rc)
  if(NOT _brl_rc EQUAL 0)
    message(FATAL_ERROR "${BRL_PYTHON} cannot import torch: run scripts/setup.sh")
  endif()
  list(APPEND CMAKE_PREFIX_PATH "${_brl_torch_prefix}")
endif()
# Without an arch list, libtorch's CMake probes the machine's GPUs by compiling and running a
# CUDA program, which fails where there is none (CI). 9.0: the H200 of the GPU machine.
if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST} AND NOT TORCH_CUDA_ARCH_LIST)
  set(TORCH_CUDA_ARCH_LIST "9.0" CACHE STRING "CUDA architectures for .cu files (libtorch's knob)")
endif()
find_package(Torch REQUIRED)
message(STATUS "libtorch ${Torch_VERSION} at ${TORCH_INSTALL_PREFIX} (CUDA libraries: ${TORCH_CUDA_LIBRARIES})")

# One fmt in the whole build. The wheel's include/ bundles fmt 12 headers, and as an include
# directory it would shadow the system's fmt 9 that spdlog is built on (spdlog then fails to
# compile, or mixes two fmts). libtorch's public headers we use do not need fmt, so the build
# sees torch's include/ through a view that leaves fmt/ out; every fmt include resolves to
# the system's fmt, the one spdlog links.
set(_brl_view "${CMAKE_BINARY_DIR}/torch-include")
file(REMOVE_RECURSE "${_brl_view}")
file(MAKE_DIRECTORY "${_brl_view}")
file(GLOB _brl_entries RELATIVE "${TORCH_INSTALL_PREFIX}/include" "${TORCH_INSTALL_PREFIX}/include/*")
foreach(e ${_brl_entries})
  if(NOT e STREQUAL "fmt")
    file(CREATE_LINK "${TORCH_INSTALL_PREFIX}/include/${e}" "${_brl_view}/${e}" SYMBOLIC)
  endif()
endforeach()
foreach(t torch torch_cpu torch_cuda c10 c10_cuda headeronly torch_nvshmem)
  if(TARGET ${t})
    foreach(prop INTERFACE_INCLUDE_DIRECTORIES INTERFACE_SYSTEM_INCLUDE_DIRECTORIES)
      get_target_property(dirs ${t} ${prop})
      if(dirs)
        string(REPLACE "${TORCH_INSTALL_PREFIX}/include" "${_brl_view}" dirs "${dirs}")
        set_target_properties(${t} PROPERTIES ${prop} "${dirs}")
      endif()
    endforeach()
  endif()
endforeach()

# The wheel's libtorch*.so are built with a newer GCC whose static libstdc++ parts
# (std::filesystem, std::chrono's tzdb, ...) they export. Linked after them, the system's
# libstdc++ would lose the symbol lookup to those copies, which crash outside torch
# (std::filesystem::remove_all jumps to address 0). Naming libstdc++ first on every link
# line (before the objects: link options; kept even where --as-needed is the default) makes
# it the first of the program's libraries, so our calls bind to the system's own.
add_link_options("LINKER:--push-state,--no-as-needed,-lstdc++,--pop-state")
