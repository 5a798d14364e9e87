#include "topology/base/atomic_output.h"

#include "topology/base/json_input.h"

#include <cstdio>
#include <unistd.h>

namespace shardsim {

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

AtomicOutputFiles::~AtomicOutputFiles() {
  if (committed_) return;
  out_.close();
  for (const auto& [path, temporary] : files_) std::remove(temporary.c_str());
}

void AtomicOutputFiles::close_current() {
  if (files_.empty() || !out_.is_open()) return;
  out_.close();
  if (!out_) throw_input_error(files_.back().first, "", "could not write the file");
}

std::ostream& AtomicOutputFiles::next(const std::string& path) {
  close_current();
  files_.emplace_back(path, path + ".tmp." + std::to_string(::getpid()));
  out_.clear();
  out_.open(files_.back().second, std::ios::binary | std::ios::trunc);
  if (!out_) {
    files_.pop_back();
    throw_input_error(path, "", "cannot write here");
  }
  return out_;
}

void AtomicOutputFiles::commit() {
  close_current();
  for (const auto& [path, temporary] : files_) {
    if (std::rename(temporary.c_str(), path.c_str()) != 0) throw_input_error(path, "", "could not write the file");
  }
  committed_ = true;
}

}  // namespace shardsim
