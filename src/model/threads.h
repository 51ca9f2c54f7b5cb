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

// Sets libtorch's intra-op threads: n > 0 as given, n <= 0 every core. Returns the count.
int set_compute_threads(int n);

// The wait policy libgomp was started with and why, for logs.
const char* omp_wait_policy();

}  // namespace brl::model
