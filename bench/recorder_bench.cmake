# Recorder benchmarks (docs/recorder.md). Included from tests/recorder/CMakeLists.txt, which
# defines the do-nothing NCCL they run over.
find_package(benchmark REQUIRED)

add_executable(recorder_bench "${PROJECT_SOURCE_DIR}/bench/recorder_bench.cpp")
# liblockstep before the stub NCCL: the hooks come first in symbol lookup, as with LD_PRELOAD.
target_link_libraries(recorder_bench PRIVATE lockstep lockstep_stub_nccl lockstep_stub_cudart lockstep_cuda_headers
                      benchmark::benchmark SQLite::SQLite3)
target_link_options(recorder_bench PRIVATE -Wl,--no-as-needed)

add_executable(recorder_writer_bench "${PROJECT_SOURCE_DIR}/bench/recorder_writer_bench.cpp")
target_link_libraries(recorder_writer_bench PRIVATE lockstep_recorder_core benchmark::benchmark)
