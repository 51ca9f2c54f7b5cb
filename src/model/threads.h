// Compute threads for libtorch (its OpenMP pool, which MKL's products share).
//
// libgomp's default wait policy spins a waiting thread for ~300k iterations before it sleeps.
// On a machine where a core is also busy with anything else (another worker, a compile, the
// S3 server), the spinning thread and the one it waits for share a core, and every parallel
// region then costs a scheduler time slice: measured here, 2 threads ran pretraining 3-5x
// slower than 1 and decoded 10x slower (BENCHMARKS.md, "Threads"). Sleeping at once
// (OMP_WAIT_POLICY=PASSIVE) avoids that but costs a wake-up per parallel region, which loses
// to 1 thread on small work when the machine is idle; a short spin (GOMP_SPINCOUNT=10000)
// wins there by 1.3-1.65x and loses badly under load. So every executable that links this
// file picks one at start: the short spin when nothing else is runnable, PASSIVE otherwise,
// unless the environment sets OMP_WAIT_POLICY or GOMP_SPINCOUNT itself. libgomp reads them
// in its constructor, before main, so the executable's .preinit_array (which runs before any
// shared library's constructor) executes the program again with them added (threads.cpp).
#pragma once

namespace brl::model {

// Denormal floats (below 1.2e-38) are flushed to zero in this thread and the pool's threads
// (torch.set_flush_denormal): x86 handles them in microcode at ~100x the cost of a normal
// operation, and training makes them. AdamW's second moments and the gradients of weights
// that have settled drift there; measured, the skill base's pretraining slowed from 6.4 s to
// 12.5 s per 50 steps over 2000 steps with them, and stays at 5.3-6.4 s flushed (BENCHMARKS.md,
// "Threads"). Numbers that small change no result that matters; BRL_KEEP_DENORMALS=1 keeps them
// (e.g. to compare bit for bit with a PyTorch that does not flush).
//
// Sets libtorch's intra-op threads: n > 0 as given, n <= 0 every core. Returns the count.
int set_compute_threads(int n);

// The allocator serving this process, "tcmalloc" or "glibc", for logs. The build links
// tcmalloc where it is installed (CMake BRL_TCMALLOC): glibc serves every block over 32 MB (a
// 152k-vocabulary LM head's logits, their gradient) with a fresh mmap and unmaps it on free,
// so each training step page-faults and zeroes gigabytes again; tcmalloc keeps them for the
// next step. Measured here: the small shape's step 1.25-1.35x faster, its peak resident set
// 3.19 -> 2.81 GB; the 0.5B shape's 12.0-12.5 -> 8.2 GB (BENCHMARKS.md, "The allocator").
// Telling glibc to keep them instead (M_MMAP_MAX 0, no trim) was as fast but let aligned
// blocks fragment its heap: one 256 MB block allocated and freed in a loop held 2.1 GB.
const char* malloc_in_use();

// The wait policy libgomp was started with and why, for logs.
const char* omp_wait_policy();

}  // namespace brl::model
