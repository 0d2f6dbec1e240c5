# Python frame capture for the recorder (see docs/python-frames.md). Included by
# interposer/CMakeLists.txt (liblockstep links it) and by tests/python/CMakeLists.txt.
# Never links libpython: CPython is found at run time with dlsym.
if(NOT TARGET lockstep_python_frames)
  add_library(lockstep_python_frames STATIC "${CMAKE_CURRENT_LIST_DIR}/python_frames.cpp")
  target_include_directories(lockstep_python_frames PUBLIC "${CMAKE_CURRENT_LIST_DIR}")
  set_target_properties(lockstep_python_frames PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_link_libraries(lockstep_python_frames PUBLIC ${CMAKE_DL_LIBS})
endif()
