#include "calib/probe/mpi_world.h"

#include <fstream>
#include <set>
#include <thread>

namespace shardsim::calib {

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int world_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

std::string processor_name() {
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
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank(), MPI_INFO_NULL, &local);
  int rank = 0;
  MPI_Comm_rank(local, &rank);
  MPI_Comm_free(&local);
  return rank;
}

}  // namespace shardsim::calib
