// An output file that appears complete or not at all: written to a temporary
// file beside the target and renamed over it on commit(). A run that fails
// half way leaves no half-written output behind.
#pragma once

#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace shardsim {

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

// Several files that appear together or not at all: each is written to a
// temporary file beside its target, one after another (one open at a time,
// however many there are), and commit() renames them all into place. Until
// then a failure leaves none of them behind (a failure of a rename itself
// leaves those renamed before it).
class AtomicOutputFiles {
 public:
  AtomicOutputFiles() = default;
  ~AtomicOutputFiles();  // removes the temporary files unless committed
  AtomicOutputFiles(const AtomicOutputFiles&) = delete;
  AtomicOutputFiles& operator=(const AtomicOutputFiles&) = delete;

  // Closes the file before, if any, and starts the one for `path`; throws
  // InputError naming `path` when it cannot be created or the one before
  // could not be written.
  std::ostream& next(const std::string& path);
  void commit();

 private:
  void close_current();

  std::vector<std::pair<std::string, std::string>> files_;  // (path, temporary)
  std::ofstream out_;
  bool committed_ = false;
};

}  // namespace shardsim
