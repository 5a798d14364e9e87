// MPI for the programs that can run under mpirun (the probe; exec, search and
// capacity): initialised for the life of an MpiSession, finalised after it.
#pragma once

#include <mpi.h>

#include <cstdlib>
#include <functional>
#include <stdexcept>

namespace shardsim {

class MpiSession {
 public:
  explicit MpiSession(int required_thread_level = MPI_THREAD_SINGLE) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, required_thread_level, &provided);
    if (provided < required_thread_level) {
      MPI_Finalize();
      throw std::runtime_error("the MPI library does not provide the thread level shardsim needs");
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiSession() { MPI_Finalize(); }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  int rank_ = 0, size_ = 1;
};

// Whether a launcher (Open MPI's mpirun, a PMI/PMIx one such as srun or
// MPICH's) started this process: a plain run then skips MPI altogether.
inline bool launched_by_mpi() {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"}) {
    if (std::getenv(variable)) return true;
  }
  return false;
}

// Runs `work(rank, size)` in this process: alone (0, 1) when no launcher
// started it, else as one of an mpirun's processes, which share the work and
// agree on the result. Bad input fails alike on every process, so rank 0 says
// why and the others exit 2 quietly; any other failure aborts the whole job,
// since one process failing alone would leave the others waiting in a
// collective. `command` names the command in that message. Threads of `work`
// may run beside it, but only the calling thread calls MPI.
int run_across_processes(const char* command, const std::function<int(int rank, int size)>& work);

}  // namespace shardsim
