#include "sim/cli/mpi_session.h"

#include "sim/cli/threads_option.h"
#include "sim/search/plan_search.h"
#include "topology/json_input.h"

#include <iostream>

namespace shardsim::cli {

int run_across_processes(const char* command, const std::function<int(int rank, int size)>& work) {
  if (!launched_by_mpi()) return work(0, 1);
  MpiSession mpi(MPI_THREAD_FUNNELED);
  try {
    return work(mpi.rank(), mpi.size());
  } catch (const InputError&) {
    if (mpi.rank() != 0) return 2;
    throw;
  } catch (const std::invalid_argument&) {
    if (mpi.rank() != 0) return 2;
    throw;
  } catch (const std::exception& e) {
    std::cerr << command << ": internal error on process " << mpi.rank() << ": " << e.what() << "\n";
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
}

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
