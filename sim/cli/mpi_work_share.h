// How a search's work is shared when mpirun started several shardsim
// processes: which process this is, its threads, and the sum over processes.
#pragma once

#include "sim/search/plan_search.h"

namespace shardsim::cli {

// Process `rank` of `processes` in a search's work (sim/search/plan_search.h),
// its numbers summed over MPI_COMM_WORLD; alone, nothing to sum. On the
// threads `--threads` asks for (threads_option.h).
sim::WorkShare mpi_work_share(int rank, int processes, int threads_option);

}  // namespace shardsim::cli
