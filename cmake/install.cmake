# `cmake --install build --prefix P` and the Debian package (`cd build && cpack -G DEB`).
# The layout is relocatable: `lockstep` finds the recorder at ../lib/lockstep/liblockstep.so
# relative to its own executable (cli/util.cpp), and the replay worker next to itself, so the
# prefix can be moved or unpacked anywhere (tests/install checks both).
#   P/bin/lockstep, lockstep-launch, lockstep-replay-worker
#   P/lib/lockstep/liblockstep.so        the LD_PRELOAD recorder, also NCCL's profiler plugin
#   P/share/doc/lockstep/                README.md and docs/
#   P/share/lockstep/examples/lockstep.sbatch
set(LOCKSTEP_INSTALL_LIBDIR "lib/lockstep")
# `make install` and cpack install what is built, without building `all` (tests and benchmarks)
# first: the demo's build (scripts/build.sh --demo) has only the tool.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY TRUE)  # private: not on the linker's search path
foreach(t lockstep_cli lockstep-launch lockstep-replay-worker)
  if(TARGET ${t})
    install(TARGETS ${t} RUNTIME DESTINATION bin)
  endif()
endforeach()
if(TARGET lockstep)
  install(TARGETS lockstep LIBRARY DESTINATION "${LOCKSTEP_INSTALL_LIBDIR}")
endif()
install(FILES README.md DESTINATION share/doc/lockstep)
install(DIRECTORY docs/ DESTINATION share/doc/lockstep/docs FILES_MATCHING PATTERN "*.md" PATTERN "*.png")
install(PROGRAMS examples/slurm/lockstep.sbatch DESTINATION share/lockstep/examples)

set(CPACK_PACKAGE_NAME lockstep)
set(CPACK_PACKAGE_VENDOR lockstep)
set(CPACK_PACKAGE_CONTACT "lockstep maintainers <lockstep@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Records every NCCL call of every rank and finds where ranks diverge")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_GENERATOR DEB)
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
# Declared by hand (dpkg-shlibdeps needs dpkg-dev): what the executables and the recorder link,
# and libunwind8, which the recorder dlopens for native stacks (glibc's backtrace otherwise).
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libc6 (>= 2.34), libstdc++6 (>= 12), libgcc-s1, libsqlite3-0 (>= 3.35), libunwind8")
if(LOCKSTEP_MIMALLOC)  # the CLI's allocator (cli/CMakeLists.txt)
  string(APPEND CPACK_DEBIAN_PACKAGE_DEPENDS ", libmimalloc2.0")
endif()
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3, chromium")
include(CPack)
