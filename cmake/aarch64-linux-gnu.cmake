# Cross-compiling ditrun for 64-bit Arm Linux on an x86-64 Debian machine (make
# cross-test-arm64): Debian's aarch64-linux-gnu gcc (crossbuild-essential-arm64), the
# libraries as arm64 multiarch packages (dpkg --add-architecture arm64; scripts/setup-cross.sh
# installs both), and qemu-user running the test programs.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
# pkg-config reads the arm64 packages' .pc files only
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
