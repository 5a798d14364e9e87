#include "sim/cli/atomic_output.h"

#include "topology/json_input.h"

#include <cstdio>
#include <unistd.h>

namespace shardsim::cli {

AtomicOutputFile::AtomicOutputFile(std::string path)
    : path_(std::move(path)), temporary_(path_ + ".tmp." + std::to_string(::getpid())) {
  out_.open(temporary_, std::ios::binary | std::ios::trunc);
  if (!out_) throw_input_error(path_, "", "cannot write here");
}

AtomicOutputFile::~AtomicOutputFile() {
  if (!committed_) {
    out_.close();
    std::remove(temporary_.c_str());
  }
}

void AtomicOutputFile::commit() {
  out_.close();
  if (!out_ || std::rename(temporary_.c_str(), path_.c_str()) != 0) {
    std::remove(temporary_.c_str());
    throw_input_error(path_, "", "could not write the file");
  }
  committed_ = true;
}

}  // namespace shardsim::cli
