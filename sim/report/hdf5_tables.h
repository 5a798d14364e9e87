// Small pieces for writing tables of compound rows with HDF5's C API, shared
// by the timeline and search files: scoped handles, fixed-length strings,
// chunked growable 1-D datasets, scalar attributes, and a writer that builds
// the file beside its path and renames it into place when complete.
#pragma once

#include "topology/base/json_input.h"

#include <hdf5.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

namespace shardsim::sim::hdf5 {

template <std::size_t N>
void copy_label(char (&field)[N], std::string_view text) {
  std::memset(field, 0, N);
  std::memcpy(field, text.data(), std::min(text.size(), N - 1));
}

// Closes an HDF5 handle when it leaves scope.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t), const char* what) : id_(id), close_(close) {
    if (id < 0) throw std::runtime_error(std::string("HDF5: cannot create ") + what);
  }
  ~Handle() { close_(id_); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  operator hid_t() const { return id_; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

inline hid_t string_type(std::size_t length) {
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, length);
  H5Tset_strpad(type, H5T_STR_NULLTERM);
  return type;
}

template <typename Row>
void write_table(hid_t file, const char* name, hid_t type, const std::vector<Row>& rows) {
  const hsize_t count = rows.size();
  const hsize_t unlimited = H5S_UNLIMITED;
  Handle space(H5Screate_simple(1, &count, &unlimited), H5Sclose, "dataspace");
  Handle properties(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "property list");
  const hsize_t chunk = std::max<hsize_t>(1, std::min<hsize_t>(count, 4096));
  H5Pset_chunk(properties, 1, &chunk);
  // HDF5 stamps each object with the wall-clock time by default: same inputs
  // must give the same bytes.
  H5Pset_obj_track_times(properties, false);
  Handle dataset(H5Dcreate2(file, name, type, space, H5P_DEFAULT, properties, H5P_DEFAULT), H5Dclose, name);
  if (!rows.empty() && H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()) < 0) {
    throw std::runtime_error(std::string("HDF5: cannot write ") + name);
  }
}

inline void write_string_attribute(hid_t file, const char* name, const std::string& value) {
  Handle type(string_type(value.size() + 1), H5Tclose, "string type");
  Handle space(H5Screate(H5S_SCALAR), H5Sclose, "dataspace");
  Handle attribute(H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose, name);
  H5Awrite(attribute, type, value.c_str());
}

inline void write_double_attribute(hid_t file, const char* name, double value) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose, "dataspace");
  Handle attribute(H5Acreate2(file, name, H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose, name);
  H5Awrite(attribute, H5T_NATIVE_DOUBLE, &value);
}

// Calls write(file) on a new file beside `path`, then renames it over `path`;
// on any failure removes it and throws InputError naming `path`.
inline void write_file_atomically(const std::string& path, const std::function<void(hid_t file)>& write) {
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors surface as exceptions, not HDF5's stack dump
  try {
    {
      Handle file(H5Fcreate(temporary.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose, "file");
      write(file);
    }
    std::filesystem::rename(temporary, path);
  } catch (const std::exception& e) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw InputError(path + ": cannot write HDF5 (" + e.what() + ")");
  }
}

}  // namespace shardsim::sim::hdf5
