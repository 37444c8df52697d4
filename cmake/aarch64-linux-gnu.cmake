# Cross-compiling dygrad for 64-bit Arm Linux on an x86-64 Debian machine (docs/ops.md, "One binary for every CPU";
# `make test-aarch64`): Debian's g++-aarch64-linux-gnu, the arm64 libraries of Debian's multiarch (OpenBLAS,
# GoogleTest, Python's headers: `dpkg --add-architecture arm64`, packages named pkg:arm64), and qemu-user to run
# what was built, the tests included (ctest and gtest_discover_tests run every test command through
# CMAKE_CROSSCOMPILING_EMULATOR).
#   cmake -S . -B build-aarch64 -G Ninja --toolchain cmake/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# The multiarch directories (/usr/lib/aarch64-linux-gnu, /usr/include/aarch64-linux-gnu), which Debian's cross
# compiler and linker search already; find_library and find_package look there and never in the x86-64 ones.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Programs (python3, objdump, ccache) are the build machine's; libraries and headers are the target's.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)

# The arm64 run-time is multiarch's libc6:arm64 (/lib/ld-linux-aarch64.so.1, /lib/aarch64-linux-gnu), the one the
# arm64 OpenBLAS and GoogleTest packages were built against and depend on; qemu finds the loader at its usual path.
# Not `-L /usr/aarch64-linux-gnu` (the cross compiler's own libc6-arm64-cross): that loader would then load
# multiarch's libc.so.6, which is not its build (glibc's loader and libc must be one build).
find_program(DYGRAD_QEMU_AARCH64 qemu-aarch64 REQUIRED)
set(CMAKE_CROSSCOMPILING_EMULATOR ${DYGRAD_QEMU_AARCH64})

# The Python extension (python/CMakeLists.txt): the interpreter that runs CMake is the build machine's, the headers
# and the module suffix are arm64 Debian's Python 3.11 (libpython3.11-dev:arm64; /usr/include/python3.11/pyconfig.h
# includes the aarch64 one when compiled for aarch64). The extension is built, not run: there is no arm64 numpy.
set(Python_INCLUDE_DIR /usr/include/python3.11 CACHE PATH "the target's Python headers")
set(DYGRAD_PYTHON_SOABI cpython-311-aarch64-linux-gnu CACHE STRING "the target's extension suffix")
