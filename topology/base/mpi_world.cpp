#include "topology/base/mpi_world.h"

#include <unistd.h>

#include <climits>
#include <fstream>
#include <set>
#include <thread>

namespace shardsim {

bool mpi_running() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  return initialised != 0 && finalised == 0;
}

int world_rank() {
  if (!mpi_running()) return 0;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int world_size() {
  if (!mpi_running()) return 1;
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

std::string processor_name() {
  if (!mpi_running()) {
    char name[HOST_NAME_MAX + 1] = {};
    gethostname(name, sizeof name - 1);
    return name;
  }
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  return name;
}

std::string cpu_description() {
  std::string model = "unknown CPU";
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  }
  return "CPU: " + model + ", " + std::to_string(std::thread::hardware_concurrency()) + " threads";
}

int node_count() {
  if (!mpi_running()) return 1;
  std::vector<char> mine(MPI_MAX_PROCESSOR_NAME, 0);
  const std::string name = processor_name();
  std::copy(name.begin(), name.end(), mine.begin());
  std::vector<char> all(static_cast<std::size_t>(world_size()) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(mine.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                MPI_COMM_WORLD);
  std::set<std::string> hosts;
  for (int r = 0; r < world_size(); ++r) hosts.insert(std::string(&all[static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME]));
  return static_cast<int>(hosts.size());
}

int local_rank() {
  if (!mpi_running()) return 0;
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank(), MPI_INFO_NULL, &local);
  int rank = 0;
  MPI_Comm_rank(local, &rank);
  MPI_Comm_free(&local);
  return rank;
}

void world_barrier() {
  if (mpi_running()) MPI_Barrier(MPI_COMM_WORLD);
}

void world_max(std::vector<double>& values) {
  if (mpi_running()) {
    MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  }
}

std::int64_t world_min(std::int64_t value) {
  if (!mpi_running()) return value;
  std::int64_t minimum = value;
  MPI_Allreduce(&value, &minimum, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
  return minimum;
}

void world_broadcast(void* data, int bytes) {
  if (mpi_running()) MPI_Bcast(data, bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
}

}  // namespace shardsim
