// An output file that appears complete or not at all: written to a temporary
// file beside the target and renamed over it on commit(). A run that fails
// half way leaves no half-written output behind.
#pragma once

#include <fstream>
#include <string>

namespace shardsim::cli {

class AtomicOutputFile {
 public:
  // Throws InputError naming `path` when the temporary file cannot be created.
  explicit AtomicOutputFile(std::string path);
  ~AtomicOutputFile();  // removes the temporary file unless committed
  AtomicOutputFile(const AtomicOutputFile&) = delete;
  AtomicOutputFile& operator=(const AtomicOutputFile&) = delete;

  std::ostream& stream() { return out_; }
  void commit();

 private:
  std::string path_;
  std::string temporary_;
  std::ofstream out_;
  bool committed_ = false;
};

}  // namespace shardsim::cli
