#!/usr/bin/env bash
# Installs what mxdp needs (Debian/Ubuntu packages, only those missing;
# librsvg2-bin only lets a test render the loss plot; the PyPI packages the
# interop tests compare against),
# configures and builds into ./build. Sourced by scripts/train.sh and
# scripts/test.sh; safe to run again (does nothing that is already done).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

need=() want=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
# A tool counts as present when its command is on PATH, however it came (pip's
# cmake, a vendor image's ninja); the libraries and headers only as packages.
have_cmd_or_pkg() { command -v "$1" >/dev/null || have_pkg "$2"; }
for t in cmake:cmake ninja:ninja-build g++:g++ mpirun:openmpi-bin python3:python3; do
  have_cmd_or_pkg "${t%%:*}" "${t#*:}" || need+=("${t#*:}")
done
for p in libopenmpi-dev libgtest-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev libfmt-dev; do
  have_pkg "$p" || need+=("$p")
done
# Optional: only one test renders the loss plot with it, and says so when it is missing.
have_cmd_or_pkg rsvg-convert librsvg2-bin || want+=(librsvg2-bin)
if ((${#need[@]} + ${#want[@]})); then
  all=("${need[@]}" "${want[@]}")
  echo "setup: installing ${all[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  if ! { $SUDO apt-get update -qq &&
         DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${all[@]}" \
           >/dev/null; }; then
    if ((${#need[@]})); then
      echo "setup: could not install ${need[*]} with apt-get; install them (or put their commands on PATH) and run again" >&2
      exit 1
    fi
    echo "setup: WARNING: could not install ${want[*]}; the loss-plot rendering test will say it is skipped" >&2
  fi
fi

# Python packages the interop tests compare against (PyPI): numpy, safetensors, tokenizers.
py_need=()
for m in numpy safetensors tokenizers; do python3 -c "import $m" 2>/dev/null || py_need+=("$m"); done
if ((${#py_need[@]})); then
  echo "setup: pip installing ${py_need[*]}"
  if ! python3 -m pip --version >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
  fi
  export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
  # A distribution's own python3 refuses plain installs (PEP 668); then install beside its packages.
  # Not fatal (a machine without network still builds and trains): the tests that need them say so.
  python3 -m pip install -q "${py_need[@]}" 2>/dev/null ||
    python3 -m pip install -q --break-system-packages "${py_need[@]}" ||
    echo "setup: WARNING: could not pip install ${py_need[*]}; the interop tests will fail until they are installed"
fi

# CUDA is optional: build its kernels wherever nvcc exists (CI compiles them, a GPU runs them).
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

# The GPU GPT's attention needs the header-only cuDNN frontend: the PyPI wheel
# nvidia-cudnn-frontend holds include/; it goes to .deps/ (no system Python touched).
if command -v nvcc >/dev/null && [ ! -f .deps/cudnn-frontend/include/cudnn_frontend.h ] && [ -z "${MXDP_CUDNN_FRONTEND_DIR:-}" ]; then
  python3 -m pip --version >/dev/null 2>&1 || {
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
  }
  echo "setup: installing the cuDNN frontend headers into .deps/cudnn-frontend"
  python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps --target .deps/cudnn-frontend nvidia-cudnn-frontend
fi

BUILD_DIR=${MXDP_BUILD_DIR:-build}
JOBS=${MXDP_JOBS:-$(nproc)}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    ${MXDP_CUDNN_FRONTEND_DIR:+-DMXDP_CUDNN_FRONTEND_DIR=$MXDP_CUDNN_FRONTEND_DIR} ${MXDP_CMAKE_ARGS:-}
fi
# MXDP_TARGETS: build only these targets (the training job needs just `mxdp`).
cmake --build "$BUILD_DIR" -j "$JOBS" ${MXDP_TARGETS:+--target $MXDP_TARGETS}
export MXDP_BIN="$PWD/$BUILD_DIR/mxdp"
