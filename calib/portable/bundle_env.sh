# Sourced, with the bundle as its argument: unpacks make_bundle.sh's archive
# (once) and sets PATH, LD_LIBRARY_PATH and SHARDSIM_DATA_DIR so that its
# binaries run here, on the target's glibc, CUDA and NCCL.
#   . calib/portable/bundle_env.sh .gpu-bundle/shardsim-bundle.tar.gz
# Run from the repository root: the presets are read from it.
shardsim_bundle_archive=${1:?usage: . calib/portable/bundle_env.sh BUNDLE.tar.gz}
shardsim_bundle=${SHARDSIM_BUNDLE_DIR:-/tmp/shardsim-bundle}
if [ ! -x "$shardsim_bundle/bin/shardsim" ]; then
  mkdir -p "$shardsim_bundle" && tar -C "$shardsim_bundle" -xzf "$shardsim_bundle_archive"
fi
export PATH="$shardsim_bundle/bin:$PATH"
export SHARDSIM_DATA_DIR="$PWD"
export LD_LIBRARY_PATH="$shardsim_bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

shardsim_bundle_missing() {
  ldd "$shardsim_bundle"/bin/* 2>&1 | awk '$2 == "=>" && $3 == "not" { print $1 }' | sort -u
}
# CUDA's libraries where the target keeps them: the toolkit, or the Python
# wheels (nvidia-*-cu13) a PyTorch image installs them from.
for soname in $(shardsim_bundle_missing); do
  found=$(find /usr/local /opt /usr/lib /usr/lib64 /root -name "$soname" 2>/dev/null | head -n 1)
  if [ -n "$found" ]; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$found")"
  fi
done
# cuDNN is opened at run time rather than linked (calib/cuda/fused_attention.h),
# so ldd never asks for it: where the target keeps it, if anywhere.
if ! ldconfig -p 2>/dev/null | grep -q "libcudnn.so.9 "; then
  found=$(find /usr/local /opt /usr/lib /usr/lib64 /root -name libcudnn.so.9 2>/dev/null | head -n 1)
  if [ -n "$found" ]; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$found")"
  fi
fi
# The build machine's C++ runtime only when the target's is older.
if ldd "$shardsim_bundle/bin/shardsim" 2>&1 | grep -q "version .GLIBCXX\|version .GCC"; then
  export LD_LIBRARY_PATH="$shardsim_bundle/cxx:$LD_LIBRARY_PATH"
fi
if [ -n "$(shardsim_bundle_missing)" ]; then
  echo "bundle_env.sh: not found on this machine: $(shardsim_bundle_missing | tr '\n' ' ')" >&2
fi
