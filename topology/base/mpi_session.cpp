#include "topology/base/mpi_session.h"

#include "topology/base/json_input.h"

#include <iostream>

namespace shardsim {

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

}  // namespace shardsim
