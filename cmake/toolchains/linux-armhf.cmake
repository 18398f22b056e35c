# Cross build for Linux on armhf with Debian's cross toolchain
# (apt-get install g++-arm-linux-gnueabihf qemu-user); the tests run under qemu-arm.
#
#   cmake -S . -B build-cross-armhf -G Ninja \
#         -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/linux-armhf.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR arm)
set(CMAKE_C_COMPILER arm-linux-gnueabihf-gcc)
set(CMAKE_CXX_COMPILER arm-linux-gnueabihf-g++)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-arm -L /usr/arm-linux-gnueabihf)
# GCC notes that the ARM parameter passing of some types changed in GCC 7.1:
# it concerns only mixing objects from older compilers.
set(CMAKE_CXX_FLAGS_INIT -Wno-psabi)

# Target libraries from the cross toolchain's root and Debian's multiarch
# directories; headers that are the same on every architecture (Vulkan,
# Catch2 2.x) and programs (glslc, spirv-val) from the host.
set(CMAKE_FIND_ROOT_PATH /usr/arm-linux-gnueabihf)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(CMAKE_LIBRARY_ARCHITECTURE arm-linux-gnueabihf)
