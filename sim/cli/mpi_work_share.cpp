#include "sim/cli/mpi_work_share.h"

#include "sim/cli/threads_option.h"

#include <mpi.h>

namespace shardsim::cli {

sim::WorkShare mpi_work_share(int rank, int processes, int threads_option) {
  sim::WorkShare share;
  share.rank = rank;
  share.size = processes;
  share.threads = threads_to_use(threads_option, processes);
  if (processes > 1) {
    share.sum = [](std::vector<double>& values) {
      MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    };
  }
  return share;
}

}  // namespace shardsim::cli
